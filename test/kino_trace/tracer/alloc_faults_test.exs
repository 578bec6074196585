defmodule KinoTrace.Tracer.AllocFaultsTest do
  # Running out of memory inside the NIF, made to happen: kino_trace_tracer:alloc_faults/3
  # calls one NIF with the calling thread's allocations failing after the first N
  # (c_src/core/alloc_faults.hpp; the library `mix test` builds has it, see
  # KINO_TRACE_FAULT_INJECTION). Whatever allocation fails, the NIF raises a RuntimeError
  # (or, for the trace callback, counts a no_memory drop) and the node, the session and
  # the decoder go on: no std::terminate.
  use ExUnit.Case, async: true

  alias KinoTrace.Tracer

  @no_memory "kino_trace's native tracer ran out of memory (the call was abandoned, nothing else)"

  setup do
    cond do
      not Tracer.loaded?() ->
        {:skip, "the native tracer is not loaded"}

      :kino_trace_tracer.alloc_faults(0, :nif_loaded, []) == :unsupported ->
        {:skip, "built without fault injection"}

      true ->
        :ok
    end
  end

  # A payload of more than the event's inline bytes: encoding it allocates.
  defp big, do: :binary.copy("x", 400)

  defp push(resource, args) do
    assert :kino_trace_tracer.trace(:call, resource, self(), {__MODULE__, :f, args}, %{}) == :ok
  end

  defp balanced?(resource) do
    c = Tracer.counters(resource)
    c.accepted == c.delivered + c.queued + c.discarded
  end

  # Calls `name` with `args.()` failing after 0, 1, 2... allocations until a call runs
  # without a failure. Returns how many calls raised; each raised the RuntimeError,
  # and `after_each` holds after each.
  defp sweep(name, args, after_each \\ fn _ -> :ok end) do
    Enum.reduce_while(0..10_000, 0, fn allowed, raised ->
      try do
        :kino_trace_tracer.alloc_faults(allowed, name, args.())
      rescue
        error in RuntimeError ->
          assert error.message == @no_memory
          after_each.(:raised)
          {:cont, raised + 1}
      else
        {_result, 0} ->
          {:halt, raised}

        {_result, _failed} ->
          after_each.(:returned)
          {:cont, raised}
      end
    end)
  end

  test "trace: no memory for the payload or for the queue is a counted no_memory drop" do
    resource = Tracer.new_session(self(), %{})
    # the event's payload (SmallBuffer's block)
    assert {:ok, failed} =
             :kino_trace_tracer.alloc_faults(0, :trace, [
               :call,
               resource,
               self(),
               {__MODULE__, :f, [big()]},
               %{}
             ])

    assert failed >= 1
    assert %{dropped_no_memory: 1, accepted: 0} = Tracer.counters(resource)
    # the queue's first block (a small payload needs no block of its own)
    assert {:ok, 1} =
             :kino_trace_tracer.alloc_faults(0, :trace, [
               :call,
               resource,
               self(),
               {__MODULE__, :f, [1]},
               %{}
             ])

    assert %{dropped_no_memory: 2, accepted: 0} = Tracer.counters(resource)
    # and then it takes events again
    push(resource, [big()])
    assert %{dropped_no_memory: 2, accepted: 1} = Tracer.counters(resource)
    assert {[{:call, _, _, _, __MODULE__, :f, 1, [_], _, _}], _} = Tracer.drain(resource, 10)
    Tracer.close(resource)
  end

  test "new_session, roundtrip and new_decoder raise a RuntimeError when out of memory" do
    assert sweep(:new_session, fn -> [self(), %{limit: 10}] end) >= 1
    assert sweep(:roundtrip, fn -> [Enum.map(1..40, &{&1, big()}), %{}] end) >= 1
    sweep(:new_decoder, fn -> [true, node()] end)
    # the node goes on, and so does the NIF
    resource = Tracer.new_session(self(), %{})
    push(resource, [1])
    assert {[_], _} = Tracer.drain(resource, 10)
  end

  test "drain and drain_events: an error, then the session and the decoder go on" do
    resource = Tracer.new_session(self(), %{})
    decoder = Tracer.new_decoder(true, node())
    :ok = Tracer.decoder_put_names(decoder, [{self(), nil}])

    refill = fn -> for i <- 1..30, do: push(resource, [i, big()]) end
    check = fn _ -> assert balanced?(resource) end

    refill.()
    assert sweep(:drain, fn -> [resource, 100] end, check) >= 1

    # drain_events: each attempt on a fresh batch (names known: no {names, _} detour)
    raised =
      sweep(
        :drain_events,
        fn ->
          refill.()
          [resource, decoder, 100]
        end,
        fn _ ->
          check.(nil)
          # the decoder's lock was let go, and it decodes what comes next
          push(resource, [:after])
          assert {events, _} = Tracer.drain_events(resource, decoder, 10_000)
          # (a tuple of Kino.Trace.Event's fields: args is the 9th)
          assert Enum.any?(events, &(elem(&1, 8) == [:after]))
        end
      )

    assert raised >= 1
    assert balanced?(resource)
    Tracer.close(resource)
  end

  test "decode_events and the decoder's other NIFs raise a RuntimeError when out of memory" do
    decoder = Tracer.new_decoder(true, node())
    :ok = Tracer.decoder_put_names(decoder, [{self(), nil}])
    now = System.monotonic_time(:nanosecond)

    raw =
      for i <- 1..50,
          do: {:call, self(), now + i, 1, __MODULE__, :f, 1, [i], :undefined, 0}

    assert sweep(:decode_events, fn -> [decoder, raw] end) >= 1
    sweep(:decoder_no_returns, fn -> [decoder, [{__MODULE__, :f, 1}]] end)
    sweep(:decoder_put_names, fn -> [decoder, [{self(), nil}]] end)
    sweep(:decoder_take_callers, fn -> [decoder] end)
    # still decodes
    assert length(Tracer.decode_events(decoder, raw)) == 50
  end
end
