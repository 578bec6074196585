defmodule KinoTrace.Base.MFATest do
  use ExUnit.Case, async: true

  alias KinoTrace.Base.Name
  alias KinoTrace.Base.MFA

  doctest KinoTrace.Base.MFA

  test "names without atoms are written as the pattern would write them" do
    module = %Name{text: "kino_trace_no_such_mod_1f3c"}
    function = %Name{text: "no such fun"}

    assert MFA.to_string({module, function, 1}) ==
             ~s(:kino_trace_no_such_mod_1f3c."no such fun"/1)

    assert MFA.to_string({function, 2}) == ~s("no such fun"/2)
  end

  test "every caller writes a function the same way" do
    mfa = {MyApp, :"-run/2-fun-0-", 1}
    text = ~s(MyApp."-run/2-fun-0-"/1)

    assert MFA.to_string(mfa) == text
    assert Kino.Trace.Stats.Row.key(mfa) == text
    assert Kino.Trace.Printer.format_caller(mfa) == text

    {:ok, pattern} = KinoTrace.Pattern.parse({Kernel, :+, 2})
    assert KinoTrace.Pattern.to_string(pattern) == "Kernel.+/2"
  end
end
