defmodule KinoTrace.SmartCell.Form do
  @moduledoc false
  # The state of the "Trace" smart cell's form, as the attrs Livebook saves in the
  # notebook: a map with string keys and JSON values.
  #
  # `new/1` reads saved attrs (an unknown key is dropped, a bad value falls back to its
  # default), `put/3` sets one field as the browser sends it, and the form itself is what
  # `KinoTrace.SmartCell.Source.to_source/1` turns into code.
  #
  # | field             | values                                                      | default   |
  # | ----------------- | ----------------------------------------------------------- | --------- |
  # | `"mode"`          | `"calls"`, `"messages"`, `"processes"`, `"stats"`, `"record"` | `"calls"` |
  # | `"patterns"`      | text, one pattern per line (calls and stats)                | `""`      |
  # | `"processes"`     | `"all"`, `"new"`, `"existing"`, `"some"`, `"distributed"`   | `"all"`   |
  # | `"targets"`       | text: names and pids, comma-separated (with `"some"`)       | `""`      |
  # | `"return"`        | boolean (calls)                                             | `true`    |
  # | `"exceptions"`    | boolean (calls)                                             | `true`    |
  # | `"caller"`        | boolean (calls)                                             | `false`   |
  # | `"match"`         | text: a message pattern such as `{:ok, _}` (messages)       | `""`      |
  # | `"limit"`         | positive integer or `nil`                                   | `nil`     |
  # | `"rate_count"`    | positive integer or `nil` (events per period)               | `nil`     |
  # | `"rate_period"`   | positive integer (ms)                                       | `1000`    |
  # | `"nodes"`         | `"local"`, `"all"`, `"some"`                                | `"local"` |
  # | `"node_names"`    | text: node names, comma-separated (with `"some"`)           | `""`      |
  # | `"timeout"`       | positive integer (ms) or `nil`                              | `nil`     |
  # | `"ring_events"`   | positive integer or `nil`: the recorder's ring (record)     | `nil`     |
  # | `"on_exception"`  | boolean: the exception trigger (record)                     | `false`   |
  # | `"slower_than"`   | positive integer (ms) or `nil`: the slow-call trigger       | `nil`     |
  # | `"on_match"`      | text: a call pattern, the match trigger (record)            | `""`      |
  # | `"after"`         | positive integer or `nil`: events after a trigger (record)  | `nil`     |
  #
  # `"record"` is a flight recorder (`Kino.Trace.record/2`) of the calls the patterns
  # name, with the calls' fields and its triggers as fields.
  #
  # `"distributed"` (every message that crosses to or from another node) is for messages
  # only. The defaults are those of `KinoTrace.Plan.Options.defaults/0`: a form left as it is
  # adds no option to the code.

  @typedoc "The form: every field of the table above, by its string name."
  @type t :: %{String.t() => String.t() | boolean() | pos_integer() | nil}

  @modes ~w(calls messages processes stats record)
  @processes ~w(all new existing some distributed)
  @nodes ~w(local all some)

  # The longest text a field holds (the patterns' bound is the widget's, see
  # KinoTrace.Pattern.Edit).
  @max_text_bytes 4_096

  @defaults %{
    "mode" => "calls",
    "patterns" => "",
    "processes" => "all",
    "targets" => "",
    "return" => true,
    "exceptions" => true,
    "caller" => false,
    "match" => "",
    "limit" => nil,
    "rate_count" => nil,
    "rate_period" => 1_000,
    "nodes" => "local",
    "node_names" => "",
    "timeout" => nil,
    "ring_events" => nil,
    "on_exception" => false,
    "slower_than" => nil,
    "on_match" => "",
    "after" => nil
  }

  @doc """
  The fields and their defaults: the form of a new cell.

  ## Examples

      iex> form = KinoTrace.SmartCell.Form.new(%{"mode" => "stats", "limit" => "nope"})
      iex> {form["mode"], form["limit"], form["processes"]}
      {"stats", nil, "all"}
      iex> {:ok, form} = KinoTrace.SmartCell.Form.put(form, "limit", "1000")
      iex> form["limit"]
      1000
      iex> KinoTrace.SmartCell.Form.put(form, "mode", "everything")
      {:error, "mode: expected one of calls, messages, processes, stats, record, got: \\"everything\\""}
  """
  @spec defaults() :: t()
  def defaults, do: @defaults

  @doc "The fields' names."
  @spec fields() :: [String.t()]
  def fields, do: Map.keys(@defaults)

  @doc "The modes, in the order the form shows them."
  @spec modes() :: [String.t()]
  def modes, do: @modes

  @doc """
  The form from saved attrs (`nil` for a new cell). Unknown keys are dropped and a bad
  value takes its field's default, so any attrs give a form.
  """
  @spec new(map() | nil) :: t()
  def new(attrs \\ nil)
  def new(nil), do: @defaults

  def new(attrs) when is_map(attrs) do
    Map.new(@defaults, fn {field, default} ->
      case Map.fetch(attrs, field) do
        {:ok, value} ->
          case cast(field, value) do
            {:ok, value} -> {field, value}
            {:error, _} -> {field, default}
          end

        :error ->
          {field, default}
      end
    end)
  end

  def new(_attrs), do: @defaults

  @doc """
  Sets `field` to `value` as a browser sends it (numbers may come as text; an empty
  text clears a number). Returns `{:error, message}` for an unknown field or a bad
  value, and the form is unchanged.
  """
  @spec put(t(), term(), term()) :: {:ok, t()} | {:error, String.t()}
  def put(form, field, value) when is_map_key(@defaults, field) do
    with {:ok, value} <- cast(field, value), do: {:ok, Map.put(form, field, value)}
  end

  def put(_form, field, _value), do: {:error, "unknown field #{inspect(field)}"}

  # (saved only when set: the attrs of a cell saved before they existed stay the same)
  @record_fields ~w(ring_events on_exception slower_than on_match after)

  @doc "The attrs to save: the form itself (JSON-friendly), a recorder's fields when set."
  @spec to_attrs(t()) :: map()
  def to_attrs(form) do
    form
    |> Map.take(fields())
    |> Map.reject(fn {field, value} -> field in @record_fields and value == @defaults[field] end)
  end

  ## Casting

  defp cast("mode", value), do: one_of("mode", value, @modes)
  defp cast("processes", value), do: one_of("processes", value, @processes)
  defp cast("nodes", value), do: one_of("nodes", value, @nodes)

  defp cast(field, value) when field in ~w(return exceptions caller on_exception) do
    if is_boolean(value), do: {:ok, value}, else: invalid(field, "true or false", value)
  end

  defp cast(field, value)
       when field in ~w(limit rate_count timeout ring_events slower_than after),
       do: count(field, value, true)

  defp cast("rate_period", value), do: count("rate_period", value, false)

  defp cast(field, value) when field in ~w(patterns targets match node_names on_match) do
    cond do
      not is_binary(value) ->
        invalid(field, "a text", value)

      not String.valid?(value) ->
        invalid(field, "UTF-8 text", "<invalid UTF-8>")

      field != "patterns" and byte_size(value) > @max_text_bytes ->
        invalid(field, "at most #{@max_text_bytes} bytes", "#{byte_size(value)} bytes")

      true ->
        {:ok, value}
    end
  end

  defp one_of(field, value, allowed) do
    if value in allowed,
      do: {:ok, value},
      else: invalid(field, "one of #{Enum.join(allowed, ", ")}", value)
  end

  # The browser's number inputs: integers, or their text; "" is "not set" where allowed.
  # The upper bounds are the options' own, checked when the code runs.
  defp count(_field, nil, true = _optional), do: {:ok, nil}

  defp count(field, value, optional?) when is_binary(value) do
    text = String.replace(String.trim(value), "_", "")

    cond do
      text == "" and optional? ->
        {:ok, nil}

      match?({_, ""}, Integer.parse(text)) ->
        count(field, elem(Integer.parse(text), 0), optional?)

      true ->
        invalid(field, "a positive integer", value)
    end
  end

  defp count(_field, value, _optional?) when is_integer(value) and value > 0, do: {:ok, value}
  defp count(field, value, _optional?), do: invalid(field, "a positive integer", value)

  defp invalid(field, expected, value),
    do:
      {:error,
       "#{field}: expected #{expected}, got: #{inspect(value, limit: 5, printable_limit: 40)}"}
end
