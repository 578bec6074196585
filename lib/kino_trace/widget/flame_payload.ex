defmodule KinoTrace.Widget.FlamePayload do
  @moduledoc false
  # The Flame tab's data: the call trees of the events the widget holds
  # (KinoTrace.Render.CallTree) folded into stacks by the rule of `Kino.Trace.flame/2`
  # (KinoTrace.Render.Flame: frames in Elixir's spelling, a call whose end the events do
  # not have is the frame `Mod.fun/1 [no return]`, never a deep false stack), merged
  # into one tree of frames, as a JSON-able map the browser draws without more work:
  #
  #   * `frames` - the distinct frame names, each once
  #   * `nodes` - flat, four integers a node: `parent` (index of the parent node, -1 for
  #     the root), `frame` (index in `frames`, -1 for the root), `total` and `self` (ns);
  #     node 0 is the root (all the stacks), parents come before their children, and
  #     the children of a node are consecutive, by frame name
  #   * `no_return` - the indices of the frames marked `[no return]`
  #   * `processes` - the processes of the events (`pid`, `name`, `total` ns), most
  #     time first, at most @max_processes; `process` the one asked for (`nil`: all; a
  #     process with no calls in the events has an empty tree)
  #   * `omitted` - time (ns) of the stacks left out past `max_nodes` nodes
  #
  # Bounded: a node is a distinct stack prefix, so at most as many as the calls of the
  # events (the widget keeps `keep` events), and never more than `max_nodes` besides the
  # root.

  alias KinoTrace.Render.{CallTree, Flame}

  @max_processes 50
  @default_max_nodes 100_000

  @type t :: %{
          frames: [String.t()],
          nodes: [integer()],
          no_return: [non_neg_integer()],
          processes: [%{pid: String.t(), name: String.t() | nil, total: non_neg_integer()}],
          process: String.t() | nil,
          omitted: non_neg_integer()
        }

  @doc """
  The payload of `events` (oldest first), for all processes or for the one whose pid
  reads `process` (`inspect/1`'s text; text from a browser is compared, never turned
  into a term). Option: `:max_nodes` (default #{@default_max_nodes}).

      iex> alias Kino.Trace.Event
      iex> pid = :c.pid(0, 250, 0)
      iex> events = [
      ...>   %Event{id: 1, kind: :call, pid: pid, module: M, function: :a, arity: 0, depth: 0},
      ...>   %Event{id: 2, kind: :call, pid: pid, module: M, function: :b, arity: 0, depth: 1},
      ...>   %Event{id: 3, kind: :return, pid: pid, module: M, function: :b, arity: 0, call_id: 2, duration: 400, depth: 1},
      ...>   %Event{id: 4, kind: :return, pid: pid, module: M, function: :a, arity: 0, call_id: 1, duration: 1_000, depth: 0}
      ...> ]
      iex> flame = KinoTrace.Widget.FlamePayload.build(events)
      iex> {flame.frames, flame.nodes}
      {["M.a/0", "M.b/0"], [-1, -1, 1_000, 0, 0, 0, 1_000, 600, 1, 1, 400, 400]}
  """
  @spec build([Kino.Trace.Event.t()], String.t() | nil, keyword()) :: t()
  def build(events, process \\ nil, opts \\ []) do
    max_nodes = Keyword.get(opts, :max_nodes, @default_max_nodes)
    trees = CallTree.build(events)
    names = names(events)

    processes =
      trees
      |> Enum.map(fn {pid, roots} ->
        %{
          pid: inspect(pid),
          name: names[pid],
          total: Enum.reduce(roots, 0, &(CallTree.total(&1) + &2))
        }
      end)
      |> Enum.sort_by(&(-&1.total))
      |> Enum.take(@max_processes)

    shown =
      if process, do: Enum.filter(trees, fn {pid, _} -> inspect(pid) == process end), else: trees

    {tree, omitted} = merge(Flame.stacks(shown), max_nodes)
    {frames, nodes} = flatten(tree)
    no_return = Flame.no_return()

    %{
      frames: frames,
      nodes: nodes,
      no_return: for({f, i} <- Enum.with_index(frames), String.ends_with?(f, no_return), do: i),
      processes: processes,
      process: process,
      omitted: omitted
    }
  end

  @doc """
  The reply to a browser's `"get_flame"` request (`%{"process" => pid_text}` for one
  process, anything else for all).
  """
  @spec reply([Kino.Trace.Event.t()], term()) :: t()
  def reply(events, %{"process" => process}) when is_binary(process), do: build(events, process)
  def reply(events, _request), do: build(events)

  # The registered name of each process, as its events say.
  defp names(events) do
    for %{pid: pid, name: name} <- events,
        pid != nil and name != nil,
        into: %{},
        do: {pid, KinoTrace.Render.process_name(name)}
  end

  # The stacks in a tree: %{frame => {self, children}}; stacks that would make the tree
  # pass `max` nodes are left out, their time counted.
  defp merge(stacks, max) do
    {tree, _count, omitted} =
      Enum.reduce(stacks, {%{}, 0, 0}, fn {frames, value}, {tree, count, omitted} ->
        new = new_nodes(tree, frames)

        if count + new > max,
          do: {tree, count, omitted + value},
          else: {insert(tree, frames, value), count + new, omitted}
      end)

    {tree, omitted}
  end

  defp new_nodes(_tree, []), do: 0

  defp new_nodes(tree, [frame | rest]) do
    case tree do
      %{^frame => {_self, children}} -> new_nodes(children, rest)
      _ -> length(rest) + 1
    end
  end

  defp insert(tree, [frame], value) do
    Map.update(tree, frame, {value, %{}}, fn {self, children} -> {self + value, children} end)
  end

  defp insert(tree, [frame | rest], value) do
    {self, children} = Map.get(tree, frame, {0, %{}})
    Map.put(tree, frame, {self, insert(children, rest, value)})
  end

  # Preorder, children by frame name: {frames, flat nodes}.
  defp flatten(tree) do
    {tree, total} = totals(tree)
    {nodes, frames, _next} = walk(tree, 0, {[], %{}, 1})
    frame_list = frames |> Enum.sort_by(&elem(&1, 1)) |> Enum.map(&elem(&1, 0))
    {frame_list, [-1, -1, total, 0 | nodes |> Enum.reverse() |> Enum.concat()]}
  end

  # Each node's total, once: %{frame => {self, total, children}} and the tree's total.
  defp totals(tree) do
    Enum.map_reduce(tree, 0, fn {frame, {self, children}}, sum ->
      {children, below} = totals(children)
      {{frame, {self, self + below, children}}, sum + self + below}
    end)
  end

  defp walk(tree, parent, acc) do
    tree
    |> Enum.sort_by(&elem(&1, 0))
    |> Enum.reduce(acc, fn {frame, {self, total, children}}, {nodes, frames, next} ->
      {index, frames} =
        case frames do
          %{^frame => i} -> {i, frames}
          _ -> {map_size(frames), Map.put(frames, frame, map_size(frames))}
        end

      walk(children, next, {[[parent, index, total, self] | nodes], frames, next + 1})
    end)
  end
end
