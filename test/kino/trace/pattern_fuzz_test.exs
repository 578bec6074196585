defmodule PatternFuzzTarget do
  @moduledoc false
  # Functions the fuzzed call patterns name (arities 0 to 3).
  def f, do: :ok
  def f(a), do: a
  def f(a, b), do: {a, b}
  def f(a, b, c), do: {a, b, c}
end

defmodule Kino.Trace.PatternFuzzTest do
  # Generated patterns: every one either compiles to a match spec the VM accepts, or is
  # an error naming what is wrong (an ArgumentError from the raising API). None may
  # crash the compiler: its callers include a running trace's session. A call pattern
  # that compiles matches what Elixir matches with the same head and guard.
  #
  # The inputs are Elixir source: argument patterns and guards from a corpus of pieces
  # (supported and not), whose quoted forms are recombined by swapping random subtrees,
  # then printed back with `Macro.to_string/1`. The seed is fixed and the number of
  # cases too, so a run is the same every time and takes a few seconds.
  use ExUnit.Case, async: true

  alias Kino.Trace.{MessagePattern, Pattern}

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
    for line <- String.split(text, "\n", trim: true), do: Code.string_to_quoted!("[#{line}]")
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

  # A piece, with up to three random subtrees swapped for random subtrees of the pool.
  defp mutate(pieces, pool) do
    piece = Enum.random(pieces)

    Enum.reduce(1..(:rand.uniform(4) - 1)//1, piece, fn _, acc ->
      replace(acc, :rand.uniform(size(acc)) - 1, Enum.random(pool))
    end)
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
        check_spec(specs.send, 2)
        check_spec(specs.recv, 3)
        :ok

      {:error, message} ->
        check_error(message, input)
        :error
    end
  end

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
end
