defmodule KinoTraceTest.UserErrorStacktraceTest do
  # A bad argument to the API raises an ArgumentError whose top frame is the user's
  # call, with none of kino_trace's frames under it (issue 39 item 11): in Livebook the
  # stack trace under the message is the user's, as with Ecto's and Phoenix's errors.
  use ExUnit.Case, async: true

  doctest KinoTrace.Front, only: [own_module?: 1]

  # {the error, the stack trace} of `fun`'s ArgumentError
  defp raised(fun) do
    fun.()
    flunk("nothing raised")
  rescue
    e in ArgumentError -> {e, __STACKTRACE__}
  end

  for {name, fun} <- [
        {"calls/2, an unknown module", quote(do: fn -> Kino.Trace.calls(["Nope.nope/9"]) end)},
        {"calls/2, an unknown option",
         quote(do: fn -> Kino.Trace.calls(["Enum.map/2"], bogus: 1) end)},
        {"messages/2, a name of no process",
         quote(do: fn -> Kino.Trace.messages([:kino_trace_no_such_name]) end)},
        {"stats/2, an unknown function", quote(do: fn -> Kino.Trace.stats(["Enum.nope/9"]) end)},
        {"capture/3, an unknown module",
         quote(do: fn -> Kino.Trace.capture(["Nope.nope/9"], fn -> :ok end) end)},
        {"to_mermaid/2, a bad option",
         quote(do: fn -> Kino.Trace.to_mermaid([], max_messages: -1) end)}
      ] do
    test "#{name}: the top frame is the user's call, no frame is kino_trace's" do
      {error, stacktrace} = raised(unquote(fun))
      assert Exception.message(error) != ""
      [{top, _fun, _arity, location} | _] = stacktrace
      assert top == __MODULE__, Exception.format_stacktrace(stacktrace)
      assert Path.basename(to_string(location[:file])) == Path.basename(__ENV__.file)

      refute Enum.any?(stacktrace, &KinoTrace.Front.own_module?(elem(&1, 0))),
             Exception.format_stacktrace(stacktrace)
    end
  end
end
