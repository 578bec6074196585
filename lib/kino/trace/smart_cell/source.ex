defmodule Kino.Trace.SmartCell.Source do
  @moduledoc """
  The code of the "Trace" smart cell: the shortest call that starts the trace its form
  (`Kino.Trace.SmartCell.Form`) describes.

  Only the options that differ from their defaults (`Kino.Trace.Options.defaults/0`,
  `Kino.Trace.Stats.Options.defaults/0`) are written, patterns are a list of strings,
  and the code is formatted by `Code.format_string!/2`.

      iex> Kino.Trace.SmartCell.Source.to_source(%{"patterns" => "MyApp.Repo.get/2", "limit" => 1000})
      ~S|Kino.Trace.calls(["MyApp.Repo.get/2"], limit: 1_000)|

      iex> Kino.Trace.SmartCell.Source.to_source(%{
      ...>   "mode" => "messages", "processes" => "some", "targets" => "MyApp.Cache",
      ...>   "match" => "{:ok, _}", "rate_count" => 100
      ...> })
      ~S|Kino.Trace.messages(MyApp.Cache, pattern: "{:ok, _}", rate: {100, 1_000})|

      iex> Kino.Trace.SmartCell.Source.to_source(%{"mode" => "stats", "patterns" => "Enum\\n# off\\n:ets"})
      ~S|Kino.Trace.stats(["Enum", ":ets"])|

  A text field that does not read (see `Kino.Trace.SmartCell.Names`) is written as a
  `raise` with the reason, so evaluating the cell says what is wrong:

      iex> source = Kino.Trace.SmartCell.Source.to_source(%{"processes" => "some", "targets" => "1 + 1", "patterns" => "Enum"})
      iex> String.starts_with?(source, "raise ArgumentError,") and source =~ "is not a process"
      true
  """

  alias Kino.Trace.SmartCell.{Form, Names}

  @doc """
  The source of the cell for `attrs` (a form, or saved attrs: read by
  `Kino.Trace.SmartCell.Form.new/1`).
  """
  @spec to_source(map()) :: String.t()
  def to_source(attrs) do
    form = Form.new(attrs)

    case call(form) do
      {:ok, {fun, args, opts}} ->
        opts = Enum.map(opts, fn {key, code} -> "#{key}: #{code}" end)
        "Kino.Trace.#{fun}(#{Enum.join(args ++ opts, ", ")})" |> format_held()

      {:error, message} ->
        "raise ArgumentError, #{inspect(message)}" |> format()
    end
  end

  # The call the form makes: {function, arguments, [{option, value}]}, each argument
  # and value a piece of code (names held, see hold/1), only options that differ from
  # the defaults.
  defp call(%{"mode" => "calls"} = form) do
    with {:ok, pids} <- targets(form, :option),
         {:ok, nodes} <- nodes(form) do
      opts =
        [
          pids: pids,
          return: boolean(form["return"], :return),
          exceptions: boolean(form["exceptions"], :exceptions),
          caller: boolean(form["caller"], :caller)
        ] ++ limits(form) ++ [nodes: nodes, timeout: count(form["timeout"])]

      {:ok, {:calls, [patterns(form)], compact(opts)}}
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
          do: inspect(String.trim(form["match"]))

      opts = [pattern: match] ++ limits(form) ++ [nodes: nodes, timeout: count(form["timeout"])]
      {:ok, {String.to_existing_atom(mode), [targets], compact(opts)}}
    end
  end

  ## Parts

  # Patterns: a list of strings, as the user wrote them (comments and blanks dropped).
  defp patterns(form),
    do:
      form["patterns"]
      |> Kino.Trace.Pattern.lines()
      |> inspect(limit: :infinity, printable_limit: :infinity)

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
    do: {:ok, ":distributed"}

  defp targets(%{"processes" => "distributed"}, as), do: targets(%{"processes" => "all"}, as)
  defp targets(%{"processes" => "all"}, :option), do: {:ok, nil}
  defp targets(%{"processes" => which}, _as), do: {:ok, ":" <> which}

  defp nodes(%{"nodes" => "local"}), do: {:ok, nil}
  defp nodes(%{"nodes" => "all"}), do: {:ok, ":all"}

  defp nodes(form) do
    case Names.nodes(form["node_names"]) do
      {:ok, []} -> {:ok, nil}
      {:ok, names} -> {:ok, list(names)}
      {:error, message} -> {:error, "nodes: " <> message}
    end
  end

  # One name as itself, several as a list. Names are code with atoms in it: each is
  # held out of the formatter (see format_held/1).
  defp list([one]), do: hold(one)
  defp list(many), do: "[" <> Enum.map_join(many, ", ", &hold/1) <> "]"

  # U+E000 (private use) marks a name in the code given to the formatter.
  @held "\u{E000}"

  defp hold(code), do: @held <> Base.url_encode64(code, padding: false) <> @held

  defp limits(form) do
    rate = if n = form["rate_count"], do: "{#{integer(n)}, #{integer(form["rate_period"])}}"
    [limit: count(form["limit"]), rate: rate]
  end

  defp boolean(value, key) do
    if value == Keyword.fetch!(Kino.Trace.Options.defaults(), key), do: nil, else: inspect(value)
  end

  defp count(nil), do: nil
  defp count(n), do: integer(n)

  defp compact(opts), do: Enum.reject(opts, fn {_key, code} -> is_nil(code) end)

  @doc """
  An integer as code, with `_` between thousands from 1 000 up.

      iex> Kino.Trace.SmartCell.Source.integer(1234567)
      "1_234_567"
      iex> Kino.Trace.SmartCell.Source.integer(999)
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

  # Formats `code` with each held name as a string as wide as the name, and puts the
  # names back after: the formatter reads code into atoms, and process and node names
  # typed into the form must not become atoms each time the code is written (an atom
  # is never freed). Patterns and the message pattern are strings already.
  defp format_held(code) do
    held =
      Regex.scan(~r/#{@held}([A-Za-z0-9_-]*)#{@held}/u, code, capture: :all_but_first)
      |> List.flatten()

    {code, names} =
      held
      |> Enum.uniq()
      |> Enum.with_index()
      |> Enum.reduce({code, []}, fn {encoded, i}, {code, names} ->
        name = Base.url_decode64!(encoded, padding: false)

        stand_in =
          ~s("#{@held}#{i}#{String.duplicate("_", max(String.length(name) - 4 - String.length("#{i}"), 0))}#{@held}")

        {String.replace(code, @held <> encoded <> @held, stand_in), [{stand_in, name} | names]}
      end)

    Enum.reduce(names, format(code), fn {stand_in, name}, code ->
      String.replace(code, stand_in, name)
    end)
  end

  defp format(code), do: code |> Code.format_string!() |> IO.iodata_to_binary()
end
