defmodule KinoTrace.SmartCell.Controller do
  @moduledoc false
  # Everything the "Trace" smart cell does on the Elixir side, without Kino.
  #
  # `Kino.Trace.SmartCell` (the `Kino.SmartCell` module) is a thin adapter: it hands
  # each callback to this module and carries out the effects it returns, as the widgets
  # do (see `KinoTrace.Widget.Controller`):
  #
  #   * `{:broadcast, event, payload}` - send to every connected browser
  #   * `{:reply, event, payload}` - send to the browser that made the request
  #
  # The controller holds the form (`KinoTrace.SmartCell.Form`) and checks it as it is
  # filled in, where the trace will run: each pattern line as the widget's pattern editor
  # does (`KinoTrace.Pattern.parse_each/2`, shown inline per line), the processes and
  # nodes typed in, and the message pattern. Checking a pattern loads the module it names
  # when it is on the code path but not loaded yet (its `-on_load` runs), as the trace
  # would: see `check/1`.
  #
  # Events from the browser: `"update"` (`%{"field" => field, "value" => value}`) and
  # `"complete"` (`%{"text" => line, "seq" => n}`, as the widget's pattern editor sends).
  # Events sent to the browser: `"update"` (`%{field => value}`, the field as stored, to
  # every browser), `"check"` (see `check/1`), `"error"` (`%{field:, message:}`, a value
  # refused, to the browser that sent it) and `"completions"` (the reply to `"complete"`,
  # see `KinoTrace.Widget.Payload.completions/1`).

  alias KinoTrace.Pattern
  alias KinoTrace.Plan.MessagePattern
  alias KinoTrace.SmartCell.{Form, Names, Source}
  alias KinoTrace.Widget.Payload

  defstruct form: Form.defaults()

  @type t :: %__MODULE__{form: Form.t()}
  @type effect :: {:broadcast, String.t(), map()} | {:reply, String.t(), map()}

  # Fields whose check depends on others: a change of any of these checks again.
  @checked ~w(mode patterns processes targets nodes node_names match on_match)

  @doc """
  The controller of a cell with saved `attrs` (`%{}` or `nil` for a new cell), in the
  cell's process. That process is kino_trace's own from then on (see
  `KinoTrace.Internal`): no trace records it, so a trace of `Enum` does not fill with
  the form checking its patterns.

  ## Examples

      iex> alias KinoTrace.SmartCell.Controller
      iex> controller = Controller.init(%{"patterns" => "Enum.map/2"})
      iex> {effects, controller} = Controller.handle_event(controller, "update", %{"field" => "limit", "value" => "500"})
      iex> effects
      [{:broadcast, "update", %{"limit" => 500}}]
      iex> Controller.to_attrs(controller)["limit"]
      500
  """
  @spec init(map() | nil) :: t()
  def init(attrs) do
    KinoTrace.Internal.register(self())
    %__MODULE__{form: Form.new(attrs)}
  end

  @doc """
  What a connecting browser starts from: `%{form: form, modes: modes, check: check}`.
  """
  @spec connect(t()) :: map()
  def connect(%__MODULE__{form: form}), do: %{form: form, modes: Form.modes(), check: check(form)}

  @doc "Handles an event pushed by a browser."
  @spec handle_event(t(), String.t(), term()) :: {[effect()], t()}
  def handle_event(%__MODULE__{form: form} = controller, "update", %{
        "field" => field,
        "value" => value
      }) do
    with :ok <- bound(field, value),
         {:ok, new_form} <- Form.put(form, field, value) do
      controller = %{controller | form: new_form}
      update = {:broadcast, "update", %{field => new_form[field]}}

      if field in @checked and new_form != form,
        do: {[update, {:broadcast, "check", check(new_form)}], controller},
        else: {[update], controller}
    else
      {:error, message} -> {[{:reply, "error", %{field: field, message: message}}], controller}
    end
  end

  # Completion of the pattern line being typed, as in the widget's pattern editor.
  def handle_event(%__MODULE__{form: form} = controller, "complete", request) do
    {[{:reply, "completions", Payload.completions(request, trace_nodes(form))}], controller}
  end

  def handle_event(%__MODULE__{} = controller, _event, _payload), do: {[], controller}

  @doc """
  Checks the form again, for every browser: after cells above were evaluated, a module
  a pattern names may exist now (or no more). The adapter calls it when Livebook says
  the evaluation context changed (`c:Kino.SmartCell.scan_binding/3`).
  """
  @spec recheck(t()) :: [effect()]
  def recheck(%__MODULE__{form: form}), do: [{:broadcast, "check", check(form)}]

  @doc "The attrs to save (see `KinoTrace.SmartCell.Form`)."
  @spec to_attrs(t()) :: map()
  def to_attrs(%__MODULE__{form: form}), do: Form.to_attrs(form)

  @doc "The cell's code for `attrs`: `KinoTrace.SmartCell.Source.to_source/1`."
  @spec to_source(map()) :: String.t()
  defdelegate to_source(attrs), to: Source

  @doc """
  Checks the form where the trace will run. Returns a map the browser shows:

    * `:patterns` - per pattern line, as the widget's pattern editor shows them
      (`KinoTrace.Widget.Payload.pattern_results/2`), or `nil` when the mode has none;
    * `:processes`, `:nodes`, `:match`, `:on_match` - a message for a field that is
      wrong, else `nil`.

  Processes are looked up here only for a trace of this node alone (on other nodes
  they are names there).

      iex> check = KinoTrace.SmartCell.Controller.check(KinoTrace.SmartCell.Form.new(%{"patterns" => "Enum.map/2\\nEnum.mpa/2"}))
      iex> Enum.map(check.patterns.results, &{&1.input, &1.ok})
      [{"Enum.map/2", true}, {"Enum.mpa/2", false}]
  """
  @spec check(Form.t()) :: map()
  def check(form) do
    %{
      patterns: check_patterns(form),
      processes: check_processes(form),
      nodes: check_nodes(form),
      match: check_match(form),
      on_match: check_on_match(form)
    }
  end

  ## Checks

  defp check_patterns(%{"mode" => mode}) when mode in ["messages", "processes"], do: nil

  defp check_patterns(%{"mode" => mode, "patterns" => text} = form) do
    lines = Pattern.lines(text)

    case KinoTrace.Pattern.Edit.check(lines) do
      :ok ->
        form
        |> trace_nodes()
        |> Enum.map(&parse_on(lines, &1))
        |> Enum.zip_with(&first_error/1)
        |> Enum.map(fn
          {input, {:ok, pattern, warnings}} -> {input, stats_check(mode, pattern, warnings)}
          {input, {:error, message}} -> {input, {:error, message}}
        end)
        |> Payload.pattern_results(lines)

      {:error, message} ->
        Payload.pattern_error(message, [])
    end
  end

  # The nodes the trace is for, as far as they are connected now: patterns are checked
  # against each one's modules (KinoTrace.Base.Lookup), as the trace will check them.
  defp trace_nodes(%{"nodes" => "all"}), do: [node() | Node.list(:connected)]

  defp trace_nodes(%{"nodes" => "some", "node_names" => text}) do
    known = [node() | Node.list(:connected)]

    with {:ok, nodes} <- Names.nodes(text),
         [_ | _] = nodes <- for(n <- Enum.uniq(nodes), is_atom(n), n in known, do: n) do
      nodes
    else
      _ -> [node()]
    end
  end

  defp trace_nodes(_form), do: [node()]

  # Each line's result on `node`; an error there names the node when it is another one.
  defp parse_on(lines, node) do
    opts =
      [lookup: KinoTrace.Base.Lookup.new(node)] ++
        Kino.Trace.Plan.pattern_opts(KinoTrace.Plan.Options.defaults())

    for {input, result} <- Pattern.parse_each(lines, opts) do
      case result do
        {:error, message} when node != node() ->
          {input, {:error, "on #{inspect(node)}: #{message}"}}

        _ ->
          {input, result}
      end
    end
  rescue
    # the node went away or did not answer while its modules were looked up
    e in ArgumentError -> for line <- lines, do: {line, {:error, e.message}}
  end

  defp first_error([first | _] = results),
    do: Enum.find(results, first, &match?({_, {:error, _}}, &1))

  # Statistics count every call: argument patterns and guards are refused there.
  defp stats_check("stats", pattern, warnings) do
    KinoTrace.Stats.Targets.check_plain!([pattern])
    {:ok, warnings}
  rescue
    e in ArgumentError -> {:error, e.message}
  end

  defp stats_check(_mode, _pattern, warnings), do: {:ok, warnings}

  defp check_processes(%{"processes" => "some", "targets" => text} = form) do
    result =
      if form["nodes"] == "local", do: Names.check_processes(text), else: Names.processes(text)

    case result do
      {:error, message} -> message
      _ -> nil
    end
  end

  defp check_processes(_form), do: nil

  defp check_nodes(%{"nodes" => "some", "node_names" => text}) do
    case Names.check_nodes(text) do
      :ok -> nil
      {:error, message} -> message
    end
  end

  defp check_nodes(_form), do: nil

  defp check_match(%{"mode" => "messages", "match" => text, "processes" => processes}) do
    with text when text != "" <- String.trim(text),
         {:error, message} <- MessagePattern.compile(text, processes == "distributed") do
      message
    else
      _ -> nil
    end
  end

  defp check_match(_form), do: nil

  # The match trigger of a recorder, as record/2 checks it.
  defp check_on_match(%{"mode" => "record", "on_match" => text}) do
    with text when text != "" <- String.trim(text) do
      KinoTrace.Plan.Record.new!([on: [match: text]], KinoTrace.Plan.Options.validate!([]))
      nil
    else
      _ -> nil
    end
  rescue
    e in ArgumentError -> e.message
  end

  defp check_on_match(_form), do: nil

  # The patterns' bounds are the widget's (one home): over them, the text is refused.
  defp bound("patterns", text) when is_binary(text),
    do: KinoTrace.Pattern.Edit.check(Pattern.lines(text))

  defp bound(_field, _value), do: :ok
end
