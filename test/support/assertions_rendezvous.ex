defmodule Kino.Trace.AssertionsRendezvous do
  @moduledoc """
  Lets processes of different test modules wait for each other, so the isolation tests
  can prove that two traces really ran at the same time.

  `meet(name, parties, timeout)` blocks until `parties` processes have called it with the
  same `name`, then returns `:ok` in all of them; `{:error, :timeout}` when the others did
  not come in time. The server is started on first use, unlinked, and lives until the
  test run ends.

      iex> Kino.Trace.AssertionsRendezvous.meet({:doc, make_ref()}, 1, 1000)
      :ok
  """

  use GenServer

  @doc "Starts the server unless it runs already."
  @spec ensure_started() :: pid()
  def ensure_started do
    case GenServer.start(__MODULE__, %{}, name: __MODULE__) do
      {:ok, pid} -> pid
      {:error, {:already_started, pid}} -> pid
    end
  end

  @doc "Waits until `parties` processes called `meet/3` with `name`."
  @spec meet(term(), pos_integer(), timeout()) :: :ok | {:error, :timeout}
  def meet(name, parties, timeout) do
    server = ensure_started()
    ref = make_ref()
    GenServer.cast(server, {:meet, name, parties, {self(), ref}})

    receive do
      {^ref, :met} -> :ok
    after
      timeout ->
        GenServer.cast(server, {:leave, name, ref})
        {:error, :timeout}
    end
  end

  @impl true
  def init(state), do: {:ok, state}

  @impl true
  def handle_cast({:meet, name, parties, waiter}, state) do
    waiting = [waiter | Map.get(state, name, [])]

    if length(waiting) >= parties do
      for {pid, ref} <- waiting, do: send(pid, {ref, :met})
      {:noreply, Map.delete(state, name)}
    else
      {:noreply, Map.put(state, name, waiting)}
    end
  end

  def handle_cast({:leave, name, ref}, state) do
    {:noreply, Map.update(state, name, [], &Enum.reject(&1, fn {_pid, r} -> r == ref end))}
  end
end
