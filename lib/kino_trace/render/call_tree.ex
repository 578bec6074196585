defmodule KinoTrace.Render.CallTree do
  @moduledoc false
  # Call trees from a trace's events, per process: the rule the widget's Calls tab draws
  # them by (`callTrees` in assets/src/model.js), on the depths the call pairing rule
  # gave the events (KinoTrace.Tracer.Decoder): per process, a call at depth d is a
  # child of the open call at depth d - 1 when there is one, else a root; a call of a
  # function traced without returns opens nothing (its depth is its caller's), so a
  # tail-call loop makes siblings, never a deep false stack. A `:return` or `:exception`
  # gives the call its `:call_id` names its duration.
  #
  # A node: `%{mfa, id, duration, children}`, `duration` in nanoseconds, `nil` when the
  # events do not say how the call ended (traced without returns, still running, its
  # return lost or outside the events). `total/1` is a node's time as far as it is
  # known, `self/1` what it spent outside the calls it made.

  alias Kino.Trace.Event

  @type tree :: %{
          mfa: mfa(),
          id: pos_integer() | nil,
          duration: non_neg_integer() | nil,
          children: [tree()]
        }

  @doc """
  The call trees of `events` (oldest first), per process in the order each first
  called: `[{pid, roots}]`.

      iex> alias Kino.Trace.Event
      iex> pid = :c.pid(0, 250, 0)
      iex> events = [
      ...>   %Event{id: 1, kind: :call, pid: pid, module: M, function: :a, arity: 0, depth: 0},
      ...>   %Event{id: 2, kind: :call, pid: pid, module: M, function: :b, arity: 0, depth: 1},
      ...>   %Event{id: 3, kind: :return, pid: pid, module: M, function: :b, arity: 0, call_id: 2, duration: 400, depth: 1},
      ...>   %Event{id: 4, kind: :return, pid: pid, module: M, function: :a, arity: 0, call_id: 1, duration: 1_000, depth: 0}
      ...> ]
      iex> [{^pid, [a]}] = KinoTrace.Render.CallTree.build(events)
      iex> {a.mfa, a.duration, Enum.map(a.children, &{&1.mfa, &1.duration})}
      {{M, :a, 0}, 1_000, [{{M, :b, 0}, 400}]}
      iex> {KinoTrace.Render.CallTree.total(a), KinoTrace.Render.CallTree.self(a)}
      {1_000, 600}
  """
  @spec build([Event.t()]) :: [{pid() | nil, [tree()]}]
  def build(events) do
    durations =
      for %Event{kind: kind, call_id: id, duration: d} <- events,
          kind in [:return, :exception] and id != nil and d != nil,
          into: %{},
          do: {id, d}

    # per process: {order, stack of open nodes (newest first, with their depth)}; nodes
    # are built bottom-up when they leave the stack.
    {order, stacks} =
      Enum.reduce(events, {[], %{}}, fn
        %Event{kind: :call, pid: pid} = e, {order, stacks} ->
          {order, stack} =
            case stacks do
              %{^pid => stack} -> {order, stack}
              _ -> {[pid | order], {[], []}}
            end

          node = %{mfa: Event.mfa(e), id: e.id, duration: Map.get(durations, e.id), children: []}
          {order, Map.put(stacks, pid, push(stack, max(e.depth || 0, 0), node))}

        _other, acc ->
          acc
      end)

    for pid <- Enum.reverse(order), do: {pid, close(Map.fetch!(stacks, pid))}
  end

  # `{open, roots}`: `open` the open calls, innermost first, each `{depth, node, root?}`
  # with its children newest first; `roots` newest first. A node closes when a call at
  # its depth or above comes, or at the end: into its parent (the open call below it) or,
  # when it had none, into the roots.
  defp push({open, roots}, depth, node) do
    {open, roots} = close_to(open, roots, depth)

    case open do
      [{parent_depth, _, _} | _] when parent_depth == depth - 1 ->
        {[{depth, node, false} | open], roots}

      _ ->
        {[{depth, node, true} | open], roots}
    end
  end

  defp close_to([{d, node, root?} | rest], roots, depth) when d >= depth do
    node = finish(node)

    case {root?, rest} do
      {false, [{pd, parent, proot?} | rest]} ->
        close_to(
          [{pd, %{parent | children: [node | parent.children]}, proot?} | rest],
          roots,
          depth
        )

      _ ->
        close_to(rest, [node | roots], depth)
    end
  end

  defp close_to(open, roots, _depth), do: {open, roots}

  defp close({open, roots}) do
    {[], roots} = close_to(open, roots, 0)
    # (a root closes when a call at its depth or above comes, which may be after a root
    # made later: in the order they were made)
    Enum.sort_by(roots, & &1.id)
  end

  defp finish(node), do: %{node | children: Enum.reverse(node.children)}

  @doc "A node's time in nanoseconds: its duration, or when unknown the time of the calls it made that is known."
  @spec total(tree()) :: non_neg_integer()
  def total(%{duration: d}) when is_integer(d), do: d
  def total(%{children: children}), do: Enum.reduce(children, 0, &(total(&1) + &2))

  @doc "A node's time outside the calls it made (0 when its duration is unknown)."
  @spec self(tree()) :: non_neg_integer()
  def self(%{duration: nil}), do: 0

  def self(%{duration: d, children: children}),
    do: max(d - Enum.reduce(children, 0, &(total(&1) + &2)), 0)
end
