defmodule SampleApp.Repo do
  @moduledoc """
  A pretend repository for the assertion tests: deterministic, no state.

      iex> SampleApp.Repo.get(:users, 1)
      {:ok, %{id: 1, table: :users}}
      iex> SampleApp.Repo.get(:users, 0)
      {:error, :not_found}
  """

  @doc "Reads a row: `{:ok, row}`, `{:error, :not_found}` for id 0, raises for negative ids."
  @spec get(atom(), integer()) :: {:ok, map()} | {:error, :not_found}
  def get(table, id) when is_integer(id) do
    cond do
      id < 0 -> raise ArgumentError, "negative id: #{id}"
      id == 0 -> {:error, :not_found}
      true -> {:ok, %{id: id, table: table}}
    end
  end

  @doc "Like `get/2` but throws `:not_found` instead of returning an error."
  @spec get!(atom(), integer()) :: map()
  def get!(table, id) do
    case get(table, id) do
      {:ok, row} -> row
      {:error, :not_found} -> throw(:not_found)
    end
  end

  @doc "Pretends to delete a row."
  @spec delete(integer()) :: :ok
  def delete(id) when is_integer(id), do: :ok

  @doc "Exits with `{:shutdown, reason}`."
  @spec crash(term()) :: no_return()
  def crash(reason), do: exit({:shutdown, reason})
end

defmodule SampleApp.Cache do
  @moduledoc """
  A read-through cache in the process dictionary, over `SampleApp.Repo`.

      iex> SampleApp.Cache.fetch(:users, 7)
      {:ok, %{id: 7, table: :users}}
  """

  alias SampleApp.Repo

  @doc "Returns the cached row, or reads it from the repo and caches it."
  @spec fetch(atom(), integer()) :: {:ok, map()} | {:error, :not_found}
  def fetch(table, id) do
    case Process.get({__MODULE__, table, id}) do
      nil ->
        with {:ok, row} <- Repo.get(table, id) do
          put(table, id, row)
          {:ok, row}
        end

      row ->
        {:ok, row}
    end
  end

  @doc "Fetches from the `:users` table."
  @spec fetch(integer()) :: {:ok, map()} | {:error, :not_found}
  def fetch(id), do: fetch(:users, id)

  @doc "Fetches several ids."
  @spec fetch_all(atom(), [integer()]) :: [{:ok, map()} | {:error, :not_found}]
  def fetch_all(table, ids), do: Enum.map(ids, &fetch(table, &1))

  @doc "Caches a row."
  @spec put(atom(), integer(), map()) :: :ok
  def put(table, id, row) do
    Process.put({__MODULE__, table, id}, row)
    :ok
  end

  @doc "Forgets a row and deletes it from the repo."
  @spec evict(atom(), integer()) :: :ok
  def evict(table, id) do
    Process.delete({__MODULE__, table, id})
    Repo.delete(id)
  end
end

defmodule SampleApp.Shared do
  @moduledoc """
  A function the isolation tests call from several test modules at the same time.

      iex> SampleApp.Shared.ping(:a, 1)
      {:pong, :a, 1}
  """

  @doc "Returns `{:pong, tag, n}`."
  @spec ping(atom(), integer()) :: {:pong, atom(), integer()}
  def ping(tag, n), do: {:pong, tag, n}
end
