defmodule KinoTrace.Render.Flame do
  @moduledoc false
  # Flame graph data from a trace's events, built on their call trees
  # (KinoTrace.Render.CallTree): folded stacks (flamegraph.pl, Inferno, speedscope) and
  # callgrind files (KCachegrind).
  #
  # A frame is a function in its Elixir spelling (KinoTrace.Base.MFA.to_string/1,
  # `MyApp.a/0`, `:ets.insert/2`); a call whose end the events do not have (a tail-call
  # loop traced without returns, a call still running) is the frame `MyApp.loop/1 [no
  # return]`: its own time is unknown, so it has no value of its own, and the calls it
  # made keep their times under it. Values are self times (a node's duration less those
  # of the calls it made), summed over the processes (or one), in `unit`.

  alias KinoTrace.Base.MFA
  alias KinoTrace.Render.CallTree

  @no_return " [no return]"

  @doc "The suffix of a frame whose call has no known end."
  @spec no_return() :: String.t()
  def no_return, do: @no_return

  @doc """
  Folded stacks: `[{frames, value}]`, one per distinct stack with a value above zero,
  in the order the stacks were first seen; `value` in nanoseconds.
  """
  @spec stacks([{term(), [CallTree.tree()]}]) :: [{[String.t()], non_neg_integer()}]
  def stacks(trees) do
    {order, sums} =
      trees
      |> Enum.flat_map(fn {_pid, roots} -> roots end)
      |> Enum.reduce({[], %{}}, &walk(&1, [], &2))

    for stack <- Enum.reverse(order),
        (value = Map.fetch!(sums, stack)) > 0,
        do: {Enum.reverse(stack), value}
  end

  # `path` is the stack above the node, innermost first.
  defp walk(node, path, acc) do
    path = [frame(node) | path]
    acc = Enum.reduce(node.children, add(acc, path, CallTree.self(node)), &walk(&1, path, &2))
    acc
  end

  defp add({order, sums}, path, value) do
    case sums do
      %{^path => sum} -> {order, %{sums | path => sum + value}}
      _ -> {[path | order], Map.put(sums, path, value)}
    end
  end

  @doc "A node's frame."
  @spec frame(CallTree.tree()) :: String.t()
  def frame(%{mfa: mfa, duration: d}), do: name(mfa) <> if(d == nil, do: @no_return, else: "")

  # A frame never holds the folded format's separators (a `;`, a line break).
  defp name(mfa),
    do: mfa |> MFA.to_string() |> String.replace(";", ",") |> String.replace(["\n", "\r"], " ")

  @doc "The folded text: one line per stack, `frame;frame value`, the value in `unit`."
  @spec folded([{term(), [CallTree.tree()]}], :microsecond | :nanosecond) :: String.t()
  def folded(trees, unit) do
    trees
    |> stacks()
    |> Enum.flat_map(fn {frames, ns} ->
      case convert(ns, unit) do
        0 -> []
        value -> [Enum.join(frames, ";"), " ", Integer.to_string(value), "\n"]
      end
    end)
    |> IO.iodata_to_binary()
  end

  @doc """
  A callgrind file: per function its self time, and per function it called the calls
  and their inclusive time (as far as known), in `unit`.
  """
  @spec callgrind([{term(), [CallTree.tree()]}], :microsecond | :nanosecond) :: String.t()
  def callgrind(trees, unit) do
    # frame => %{self, calls: %{callee frame => {count, inclusive}}}, in first-seen order
    {order, table} =
      trees
      |> Enum.flat_map(fn {_pid, roots} -> roots end)
      |> Enum.reduce({[], %{}}, &cost/2)

    blocks =
      for fn_name <- Enum.reverse(order) do
        %{self: self, calls: calls, callees: callees} = Map.fetch!(table, fn_name)

        calls_text =
          for callee <- Enum.reverse(callees) do
            {count, inclusive} = Map.fetch!(calls, callee)

            [
              "cfn=",
              callee,
              "\ncalls=",
              Integer.to_string(count),
              " 0\n0 ",
              Integer.to_string(convert(inclusive, unit)),
              "\n"
            ]
          end

        ["fn=", fn_name, "\n0 ", Integer.to_string(convert(self, unit)), "\n", calls_text, "\n"]
      end

    total = table |> Map.values() |> Enum.reduce(0, &(&1.self + &2))
    unit_name = if unit == :nanosecond, do: "ns", else: "us"

    IO.iodata_to_binary([
      "# callgrind format\nversion: 1\ncreator: kino_trace\npositions: line\n",
      "event: ",
      unit_name,
      " : Time (",
      unit_name,
      ")\nevents: ",
      unit_name,
      "\ntotals: ",
      Integer.to_string(convert(total, unit)),
      "\n\n",
      blocks
    ])
  end

  defp cost(node, acc) do
    name = frame(node)
    acc = entry(acc, name, fn e -> %{e | self: e.self + CallTree.self(node)} end)

    acc =
      Enum.reduce(node.children, acc, fn child, acc ->
        callee = frame(child)
        inclusive = CallTree.total(child)

        entry(acc, name, fn e ->
          case e.calls do
            %{^callee => {n, t}} ->
              %{e | calls: %{e.calls | callee => {n + 1, t + inclusive}}}

            _ ->
              %{
                e
                | calls: Map.put(e.calls, callee, {1, inclusive}),
                  callees: [callee | e.callees]
              }
          end
        end)
      end)

    Enum.reduce(node.children, acc, &cost/2)
  end

  defp entry({order, table}, name, fun) do
    case table do
      %{^name => e} -> {order, %{table | name => fun.(e)}}
      _ -> {[name | order], Map.put(table, name, fun.(%{self: 0, calls: %{}, callees: []}))}
    end
  end

  defp convert(ns, :nanosecond), do: ns
  defp convert(ns, :microsecond), do: div(ns + 500, 1000)
end
