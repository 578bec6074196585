defmodule KinoTrace.Assertions.Format do
  @moduledoc false
  # Builds the text of assertion failure messages: calls written as Elixir code, lists of
  # calls, the traced functions, and the calls closest by name to one that never happened.
  # Functions are written by `KinoTrace.Base.MFA`.

  alias KinoTrace.Assertions.Call
  alias KinoTrace.Base.MFA
  alias KinoTrace.Base.Suggest

  @max_listed 10

  @doc """
  How many calls a list shows before it says how many more there are.

  ## Examples

      iex> KinoTrace.Assertions.Format.traced_functions([])
      "(no calls were traced)"
      iex> KinoTrace.Assertions.Format.times(1)
      "1 time"
  """
  @spec max_listed() :: pos_integer()
  def max_listed, do: @max_listed

  @doc "A term as Elixir code, kept short."
  @spec term(term()) :: String.t()
  defdelegate term(value), to: KinoTrace.Render, as: :code

  @doc "`1 time`, `3 times`."
  @spec times(non_neg_integer()) :: String.t()
  def times(1), do: "1 time"
  def times(n), do: "#{n} times"

  @doc """
  Lists `calls` one per line, indented, as code. `describe` adds text after each call
  (for example its outcome). When the calls come from more than one process, each line
  ends with the pid. At most #{@max_listed} are shown.
  """
  @spec list_calls([Call.t()], (Call.t() -> String.t() | nil)) :: String.t()
  def list_calls(calls, describe \\ fn _ -> nil end) do
    show_pid? = calls |> Enum.map(& &1.pid) |> Enum.uniq() |> length() > 1
    {shown, rest} = Enum.split(calls, @max_listed)

    lines =
      Enum.map(shown, fn call ->
        extra = describe.(call)
        pid = if show_pid?, do: "  (#{inspect(call.pid)})", else: ""
        "    " <> Call.to_code(call) <> if(extra, do: "  " <> extra, else: "") <> pid
      end)

    more = if rest == [], do: [], else: ["    ... and #{length(rest)} more"]
    Enum.join(lines ++ more, "\n")
  end

  @doc """
  The traced functions with their call counts, most called first:
  `MyApp.Cache.fetch/2 (3 calls), MyApp.Repo.get/2 (1 call)`.
  """
  @spec traced_functions([Call.t()]) :: String.t()
  def traced_functions([]), do: "(no calls were traced)"

  def traced_functions(calls) do
    calls
    |> Enum.frequencies_by(&Call.mfa/1)
    |> Enum.sort_by(fn {mfa, count} -> {-count, mfa} end)
    |> Enum.map_join(", ", fn {mfa, count} ->
      MFA.to_string(mfa) <> " (" <> if(count == 1, do: "1 call", else: "#{count} calls") <> ")"
    end)
  end

  @doc """
  The traced functions closest by name to `{module, function, arity}`, best first: the same
  function with another arity, then functions of the same module with a similar name
  (close by `KinoTrace.Base.Suggest`'s rule, the closest first), then the same function name
  in another module.

  ## Examples

      iex> mfas = [{Map, :fetch, 2}, {Map, :fetch!, 2}, {Map, :put, 3}, {Keyword, :fetch, 2}]
      iex> KinoTrace.Assertions.Format.closest({Map, :fetch, 3}, mfas)
      [{Map, :fetch, 2}, {Map, :fetch!, 2}, {Keyword, :fetch, 2}]
  """
  @spec closest(mfa(), [mfa()]) :: [mfa()]
  def closest({module, function, arity}, mfas) do
    mfas = mfas |> Enum.uniq() |> Enum.reject(&(&1 == {module, function, arity}))
    names = for {^module, f, _} <- mfas, f != function, uniq: true, do: f
    rank = function |> Suggest.similar(names) |> Enum.with_index() |> Map.new()

    mfas
    |> Enum.flat_map(fn {m, f, a} = mfa ->
      cond do
        m == module and f == function -> [{0, 0, abs(a - arity), mfa}]
        m == module and is_map_key(rank, f) -> [{1, Map.fetch!(rank, f), abs(a - arity), mfa}]
        f == function -> [{2, 0, abs(a - arity), mfa}]
        true -> []
      end
    end)
    |> Enum.sort()
    |> Enum.map(&elem(&1, 3))
  end

  @doc "Indents every line of `text` by `n` spaces."
  @spec indent(String.t(), non_neg_integer()) :: String.t()
  def indent(text, n) do
    pad = String.duplicate(" ", n)
    text |> String.split("\n") |> Enum.map_join("\n", &(pad <> &1))
  end
end
