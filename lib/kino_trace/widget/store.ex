defmodule KinoTrace.Widget.Store do
  @moduledoc false
  # The widget's bounded memory of recent events: their rendered rows, sent again to a
  # browser that (re)connects, and the events themselves, so a row's full terms can be
  # rendered when the user expands it.
  #
  # At most `:capacity` events are kept (default 10 000, the widget's `keep:`); older
  # ones are forgotten. (Not `:max_events`, which names a trace's limit of events.)

  alias KinoTrace.Options

  @enforce_keys [:capacity]
  defstruct [:capacity, ids: :queue.new(), entries: %{}, size: 0]

  @type t :: %__MODULE__{
          capacity: pos_integer(),
          ids: :queue.queue(),
          entries: %{optional(term()) => {map(), term()}},
          size: non_neg_integer()
        }

  @doc """
  A new, empty store. Option: `:capacity`, the events kept (default 10 000). A bad
  option raises an `ArgumentError` naming it.

  ## Examples

      iex> alias KinoTrace.Widget.Store
      iex> store = Store.new(capacity: 2)
      iex> store = Store.add(store, [{%{id: 1}, :e1}, {%{id: 2}, :e2}, {%{id: 3}, :e3}])
      iex> Store.rows(store)
      [%{id: 2}, %{id: 3}]
      iex> {Store.fetch(store, 3), Store.fetch(store, 1)}
      {{:ok, :e3}, :error}
      iex> Store.rows(store, 1)
      [%{id: 3}]
  """
  @spec new(keyword()) :: t()
  def new(opts \\ []) do
    opts = Options.validate!(opts, options())
    %__MODULE__{capacity: opts[:capacity]}
  end

  @doc """
  The options of `new/1`, their defaults and checks (`KinoTrace.Options`).

      iex> KinoTrace.Widget.Store.new(capacity: 0)
      ** (ArgumentError) invalid value for :capacity: expected a positive integer, got: 0
  """
  @spec options() :: Options.schema()
  def options, do: [capacity: {10_000, Options.pos_integer()}]

  @doc "Adds `{row, event}` pairs, oldest first; each row has an `:id` (a known id is skipped)."
  @spec add(t(), [{map(), term()}]) :: t()
  def add(%__MODULE__{} = store, pairs) do
    store =
      Enum.reduce(pairs, store, fn
        {%{id: id}, _event}, store when is_map_key(store.entries, id) ->
          store

        {%{id: id} = row, event}, store ->
          %{
            store
            | ids: :queue.in(id, store.ids),
              entries: Map.put(store.entries, id, {row, event}),
              size: store.size + 1
          }
      end)

    trim(store)
  end

  @doc "The last `n` rows (all by default), oldest first."
  @spec rows(t(), non_neg_integer() | :all) :: [map()]
  def rows(%__MODULE__{} = store, n \\ :all) do
    ids = :queue.to_list(store.ids)
    ids = if n == :all, do: ids, else: Enum.take(ids, -n)
    Enum.map(ids, fn id -> elem(Map.fetch!(store.entries, id), 0) end)
  end

  @doc "The event with this id, if still kept."
  @spec fetch(t(), term()) :: {:ok, term()} | :error
  def fetch(%__MODULE__{} = store, id) do
    case Map.fetch(store.entries, id) do
      {:ok, {_row, event}} -> {:ok, event}
      :error -> :error
    end
  end

  @doc """
  The kept events with these ids (or `:all` of them), in the order they were added;
  ids no longer kept are skipped.

      iex> alias KinoTrace.Widget.Store
      iex> store = Store.add(Store.new(), [{%{id: 1}, :e1}, {%{id: 2}, :e2}, {%{id: 3}, :e3}])
      iex> Store.events(store, [3, 1, 9])
      [:e1, :e3]
  """
  @spec events(t(), [term()] | :all) :: [term()]
  def events(%__MODULE__{} = store, :all),
    do: Enum.map(:queue.to_list(store.ids), &elem(Map.fetch!(store.entries, &1), 1))

  def events(%__MODULE__{} = store, ids) when is_list(ids) do
    wanted = MapSet.new(ids)

    for id <- :queue.to_list(store.ids),
        MapSet.member?(wanted, id),
        do: elem(Map.fetch!(store.entries, id), 1)
  end

  @doc "Forgets everything (the widget's clear button)."
  @spec clear(t()) :: t()
  def clear(%__MODULE__{} = store), do: new(capacity: store.capacity)

  defp trim(%{size: size, capacity: max} = store) when size <= max, do: store

  defp trim(store) do
    {{:value, id}, ids} = :queue.out(store.ids)
    trim(%{store | ids: ids, entries: Map.delete(store.entries, id), size: store.size - 1})
  end
end
