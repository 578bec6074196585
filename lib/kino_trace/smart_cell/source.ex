defmodule KinoTrace.SmartCell.Source do
  @moduledoc false
  # The code of the "Trace" smart cell: the shortest call that starts the trace its form
  # (`KinoTrace.SmartCell.Form`) describes.
  #
  # Only the options that differ from their defaults (`KinoTrace.Plan.Options.defaults/0`,
  # `KinoTrace.Stats.Options.defaults/0`) are written, patterns are a list of strings,
  # and the code is formatted by `Code.format_string!/2`.

  alias KinoTrace.Base.Name
  alias KinoTrace.Pattern.Quoted
  alias KinoTrace.SmartCell.{Form, Names}

  @doc """
  The source of the cell for `attrs` (a form, or saved attrs: read by
  `KinoTrace.SmartCell.Form.new/1`).

  ## Examples

      iex> KinoTrace.SmartCell.Source.to_source(%{"patterns" => "MyApp.Repo.get/2", "limit" => 1000})
      ~S|Kino.Trace.calls(["MyApp.Repo.get/2"], limit: 1_000)|

      iex> KinoTrace.SmartCell.Source.to_source(%{
      ...>   "mode" => "messages", "processes" => "some", "targets" => "MyApp.Cache",
      ...>   "match" => "{:ok, _}", "rate_count" => 100
      ...> })
      ~S|Kino.Trace.messages(MyApp.Cache, pattern: "{:ok, _}", rate: {100, 1_000})|

      iex> KinoTrace.SmartCell.Source.to_source(%{"mode" => "stats", "patterns" => "Enum\\n# off\\n:ets"})
      ~S|Kino.Trace.stats(["Enum", ":ets"])|

      iex> KinoTrace.SmartCell.Source.to_source(%{"mode" => "record", "patterns" => "MyApp.Orders", "on_exception" => true, "after" => 100})
      ~S|Kino.Trace.record(["MyApp.Orders"], on: [exception: true], after: 100)|

  A text field that does not read (see `KinoTrace.SmartCell.Names`) is written as a
  `raise` with the reason, so evaluating the cell says what is wrong:

      iex> source = KinoTrace.SmartCell.Source.to_source(%{"processes" => "some", "targets" => "1 + 1", "patterns" => "Enum"})
      iex> String.starts_with?(source, "raise ArgumentError,") and source =~ "is not a process"
      true

  The code is written from data: the call is a quoted form of literals (strings,
  numbers, atoms, the names `KinoTrace.SmartCell.Names` reads, `:c.pid/3` for a pid),
  printed with `Macro.to_string/1`; no text typed into the form is ever spliced into it.

      iex> source = KinoTrace.SmartCell.Source.to_source(%{"processes" => "some", "targets" => ~S|:"\#{System.cmd("touch", ["/tmp/x"])}"|, "patterns" => "Enum"})
      iex> String.starts_with?(source, "raise ArgumentError,") and source =~ "is not a process"
      true
  """
  @spec to_source(map()) :: String.t()
  def to_source(attrs) do
    form = Form.new(attrs)

    quoted =
      case call(form) do
        {:ok, {fun, args, []}} -> remote(fun, args)
        {:ok, {fun, args, opts}} -> remote(fun, args ++ [opts])
        {:error, message} -> {:raise, [], [{:__aliases__, [], [:ArgumentError]}, message]}
      end

    print(quoted)
  end

  defp remote(fun, args), do: {{:., [], [{:__aliases__, [], [:Kino, :Trace]}, fun]}, [], args}

  # The call the form makes: {function, arguments, [{option, value}]}, each argument
  # and value a quoted literal, only options that differ from the defaults.
  defp call(%{"mode" => "calls"} = form) do
    with {:ok, pids} <- targets(form, :option),
         {:ok, nodes} <- nodes(form) do
      opts =
        [
          pids: pids,
          return: boolean(form["return"], :return),
          exceptions: boolean(form["exceptions"], :exceptions),
          caller: boolean(form["caller"], :caller)
        ] ++ limits(form) ++ [nodes: nodes, timeout: form["timeout"]]

      {:ok, {:calls, [patterns(form)], compact(opts)}}
    end
  end

  # A flight recorder: the calls' options, its ring and its triggers.
  defp call(%{"mode" => "record"} = form) do
    with {:ok, {:calls, args, opts}} <- call(%{form | "mode" => "calls"}) do
      match = String.trim(form["on_match"])

      on =
        compact(
          exception: form["on_exception"] || nil,
          slower_than: form["slower_than"],
          match: if(match != "", do: match)
        )

      record =
        compact(events: form["ring_events"], on: if(on != [], do: on), after: form["after"])

      {:ok, {:record, args, record ++ opts}}
    end
  end

  defp call(%{"mode" => "stats"} = form) do
    with {:ok, pids} <- targets(form, :option),
         {:ok, nodes} <- nodes(form) do
      {:ok, {:stats, [patterns(form)], compact(pids: pids, nodes: nodes)}}
    end
  end

  defp call(%{"mode" => mode} = form) when mode in ["messages", "processes"] do
    with {:ok, targets} <- targets(form, :argument),
         {:ok, nodes} <- nodes(form) do
      match =
        if mode == "messages" and String.trim(form["match"]) != "",
          do: String.trim(form["match"])

      opts = [pattern: match] ++ limits(form) ++ [nodes: nodes, timeout: form["timeout"]]
      {:ok, {String.to_existing_atom(mode), [targets], compact(opts)}}
    end
  end

  ## Parts

  # Patterns: a list of strings, as the user wrote them (comments and blanks dropped).
  defp patterns(form), do: KinoTrace.Pattern.lines(form["patterns"])

  # Whose events. As an option, :all is the default (nil: left out); as the first
  # argument of messages/2 and processes/2 it is always written. "distributed" is a
  # messages preset; elsewhere it means every process.
  defp targets(%{"processes" => "some"} = form, _as) do
    case Names.processes(form["targets"]) do
      {:ok, []} ->
        {:error, "processes: name at least one process or pid, or choose all, new or existing"}

      {:ok, names} ->
        {:ok, list(names)}

      {:error, message} ->
        {:error, "processes: " <> message}
    end
  end

  defp targets(%{"processes" => "distributed", "mode" => "messages"}, :argument),
    do: {:ok, :distributed}

  defp targets(%{"processes" => "distributed"}, as), do: targets(%{"processes" => "all"}, as)
  defp targets(%{"processes" => "all"}, :option), do: {:ok, nil}
  defp targets(%{"processes" => which}, _as), do: {:ok, String.to_existing_atom(which)}

  defp nodes(%{"nodes" => "local"}), do: {:ok, nil}
  defp nodes(%{"nodes" => "all"}), do: {:ok, :all}

  defp nodes(form) do
    case Names.nodes(form["node_names"]) do
      {:ok, []} -> {:ok, nil}
      {:ok, names} -> {:ok, list(names)}
      {:error, message} -> {:error, "nodes: " <> message}
    end
  end

  # One name as itself, several as a list.
  defp list([one]), do: one
  defp list(many), do: many

  defp limits(form) do
    rate = if n = form["rate_count"], do: {n, form["rate_period"]}
    [limit: form["limit"], rate: rate]
  end

  defp boolean(value, key) do
    if value == Keyword.fetch!(KinoTrace.Plan.Options.defaults(), key), do: nil, else: value
  end

  defp compact(opts), do: Enum.reject(opts, fn {_key, value} -> is_nil(value) end)

  @doc """
  An integer as code, with `_` between thousands from 1 000 up.

      iex> KinoTrace.SmartCell.Source.integer(1234567)
      "1_234_567"
      iex> KinoTrace.SmartCell.Source.integer(999)
      "999"
  """
  @spec integer(integer()) :: String.t()
  def integer(n) when is_integer(n) and n >= 1_000 do
    n
    |> Integer.to_string()
    |> String.reverse()
    |> String.to_charlist()
    |> Enum.chunk_every(3)
    |> Enum.join("_")
    |> String.reverse()
  end

  def integer(n) when is_integer(n), do: Integer.to_string(n)

  # Prints the call, formatted as `Code.format_string!/2` does. The formatter reads
  # the code it formats into atoms, and process and node names typed into the form
  # must not become atoms each time the code is written (an atom is never freed): so
  # each name (an atom that does not exist, a `Name`) is printed as a string as wide as
  # it, put back once formatted. Integers from 1 000 up are held the same way, to be
  # written with `_` between thousands.
  defp print(quoted) do
    {quoted, held} = hold(quoted, [])

    code =
      quoted
      |> Macro.to_string()
      |> Code.format_string!()
      |> IO.iodata_to_binary()

    Enum.reduce(held, code, fn {stand_in, text}, code ->
      String.replace(code, inspect(stand_in), text)
    end)
  end

  # U+E000 (private use) marks a stand-in: no string of the form can hold one (the
  # patterns and the message pattern are strings in the code, stand-ins are not).
  @held "\u{E000}"

  defp hold(%Name{} = name, held), do: stand_in(name, Quoted.to_string(name), held)

  defp hold({:__aliases__, _, segments} = quoted, held) do
    if Enum.all?(segments, &is_atom/1),
      do: {quoted, held},
      else: stand_in(quoted, Quoted.to_string(quoted), held)
  end

  defp hold(n, held) when is_integer(n) and n >= 1_000, do: stand_in(n, integer(n), held)

  defp hold({:{}, meta, items}, held) do
    {items, held} = hold_all(items, held)
    {{:{}, meta, items}, held}
  end

  defp hold({form, meta, args}, held) when is_list(args) do
    {args, held} = hold_all(args, held)
    {{form, meta, args}, held}
  end

  defp hold({left, right}, held) do
    {[left, right], held} = hold_all([left, right], held)
    {{left, right}, held}
  end

  defp hold(list, held) when is_list(list), do: hold_all(list, held)
  defp hold(other, held), do: {other, held}

  defp hold_all(items, held), do: Enum.map_reduce(items, held, &hold/2)

  # A string as wide as `text` (at least 5 wide), unique to `held`'s length.
  defp stand_in(_quoted, text, held) do
    i = Integer.to_string(length(held))
    padding = String.duplicate("_", max(String.length(text) - 4 - String.length(i), 0))
    stand_in = @held <> i <> padding <> @held
    {stand_in, [{stand_in, text} | held]}
  end
end
