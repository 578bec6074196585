defmodule KinoTrace.Base.Lookup do
  @moduledoc false
  # Where a plan's facts come from: which modules exist and what they define, their
  # object code (`KinoTrace.Plan.TailCalls`), and the processes names stand for. A lookup
  # reads them on one node: this one (`local/0`), or another (`new/1`), with plain OTP
  # calls (`:code`, `:erlang`, `:global`, a `{:via, module, name}`'s module) over
  # `:erpc`, so that node needs neither kino_trace nor Elixir. The pattern checks
  # (`KinoTrace.Pattern.Preflight`), `KinoTrace.Plan.TailCalls` and
  # `KinoTrace.Plan.Options.resolve_pids/2` take a lookup and are the same code for every
  # node.
  #
  # Every function takes a list and answers for all of it: on another node the calls
  # are sent together and their answers collected, one round trip per step however long
  # the list, within `call_timeout/0`. A node that goes away or does
  # not answer in time raises `ArgumentError` naming it.

  alias KinoTrace.Base.Name

  @enforce_keys [:node]
  defstruct [:node]

  @type t :: %__MODULE__{node: node()}

  @call_timeout 15_000

  @typedoc "A process name, as `:pids` takes it."
  @type name :: atom() | {:global, term()} | {:via, module(), term()}

  @doc "How long a call to another node may take (ms): a lookup's, `KinoTrace.Plan.Nodes.call/4`'s."
  @spec call_timeout() :: pos_integer()
  def call_timeout, do: @call_timeout

  @doc """
  The lookup of this node.

  ## Examples

      iex> lookup = KinoTrace.Base.Lookup.local()
      iex> KinoTrace.Base.Lookup.ensure_loaded(lookup, [:lists, :kino_trace_no_such_module])
      %{lists: {:module, :lists}, kino_trace_no_such_module: {:error, :nofile}}
      iex> KinoTrace.Base.Lookup.module_info(lookup, [:lists], [:exports])[:lists][:exports] |> Keyword.has_key?(:sum)
      true
      iex> KinoTrace.Base.Lookup.whereis(lookup, [:kino_trace_nobody])
      %{kino_trace_nobody: {:ok, nil}}
      iex> KinoTrace.Base.Lookup.new(node()) == lookup
      true

  Atoms: what another node answers is decoded here, so the names it returns (its
  modules, their functions, the atoms it is asked about) become atoms here too. They
  exist on that node already: its atom table bounds what a lookup can add to this one.
  """
  @spec local() :: t()
  def local, do: %__MODULE__{node: node()}

  @doc "The lookup of `node` (this node's when it is `node()`)."
  @spec new(node()) :: t()
  def new(node) when is_atom(node), do: %__MODULE__{node: node}

  @doc "Whether the lookup reads this node."
  @spec local?(t()) :: boolean()
  def local?(%__MODULE__{node: node}), do: node == node()

  @doc """
  Runs each `{module, function, args}` on the lookup's node: `{:ok, result}`, or
  `{:error, exception}` when it raised (an Erlang error normalized as Elixir does, so
  an `:undef` is an `UndefinedFunctionError`).

      iex> lookup = KinoTrace.Base.Lookup.local()
      iex> [{:ok, 1}, {:error, %ArgumentError{}}] = KinoTrace.Base.Lookup.run(lookup, [{:erlang, :abs, [-1]}, {:erlang, :abs, [:x]}])
      iex> [{:error, %UndefinedFunctionError{function: :nope}}] = KinoTrace.Base.Lookup.run(lookup, [{:lists, :nope, []}])
  """
  @spec run(t(), [{module(), atom(), list()}]) :: [{:ok, term()} | {:error, Exception.t()}]
  def run(%__MODULE__{node: node}, calls) when node == node() do
    for {m, f, a} <- calls do
      try do
        {:ok, apply(m, f, a)}
      catch
        kind, reason -> {:error, normalize(kind, reason, __STACKTRACE__)}
      end
    end
  end

  def run(%__MODULE__{node: node}, calls) do
    deadline = System.monotonic_time(:millisecond) + call_timeout()
    requests = for {m, f, a} <- calls, do: :erpc.send_request(node, m, f, a)
    collect(requests, node, deadline, [])
  end

  defp collect([], _node, _deadline, acc), do: Enum.reverse(acc)

  defp collect([request | rest], node, deadline, acc) do
    left = max(deadline - System.monotonic_time(:millisecond), 0)

    result =
      try do
        {:ok, :erpc.receive_response(request, left)}
      catch
        :error, {:erpc, reason} ->
          # No answer of the others may arrive later in this process's mailbox.
          Enum.each(rest, &abandon/1)
          raise ArgumentError, unreachable(node, reason)

        :error, {:exception, reason, stack} ->
          {:error, normalize(:error, reason, stack)}

        :exit, {:exception, reason} ->
          {:error, normalize(:exit, reason, [])}

        :throw, value ->
          {:error, normalize(:throw, value, [])}
      end

    collect(rest, node, deadline, [result | acc])
  end

  defp abandon(request) do
    :erpc.receive_response(request, 0)
  catch
    _, _ -> :ok
  end

  defp unreachable(node, :timeout),
    do:
      "#{inspect(node)} did not answer within #{call_timeout()} ms while its modules and names were looked up"

  defp unreachable(node, reason),
    do:
      "lost the connection to #{inspect(node)} while its modules and names were looked up (#{inspect(reason)})"

  defp normalize(:error, reason, stack), do: Exception.normalize(:error, reason, stack)
  defp normalize(:exit, reason, _stack), do: %ErlangError{original: {:exit, reason}}
  defp normalize(:throw, value, _stack), do: %ErlangError{original: {:nocatch, value}}

  @doc """
  `:code.ensure_loaded/1` of each module on the lookup's node (loading it there, as a
  trace of it would): `{:module, module}` or `{:error, reason}`.
  """
  @spec ensure_loaded(t(), [module()]) :: %{module() => {:module, module()} | {:error, term()}}
  def ensure_loaded(lookup, modules) do
    modules = Enum.uniq(modules)

    results =
      for result <- run(lookup, Enum.map(modules, &{:code, :ensure_loaded, [&1]})) do
        case result do
          {:ok, answer} -> answer
          {:error, e} -> {:error, Exception.message(e)}
        end
      end

    modules |> Enum.zip(results) |> Map.new()
  end

  @doc """
  `:erlang.get_module_info/2` of each loaded module for each key (`:exports`,
  `:functions`, `:md5`...): a map per module with the keys that could be read (none
  for a module that is not loaded).
  """
  @spec module_info(t(), [module()], [atom()]) :: %{module() => %{atom() => term()}}
  def module_info(lookup, modules, keys) do
    asks = for m <- Enum.uniq(modules), key <- keys, do: {m, key}
    results = run(lookup, for({m, key} <- asks, do: {:erlang, :get_module_info, [m, key]}))

    initial = Map.new(Enum.uniq(modules), &{&1, %{}})

    asks
    |> Enum.zip(results)
    |> Enum.reduce(initial, fn
      {{m, key}, {:ok, value}}, acc -> Map.update!(acc, m, &Map.put(&1, key, value))
      {_ask, {:error, _}}, acc -> acc
    end)
  end

  @doc """
  The object code of each module as the code path of the lookup's node has it
  (`:code.get_object_code/1` there), or `nil`. It may not be the loaded version:
  compare its MD5 with the loaded one's.
  """
  @spec object_code(t(), [module()]) :: %{module() => binary() | nil}
  def object_code(lookup, modules) do
    modules = Enum.uniq(modules)

    results =
      for result <- run(lookup, Enum.map(modules, &{:code, :get_object_code, [&1]})) do
        case result do
          {:ok, {_module, beam, _file}} when is_binary(beam) -> beam
          _ -> nil
        end
      end

    modules |> Enum.zip(results) |> Map.new()
  end

  @doc """
  The modules named by `texts` (full atom texts: `"Elixir.Enum"`, `"ets"`) that exist
  on the lookup's node: its atom exists there or its `.beam` is on its code path. A
  text with no such module is left out.

      iex> KinoTrace.Base.Lookup.module_atoms(KinoTrace.Base.Lookup.local(), ["Elixir.Enum", "kino_trace_no_such_mod_5d1e"])
      %{"Elixir.Enum" => Enum}
  """
  @spec module_atoms(t(), [String.t()]) :: %{String.t() => module()}
  def module_atoms(lookup, texts) do
    texts = Enum.uniq(texts)
    existing = existing_atoms(lookup, texts)

    on_path =
      for text <- texts,
          not is_map_key(existing, text),
          file = Name.beam_file(text),
          do: {text, file}

    found =
      for {{text, _file}, {:ok, path}} <-
            Enum.zip(
              on_path,
              run(lookup, for({_, file} <- on_path, do: {:code, :where_is_file, [file]}))
            ),
          is_list(path),
          # The module is on that node's code path: loading it there creates the atom.
          into: %{},
          do: {text, String.to_atom(text)}

    Map.merge(existing, found)
  end

  @doc """
  The atoms named by `texts` that exist on the lookup's node (they then exist here too).

      iex> KinoTrace.Base.Lookup.existing_atoms(KinoTrace.Base.Lookup.local(), ["ok", "kino_trace_no_such_atom_9b2c"])
      %{"ok" => :ok}
  """
  @spec existing_atoms(t(), [String.t()]) :: %{String.t() => atom()}
  def existing_atoms(lookup, texts) do
    texts = Enum.uniq(texts)

    results =
      run(lookup, for(text <- texts, do: {:erlang, :binary_to_existing_atom, [text, :utf8]}))

    for {text, {:ok, atom}} <- Enum.zip(texts, results), into: %{}, do: {text, atom}
  end

  @doc """
  Every module the lookup's node can load or has loaded (`:code.all_available/0`
  there), as the texts of their atoms.
  """
  @spec available_modules(t()) :: [String.t()]
  def available_modules(lookup) do
    case run(lookup, [{:code, :all_available, []}]) do
      [{:ok, modules}] -> for {name, _file, _loaded} <- modules, do: List.to_string(name)
      [{:error, _}] -> []
    end
  end

  @doc """
  The process each name stands for on the lookup's node, looked up as `GenServer`
  does: `:erlang.whereis/1` there for an atom, `:global.whereis_name/1` for
  `{:global, name}` and `module.whereis_name/1` there for `{:via, module, name}`.
  `{:ok, pid}`, `{:ok, nil}` when no process has the name, or `{:error, exception}`
  when the lookup raised.
  """
  @spec whereis(t(), [name()]) :: %{name() => {:ok, pid() | nil} | {:error, Exception.t()}}
  def whereis(lookup, names) do
    names = Enum.uniq(names)

    calls =
      for name <- names do
        case name do
          {:global, name} -> {:global, :whereis_name, [name]}
          {:via, module, name} -> {module, :whereis_name, [name]}
          name when is_atom(name) -> {:erlang, :whereis, [name]}
        end
      end

    results =
      for result <- run(lookup, calls) do
        case result do
          {:ok, pid} when is_pid(pid) -> {:ok, pid}
          {:ok, _undefined} -> {:ok, nil}
          error -> error
        end
      end

    names |> Enum.zip(results) |> Map.new()
  end
end
