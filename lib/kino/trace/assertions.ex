defmodule Kino.Trace.Assertions do
  @moduledoc """
  ExUnit assertions about the functions a block of code really called: no mocks, the
  real code runs and `Kino.Trace.capture/3` records the calls, their return values and
  their exceptions.

      defmodule MyApp.CacheTest do
        use ExUnit.Case, async: true
        use Kino.Trace.Assertions

        alias MyApp.{Cache, Repo}

        test "a miss reads the repo once, then the cache serves it" do
          trace =
            Kino.Trace.capture(["MyApp.Cache", "MyApp.Repo"], fn ->
              Cache.fetch(:users, 42)
              Cache.fetch(:users, 42)
            end)

          assert_called trace, Cache.fetch(:users, id) when id > 0
          assert_called trace, Cache.fetch(_, _), times: 2
          assert_called trace, Repo.get(_, 42), times: 1
          refute_called trace, Repo.delete(_)
          assert_returned trace, Cache.fetch(:users, _), {:ok, %{id: 42}}
          assert_returned trace, Repo.get(_, id), {:ok, %{id: ^id}}
          assert_called_in_order trace, [Repo.get(_, 42), Cache.put(:users, 42, _)]
        end
      end

  `use Kino.Trace.Assertions` imports the macros below (so does
  `import Kino.Trace.Assertions`). They need no Kino and work on Elixir 1.17+.

  ## Call patterns

  The second argument of every assertion is a call pattern, written like the call:

    * `Cache.fetch(:users, id) when id > 0` - the arguments are patterns, as in a `case`
      clause, optionally with a guard. Aliases of the test module are expanded.
    * `Cache.fetch(:users, ^id)` - pins read the test's variables.
    * `Cache.fetch(key, key)` - a variable used twice must match the same value.
    * `&Cache.fetch/2` - any call to `fetch/2`, whatever the arguments (`Cache.fetch/2`
      works too, but `mix format` rewrites it as `Cache.fetch() / 2`).
    * `:ets.lookup(_, _)` - Erlang modules work too.

  Variables in a pattern are local to the assertion: they bind nothing in the test and do
  not warn when unused. The value pattern of `assert_returned/4` and the `{class, reason}`
  pattern of `assert_raised_in/4` are matched after the call pattern, so they can pin the
  call pattern's variables: `assert_returned trace, Repo.get(_, id), {:ok, %{id: ^id}}`. Every pattern is compiled into a match function when the test
  compiles, so a pattern that is not a remote call (`assert_called trace, fetch(_)`) or a
  bad guard is a compile error. At run time, a pattern naming a module that does not exist
  or a function it does not have raises `ArgumentError` (otherwise `refute_called` could
  never fail).

  ## Failure messages

  A failed assertion raises `ExUnit.AssertionError` with a message that shows what did
  happen, and ExUnit's diff between the pattern and the closest call:

      Expected a call matching:

          MyApp.Cache.fetch(:users, id) when id > 0

      but the only call to MyApp.Cache.fetch/2 did not match:

          MyApp.Cache.fetch(:users, -1)
      code:  assert_called(trace, Cache.fetch(:users, id) when id > 0)
      left:  [:users, id] when id > 0
      right: [:users, -1]

  When the function was never called, it lists the closest calls by name (same function
  with another arity, similar names in the same module) and every traced function with
  its call count. `times:` failures give both counts and the calls; `assert_returned`
  and `assert_raised_in` failures list what each matching call returned or raised.

  A call made in another process, such as a GenServer the block calls, is seen only if
  `capture/3` traced that process too. When an assertion about a missing call fails and
  the block sent messages to processes the capture did not trace, the message names
  them (by registered name when they have one) and suggests the option that traces
  them:

      The block sent messages to processes the capture did not trace: MyApp.Cache. Calls
      they made are not in the capture; to capture them, pass pids: [MyApp.Cache] to
      Kino.Trace.capture/3.

  A call can only be seen if `capture/3` traced its function, so `refute_called` on a
  function left out of the capture's patterns could never fail: it raises
  `ArgumentError` naming the function and the patterns instead. Trace whole modules
  (`"MyApp.Repo"`) when refuting.

  ## Lost events

  Tracing never blocks the code under test, so a capture can lose events: dropped when
  its queue is full or over its `:rate`, or not traced at all once its `:limit` or
  `:timeout` ends the trace before the block (see `Kino.Trace.Capture`). A call an
  incomplete capture lacks may still have happened, so every assertion on it fails,
  whatever its calls say (`refute_called` never passes on it), with a message that gives
  the number dropped per reason and the remedy:

      The capture is incomplete: 144275 of its events were dropped. No assertion on it can
      be trusted: a call the capture lacks may still have happened, and counts may be short.

          144275 dropped because the capture's queue was full (the block made events faster
      than they were collected) (queue_full)

      To capture every event:

        * trace fewer calls: give Kino.Trace.capture/3 narrower patterns (a function rather
      than a whole module, argument patterns)
        * or give it a bigger queue: the queue: [events: n, bytes: n] option (now queue:
      [events: 100000, bytes: 67108864])

  `Kino.Trace.Capture.complete?/1` tells whether a capture lost nothing.

  ## Isolation

  `Kino.Trace.capture/3` traces only the calling process and the processes it spawns
  during the block, in a trace session of its own, so tests in `async: true` modules can
  trace the same functions at once and each sees only its own calls.

  ## Options

  Every assertion takes `pid: pid` to look only at the calls made by one process.
  `assert_called/3` also takes `times: n` (exactly `n` matching calls; `times: 0` is
  `refute_called/3`).

  ## The trace

  The first argument is what `Kino.Trace.capture/3` returned (any struct or map with an
  `:events` list), a list of `Kino.Trace.Event` structs, or a trace: one opened from a
  file with `Kino.Trace.open/2`, or a live one (its events so far). A trace's
  assertions fail, as an incomplete capture's do, when it dropped events or delivered
  more than its history (or its file) holds. Each assertion returns the
  matching calls as structs with their `args` and `outcome`.
  """

  alias KinoTrace.Assertions.{CallPattern, ValuePattern}

  @doc false
  defmacro __using__(_opts) do
    quote do
      import Kino.Trace.Assertions
    end
  end

  @doc """
  Asserts that `trace` holds a call matching `call_pattern`.

  Options: `times: n` asserts exactly `n` matching calls; `pid: pid` looks only at the
  calls made by that process. Returns the matching calls.

  ## Examples

      assert_called trace, MyApp.Cache.fetch(:users, id) when id > 0
      assert_called trace, MyApp.Cache.fetch(_, ^key)
      assert_called trace, MyApp.Cache.fetch(_, _), times: 2
      assert_called trace, &MyApp.Cache.fetch/2, pid: worker

  Run on a real capture:

      iex> import Kino.Trace.Assertions
      iex> capture = Kino.Trace.capture(["Enum.sum/1"], fn -> Enum.sum([1, 2]) + Enum.sum([3]) end)
      iex> [call] = assert_called(capture, Enum.sum([_, _]))
      iex> call.args
      [[1, 2]]
      iex> assert_called(capture, Enum.sum(_), times: 2) |> length()
      2
  """
  defmacro assert_called(trace, call_pattern, opts \\ []) do
    check_opts!(opts, [:times, :pid], "assert_called", __CALLER__)
    pattern = CallPattern.quoted(call_pattern, __CALLER__, "assert_called")

    quote do
      KinoTrace.Assertions.Checks.called(
        unquote(trace),
        unquote(pattern),
        unquote(opts),
        unquote(code(:assert_called, [trace, call_pattern | opts_list(opts)]))
      )
    end
  end

  @doc """
  Asserts that `trace` holds no call matching `call_pattern`.

  Option: `pid: pid` looks only at the calls made by that process. Raises
  `ArgumentError` when the pattern names a module or function that does not exist.

  ## Examples

      refute_called trace, MyApp.Repo.delete(_)
      refute_called trace, MyApp.Cache.fetch(:admins, _)

  Run on a real capture:

      iex> import Kino.Trace.Assertions
      iex> capture = Kino.Trace.capture(["Enum.sum/1"], fn -> Enum.sum([1, 2]) end)
      iex> refute_called(capture, Enum.sum([]))
      :ok
  """
  defmacro refute_called(trace, call_pattern, opts \\ []) do
    check_opts!(opts, [:pid], "refute_called", __CALLER__)
    pattern = CallPattern.quoted(call_pattern, __CALLER__, "refute_called")

    quote do
      KinoTrace.Assertions.Checks.not_called(
        unquote(trace),
        unquote(pattern),
        unquote(opts),
        unquote(code(:refute_called, [trace, call_pattern | opts_list(opts)]))
      )
    end
  end

  @doc """
  Asserts that a call matching `call_pattern` returned a value matching `value_pattern`
  (a pattern, optionally with a guard; pins work).

  Option: `pid: pid`. Returns the calls that did.

  ## Examples

      assert_returned trace, MyApp.Cache.fetch(:users, _), {:ok, _}
      assert_returned trace, MyApp.Cache.fetch(:users, ^id), {:ok, %{id: ^id}}
      assert_returned trace, MyApp.Counter.next(), n when n > 10

  Run on a real capture:

      iex> import Kino.Trace.Assertions
      iex> capture = Kino.Trace.capture(["Enum.sum/1"], fn -> Enum.sum([1, 2]) end)
      iex> assert_returned(capture, Enum.sum(_), n when n > 2) |> length()
      1
  """
  defmacro assert_returned(trace, call_pattern, value_pattern, opts \\ []) do
    check_opts!(opts, [:pid], "assert_returned", __CALLER__)
    pattern = CallPattern.quoted(call_pattern, __CALLER__, "assert_returned")
    parsed = CallPattern.parse!(call_pattern, __CALLER__, "assert_returned")
    value = ValuePattern.quoted(value_pattern, __CALLER__, parsed)

    quote do
      KinoTrace.Assertions.Checks.returned(
        unquote(trace),
        unquote(pattern),
        unquote(value),
        unquote(opts),
        unquote(code(:assert_returned, [trace, call_pattern, value_pattern | opts_list(opts)]))
      )
    end
  end

  @doc """
  Asserts that a call matching `call_pattern` ended with an exception.

  `exception` is either

    * an exception module, optionally followed by the expected message (a string,
      compared whole, or a regex): `ArgumentError`, `ArgumentError, "bad id"`,
      `ArgumentError, ~r/bad/`. Erlang errors count as the exception they stand for
      (`:badarg` is an `ArgumentError`), as in `rescue`;
    * or a pattern for `{class, reason}` with class `:error`, `:throw` or `:exit`:
      `{:throw, :not_found}`, `{:exit, {:shutdown, _}}`,
      `{:error, %ArgumentError{message: "bad" <> _}}`. For `:error`, the pattern is
      tried against the raw reason and against the exception it stands for.

  The exception may come from a function deeper down: what counts is that the call
  matching the pattern did not return because of it. Option: `pid: pid`. Returns the
  calls that raised.

  ## Examples

      assert_raised_in trace, MyApp.Repo.get(_, -1), ArgumentError
      assert_raised_in trace, MyApp.Repo.get(_, -1), ArgumentError, ~r/negative id/
      assert_raised_in trace, MyApp.Repo.get(_, -1), ArgumentError, "negative id", pid: self()
      assert_raised_in trace, MyApp.Cache.fetch!(_, _), {:throw, :miss}

  Run on a real capture:

      iex> import Kino.Trace.Assertions
      iex> capture =
      ...>   Kino.Trace.capture(["Enum.fetch!/2"], fn ->
      ...>     try do
      ...>       Enum.fetch!([], 0)
      ...>     rescue
      ...>       Enum.OutOfBoundsError -> :none
      ...>     end
      ...>   end)
      iex> assert_raised_in(capture, Enum.fetch!([], 0), Enum.OutOfBoundsError) |> length()
      1
  """
  defmacro assert_raised_in(trace, call_pattern, exception, message_or_opts \\ [], opts \\ []) do
    {message, opts} =
      case message_or_opts do
        list when is_list(list) and opts == [] -> {nil, list}
        message -> {message, opts}
      end

    check_opts!(opts, [:pid], "assert_raised_in", __CALLER__)
    pattern = CallPattern.quoted(call_pattern, __CALLER__, "assert_raised_in")
    parsed = CallPattern.parse!(call_pattern, __CALLER__, "assert_raised_in")
    spec = exception_spec(exception, message, parsed, __CALLER__)
    args = [trace, call_pattern, exception | List.wrap(message)] ++ opts_list(opts)

    quote do
      KinoTrace.Assertions.Checks.raised_in(
        unquote(trace),
        unquote(pattern),
        unquote(spec),
        unquote(opts),
        unquote(code(:assert_raised_in, args))
      )
    end
  end

  @doc """
  Asserts that calls matching `call_patterns` happened in this order. Other calls may
  come before, between and after them (the patterns form a subsequence of the calls).

  Option: `pid: pid`. Returns the calls that matched, one per pattern.

  ## Examples

      assert_called_in_order trace, [MyApp.Cache.fetch(_, _), MyApp.Repo.get(_, _)]
      assert_called_in_order trace, [MyApp.Repo.get(_, id), MyApp.Cache.put(_, ^id, _)]

  Run on a real capture:

      iex> import Kino.Trace.Assertions
      iex> capture = Kino.Trace.capture(["Enum.sum/1", "Enum.reverse/1"], fn -> Enum.reverse([Enum.sum([1])]) end)
      iex> assert_called_in_order(capture, [Enum.sum([1]), Enum.reverse([1])]) |> length()
      2
  """
  defmacro assert_called_in_order(trace, call_patterns, opts \\ []) do
    check_opts!(opts, [:pid], "assert_called_in_order", __CALLER__)

    patterns =
      case call_patterns do
        [_ | _] ->
          Enum.map(call_patterns, &CallPattern.quoted(&1, __CALLER__, "assert_called_in_order"))

        _ ->
          CallPattern.compile_error!(
            __CALLER__,
            "assert_called_in_order expects a non-empty list of call patterns, such as " <>
              "[MyApp.Cache.fetch(_, _), MyApp.Repo.get(_, _)], got: #{Macro.to_string(call_patterns)}"
          )
      end

    quote do
      KinoTrace.Assertions.Checks.called_in_order(
        unquote(trace),
        unquote(patterns),
        unquote(opts),
        unquote(code(:assert_called_in_order, [trace, call_patterns | opts_list(opts)]))
      )
    end
  end

  ## Helpers

  defp exception_spec({:__aliases__, _, _} = alias, message, _call, env) do
    case Macro.expand(alias, env) do
      module when is_atom(module) -> quote(do: {:module, unquote(module), unquote(message)})
    end
  end

  defp exception_spec(pattern, nil, call, env) do
    quote(do: {:pattern, unquote(ValuePattern.quoted(pattern, env, call))})
  end

  defp exception_spec(pattern, _message, _call, env) do
    CallPattern.compile_error!(
      env,
      "assert_raised_in takes a message only after an exception module (such as " <>
        "ArgumentError, \"message\"), got the pattern: #{Macro.to_string(pattern)}"
    )
  end

  defp check_opts!(opts, allowed, what, env) when is_list(opts) do
    if Keyword.keyword?(opts) do
      case Keyword.keys(opts) -- allowed do
        [] ->
          :ok

        unknown ->
          CallPattern.compile_error!(
            env,
            "#{what}: unknown options #{inspect(unknown)}, allowed: #{inspect(allowed)}"
          )
      end
    end
  end

  defp check_opts!(_opts, _allowed, _what, _env), do: :ok

  defp opts_list([]), do: []
  defp opts_list(opts), do: [opts]

  defp code(name, args) do
    Macro.escape({name, [], args}, prune_metadata: true)
  end
end
