defmodule KinoTraceBench.Workload do
  @moduledoc false
  # The benchmark's workload: a one-line function, called in a tight loop by a worker
  # process. Only work/1 is traced.

  def work(x), do: x

  def loop(0, _arg), do: :ok

  def loop(n, arg) do
    __MODULE__.work(arg)
    loop(n - 1, arg)
  end

  # The arguments: :small is an integer; :list_10mb a 10 MiB proper list (655 360 cells);
  # :bits_10mb a 10 MiB bitstring (with 3 tail bits); :fun_10mb a fun capturing a 10 MiB
  # binary; :bignum the largest integer ERTS holds (512 KiB); :list_50_huge a list of 50
  # of those three; :list_50_small the same list with each just under the caps (copied whole).
  def build_arg(:small), do: 42
  def build_arg(:list_10mb), do: :lists.duplicate(655_360, 0)
  def build_arg(:bits_10mb), do: <<:binary.copy(<<200>>, 10 * 1024 * 1024)::binary, 5::3>>
  def build_arg(:fun_10mb), do: capture(:binary.copy(<<200>>, 10 * 1024 * 1024))
  def build_arg(:bignum), do: Bitwise.bsl(1, 64 * 65_535 - 1) + 12_345

  def build_arg(:list_50_huge),
    do: for(i <- 1..50, do: build_arg(Enum.at([:bits_10mb, :fun_10mb, :bignum], rem(i, 3))))

  def build_arg(:list_50_small), do: for(i <- 1..50, do: small(rem(i, 3)))

  defp small(0), do: <<:binary.copy(<<200>>, 500)::binary, 5::3>>
  defp small(1), do: capture(:binary.copy(<<200>>, 400))
  defp small(2), do: Bitwise.bsl(1, 8 * 500) + 12_345

  defp capture(term), do: fn -> term end

  @doc false
  # A worker: builds its argument, reports ready, then runs {:go, n} calls and reports
  # {ref, t0, t1} (monotonic ns). With {:go_chunks, ...} it runs until n calls are done
  # or the stop flag (an :atomics) is set, counting calls in `count` (a :counters).
  def spawn_worker(arg_spec) do
    parent = self()
    pid = spawn(fn -> worker_init(parent, arg_spec) end)

    receive do
      {:ready, ^pid} -> pid
    end
  end

  defp worker_init(parent, arg_spec) do
    arg = build_arg(arg_spec)
    :erlang.garbage_collect()
    send(parent, {:ready, self()})
    worker_wait(arg)
  end

  defp worker_wait(arg) do
    receive do
      {:go, from, ref, n} ->
        t0 = :erlang.monotonic_time(:nanosecond)
        loop(n, arg)
        t1 = :erlang.monotonic_time(:nanosecond)
        send(from, {ref, t0, t1})
        worker_wait(arg)

      {:go_chunks, from, ref, n, chunk, stop, count} ->
        t0 = :erlang.monotonic_time(:nanosecond)
        chunks(n, chunk, arg, stop, count)
        t1 = :erlang.monotonic_time(:nanosecond)
        send(from, {ref, t0, t1})
        worker_wait(arg)

      :exit ->
        :ok
    end
  end

  defp chunks(n, _chunk, _arg, _stop, _count) when n <= 0, do: :ok

  defp chunks(n, chunk, arg, stop, count) do
    if :atomics.get(stop, 1) == 0 do
      k = min(n, chunk)
      loop(k, arg)
      :counters.add(count, 1, k)
      chunks(n - k, chunk, arg, stop, count)
    else
      :ok
    end
  end
end
