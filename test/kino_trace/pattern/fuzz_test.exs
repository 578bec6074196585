defmodule PatternFuzzTarget do
  @moduledoc false
  # Functions the fuzzed call patterns name (arities 0 to 3).
  def f, do: :ok
  def f(a), do: a
  def f(a, b), do: {a, b}
  def f(a, b, c), do: {a, b, c}
end

defmodule KinoTrace.Pattern.FuzzTest do
  # Generated patterns: every one either compiles to a match spec the VM accepts, or is
  # an error naming what is wrong (an ArgumentError from the raising API). None may
  # crash the compiler: its callers include a running trace's session. A call pattern
  # that compiles matches what Elixir matches with the same head and guard.
  #
  # The inputs are Elixir source: argument patterns and guards from a corpus of pieces
  # (supported and not), whose quoted forms are recombined by swapping random subtrees,
  # then printed back with `Macro.to_string/1`. The seed is fixed and the number of
  # cases too, so a run is the same every time and takes a few seconds.
  #
  # Sizes and repetitions are fuzzed too: the corpus has binaries and shifts of every
  # size up to 10^12 bits, and a mutation repeats a subtree (in a list, a tuple or a
  # binary's segments). Whatever compiles builds literals within the trace's
  # :max_bytes (issue 27: `<<0::size(1_000_000_000_000)>>` aborted the VM).
  use ExUnit.Case, async: true

  @moduletag :slow

  alias KinoTrace.Pattern
  alias KinoTrace.Plan.MessagePattern

  @cases 8_000
  @internal "the pattern compiler failed"

  @args ~S"""
  x
  _
  x, y
  {:ok, x}
  {:ok, x}, x
  [h | t]
  [1, 2 | rest]
  %{id: id}
  %{"key" => v, {:t} => w}
  %URI{host: h}
  %_{}
  %name{}
  %URI{u | host: h}
  %{m | a: 1}
  %:"$1"{}
  :"$1"
  :_
  :"$gen_call"
  {:"$gen_call", from, {:fetch, key}}
  ~w(a b)a
  ~w($1 $$)a
  ~c"abc"
  <<1, 2>>
  <<x, 2>>
  <<0::size(1_000_000_000_000)>>
  <<1::size(8_000_000_000)>>
  <<0::8*1_000_000_000>>
  <<255::unit(8)-size(2)>>
  <<1::size(65_536)-little, 2.5::float-32, "é"::utf16>>
  <<0::size(131_072)>>
  <<"abc"::binary, 1::utf8, -3::signed-4, 5::4>>
  <<1::size(n)>>
  <<"abc"::binary-size(2)>>
  "abc" <> rest
  x = y
  ^x
  @attr
  -5
  1.5
  [a: 1, b: x]
  %{:"$1" => v}
  {x, x, _}
  {{:a, [b]}, %{c: {d}}}
  1..3
  &Enum.map/2
  fn -> 1 end
  String.trim(x)
  length(x)
  x when y
  """

  @guards ~S"""
  is_integer(x) and x > 0
  hd(x) == 1
  is_atom(x) or not is_list(y)
  x in [:a, "b", {1, 2}]
  x in -5..5
  x in 1..10//3
  x in 10..1//-3
  x in 1..x
  x not in ~w(a b)a
  x in [h | t]
  elem(x, 0) == :ok
  map_size(m) > 1 and is_map_key(m, :a)
  map_get(m, :a) == x.b
  x.field.deep == 1
  is_struct(x, URI) and is_exception(x)
  is_exception(x, ArgumentError)
  is_non_struct_map(x)
  (x &&& 1) == 1
  Bitwise.band(x, 3) ||| 4 == 7
  ~~~x == -2 and (x <<< 2) > (x >>> 1)
  :erlang.element(1, x) == :"$1"
  Kernel.is_tuple(x) && !is_nil(x)
  x || y
  x == {y, :"$_", [1, y]}
  x == %{k: y}
  m == %{m | a: 1}
  u == %URI{host: "h"}
  x == [y | 1]
  String.length(x) > 1
  foo(x)
  :erlang.send(x, 1)
  _ == 1
  x == ^y
  div(x, 0) == 1
  abs(x) + rem(x, 3) * 2 - 1 / 4
  binary_part(x, 0, 1) == "a"
  binary_part(x, 0, 1_000_000_000_000) == "a"
  x == <<0::size(1_000_000_000_000)>>
  x == {<<0::size(100_000)>>, <<0::size(100_000)>>}
  x == 1 <<< 1_000_000_000
  x > Bitwise.bsl(1, 10_000_000_000) and (x >>> -1_000_000) > 0
  :erlang.bsl(x, 100_000) > 1 <<< 64
  :binary.copy(x, 1_000_000_000) == x
  String.duplicate(x, 1_000_000_000) == x
  self() == node()
  a when b
  x == <<y, 1>>
  x == fn -> 1 end
  x == 1..2
  unbound > 1
  is_function(x, 2) and tuple_size(x) == 2
  """

  @samples [
    nil,
    0,
    -1,
    7,
    1.5,
    :a,
    :"$1",
    :_,
    "abc",
    <<1, 2>>,
    ~c"abc",
    [1],
    [:a, :b],
    {:ok, 1},
    {:"$gen_call", {:pid, :ref}, {:fetch, :k}},
    %{id: 1, a: 2},
    %{__struct__: "s", __exception__: true},
    %ArgumentError{message: "m"}
  ]

  defp pieces(text) do
    for line <- String.split(text, "\n", trim: true),
        do: Code.string_to_quoted!("[#{line}]", emit_warnings: false)
  end

  # Every subtree of the quoted forms.
  defp subtrees(quoted) do
    {_, acc} = Macro.prewalk(quoted, [], fn node, acc -> {node, [node | acc]} end)
    acc
  end

  defp size(quoted), do: quoted |> subtrees() |> length()

  # `quoted` with its `n`th subtree (in prewalk order) replaced by `new`.
  defp replace(quoted, n, new) do
    {quoted, _} =
      Macro.prewalk(quoted, 0, fn
        _node, ^n -> {new, :done}
        node, :done -> {node, :done}
        node, i -> {node, i + 1}
      end)

    quoted
  end

  # A piece, with up to three random subtrees swapped for random subtrees of the pool,
  # or repeated.
  defp mutate(pieces, pool) do
    piece = Enum.random(pieces)

    Enum.reduce(1..(:rand.uniform(4) - 1)//1, piece, fn _, acc ->
      n = :rand.uniform(size(acc)) - 1

      new =
        if :rand.uniform(4) == 1,
          do: repeat(Enum.at(subtrees_in_order(acc), n)),
          else: Enum.random(pool)

      replace(acc, n, new)
    end)
  end

  defp subtrees_in_order(quoted), do: quoted |> subtrees() |> Enum.reverse()

  # `node` repeated up to 64 times: in a list, a tuple, or as a binary's segments (a
  # binary's segments repeated when it is one).
  defp repeat(node) do
    copies = List.duplicate(node, :rand.uniform(64))

    case {node, :rand.uniform(3)} do
      {{:<<>>, meta, segments}, _} -> {:<<>>, meta, Enum.flat_map(copies, fn _ -> segments end)}
      {_, 1} -> copies
      {_, 2} -> {:{}, [], copies}
      {_, 3} -> {:<<>>, [], copies}
    end
  end

  # What a compiled pattern's literals build stays within :max_bytes (the default:
  # 16 384 bytes), beside what the text itself holds.
  defp check_bounded(term, input) do
    size = :erlang.external_size(term)
    assert size <= 16_384 + 16 * byte_size(input), "#{inspect(input)}: #{size} bytes"
  end

  # A mutated piece as text, without the list brackets the pieces were parsed in. A
  # swap can make a quoted form no source text has (a `|` outside a list): then
  # another one.
  defp generate(pieces, pool) do
    quoted = mutate(pieces, pool)

    try do
      if is_list(quoted) and quoted != [],
        do: Enum.map_join(quoted, ", ", &Macro.to_string/1),
        else: Macro.to_string(quoted)
    rescue
      _ -> generate(pieces, pool)
    end
  end

  defp check_spec(spec, arity) do
    args = List.duplicate(nil, arity)
    assert {:ok, _, _, _} = :erlang.match_spec_test(args, spec, :trace)

    for _ <- 1..3 do
      args = for _ <- 1..arity//1, do: Enum.random(@samples)
      assert {:ok, _, _, _} = :erlang.match_spec_test(args, spec, :trace)
    end
  end

  # Where Elixir compiles the same head and guard (it is stricter about some: unknown
  # structs, `!` in guards), both decide alike on random arguments.
  defp agrees_with_elixir("PatternFuzzTarget.f" <> head = input, pattern, arity) do
    wildcards = Enum.map_join(1..arity//1, ", ", fn _ -> "_" end)
    code = "import Bitwise, warn: false\nfn\n  #{head} -> true\n  #{wildcards} -> false\nend"

    fun =
      try do
        {{fun, _binding}, _warnings} =
          ExUnit.CaptureIO.with_io(:stderr, fn -> Code.eval_string(code) end)

        fun
      rescue
        _ -> nil
      end

    for _ <- 1..8, fun do
      args = for _ <- 1..arity//1, do: Enum.random(@samples)

      assert {:ok, result, [], []} =
               :erlang.match_spec_test(args, Pattern.match_spec(pattern, []), :trace)

      assert result == apply(fun, args),
             "#{input} on #{inspect(args)}: the match spec says #{result}"
    end
  end

  defp check_error(message, input) do
    assert is_binary(message)
    refute message =~ @internal, "#{inspect(input)}: #{message}"
  end

  defp call_case(args, guard) do
    call = "PatternFuzzTarget.f(#{args})"
    input = if guard, do: "#{call} when #{guard}", else: call

    case Pattern.parse(input) do
      {:ok, pattern} ->
        arity = if pattern.arity == :_, do: 1, else: pattern.arity
        check_bounded({pattern.head, pattern.guards}, input)
        check_spec(Pattern.match_spec(pattern, [{:return_trace}]), arity)
        agrees_with_elixir(input, pattern, arity)

        # the raising API, with the pre-flight check: a result or an ArgumentError
        try do
          Pattern.parse_all!([input])
        rescue
          error in ArgumentError -> check_error(Exception.message(error), input)
        end

        :ok

      {:error, message} ->
        check_error(message, input)

        error = assert_raise ArgumentError, fn -> Pattern.parse_all!([input]) end
        assert Exception.message(error) =~ message
        :error
    end
  end

  defp message_case(message, guard) do
    input = if guard, do: "#{message} when #{guard}", else: message

    case MessagePattern.compile(input, :rand.uniform(2) == 1) do
      {:ok, specs} ->
        check_bounded(specs.send, input)
        check_bounded(specs.recv, input)
        check_spec(specs.send, 2)
        check_spec(specs.recv, 3)
        :ok

      {:error, message} ->
        check_error(message, input)
        :error
    end
  end

  # thousands of compiles: minutes, not seconds, on a loaded machine
  @tag timeout: 300_000
  test "no generated pattern crashes the compiler; each compiles to a valid spec or is an error" do
    :rand.seed(:exsss, {20_261_201, 7, 42})
    args = pieces(@args)
    guards = for [guard] <- pieces(@guards), do: guard
    pool = Enum.flat_map(args ++ guards, &subtrees/1)

    results =
      for i <- 1..@cases do
        args_text = generate(args, pool)
        guard_text = if rem(i, 4) != 0, do: generate(guards, pool)

        if rem(i, 3) == 0 do
          [message | _] = String.split(args_text, ", ") ++ ["_"]
          {:message, message_case(message, guard_text)}
        else
          {:call, call_case(args_text, guard_text)}
        end
      end

    frequencies = Enum.frequencies(results)
    IO.puts("\npattern fuzz: #{@cases} cases, #{inspect(frequencies)}")

    # the generator reaches both outcomes of both compilers
    for kind <- [:call, :message], outcome <- [:ok, :error] do
      assert Map.get(frequencies, {kind, outcome}, 0) > 10, inspect(frequencies)
    end
  end

  test "the quoted forms of the corpus itself, each as written" do
    for [quoted] <- pieces(@args) ++ pieces(@guards) do
      text = Macro.to_string(quoted)
      call_case("x", text)
      call_case(text, nil)
      message_case(text, nil)
    end
  end

  # Literal binaries are built from their segments (KinoTrace.Pattern.Bits), not
  # evaluated: on random segments of small sizes, the pattern holds what Elixir builds,
  # and what Elixir refuses is an error.
  # thousands of compiles: minutes, not seconds, on a loaded machine
  @tag timeout: 300_000
  test "literal binaries of random segments are what Elixir builds" do
    :rand.seed(:exsss, {20_261_202, 27, 1})

    values = [
      "0",
      "1",
      "-1",
      "255",
      "65_537",
      "1.5",
      "-0.25",
      "233",
      "0x1F600",
      ~S|"a"|,
      ~S|"é€"|,
      ~S|""|
    ]

    # blanks weigh towards segments Elixir builds
    types = ["", "", "", "integer", "float", "binary", "bits", "utf8", "utf16", "utf32"]

    extras = [
      "",
      "",
      "",
      "",
      "",
      "signed",
      "unsigned",
      "big",
      "little",
      "native",
      "size(0)",
      "size(3)",
      "size(16)",
      "size(32)",
      "unit(8)",
      "8",
      "4*2"
    ]

    outcomes =
      for _ <- 1..2_000 do
        segments =
          for _ <- 1..:rand.uniform(3) do
            modifiers =
              [Enum.random(types), Enum.random(extras), Enum.random(extras)]
              |> Enum.reject(&(&1 == ""))
              |> Enum.uniq()

            value = Enum.random(values)
            if modifiers == [], do: value, else: value <> "::" <> Enum.join(modifiers, "-")
          end

        literal = "<<" <> Enum.join(segments, ", ") <> ">>"

        elixir =
          try do
            {{value, _}, _} =
              ExUnit.CaptureIO.with_io(:stderr, fn -> Code.eval_string(literal) end)

            {:ok, value}
          rescue
            _ -> :error
          end

        case {elixir, Pattern.parse("PatternFuzzTarget.f(#{literal})")} do
          {{:ok, value}, {:ok, pattern}} ->
            assert pattern.head == [value], literal
            :same

          {:error, {:error, message}} ->
            check_error(message, literal)
            :both_refuse

          {{:ok, value}, {:error, message}} ->
            flunk(
              "#{literal}: Elixir builds #{inspect(value)}, the pattern compiler says #{message}"
            )

          {:error, {:ok, pattern}} ->
            flunk(
              "#{literal}: Elixir refuses it, the pattern compiler builds #{inspect(pattern.head)}"
            )
        end
      end

    frequencies = Enum.frequencies(outcomes)
    assert frequencies[:same] > 100 and frequencies[:both_refuse] > 100, inspect(frequencies)
  end
end
