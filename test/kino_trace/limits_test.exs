defmodule KinoTrace.LimitsTest do
  # Each limit and default is defined once, in KinoTrace.Limits (issue 35 item 1): the
  # files generated from it are up to date, and every copy agrees with it, as each
  # tracer reports what it runs with (the native tracer's limits/0, a Limits made with
  # none given; the fallback's table/0, its read of no limits), and as the options check
  # them. A default or a bound changed anywhere but in the table fails here.
  use ExUnit.Case, async: true

  alias KinoTrace.Limits
  alias KinoTrace.Plan.Options

  doctest KinoTrace.Limits

  @root Path.expand("../..", __DIR__)

  test "the generated header and .hrl are what the table gives (else run mix kino_trace.limits)" do
    for {path, text} <- Mix.Tasks.KinoTrace.Limits.generated() do
      assert File.read!(Path.join(@root, path)) == text,
             "#{path} is not what lib/kino_trace/limits.ex gives: run `mix kino_trace.limits`"
    end
  end

  test "the native tracer runs with the table's defaults and checks its bounds" do
    assert :kino_trace_tracer.limits() == Limits.tracer_view(:native)
  end

  test "the fallback tracer runs with the table's defaults and checks its bounds" do
    fallback =
      Map.new(:kino_trace_fallback_limits.table(), fn {k, {d, max}} ->
        {k, {d, if(max != :undefined, do: max)}}
      end)

    assert fallback == Limits.tracer_view(:fallback)
  end

  test "both tracers refuse one past each bound, naming the option, and take the bound" do
    for {name, {_default, max}} <- Limits.tracer_view(:native),
        {option, at, past} = probe(name, max),
        check <- [
          &:kino_trace_tracer.roundtrip(:ok, &1),
          &:kino_trace_fallback.roundtrip(:ok, &1)
        ] do
      assert {:ok, _} = check.(%{option => at})
      error = assert_raise ArgumentError, fn -> check.(%{option => past}) end
      assert error.message =~ "invalid value for #{inspect(option)}: expected", error.message
      assert error.message =~ "at most #{max}", error.message
    end
  end

  defp probe(:rate_count, max), do: {:rate, {max, 1}, {max + 1, 1}}
  defp probe(:rate_period_ms, max), do: {:rate, {1, max}, {1, max + 1}}
  defp probe(:queue_events, max), do: {:queue, [events: max], [events: max + 1]}
  defp probe(:queue_bytes, max), do: {:queue, [bytes: max], [bytes: max + 1]}
  defp probe(name, max), do: {name, max, max + 1}

  test "the options' defaults and bounds are the table's, worded as the tracers word them" do
    defaults = Options.defaults()

    for %{option: option, default: default, max: max} <- Limits.table(),
        option != nil and not match?({:record, _}, option) do
      case option do
        {:queue, part} -> assert defaults[:queue][part] == default
        {:rate, _part} -> assert defaults[:rate] == nil and default == nil
        option -> assert defaults[option] == default
      end

      {key, at, past} = option_probe(option, max)

      assert Options.validate!([{key, at}])[key] ==
               if(key == :queue, do: Keyword.merge(defaults[:queue], at), else: at)

      error = assert_raise ArgumentError, fn -> Options.validate!([{key, past}]) end
      assert error.message =~ "invalid value for #{inspect(key)}: expected", error.message
      assert error.message =~ "at most #{max}", error.message
      assert error.message =~ "got: #{inspect(past)}", error.message
    end
  end

  test "a recorder's options (Kino.Trace.record/2) take the table's defaults and bounds" do
    schema = KinoTrace.Plan.Record.schema()
    defaults = KinoTrace.Options.defaults(schema)
    rows = for %{option: {:record, option}} = row <- Limits.table(), do: {option, row}
    assert Keyword.keys(rows) == [:events, :bytes, :snapshots, :snapshot_bytes]

    for {option, %{default: default, max: max}} <- rows do
      assert defaults[option] == default
      assert KinoTrace.Options.validate!([{option, max}], schema)[option] == max

      error =
        assert_raise ArgumentError, fn ->
          KinoTrace.Options.validate!([{option, max + 1}], schema)
        end

      assert error.message =~ "invalid value for #{inspect(option)}: expected", error.message
      assert error.message =~ "at most #{max}", error.message
    end
  end

  defp option_probe({:rate, :count}, max), do: {:rate, {max, 1}, {max + 1, 1}}
  defp option_probe({:rate, :period}, max), do: {:rate, {1, max}, {1, max + 1}}
  defp option_probe({:queue, part}, max), do: {:queue, [{part, max}], [{part, max + 1}]}
  defp option_probe(option, max), do: {option, max, max + 1}

  test "the options learn the bounds from the table, not by making a tracer session" do
    # KinoTrace.Plan.Options made (and closed) a native session, or asked the fallback,
    # to find out whether a value was in bounds.
    {:ok, {_, [imports: imports]}} = :beam_lib.chunks(:code.which(Options), [:imports])

    asked =
      for {module, _fun, _arity} <- imports,
          module in [:kino_trace_tracer, :kino_trace_fallback, KinoTrace.Tracer],
          do: module

    assert asked == []
  end

  test "a capture runs with the table's capture defaults, and its docs say them" do
    capture = Kino.Trace.capture(["Enum.sum/1"], fn -> Enum.sum([1]) end)

    assert capture.limits[:limit] == Limits.capture_default(:limit)

    assert capture.limits[:queue] == [
             events: Limits.capture_default(:queue_events),
             bytes: Limits.capture_default(:queue_bytes)
           ]

    {:docs_v1, _, _, _, %{"en" => moduledoc}, _, docs} = Code.fetch_docs(Kino.Trace.Capture)
    {:docs_v1, _, _, _, _, _, api} = Code.fetch_docs(Kino.Trace)
    [capture_doc] = for {{:function, :capture, 3}, _, _, %{"en" => doc}, _} <- api, do: doc
    limit = Limits.capture_default(:limit) |> Integer.to_string() |> underscored()
    mb = "#{div(Limits.capture_default(:queue_bytes), 1024 * 1024)} MB"

    for doc <- [moduledoc, capture_doc] do
      assert doc =~ "#{limit} by default" or doc =~ "`:limit` to #{limit} events"
      assert doc =~ mb
    end

    assert docs != []
  end

  defp underscored(digits),
    do:
      digits
      |> String.reverse()
      |> String.graphemes()
      |> Enum.chunk_every(3)
      |> Enum.map_join("_", &Enum.join/1)
      |> String.reverse()

  test "each limit names the code that enforces it, and that code exists" do
    for %{name: name, enforced_by: [_ | _] = by} <- Limits.table(), place <- by do
      [path | _] = String.split(place, " ")
      assert File.regular?(Path.join(@root, path)), "#{name}: #{path} does not exist"

      # the function or type named first in parentheses ("(BasicSessionCore::admit, ...)",
      # "(offer/2: ...)") is in that file
      with [_, what] <- Regex.run(~r/\((\w+(?:(?:::|\.)\w+)*)/, place) do
        what = what |> String.split("::") |> List.last()
        assert File.read!(Path.join(@root, path)) =~ what, "#{name}: #{what} is not in #{path}"
      end
    end
  end
end
