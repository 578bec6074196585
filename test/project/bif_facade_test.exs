defmodule KinoTraceTest.Project.BifFacadeTest do
  # The OTP 27.3 BIF work-around (erlang/otp#10349) has one facade (issue 35):
  # KinoTrace.Backend.BifWorkaround is the only module that asks the Reaper (which runs
  # it), and only the traces ask the facade: the session's parts, the stats server, and
  # the backend's modes of this node, which destroy their sessions through it. A
  # capture's watch is its session's (`Kino.Trace.Plan.watch_bifs/1`), its trace of
  # sends a backend's. Checked with `mix xref callers`.
  use ExUnit.Case, async: false

  import ExUnit.CaptureIO

  # Besides the facade: the application starts the Reaper. (The BIF table, which BIFs a
  # pattern covers, is not the work-around: KinoTrace.Base.Bifs, read by the plan.)
  @reaper_callers ~w(lib/kino_trace/backend/bif_workaround.ex lib/kino_trace/application.ex)

  @facade_callers ~w(lib/kino_trace/backend/local.ex lib/kino_trace/session/safeguards.ex
                     lib/kino_trace/session/setup.ex lib/kino_trace/session/stack_guard.ex
                     lib/kino_trace/stats/server.ex)

  test "only the facade asks the Reaper, and only the traces ask the facade" do
    assert callers(KinoTrace.Backend.Reaper) -- @reaper_callers == []
    assert callers(KinoTrace.Backend.BifWorkaround) -- @facade_callers == []
  end

  defp callers(module) do
    output = capture_io(fn -> Mix.Tasks.Xref.run(["callers", inspect(module)]) end)
    # (the Reaper's own files call themselves)
    for [path] <- Regex.scan(~r{^(lib/\S+)}m, output, capture: :all_but_first),
        not String.starts_with?(path, "lib/kino_trace/backend/reaper"),
        uniq: true,
        do: path
  end
end
