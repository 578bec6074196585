defmodule KinoTraceTest.Project.DocExamplesTest do
  # The harness that runs the README's examples: it must fail when an example is wrong.
  use ExUnit.Case, async: true

  alias KinoTraceTest.DocExamples

  doctest KinoTraceTest.DocExamples

  defp run(markdown, timeout \\ 5_000),
    do: markdown |> DocExamples.blocks("DOC.md") |> DocExamples.run(timeout)

  defp fence(code), do: "```elixir\n" <> code <> "\n```\n"

  test "a block that runs passes; one that raises fails, naming its file and line" do
    assert run(fence("x = Enum.sum([1, 2])\n3 = x")) == :ok

    assert {:error, message} = run("Text.\n\n" <> fence("Enum.sum(:oops)"))
    assert message =~ "DOC.md:4: it raised"
    assert message =~ "Protocol.UndefinedError"
  end

  test "blocks share variables, aliases and modules, in order" do
    markdown =
      fence("defmodule DocExamplesTest.Adder do\n  def add(a, b), do: a + b\nend") <>
        fence("alias DocExamplesTest.Adder\nx = 40") <> fence("42 = Adder.add(x, 2)")

    assert run(markdown) == :ok
  end

  test "Mix.install is left out, and a block of nothing else is skipped with a reason" do
    [install, both] =
      DocExamples.blocks(
        fence("Mix.install([:nothing])") <> fence("Mix.install([:nothing])\n:ok"),
        "DOC.md"
      )

    assert {:skip, reason} = DocExamples.auto_skip(install)
    assert reason =~ "Mix.install"
    assert DocExamples.auto_skip(both) == :run
    assert DocExamples.run([both]) == :ok
  end

  test "an IEx session: values, printed lines and exceptions are checked" do
    assert run(fence("iex> Enum.sum([1, 2])\n3\niex> {:ok, Enum.to_list(1..3)}\n{:ok, [1, ...]}")) ==
             :ok

    assert {:error, message} = run(fence("iex> Enum.sum([1, 2])\n4"), 300)
    assert message =~ "should show:"

    assert run(
             fence(
               ~S|iex> IO.puts("12:00:00.000001 #PID<0.1.0> done (5 µs)")| <>
                 "\n12:01:03.123456 #PID<0.210.0> done (38 µs)"
             )
           ) == :ok

    assert run(fence("iex> String.to_integer(\"x\")\n** (ArgumentError) errors were found ...")) ==
             :ok

    assert {:error, message} = run(fence("iex> String.to_integer(\"x\")\n** (KeyError) ..."))
    assert message =~ "should raise"
    assert {:error, message} = run(fence("iex> :ok\n** (KeyError) ..."))
    assert message =~ "should raise, but returned :ok"
  end

  test "an ExUnit module is compiled and its tests run; a failing one fails the example" do
    passing = """
    defmodule DocExamplesTest.PassingTest do
      use ExUnit.Case, async: true
      test "sums", do: assert(Enum.sum([1, 2]) == 3)
    end
    """

    failing =
      String.replace(passing, ["PassingTest", "== 3"], fn
        "PassingTest" -> "FailingTest"
        "== 3" -> "== 4"
      end)

    assert run(fence(passing)) == :ok
    assert {:error, message} = run(fence(failing))
    assert message =~ "test sums failed"
    assert message =~ "Assertion with == failed"
  end

  test "a block that does not finish in time fails, and what it started is stopped" do
    code = """
    pid = spawn(fn -> Process.sleep(:infinity) end)
    Process.register(pid, :doc_examples_test_sleeper)
    Process.sleep(:infinity)
    """

    assert {:error, message} = run(fence(code), 200)
    assert message =~ "did not finish within 200 ms"
    assert Process.whereis(:doc_examples_test_sleeper) == nil
  end
end
