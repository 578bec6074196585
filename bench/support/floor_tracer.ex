defmodule KinoTraceBench.FloorTracer do
  @moduledoc false
  # The benchmark's cost floor (c_src/bench/floor_tracer.cpp): an erl_tracer NIF module.
  # Tracer state `:discard`: enabled*/3 discards every event (the VM builds no term).
  # Tracer state `:accept`: enabled*/3 accepts and trace*/5 returns at once (no copy).
  # Built only with MIX_ENV=bench; not part of kino_trace's API.

  @on_load :load_nif

  def load_nif do
    path = :filename.join(:code.priv_dir(:kino_trace), ~c"kino_trace_floor_tracer")

    case :erlang.load_nif(path, 0) do
      :ok -> :ok
      {:error, {:reload, _}} -> :ok
      {:error, reason} -> raise "could not load the floor tracer from #{path}: #{inspect(reason)}"
    end
  end

  # One-way trip of a cache line between CPUs 0 and 1, in ns (nil off Linux, or unless both are ours).
  def core_to_core_ns, do: :erlang.nif_error(:not_loaded)

  def enabled(_tag, _state, _tracee), do: :erlang.nif_error(:not_loaded)
  def enabled_call(_tag, _state, _tracee), do: :erlang.nif_error(:not_loaded)
  def enabled_send(_tag, _state, _tracee), do: :erlang.nif_error(:not_loaded)
  def enabled_receive(_tag, _state, _tracee), do: :erlang.nif_error(:not_loaded)
  def enabled_procs(_tag, _state, _tracee), do: :erlang.nif_error(:not_loaded)
  def trace(_tag, _state, _tracee, _term, _opts), do: :erlang.nif_error(:not_loaded)
  def trace_call(_tag, _state, _tracee, _term, _opts), do: :erlang.nif_error(:not_loaded)
  def trace_send(_tag, _state, _tracee, _term, _opts), do: :erlang.nif_error(:not_loaded)
  def trace_receive(_tag, _state, _tracee, _term, _opts), do: :erlang.nif_error(:not_loaded)
  def trace_procs(_tag, _state, _tracee, _term, _opts), do: :erlang.nif_error(:not_loaded)
end
