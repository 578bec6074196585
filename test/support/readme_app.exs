# The application the README's examples trace, so they run as written. Loaded by
# test/project/readme_examples_test.exs only while its tests run (then unloaded):
# other tests may count on MyApp.* not existing.
defmodule User do
  @moduledoc "The user row of the README's examples (they print `{:ok, %User{...}}`)."
  defstruct [:id, :name]

  @type t :: %__MODULE__{id: integer(), name: String.t()}
end

defmodule MyApp do
  @moduledoc """
  The app of the README's examples: `MyApp.Repo`, `MyApp.Cache` (a read-through cache,
  and a process registered under that name), and `MyApp.Sup`, which supervises the
  cache server and a client that keeps using the cache, as a running app would.
  """

  @doc "A little work through the cache: three fetches, one of them a hit."
  @spec run() :: [{:ok, User.t()}]
  def run, do: Enum.map([1, 2, 1], &MyApp.Cache.fetch(:users, &1))
end

defmodule MyApp.Repo do
  @moduledoc "A pretend repository: `{:ok, %User{}}` for any id but negative ones, which raise."

  @doc "Reads a user; raises `ArgumentError` for a negative id."
  @spec get(atom(), integer()) :: {:ok, User.t()}
  def get(_table, id) when is_integer(id) and id < 0,
    do: raise(ArgumentError, "negative id: #{id}")

  def get(_table, id) when is_integer(id), do: {:ok, %User{id: id, name: "user #{id}"}}

  @doc "Pretends to delete a user."
  @spec delete(integer()) :: :ok
  def delete(id) when is_integer(id), do: :ok
end

defmodule MyApp.Cache do
  @moduledoc """
  A read-through cache over `MyApp.Repo`, kept in the calling process: a miss reads the
  repo, then `put/3` keeps the row. `MyApp.Cache.Server`, registered as `MyApp.Cache`,
  answers `{:fetch, {table, id}}` calls with it.
  """

  @doc "The cached row, or the repo's (then cached)."
  @spec fetch(atom(), integer()) :: {:ok, User.t()}
  def fetch(table, id) do
    case Process.get({__MODULE__, table, id}) do
      nil ->
        with {:ok, row} <- MyApp.Repo.get(table, id) do
          MyApp.Cache.put(table, id, row)
          {:ok, row}
        end

      row ->
        {:ok, row}
    end
  end

  @doc "Caches a row."
  @spec put(atom(), integer(), User.t()) :: :ok
  def put(table, id, row) do
    Process.put({__MODULE__, table, id}, row)
    :ok
  end
end

defmodule MyApp.Cache.Server do
  @moduledoc false
  # The process registered as MyApp.Cache: answers {:fetch, {table, id}} calls.
  use GenServer

  def start_link(_), do: GenServer.start_link(__MODULE__, nil, name: MyApp.Cache)

  @impl true
  def init(nil), do: {:ok, nil}

  @impl true
  def handle_call({:fetch, {table, id}}, _from, state),
    do: {:reply, MyApp.Cache.fetch(table, id), state}
end

defmodule MyApp.Client do
  @moduledoc false
  # Keeps using the cache (directly, then through the server), every @interval ms, so a
  # trace started by an example sees calls and messages.
  use Task

  @interval 50

  def start_link(_), do: Task.start_link(&loop/0)

  defp loop do
    MyApp.Cache.fetch(:users, 42)
    GenServer.call(MyApp.Cache, {:fetch, {:users, 7}})
    # time is the subject: the app's pace, one round every @interval ms
    Process.sleep(@interval)
    loop()
  end
end

defmodule MyApp.Sup do
  @moduledoc false
  # The app's supervisor, registered as MyApp.Sup.
  use Supervisor

  def start_link(_ \\ nil), do: Supervisor.start_link(__MODULE__, nil, name: __MODULE__)

  @impl true
  def init(nil), do: Supervisor.init([MyApp.Cache.Server, MyApp.Client], strategy: :one_for_one)
end
