# kino_trace demo: traces a small sample workload and prints it on the console:
# calls with returns and exceptions across processes, a throttled flood, messages,
# and per-function statistics from the VM's counters.
# Run with `make demo` (sets up the toolchain first) or `mix run demo/demo.exs`.

defmodule Demo.Inventory do
  @moduledoc "A sample workload: an ETS-backed inventory with a cache in front of it."
  use GenServer

  def start_link(_), do: GenServer.start_link(__MODULE__, [], name: __MODULE__)

  def init(_) do
    table = :ets.new(__MODULE__, [:named_table, :public])
    :ets.insert(table, [{"apple", 12}, {"pear", 0}, {"plum", 7}])
    {:ok, table}
  end

  def stock(item), do: GenServer.call(__MODULE__, {:stock, item})

  def handle_call({:stock, item}, _from, table) do
    {:reply, lookup(table, item), table}
  rescue
    e in ArgumentError -> {:reply, {:error, Exception.message(e)}, table}
  end

  defp lookup(table, item) do
    case :ets.lookup(table, item) do
      [{^item, 0}] -> {:error, :sold_out}
      [{^item, n}] -> {:ok, n}
      [] -> raise ArgumentError, "unknown item #{inspect(item)}"
    end
  end
end

defmodule Demo.Shop do
  @moduledoc "Places orders against the inventory."
  def order(items) when is_list(items) do
    Enum.map(items, fn item ->
      Demo.Inventory.stock(item)
    end)
  end

  def total(prices), do: Enum.reduce(prices, 0, &(&1 + &2))
end

{:ok, _} = Demo.Inventory.start_link([])

IO.puts(
  IO.ANSI.format([
    :bright,
    "\n== kino_trace demo: calls, returns, exceptions, across processes ==\n"
  ])
)

trace =
  Kino.Trace.calls(
    [
      "Demo.Shop.order/1",
      "Demo.Inventory.handle_call/3",
      "Demo.Inventory.lookup/2",
      ":ets.lookup(_, \"plum\")",
      "Demo.Shop.total(prices) when length(prices) > 2"
    ],
    print: true,
    limit: 200
  )

Demo.Shop.order(["apple", "pear", "plum"])
Demo.Shop.total([1, 2])
Demo.Shop.total([1, 2, 3])
Demo.Shop.order(["kiwi"])
Process.sleep(300)

IO.puts(
  IO.ANSI.format([
    :bright,
    "\n== a flood, throttled: 100 000 calls, rate limited to 1 000 events/s ==\n"
  ])
)

flood =
  Kino.Trace.calls(["Demo.Shop.total/1"], rate: {1_000, 1_000}, return: false, exceptions: false)

for i <- 1..100_000, do: Demo.Shop.total([i])
Process.sleep(100)
info = Kino.Trace.info(flood)

IO.puts(
  "accepted #{info.accepted}, dropped by the rate limit #{info.dropped.rate}, delivered #{info.delivered}"
)

Kino.Trace.stop(flood)

Kino.Trace.stop(trace)
Process.sleep(100)

IO.puts(IO.ANSI.format([:bright, "\n== messages to and from the inventory server ==\n"]))
messages = Kino.Trace.messages([Demo.Inventory], print: true)
Demo.Shop.order(["plum"])
Process.sleep(200)
Kino.Trace.stop(messages)
Process.sleep(100)

IO.puts(
  IO.ANSI.format([
    :bright,
    "\n== statistics from the VM's counters: 1 000 orders of 2 items ==\n"
  ])
)

stats = Kino.Trace.stats(["Demo.Shop", "Demo.Inventory"])
for _ <- 1..1_000, do: Demo.Shop.order(["apple", "kiwi"])
Kino.Trace.print_stats(stats)
Kino.Trace.stop(stats)

IO.puts("\ntrace sessions left in the VM: #{inspect(:trace.session_info(:all))}")
