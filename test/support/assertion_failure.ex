defmodule KinoTraceTest.AssertionFailure do
  @moduledoc false
  # `failure(do: assertion)` returns the ExUnit.AssertionError the assertion raised, and
  # fails the test when it raised none. The flunk is raised outside the rescue, so it is
  # never mistaken for the assertion's own failure.

  defmacro failure(do: block) do
    quote do
      result =
        try do
          {:passed, unquote(block)}
        rescue
          error in ExUnit.AssertionError -> error
        end

      case result do
        {:passed, value} ->
          ExUnit.Assertions.flunk(
            "the assertion did not fail; it returned #{inspect(value, limit: 5)}"
          )

        error ->
          error
      end
    end
  end
end
