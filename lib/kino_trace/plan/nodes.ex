defmodule KinoTrace.Plan.Nodes do
  @moduledoc false
  # The `nodes:` option: which nodes a trace covers.
  #
  # `resolve!/1` turns the option into a list of nodes, checking that each is connected
  # and runs Erlang/OTP 27 or newer (each trace runs in an OTP trace session there).
  # A node needs no kino_trace for its part of the plan: it is built on this node
  # (`Kino.Trace.Plan.node_part!/3`), looking its modules and names up there with plain
  # OTP calls.

  @doc """
  Resolves the `nodes:` option: a node, a list of nodes, or `:all` (this node and every
  connected node, hidden connections included: `Node.list(:connected)`). Raises `ArgumentError` naming a node that is not connected or runs
  an Erlang/OTP release older than 27.

  ## Examples

      iex> KinoTrace.Plan.Nodes.resolve!(node())
      [node()]
      iex> KinoTrace.Plan.Nodes.resolve!(:all) == [node() | Node.list(:connected)]
      true
      iex> try do
      ...>   KinoTrace.Plan.Nodes.resolve!([:"nowhere@127.0.0.1"])
      ...> rescue
      ...>   e in ArgumentError -> e.message =~ ~s(cannot trace node :"nowhere@127.0.0.1": it is not connected)
      ...> end
      true
  """
  @spec resolve!(node() | [node()] | :all) :: [node()]
  def resolve!(:all), do: resolve!([node() | Node.list(:connected)])
  def resolve!(node) when is_atom(node), do: resolve!([node])

  def resolve!(nodes) when is_list(nodes) do
    nodes = Enum.uniq(nodes)
    Enum.each(nodes, &check_node!/1)
    nodes
  end

  defp check_node!(node) when node == node(), do: :ok

  defp check_node!(node) when is_atom(node) do
    # Hidden connections count: Livebook's runtime makes only hidden ones.
    unless node in Node.list(:connected) do
      raise ArgumentError,
            "cannot trace node #{inspect(node)}: it is not connected to #{inspect(node())}"
    end

    case call(node, :erlang, :system_info, [:otp_release]) do
      {:error, message} ->
        raise ArgumentError, "cannot trace node #{inspect(node)}: #{message}"

      release ->
        if List.to_integer(release) < 27 do
          raise ArgumentError,
                "cannot trace node #{inspect(node)}: it runs Erlang/OTP #{release}, and tracing it needs " <>
                  "OTP 27 or newer (each trace runs in its own :trace session, new in OTP 27)"
        end
    end
  end

  defp check_node!(other),
    do: raise(ArgumentError, "invalid value for :nodes: #{inspect(other)} is not a node name")

  @doc """
  Calls `m.f(a...)` on `node`: its result, or `{:error, message}` when the node cannot be
  reached or the call raises (a call of kino_trace's code where it is not loaded says so).
  """
  @spec call(node(), module(), atom(), list()) :: term()
  def call(node, m, f, a) do
    :erpc.call(node, m, f, a, KinoTrace.Base.Lookup.call_timeout())
  catch
    :error, {:erpc, reason} ->
      {:error, "node unreachable (#{inspect(reason)})"}

    :error, {:exception, reason, stack} ->
      case Exception.normalize(:error, reason, stack) do
        # (Its message would say whether the module is loaded here, not there.)
        %UndefinedFunctionError{module: ^m, function: ^f} ->
          {:error,
           if(kino_trace?(m),
             do: not_loaded(),
             else: "#{inspect(m)}.#{f}/#{length(a)} is not defined there"
           )}

        e ->
          {:error, Exception.message(e)}
      end

    kind, reason ->
      {:error, Exception.format_banner(kind, reason)}
  end

  defp kino_trace?(module) do
    name = Atom.to_string(module)

    String.starts_with?(name, "Elixir.Kino.Trace.") or
      String.starts_with?(name, "Elixir.KinoTrace.")
  end

  defp not_loaded do
    "kino_trace is not loaded there, or another version of it " <>
      "(add its code path on that node, e.g. with :code.add_paths/1, and its compiled native tracer)"
  end
end
