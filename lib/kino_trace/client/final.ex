defmodule KinoTrace.Client.Final do
  @moduledoc false
  # The last `Kino.Trace.info/1` of traces that have ended, so a trace stopped with
  # `Kino.Trace.stop/1` (whose session process is gone) still tells how it ended: status
  # `:stopped` and its final counters. Only the newest 1 000 are kept.

  use GenServer

  @table __MODULE__
  @max 1_000

  @doc false
  def start_link(_opts), do: GenServer.start_link(__MODULE__, [], name: __MODULE__)

  @doc """
  Keeps `info` as the final info of the trace `id`.

  ## Examples

      iex> KinoTrace.Client.Final.put(-1, %{status: :stopped})
      :ok
      iex> KinoTrace.Client.Final.fetch(-1)
      {:ok, %{status: :stopped}}
      iex> KinoTrace.Client.Final.fetch(-2)
      :error
  """
  @spec put(integer(), map()) :: :ok
  def put(id, info) when is_map(info) do
    if :ets.whereis(@table) != :undefined do
      :ets.insert(@table, {id, info})
      if :ets.info(@table, :size) > @max, do: evict_oldest_but(id)
    end

    :ok
  end

  # Ids grow with time: the smallest is the oldest (never the one just kept).
  defp evict_oldest_but(id) do
    case :ets.first(@table) do
      ^id -> :ets.delete(@table, :ets.next(@table, id))
      oldest -> :ets.delete(@table, oldest)
    end
  end

  @doc "The final info of the trace `id`, if it ended recently."
  @spec fetch(integer()) :: {:ok, map()} | :error
  def fetch(id) do
    case :ets.whereis(@table) != :undefined and :ets.lookup(@table, id) do
      [{^id, info}] -> {:ok, info}
      _ -> :error
    end
  end

  @impl true
  def init([]) do
    :ets.new(@table, [:named_table, :public, :ordered_set])
    {:ok, nil}
  end
end
