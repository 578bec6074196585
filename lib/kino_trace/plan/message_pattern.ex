defmodule KinoTrace.Plan.MessagePattern do
  @moduledoc false
  # Compiles message patterns in Elixir syntax into the match specs of `:trace.send/3`
  # and `:trace.recv/3`.
  #
  # A message pattern is an Elixir pattern with an optional guard, matched against the
  # message: `"{:ok, _}"`, `"{:get, key} when is_atom(key)"`, `"%{event: :login}"`.
  # The `:distributed` preset keeps only messages that cross to or from another node.
  #
  # Parsing creates no atom: variables may have any name, and a literal atom that
  # does not exist yet is refused, since no message can contain it (see
  # `KinoTrace.Base.Name`).

  alias KinoTrace.Pattern.{MatchSpec, Quoted}

  @type specs :: %{send: list() | true, recv: list() | true}

  # What the receive match spec adds to a timeout's trace message (option `timeouts:
  # true`): the decoder makes it an event of kind `:timeout` (`KinoTrace.Tracer.Decoder`).
  @timeout_marker :kino_trace_after_timeout

  @doc """
  The term a receive match spec adds to the trace message of a `receive ... after`
  that timed out, when the trace asked for timeouts.

      iex> {:ok, specs} = KinoTrace.Plan.MessagePattern.compile(nil, false, timeouts: true)
      iex> :erlang.match_spec_test([:clock_service, :undefined, :timeout], specs.recv, :trace)
      {:ok, :kino_trace_after_timeout, [], []}

  ## Examples

      iex> {:ok, specs} = KinoTrace.Plan.MessagePattern.compile("{:ok, x} when x > 1", false)
      iex> :erlang.match_spec_test([self(), {:ok, 2}], specs.send, :trace)
      {:ok, true, [], []}
      iex> :erlang.match_spec_test([self(), {:ok, 0}], specs.send, :trace)
      {:ok, false, [], []}

  Any atom matches as written, `:"$gen_call"` included; several `when` clauses
  are one match spec clause each, as `KinoTrace.Pattern` does for calls.

      iex> {:ok, specs} = KinoTrace.Plan.MessagePattern.compile(~S|{:"$gen_call", _, {:fetch, _}}|, false)
      iex> :erlang.match_spec_test([self(), {:"$gen_call", {self(), make_ref()}, {:fetch, 1}}], specs.send, :trace)
      {:ok, true, [], []}
  """
  @spec timeout_marker() :: atom()
  def timeout_marker, do: @timeout_marker

  @doc """
  Compiles `pattern` (a string, or `nil` for every message) into send and receive
  match specs. With `distributed?`, only messages to or from another node match.

  `opts`: `:max_bytes`, the trace option: what the literals of the pattern build is
  bounded by it, as in call patterns (see `KinoTrace.Pattern.parse/2`); `:timeouts`,
  the trace option: a `receive ... after` that times out (`Process.sleep/1` is one),
  which is left out by default, is traced, marked as one (see `timeout_marker/0`),
  whatever the pattern.
  """
  @spec compile(String.t() | nil, boolean(), max_bytes: pos_integer(), timeouts: boolean()) ::
          {:ok, specs()} | {:error, String.t()}
  def compile(pattern, distributed?, opts \\ []) do
    with {:ok, specs} <- do_compile(pattern, distributed?, opts) do
      # first: a timeout matches no other clause (each leaves out :clock_service)
      timeout = {[:clock_service, :_, :_], [], [{:message, @timeout_marker}]}
      {:ok, if(opts[:timeouts], do: %{specs | recv: [timeout | specs.recv]}, else: specs)}
    end
  end

  defp do_compile(nil, false, _opts),
    do: {:ok, %{send: true, recv: [{[:"$1", :_, :_], [{:"=/=", :"$1", :clock_service}], []}]}}

  defp do_compile(nil, true, opts), do: do_compile("_", true, opts)

  defp do_compile(text, distributed?, opts) when is_binary(text) do
    result =
      MatchSpec.safely(inspect(text), fn ->
        with {:ok, ast} <- Quoted.parse(text) do
          {message, guard} = split_guard(ast)
          to = var(:__kino_to__)
          from = [var(:__kino_node__), var(:__kino_from__)]

          with {:ok, send} <- spec([to, message], guard, send_guard(distributed?), opts),
               {:ok, recv} <- spec(from ++ [message], guard, recv_guard(distributed?), opts),
               do: {:ok, %{send: send, recv: recv}}
        end
      end)

    case result do
      {:ok, specs} -> {:ok, specs}
      {:error, message} -> {:error, "invalid message pattern #{inspect(text)}: #{message}"}
    end
  end

  defp do_compile(other, _distributed?, _opts),
    do:
      {:error,
       "invalid message pattern #{inspect(other)}: expected a string such as \"{:ok, _}\""}

  defp split_guard({:when, _, [message, guard]}), do: {message, guard}
  defp split_guard(message), do: {message, nil}

  # One clause per `when` of the guard, each also under the preset's guard.
  defp spec(head_ast, guard, preset_guard, opts) do
    with {:ok, head, clauses} <- MatchSpec.compile(head_ast, guard, preset_guard, opts),
         do: {:ok, for(guards <- clauses, do: {head, guards, []})}
  end

  defp var(name), do: Macro.var(name, nil)

  defp send_guard(false), do: nil

  defp send_guard(true) do
    to = var(:__kino_to__)

    # a pid, an alias (a GenServer's reply to a caller) or {name, node}
    quote do:
            ((is_pid(unquote(to)) or is_reference(unquote(to))) and node(unquote(to)) != node()) or
              (is_tuple(unquote(to)) and elem(unquote(to), 1) != node())
  end

  # A receive...after that timed out (`Process.sleep/1` is one) is traced as a receive
  # of the atom `:timeout` from `:clock_service` in place of a node: no message was
  # received, so it is left out. (A message `:timeout` that a process sent has a node.)
  defp recv_guard(false) do
    node = var(:__kino_node__)
    quote do: unquote(node) != :clock_service
  end

  # The VM's own messages (`:erlang.trace_delivered/1`'s answer, a timer's timeout) come
  # from `:system` or `:clock_service` in place of a node, with no sender: local ones.
  defp recv_guard(true) do
    node = var(:__kino_node__)

    quote do:
            unquote(node) != node() and unquote(node) != :system and
              unquote(node) != :clock_service
  end
end
