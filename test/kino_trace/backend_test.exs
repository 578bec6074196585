defmodule KinoTrace.BackendTest do
  # The backend behaviour (issue 35.3): one struct per mode, chosen once when the backend
  # starts, each draining decoded events. A real trace session on each of this node's
  # tracers: a call and its return come out of `drain/2` as paired events, whatever
  # the mode.
  use ExUnit.Case, async: false

  alias Kino.Trace.Event
  alias KinoTrace.Backend
  alias KinoTraceTest.Sample.Math

  for mode <- [:native, :fallback] do
    test "the #{mode} tracer's backend drains decoded, paired events" do
      if unquote(mode) == :fallback, do: KinoTraceTest.Helpers.use_fallback_tracer()
      expected = if unquote(mode) == :native, do: Backend.Native, else: Backend.Fallback
      backend = Backend.start(self(), %{}, node())

      try do
        assert %^expected{} = backend
        assert Backend.safeguards?(backend)

        Backend.run(backend, [
          {:function, [{Math, :echo, 1}, [{:_, [], [{:return_trace}]}], [:local]]}
        ])

        Backend.trace(backend, :process, [
          self(),
          true,
          Backend.flags(backend, [:call, :timestamp])
        ])

        Math.echo(:hello)
        Backend.trace(backend, :process, [self(), false, [:all]])

        events = drain_until(backend, [], 2)

        assert [
                 %Event{kind: :call, args: [:hello]} = call,
                 %Event{kind: :return, return: :hello} = return
               ] = events

        assert return.call_id == call.id
      after
        Backend.destroy(backend, [{Math, :echo, 1}])
        Backend.close(backend)
      end
    end
  end

  test "a counters backend is this node's, with no tracer and no events" do
    {:ok, backend} = Backend.start_counters(node(), 1)
    assert %Backend.Counters{} = backend
    assert {[], false, ^backend} = Backend.drain(backend, 10)
    assert Backend.mode(backend) == :counters
    assert Backend.destroy(backend, []).session == nil
  end

  # The fallback's events travel to its process as trace messages: once the VM has
  # delivered them, a drain (a request its process answers after them) has them all.
  defp drain_until(backend, acc, n) do
    ref = :erlang.trace_delivered(:all)
    assert_receive {:trace_delivered, :all, ^ref}
    {events, _more, backend} = Backend.drain(backend, 100)
    acc = acc ++ events
    if length(acc) >= n or events == [], do: acc, else: drain_until(backend, acc, n)
  end
end
