defmodule KinoTrace.Agent do
  @moduledoc false
  # Traces another node through kino_trace's agent (`src/kino_trace_agent.erl`), which is
  # shipped there for the duration of the trace: that node needs nothing of kino_trace.
  #
  # `start/5` loads what is missing on the node (which `KinoTrace.Plan.Nodes.resolve!/1` has
  # checked: connected, OTP 27 or newer) with `:code.load_binary/3` and starts a worker
  # for one trace:
  #
  #   * the agent and the pure-Erlang fallback tracer (`kino_trace_agent` and its
  #     `kino_trace_agent_*` modules, `kino_trace_fallback` and its
  #     `kino_trace_fallback_*` modules): small, OTP-only modules;
  #   * the native tracer (`kino_trace_tracer` and its NIF library, written to a private
  #     temporary directory on that node, loaded, and deleted with the directory at
  #     once), when it can load there: the same `:system_architecture` and a compatible
  #     `:nif_version`. Otherwise, or with `agent: :fallback`, the trace runs on the
  #     fallback tracer, and the worker says why.
  #
  # A module that node already has is used as it is if it is this very version (same
  # md5), and never replaced: another version is an error naming the module. When the
  # node's last trace ends (stopped, its owner gone, or the connection lost), the agent
  # deletes and purges every module it was sent, so the node is as it was.
  #
  # The local `KinoTrace.Session` of that node's part talks to the worker with `call/2`.

  alias KinoTrace.Plan.Nodes

  # Shipped together, and removed together by the agent when the node's last trace ends
  # (it deletes and purges every module it was sent): a module added to the agent or the
  # fallback goes here.
  @agent_modules [
    :kino_trace_agent,
    :kino_trace_agent_worker,
    :kino_trace_agent_files,
    :kino_trace_agent_ring,
    :kino_trace_agent_native,
    :kino_trace_trigger,
    :kino_trace_open_calls,
    :kino_trace_fallback,
    :kino_trace_fallback_event,
    :kino_trace_fallback_gate,
    :kino_trace_fallback_process,
    :kino_trace_fallback_limits,
    :kino_trace_fallback_terms
  ]
  @tracer :kino_trace_tracer
  @timeout 15_000

  # Run on the traced node by ship/2, with Agent, Starter and Load bound.
  @ship_exprs (
                {:ok, tokens, _} =
                  :erl_scan.string(~c"""
                  Shipped = case Agent of
                      none -> [];
                      Beam -> {module, kino_trace_agent} = code:load_binary(kino_trace_agent, "kino_trace_agent.beam", Beam),
                              [kino_trace_agent]
                  end,
                  kino_trace_agent:hold(Starter, Shipped, Load).
                  """)

                {:ok, exprs} = :erl_parse.parse_exprs(tokens)
                exprs
              )

  @typedoc "What became of a node's agent when a trace of it ended (see `stop/1`)."
  @type release :: :removed | :kept | :lost

  @typedoc "Which tracer a worker runs: the native one, or the fallback and why."
  @type mode :: :native | {:fallback, String.t()}

  @doc """
  Starts a worker on `node` for the session `owner` (a local process), whose messages
  carry `id`, with the tracer `limits`. `opts`: `agent: :auto | :fallback`, and
  `counters: true` for a session of the VM's call counters only (`Kino.Trace.Stats`:
  no tracer, no events), `ring: %{events: n, bytes: n}` for a recorder's (the worker
  keeps its ring there: `kino_trace_agent_worker`). Returns `{:ok, worker, mode}` or `{:error, message}`.
  """
  @spec start(node(), pid(), term(), map(), keyword()) ::
          {:ok, pid(), mode() | :counters} | {:error, String.t()}
  def start(node, owner, id, limits, opts \\ []) do
    # One start at a time per traced node, from any tracing node: the lock is held on
    # that node too. Two starts at once would both ship the same modules, the second
    # load making the first copy old, and neither could be removed after.
    :global.trans(
      {{__MODULE__, node}, self()},
      fn -> start(node, owner, id, limits, opts, 3) end,
      [node(), node]
    )
  end

  # The node's last trace may be ending meanwhile, its agent unloading itself (a call
  # of it fails there, or a module cannot be loaded until its old code is purged): try
  # again. The node's refusals (its release, another version) are final.
  defp start(node, owner, id, limits, opts, tries) do
    case start_once(node, owner, id, limits, opts) do
      {:error, {:refused, message}} ->
        {:error, message}

      {:error, _message} when tries > 1 ->
        settle(node)
        start(node, owner, id, limits, opts, tries - 1)

      {:error, message} ->
        {:error, message}

      ok ->
        ok
    end
  end

  # Before trying again: the node's previous agent may be going. Wait for its keeper's
  # exit (its DOWN; at most 100 ms, as a keeper that stays is not going), then purge the
  # old code it left (its purger does the same right after that exit; a soft purge never
  # kills a process still running that code).
  defp settle(node) do
    case :erpc.call(node, :erlang, :whereis, [:kino_trace_agent], 5_000) do
      pid when is_pid(pid) ->
        ref = Process.monitor(pid)

        receive do
          {:DOWN, ^ref, :process, _, _} -> :ok
        after
          100 -> Process.demonitor(ref, [:flush])
        end

      :undefined ->
        :ok
    end

    for module <- @agent_modules, do: :erpc.call(node, :code, :soft_purge, [module], 5_000)
    :ok
  catch
    _, _ -> :ok
  end

  defp start_once(node, owner, id, limits, opts) do
    # every module is checked before any is loaded: a refusal leaves the node untouched
    with {:ok, facts} <- facts(node),
         {:ok, missing} <- missing(node, @agent_modules),
         {:ok, native} <- if(opts[:counters], do: {:ok, :none}, else: native(node, facts, opts)),
         :ok <- ship(node, missing) do
      after_ship(node)

      config = %{
        owner: owner,
        id: id,
        limits: limits,
        starter: self(),
        native: native,
        counters: opts[:counters] == true
      }

      config = if ring = opts[:ring], do: Map.put(config, :ring, ring), else: config

      case Nodes.call(node, :kino_trace_agent, :start_worker, [config]) do
        {:ok, worker, mode} ->
          {:ok, worker, mode}

        {:error, message} ->
          # what was shipped for this start goes, unless a trace runs there
          Nodes.call(node, :kino_trace_agent, :release, [self()])
          {:error, if(is_binary(message), do: message, else: inspect(message))}
      end
    end
  end

  # Tests only: pauses a start between shipping and starting the worker (the tracing
  # node may die there), when the application env says whom to tell.
  defp after_ship(node) do
    case Application.get_env(:kino_trace, :test_pause_after_ship) do
      pid when is_pid(pid) ->
        send(pid, {:kino_trace_shipped, node, self()})

        receive do
          {:kino_trace_continue, ^node} -> :ok
        end

      _ ->
        :ok
    end
  end

  @doc """
  Ends `worker` (started by `start/5`) and waits until its node is as it was before:
  `:removed` when it was that node's last trace (kino_trace's modules deleted and
  purged there, its processes gone), `:kept` when other traces of that node go on (the
  agent leaves with the last), `:lost` when the node does not answer (its agent ends
  its traces and removes itself there when the connection drops).
  """
  @spec stop(pid()) :: release()
  def stop(worker) do
    case :gen_server.call({:kino_trace_agent, node(worker)}, {:end_worker, worker}, @timeout) do
      {:removed, purger} ->
        # the agent's last purge, once its keeper has exited
        if is_pid(purger), do: await_down(purger)
        :removed

      :kept ->
        :kept
    end
  catch
    # no keeper there: it ended with this worker already
    :exit, {:noproc, _} -> :removed
    :exit, _ -> :lost
  end

  defp await_down(pid) do
    ref = Process.monitor(pid)

    receive do
      {:DOWN, ^ref, :process, _, _} -> :ok
    after
      @timeout -> Process.demonitor(ref, [:flush])
    end
  end

  @doc """
  Sends `request` to `worker` and returns its answer, or `{:error, :agent_down}` when the
  worker or its node is gone or does not answer within #{@timeout} ms.
  """
  @spec call(pid(), term()) :: term()
  def call(worker, request) do
    :gen_server.call(worker, request, @timeout)
  catch
    :exit, _ -> {:error, :agent_down}
  end

  # --- checks ------------------------------------------------------------------------

  defp facts(node) do
    case Nodes.call(node, :erlang, :system_info, [:system_architecture]) do
      {:error, message} -> {:error, message}
      arch -> {:ok, %{arch: arch, nif: Nodes.call(node, :erlang, :system_info, [:nif_version])}}
    end
  end

  # The NIF loads there only where it was built for: the same architecture and a NIF
  # version with the same major and at least this minor number.
  defp native(node, facts, opts) do
    here = :erlang.system_info(:system_architecture)
    nif = :erlang.system_info(:nif_version)

    cond do
      opts[:agent] == :fallback ->
        {:ok, {:fallback, "agent: :fallback was given"}}

      not KinoTrace.Tracer.loaded?() ->
        {:ok,
         {:fallback,
          "the native tracer is not loaded on #{node()}: #{KinoTrace.Tracer.load_error()}"}}

      facts.arch != here ->
        {:ok,
         {:fallback, "the node's architecture is #{facts.arch}, the native tracer's #{here}"}}

      not nif_compatible?(facts.nif, nif) ->
        {:ok,
         {:fallback, "the node's NIF version is #{facts.nif}, the native tracer needs #{nif}"}}

      true ->
        case loaded(node, @tracer) do
          :same -> {:ok, :preloaded}
          :none -> {:ok, {object_code!(@tracer), File.read!(nif_library())}}
          {:error, message} -> {:error, message}
        end
    end
  end

  defp nif_compatible?(there, here) do
    {major, minor} = nif_version(there)
    {major_here, minor_here} = nif_version(here)
    major == major_here and minor >= minor_here
  end

  # "2.17" as :erlang.system_info(:nif_version) gives it: {2, 17}
  defp nif_version(version) do
    [major, minor] =
      version |> List.to_string() |> String.split(".") |> Enum.map(&String.to_integer/1)

    {major, minor}
  end

  defp nif_library, do: Path.join(:code.priv_dir(:kino_trace), "kino_trace_nif" <> nif_suffix())

  # As the library is named where it is built (and where it is shipped: the same
  # architecture, so the same system).
  defp nif_suffix, do: if(match?({:win32, _}, :os.type()), do: ".dll", else: ".so")

  # --- shipping ------------------------------------------------------------------------

  # The modules node does not have; an error for one it has in another version.
  defp missing(node, modules) do
    Enum.reduce_while(modules, {:ok, []}, fn module, {:ok, missing} ->
      case loaded(node, module) do
        :same -> {:cont, {:ok, missing}}
        :none -> {:cont, {:ok, missing ++ [module]}}
        {:error, message} -> {:halt, {:error, message}}
      end
    end)
  end

  # Loads the missing agent modules on node and has its agent's keeper hold for this
  # process until its worker starts: if this process (or its node) dies before, the
  # keeper removes them. The agent module is loaded and the keeper started in one
  # remote evaluation (erl_eval, which every node has), so nothing comes between.
  defp ship(node, missing) do
    {agent, others} = Enum.split_with(missing, &(&1 == :kino_trace_agent))
    load = for module <- others, do: {module, object_code!(module)}

    bindings = [
      Agent: if(agent == [], do: :none, else: object_code!(:kino_trace_agent)),
      Starter: self(),
      Load: load
    ]

    case Nodes.call(node, :erl_eval, :exprs, [@ship_exprs, bindings]) do
      {:value, :ok, _bindings} ->
        :ok

      {:value, {:error, message}, _bindings} ->
        {:error, message}

      {:error, message} ->
        {:error, "could not load kino_trace's agent on node #{inspect(node)}: #{message}"}
    end
  end

  # Whether node has this module loaded: in this version, not at all, or in another one.
  defp loaded(node, module) do
    case Nodes.call(node, :code, :is_loaded, [module]) do
      false ->
        :none

      {:file, _} ->
        if Nodes.call(node, :erlang, :get_module_info, [module, :md5]) ==
             module.module_info(:md5),
           do: :same,
           else:
             {:error,
              "node #{inspect(node)} has #{module} loaded in another version than this kino_trace's: " <>
                "kino_trace never replaces it (trace that node from a node with the same kino_trace version)"}

      {:error, message} ->
        {:error, message}
    end
  end

  defp object_code!(module) do
    {^module, binary, _file} = :code.get_object_code(module)
    binary
  end
end
