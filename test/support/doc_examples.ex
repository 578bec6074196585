defmodule KinoTraceTest.DocExamples do
  @moduledoc ~S'''
  Runs the Elixir examples of a Markdown document (README.md, a Livebook notebook) as
  they are written, so the documents cannot drift from the code.

  Every ```` ```elixir ```` block is an example: a block of code, or an IEx session
  when it starts with `iex>`. `blocks/2` finds them:

      iex> text = """
      ...> Some text.
      ...>
      ...> ```elixir
      ...> x = 1 + 1
      ...> ```
      ...>
      ...> ```elixir
      ...> iex> Enum.sum([1,
      ...> ...>   2])
      ...> 3
      ...> ```
      ...> """
      iex> [code, session] = KinoTraceTest.DocExamples.blocks(text, "DOC.md")
      iex> {code.kind, code.line, code.code}
      {:code, 4, "x = 1 + 1\n"}
      iex> {session.kind, session.line, session.steps}
      {:iex, 8, [%{line: 8, code: "Enum.sum([1,\n  2])", expected: ["3"]}]}

  `run/2` evaluates blocks in order in one fresh process, carrying variables, aliases and
  modules from one block to the next (as Livebook and IEx do):

    * `Mix.install/2` calls are left out: the project itself is loaded.
    * In an IEx session, the lines after an expression are what it shows: its value,
      lines the console prints meanwhile (say, a trace with `print: true`), or the
      exception it raises (`** (ArgumentError) ...`), compared with `shape/1` (times,
      pids, durations and `...` stand for any).
    * A module that uses `ExUnit.Case` is compiled (not registered with the running
      suite) and its tests are run, each in its own process.

  Output goes to a `StringIO`; the first failure ends the run with a message naming the
  block's file and line.
  '''

  defmodule Block do
    @moduledoc false
    defstruct [:file, :line, :code, :kind, steps: []]

    @type t :: %__MODULE__{
            file: String.t(),
            line: pos_integer(),
            code: String.t(),
            kind: :code | :iex,
            steps: [%{line: pos_integer(), code: String.t(), expected: [String.t()]}]
          }
  end

  @typedoc "An example: a block of code or an IEx session, at `line` of `file`."
  @type block :: Block.t()

  @doc "The ```` ```elixir ```` blocks of a Markdown text, in order."
  @spec blocks(String.t(), String.t()) :: [block()]
  def blocks(text, file) do
    text
    |> String.split("\n")
    |> Enum.with_index(1)
    |> collect(file, nil, [])
  end

  defp collect([], file, open, acc) do
    if open, do: raise(ArgumentError, "#{file}:#{open.line}: a ```elixir block is never closed")
    Enum.reverse(acc)
  end

  defp collect([{line, n} | rest], file, nil, acc) do
    case Regex.run(~r/^(\s*)```elixir\s*$/, line) do
      [_, indent] -> collect(rest, file, %{line: n + 1, indent: indent, lines: []}, acc)
      nil -> collect(rest, file, nil, acc)
    end
  end

  defp collect([{line, _} | rest], file, open, acc) do
    if String.trim(line) == "```" do
      code = open.lines |> Enum.reverse() |> Enum.map_join(&(&1 <> "\n"))
      collect(rest, file, nil, [block(file, open.line, code) | acc])
    else
      # a fence indented in a list: its lines are indented as much
      collect(
        rest,
        file,
        %{open | lines: [String.replace_prefix(line, open.indent, "") | open.lines]},
        acc
      )
    end
  end

  defp block(file, line, code) do
    if code |> String.trim_leading() |> String.starts_with?("iex>"),
      do: %Block{file: file, line: line, code: code, kind: :iex, steps: steps(code, line)},
      else: %Block{file: file, line: line, code: code, kind: :code}
  end

  # iex> starts an expression, ...> continues it, other lines are what it shows (until a
  # blank line).
  defp steps(code, first_line) do
    code
    |> String.split("\n")
    |> Enum.with_index(first_line)
    |> Enum.reduce([], fn {text, n}, steps ->
      case {String.trim(text), steps} do
        {"iex>" <> expr, steps} ->
          [%{line: n, code: String.trim(expr), expected: [], open?: true} | steps]

        {"...>" <> more, [step | steps]} ->
          [%{step | code: step.code <> "\n" <> String.replace_prefix(more, " ", "")} | steps]

        {"", [step | steps]} ->
          [%{step | open?: false} | steps]

        {output, [%{open?: true} = step | steps]} ->
          [%{step | expected: step.expected ++ [output]} | steps]

        {_, steps} ->
          steps
      end
    end)
    |> Enum.reverse()
    |> Enum.map(&Map.delete(&1, :open?))
  end

  @doc """
  What a block needs skipped without being listed: `{:skip, reason}` when nothing is left
  to run once `Mix.install/2` is left out, else `:run`.
  """
  @spec auto_skip(block()) :: :run | {:skip, String.t()}
  def auto_skip(%Block{kind: :code} = block) do
    case Code.string_to_quoted(block.code) do
      {:ok, quoted} ->
        if without_mix_install(quoted) == nil,
          do:
            {:skip, "it only installs dependencies (Mix.install), and the project is loaded here"},
          else: :run

      # run/2 says what is wrong with it
      {:error, _} ->
        :run
    end
  end

  def auto_skip(%Block{}), do: :run

  @doc """
  Runs `blocks` in order in one fresh process (see the module doc). Each block must end
  within `timeout` ms, and what an IEx expression prints must show within that time
  (at most 5 s). Returns `:ok` or `{:error, message}`.
  """
  @spec run([block()], timeout()) :: :ok | {:error, String.t()}
  def run(blocks, timeout \\ 30_000) do
    {:ok, io} = StringIO.open("")
    evaluator = start_evaluator(io)

    try do
      Enum.each(blocks, &run_block(&1, evaluator, io, timeout))
    catch
      {:example_failed, block, message} ->
        {_, output} = StringIO.contents(io)

        {:error,
         "#{block.file}:#{block.line}: #{message}\n\nThe example:\n\n#{indent(block.code)}\n" <>
           "Its output:\n\n#{indent(String.slice(output, -3_000, 3_000))}\n" <>
           "Fix the example (or the code). If it cannot run in a test (it needs Kino, " <>
           "Livebook, the network or other nodes), list it with a reason in " <>
           "test/project/readme_examples_test.exs."}
    else
      :ok -> :ok
    after
      stop(evaluator, io)
    end
  end

  # The evaluator goes, then what the examples started (their group leader is `io`):
  # given time to end on their own (a printer says the trace stopped), then killed.
  defp stop(evaluator, io) do
    Process.exit(evaluator, :kill)
    deadline = System.monotonic_time(:millisecond) + 1_000
    for pid <- started_by_examples(io), do: await_down(pid, deadline)
    left = started_by_examples(io)
    Enum.each(left, &Process.exit(&1, :kill))
    # a kill is a signal: gone (its name free) once its DOWN comes
    deadline = System.monotonic_time(:millisecond) + 5_000
    Enum.each(left, &await_down(&1, deadline))
    StringIO.close(io)
  end

  defp await_down(pid, deadline) do
    ref = Process.monitor(pid)

    receive do
      {:DOWN, ^ref, :process, ^pid, _} -> :ok
    after
      max(deadline - System.monotonic_time(:millisecond), 0) -> Process.demonitor(ref, [:flush])
    end
  end

  defp started_by_examples(io) do
    Enum.filter(Process.list(), &(Process.info(&1, :group_leader) == {:group_leader, io}))
  end

  defp run_block(%Block{kind: :code} = block, evaluator, _io, timeout) do
    quoted = quoted(block)
    eval!(evaluator, block, register_false(quoted), timeout)
    Enum.each(test_modules(quoted), &run_tests(&1, block, timeout))
  end

  defp run_block(%Block{kind: :iex} = block, evaluator, io, timeout) do
    for step <- block.steps do
      {_, before} = StringIO.contents(io)
      quoted = parse!(block, step.code, step.line)

      case {eval(evaluator, block, quoted, timeout), raises?(step)} do
        {{:ok, value}, false} ->
          if step.expected != [],
            do: expect!(block, step, value, io, byte_size(before), min(timeout, 5_000))

        {{:error, banner, _text}, true} ->
          expect_raise!(block, step, banner)

        {{:ok, value}, true} ->
          throw(
            {:example_failed, block,
             "line #{step.line} should raise, but returned #{inspect(value)}"}
          )

        {{:error, _banner, text}, false} ->
          throw({:example_failed, block, "line #{step.line} raised:\n\n" <> indent(text)})
      end
    end
  end

  # IEx shows an exception as `** (ArgumentError) message`
  defp raises?(step), do: match?(["** (" <> _ | _], step.expected)

  defp expect_raise!(block, step, banner) do
    unless one_line(banner) =~ step.expected |> Enum.join(" ") |> one_line() |> shape() do
      throw(
        {:example_failed, block,
         "line #{step.line} should raise:\n\n#{indent(Enum.join(step.expected, "\n"))}\n\nbut raised:\n\n#{indent(banner)}"}
      )
    end
  end

  defp one_line(text), do: String.replace(text, ~r/\s+/, " ")

  ## Evaluation

  defp start_evaluator(io) do
    spawn(fn ->
      Process.group_leader(self(), io)
      evaluate([], Code.env_for_eval([]))
    end)
  end

  defp evaluate(binding, env) do
    receive do
      {:eval, from, ref, quoted, file} ->
        env = %{env | file: file}

        {reply, binding, env} =
          try do
            {value, binding, env} = Code.eval_quoted_with_env(quoted, binding, env)
            {{:ok, value}, binding, env}
          catch
            kind, reason ->
              banner = Exception.format_banner(kind, reason, __STACKTRACE__)
              {{:error, banner, Exception.format(kind, reason, __STACKTRACE__)}, binding, env}
          end

        send(from, {ref, reply})
        evaluate(binding, env)
    end
  end

  defp eval!(evaluator, block, quoted, timeout) do
    case eval(evaluator, block, quoted, timeout) do
      {:ok, value} -> value
      {:error, _banner, text} -> throw({:example_failed, block, "it raised:\n\n" <> indent(text)})
    end
  end

  defp eval(evaluator, block, quoted, timeout) do
    ref = make_ref()
    send(evaluator, {:eval, self(), ref, quoted, Path.expand(block.file)})

    receive do
      {^ref, reply} -> reply
    after
      timeout -> throw({:example_failed, block, "it did not finish within #{timeout} ms"})
    end
  end

  defp quoted(%Block{} = block),
    do: block |> parse!(block.code, block.line) |> without_mix_install()

  defp parse!(block, code, line) do
    Code.string_to_quoted!(code, file: block.file, line: line)
  rescue
    e -> throw({:example_failed, block, "it is not valid Elixir: " <> Exception.message(e)})
  end

  defp without_mix_install({:__block__, meta, exprs}) do
    case Enum.reject(exprs, &mix_install?/1) do
      [] -> nil
      exprs -> {:__block__, meta, exprs}
    end
  end

  defp without_mix_install(expr), do: if(mix_install?(expr), do: nil, else: expr)

  defp mix_install?({{:., _, [{:__aliases__, _, [:Mix]}, :install]}, _, _}), do: true
  defp mix_install?(_), do: false

  ## ExUnit modules

  defp exunit_case?({:use, _, [{:__aliases__, _, [:ExUnit, :Case]} | _]}), do: true
  defp exunit_case?(_), do: false

  # The suite is already running: a test module must not register with it.
  defp register_false(quoted) do
    Macro.prewalk(quoted, fn
      {:use, meta, [exunit, opts]} = use when is_list(opts) ->
        if exunit_case?(use),
          do: {:use, meta, [exunit, Keyword.put(opts, :register, false)]},
          else: use

      {:use, meta, [exunit]} = use ->
        if exunit_case?(use), do: {:use, meta, [exunit, [register: false]]}, else: use

      other ->
        other
    end)
  end

  defp test_modules(quoted) do
    {_, modules} =
      Macro.prewalk(quoted, [], fn
        {:defmodule, _, [{:__aliases__, _, parts}, [do: body]]} = node, acc ->
          {_, uses?} =
            Macro.prewalk(body, false, fn n, found -> {n, found or exunit_case?(n)} end)

          {node, if(uses?, do: [Module.concat(parts) | acc], else: acc)}

        node, acc ->
          {node, acc}
      end)

    Enum.reverse(modules)
  end

  defp run_tests(module, block, timeout) do
    context = module.__ex_unit__(:setup_all, %{module: module, case: module})

    for test <- module.__ex_unit__().tests do
      context = Map.merge(context, test.tags)

      case run_test(
             fn -> apply(module, test.name, [module.__ex_unit__(:setup, context)]) end,
             timeout
           ) do
        :ok ->
          :ok

        {:error, text} ->
          throw({:example_failed, block, "#{test.name} failed:\n\n" <> indent(text)})
      end
    end
  end

  # Runs a test body in a process of its own, as ExUnit does.
  defp run_test(fun, timeout) do
    parent = self()
    ref = make_ref()

    {pid, monitor} =
      spawn_monitor(fn ->
        result =
          try do
            fun.()
            :ok
          catch
            kind, reason -> {:error, Exception.format(kind, reason, __STACKTRACE__)}
          end

        send(parent, {ref, result})
      end)

    receive do
      {^ref, result} ->
        Process.demonitor(monitor, [:flush])
        result

      {:DOWN, ^monitor, :process, ^pid, reason} ->
        {:error, "it exited: #{inspect(reason)}"}
    after
      timeout ->
        Process.exit(pid, :kill)
        {:error, "it did not finish within #{timeout} ms"}
    end
  end

  ## What an IEx session shows

  defp expect!(block, step, value, io, from, wait) do
    shapes = Enum.map(step.expected, &shape/1)
    # a value may be shown over several lines
    value_shape = step.expected |> Enum.join(" ") |> one_line() |> shape()

    printed = fn ->
      {_, output} = StringIO.contents(io)

      output
      |> binary_part(from, byte_size(output) - from)
      |> String.replace(~r/\e\[[0-9;]*m/, "")
    end

    shown? = fn ->
      one_line(inspect(value)) =~ value_shape or literal_value?(step.expected, value) or
        in_order?(String.split(printed.(), "\n"), shapes)
    end

    try do
      KinoTraceTest.Helpers.wait_until(shown?, div(wait, 10) + 1)
      :ok
    rescue
      ExUnit.AssertionError ->
        throw(
          {:example_failed, block,
           "line #{step.line} (#{step.code}) should show:\n\n#{indent(Enum.join(step.expected, "\n"))}\n" <>
             "but its value is #{inspect(value)} and it printed:\n\n#{indent(printed.())}"}
        )
    end
  end

  # The example shows a plain literal equal to the value: a map's keys may print in
  # another order (small maps keep their atom keys in the order the atoms were made).
  defp literal_value?(expected, value) do
    with {:ok, quoted} <- Code.string_to_quoted(Enum.join(expected, "\n")),
         true <- Macro.quoted_literal?(quoted) do
      {literal, _} = Code.eval_quoted(quoted)
      literal == value
    else
      _ -> false
    end
  end

  defp in_order?(_lines, []), do: true
  defp in_order?([], _shapes), do: false

  defp in_order?([line | lines], [shape | shapes] = all),
    do: if(line =~ shape, do: in_order?(lines, shapes), else: in_order?(lines, all))

  @variable ~r/(\d\d:\d\d:\d\d\.\d{6}|#PID<\d+\.\d+\.\d+>|\d+(?:\.\d+)? (?:ns|µs|ms|s)(?=\)|\s|$)|\.\.\.)/u

  @doc """
  A regex matching `text` as an example shows it: times (`12:01:03.123456`), pids,
  durations (`38 µs`) stand for any, `...` for anything.

      iex> shape = KinoTraceTest.DocExamples.shape("12:01:03.123494 #PID<0.210.0> -> {:ok, %User{...}} (38 µs)")
      iex> "09:00:00.000001 #PID<0.99.0> -> {:ok, %User{id: 1}} (1.5 ms)" =~ shape
      true
      iex> "09:00:00.000001 #PID<0.99.0> -> {:error, :x} (1.5 ms)" =~ shape
      false
  """
  @spec shape(String.t()) :: Regex.t()
  def shape(text) do
    source =
      @variable
      |> Regex.split(text, include_captures: true)
      |> Enum.map_join(fn part ->
        cond do
          part == "..." -> ".*?"
          part =~ ~r/^\d\d:\d\d:\d\d\.\d{6}$/ -> "\\d\\d:\\d\\d:\\d\\d\\.\\d{6}"
          part =~ ~r/^#PID</ -> "#PID<\\d+\\.\\d+\\.\\d+>"
          part =~ ~r/^\d+(?:\.\d+)? (?:ns|µs|ms|s)$/u -> "\\d+(?:\\.\\d+)? (?:ns|µs|ms|s)"
          true -> Regex.escape(part)
        end
      end)

    Regex.compile!("^" <> source <> "$", "us")
  end

  defp indent(text), do: text |> String.trim_trailing() |> String.replace(~r/^/m, "    ")
end
