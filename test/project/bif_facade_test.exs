defmodule KinoTraceTest.Project.BifFacadeTest do
  # The OTP 27.3 BIF work-around (erlang/otp#10349) has one facade (issue 35):
  # KinoTrace.Session.BifWorkaround is the only module that asks the Reaper (which runs
  # it), and the traces ask the facade: the session's parts, the stats server, and the
  # capture (its watch, its trace of sends). Checked with `mix xref callers`.
  use ExUnit.Case, async: false

  import ExUnit.CaptureIO

  # Besides the facade: the application starts the Reaper, and the plan reads the BIF
  # table it holds (`bifs/1`, which BIFs a pattern covers: not the work-around).
  @reaper_callers ~w(lib/kino_trace/session/bif_workaround.ex lib/kino_trace/application.ex
                     lib/kino_trace/plan/functions.ex)

  @facade_callers ~w(lib/kino_trace/session/backend.ex lib/kino_trace/session/safeguards.ex
                     lib/kino_trace/session/setup.ex lib/kino_trace/session/stack_guard.ex
                     lib/kino_trace/stats/server.ex lib/kino/trace/capture.ex
                     lib/kino_trace/capture/sends.ex)

  test "only the facade asks the Reaper, and only the traces ask the facade" do
    assert callers(KinoTrace.Session.Reaper) -- @reaper_callers == []
    assert callers(KinoTrace.Session.BifWorkaround) -- @facade_callers == []
  end

  defp callers(module) do
    output = capture_io(fn -> Mix.Tasks.Xref.run(["callers", inspect(module)]) end)
    # (the Reaper's own files call themselves)
    for [path] <- Regex.scan(~r{^(lib/\S+)}m, output, capture: :all_but_first),
        not String.starts_with?(path, "lib/kino_trace/session/reaper"),
        uniq: true,
        do: path
  end
end
