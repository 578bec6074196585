%% @doc The process of kino_trace's fallback tracer (kino_trace_fallback, whose
%% documentation tells what it does and how it differs from the NIF): it receives the
%% trace messages, turns them into the NIF's raw events and queues them for drain/2, and
%% runs the mailbox guard. Its counters live in an atomics array (ix/1), which the API
%% reads without asking the process.
-module(kino_trace_fallback_process).

-export([start/2, ix/1]).

-include("kino_trace_raw_event.hrl").

-define(TICK, 16).                 % messages between two looks at the mailbox
-define(EVENT_BYTES, 128).         % sizeof(kino_trace::Event), checked there
-define(INLINE_PAYLOAD, 64).       % its inline payload buffer
-define(MARK_SLOTS, 1024).
-define(CHECK_NS, 1000000).        % nanoseconds between two looks at the mailbox, at most
%% Open calls that hold a process: a quarter of the NIF's (c_src/core/loop_guard.hpp), as
%% the process goes on pushing frames until it handles the suspension that switches its
%% flag off (switch_off_calls/2): up to one time slice, a few thousand calls.
-define(LOOP_THRESHOLD, 1024).
-define(LOOP_EXEMPT, exempt).
-define(LOOP_LOOK, 256).           % open calls from which the mailbox counts too
-define(LOOP_MAX_PIDS, 10000).     % processes counted at once, at most
-define(SWEEP_BYTES, 4194304).     % heap growth after a return past which it is collected
-define(KEYS, [accepted, delivered, discarded, bytes_queued, dropped_closed, dropped_rate,
               dropped_queue_full, dropped_max_events, dropped_no_memory, wakeups, closed,
               limit_reached, received, guard_trips, mailbox_peak, trip_us, mailbox_bytes_peak, gate_reasserts,
               tickets_held]).

-record(s, {owner, id, gate, counters, marks, caps, skip_returns, limit, interval, burst, tat = 0, start,
            queue_events, queue_bytes, mailbox, mailbox_bytes, checked, heap_after_gc = 0, accepted = 0, q = queue:new(), qlen = 0, qbytes = 0, epoch = 0,
            closed = false, session, suspended = false, tick = ?TICK, restore = snapshot,
            loop_modules = [], loop = #{}, sweep = false, low = none}).

%% @doc The index in the counters' atomics array of each counter.
-spec ix(atom()) -> pos_integer().
ix(accepted) -> 1; ix(delivered) -> 2; ix(discarded) -> 3; ix(bytes_queued) -> 4;
ix(dropped_closed) -> 5; ix(dropped_rate) -> 6; ix(dropped_queue_full) -> 7;
ix(dropped_max_events) -> 8; ix(dropped_no_memory) -> 9; ix(wakeups) -> 10; ix(closed) -> 11;
ix(limit_reached) -> 12; ix(received) -> 13; ix(guard_trips) -> 14; ix(mailbox_peak) -> 15; ix(trip_us) -> 16;
ix(mailbox_bytes_peak) -> 17; ix(gate_reasserts) -> 18; ix(tickets_held) -> 19.

%% @doc Starts the tracer process for Owner with read limits L
%% (kino_trace_fallback_limits:read/1). Returns its pid, its session's id, its
%% counters and its gate (kino_trace_fallback_gate:claim/1).
-spec start(pid(), map()) -> {pid(), pos_integer(), atomics:atomics_ref(), kino_trace_fallback_gate:gate()}.
start(Owner, L) ->
    Id = erlang:unique_integer([positive, monotonic]),
    Counters = atomics:new(length(?KEYS), [{signed, false}]),
    {Interval, Burst} = rate(maps:get(rate, L)),
    S = #s{owner = Owner, id = Id, counters = Counters, marks = atomics:new(?MARK_SLOTS, [{signed, false}]),
           caps = kino_trace_fallback_limits:caps(L),
           skip_returns = maps:get(skip_returns, L), limit = maps:get(limit, L), interval = Interval,
           burst = Burst, start = erlang:monotonic_time(nanosecond), queue_events = maps:get(events, L),
           queue_bytes = maps:get(bytes, L), mailbox = maps:get(mailbox, L),
           mailbox_bytes = maps:get(mailbox_bytes, L), checked = erlang:monotonic_time(nanosecond) - ?CHECK_NS},
    Parent = self(),
    Pid = spawn_opt(fun() -> init(S, Parent) end, [{message_queue_data, off_heap}, {priority, high}]),
    receive {Pid, kino_trace_fallback_gate, Gate} -> {Pid, Id, Counters, Gate} end.

%% The NIF's token bucket (c_src/core/rate_limiter.hpp): `interval' ns per token,
%% a burst of `count' tokens.
rate({Count, PeriodNs}) when Count > 0, PeriodNs > 0 ->
    Interval = max(1, PeriodNs div Count),
    {Interval, Interval * Count};
rate(_) -> {0, 0}.

%% --- the tracer process ----------------------------------------------------------

%% Its gate: a slot of the trace control word its own while it lives (or the shared one).
init(#s{owner = Owner} = S, Parent) ->
    erlang:monitor(process, Owner),
    Gate = kino_trace_fallback_gate:claim(self()),
    Parent ! {self(), kino_trace_fallback_gate, Gate},
    loop(S#s{gate = Gate}).

%% Over its bound (suspended), at every message: a ticket a match spec took may have
%% written back the word it read before the gate closed, opening it again
%% (kino_trace_fallback_gate): it is closed again, and counted.
reassert(#s{gate = Gate, counters = C, closed = false}) ->
    kino_trace_fallback_gate:reassert(Gate) andalso atomics:add(C, ix(gate_reasserts), 1);
reassert(_) -> ok.

%% The guard looks at the mailbox before a message is taken from it: a message it then
%% drops is never held while the process runs (a garbage collection would copy it).
loop(#s{suspended = false, sweep = true} = S) ->
    loop(sweep(S));
loop(#s{suspended = false} = S0) ->
    case guard(S0) of
        #s{suspended = false} = S ->
            receive Msg -> handle(Msg, S)
            after 0 -> idle(S)
            end;
        S -> loop(S)
    end;
loop(S) ->
    reassert(S),
    receive Msg -> handle(Msg, S)
    after 0 -> loop(resume(S))
    end.

handle(Msg, S) when element(1, Msg) =:= trace; element(1, Msg) =:= trace_ts ->
    case kino_trace_fallback_gate:gated(Msg) of
        true -> loop(gated(Msg, S));
        false when S#s.loop_modules =:= [] -> loop(returned(Msg, offer(Msg, S)));
        false -> loop(returned(Msg, offer(Msg, loop_count(Msg, S))))
    end;
handle({'$kino_trace_fallback', From, Ref, Request}, S) ->
    case request(Request, S) of
        {stop, Reply} ->
            From ! {Ref, Reply},
            ok;
        {Reply, S1} ->
            From ! {Ref, Reply},
            loop(S1)
    end;
handle({'DOWN', _, process, Owner, _}, #s{owner = Owner} = S) ->
    shut(S);
handle(_, S) ->
    loop(S).

request({drain, Max}, #s{q = Q, qlen = Len, counters = C} = S) ->
    N = min(Max, Len),
    {Taken, Q1} = queue:split(N, Q),
    Events = queue:to_list(Taken),
    Bytes = lists:foldl(fun({_, B}, Acc) -> Acc + B end, 0, Events),
    atomics:sub(C, ix(bytes_queued), Bytes),
    atomics:add(C, ix(delivered), N),
    {{[E || {E, _} <- Events], Len > N}, S#s{q = Q1, qlen = Len - N, qbytes = S#s.qbytes - Bytes}};
request({attach, Session, Restore}, S) ->
    _ = quiet(fun() -> trace:process(Session, self(), false, [all]) end),
    S#s.closed andalso switch_off(Session),
    {ok, S#s{session = Session, restore = Restore}};
request({loop_modules, Modules}, S) ->
    {ok, S#s{loop_modules = Modules, loop = #{}}};
request({loop_release, Pid, Exempt}, #s{loop = Loop} = S) ->
    {ok, S#s{loop = case Exempt of
                        true -> Loop#{Pid => ?LOOP_EXEMPT};
                        false -> maps:remove(Pid, Loop)
                    end}};
request(close, S) ->
    shut(S),
    {stop, ok}.

%% Closes for good: discards the queue, switches tracing off, counts what is left in
%% the mailbox as dropped_closed. The process then ends.
shut(#s{counters = C, qlen = Len, qbytes = Bytes, session = Session, gate = Gate}) ->
    atomics:put(C, ix(closed), 1),
    kino_trace_fallback_gate:open(Gate),
    atomics:sub(C, ix(bytes_queued), Bytes),
    atomics:add(C, ix(discarded), Len),
    Session =:= undefined orelse switch_off(Session),
    flush(C).

flush(C) ->
    receive
        Msg when element(1, Msg) =:= trace; element(1, Msg) =:= trace_ts ->
            atomics:add(C, ix(received), 1),
            atomics:add(C, ix(dropped_closed), 1),
            flush(C)
    after 0 -> ok
    end.

switch_off(Session) ->
    _ = quiet(fun() -> trace:process(Session, all, false, [all]) end),
    true.

%% F's value, or failed when it raises: what the deprecated `catch Expr` was used for.
quiet(F) ->
    try F()
    catch _:_ -> failed
    end.

%% --- the mailbox guard -------------------------------------------------------------

%% Looks at the mailbox every ?TICK messages, and at least every ?CHECK_NS while
%% messages come (a few huge messages take long to come and fill it as much as many).
guard(#s{suspended = false, tick = T, checked = Checked} = S) ->
    Now = erlang:monotonic_time(nanosecond),
    case T =< 0 orelse Now - Checked >= ?CHECK_NS of
        true -> check(S#s{tick = ?TICK, checked = Now});
        false -> S#s{tick = T - 1}
    end;
guard(S) -> S.

%% Switches tracing off when the mailbox holds more than `mailbox' messages or more than
%% `mailbox_bytes' bytes, and frees the messages already handled.
check(#s{mailbox = Max, mailbox_bytes = MaxBytes} = S) ->
    {Len, Bytes, Heap} = measure(S#s.counters),
    S1 = collect(Heap, S),
    case Len > Max orelse Bytes > MaxBytes of
        true -> suspend(S1);
        false -> S1
    end.

%% The mailbox's length and bytes, and the heap's bytes; keeps the peaks. The mailbox is
%% off the heap: `memory' counts the heap (with the messages received but not yet
%% collected), the process's own structures (a few hundred bytes) and every message in
%% the mailbox, in transit ones included (the request is a signal the process handles
%% after them); `total_heap_size' counts the heap alone.
measure(C) ->
    [{memory, Memory}, {total_heap_size, Words}, {message_queue_len, Len}] =
        erlang:process_info(self(), [memory, total_heap_size, message_queue_len]),
    Heap = Words * erlang:system_info(wordsize),
    Bytes = max(0, Memory - Heap),
    peak(C, mailbox_peak, Len),
    peak(C, mailbox_bytes_peak, Bytes),
    {Len, Bytes, Heap}.

peak(C, Key, Value) ->
    Value > atomics:get(C, ix(Key)) andalso atomics:put(C, ix(Key), Value).

%% A message received is kept, off the heap, until the process's next garbage
%% collection, which the VM may not run soon: once the heap grew by half the mailbox's
%% bound since the last one, the tracer runs one.
collect(Heap, #s{heap_after_gc = After, mailbox_bytes = MaxBytes} = S) when Heap - After > MaxBytes div 2 ->
    gc(S);
collect(_, S) -> S.

gc(S) ->
    erlang:garbage_collect(),
    {total_heap_size, Words} = erlang:process_info(self(), total_heap_size),
    S#s{heap_after_gc = Words * erlang:system_info(wordsize)}.

suspend(#s{session = Session, counters = C, epoch = Epoch, gate = Gate} = S) ->
    %% at once, before the switch-off (which waits for the running processes)
    kino_trace_fallback_gate:close(Gate),
    atomics:add(C, ix(guard_trips), 1),
    T0 = erlang:monotonic_time(microsecond),
    Snapshot = case {Session, S#s.restore} of
                   {undefined, _} -> [];
                   {_, owner} -> owner;
                   {_, snapshot} -> snapshot(Session)
               end,
    Session =:= undefined orelse switch_off(Session),
    atomics:add(C, ix(trip_us), erlang:monotonic_time(microsecond) - T0),
    _ = measure(C),
    S#s{suspended = Snapshot, epoch = Epoch + 1}.

%% Who has which flags in the session now (processes, ports, and new ones).
snapshot(Session) ->
    Me = self(),
    Items = [new_processes, new_ports | erlang:processes() ++ erlang:ports()],
    [{Item, Flags} || Item <- Items, Item =/= Me,
                      {flags, [_ | _] = Flags} <- [quiet(fun() -> trace:info(Session, Item, flags) end)]].

%% The mailbox is empty: the messages dropped meanwhile are freed, then tracing goes on.
resume(#s{suspended = owner, closed = Closed, owner = Owner, id = Id, gate = Gate} = S) ->
    S1 = gc(S),
    kino_trace_fallback_gate:open(Gate),
    Closed orelse (Owner ! {kino_trace, Id, restore}),
    S1#s{suspended = false};
resume(#s{suspended = Snapshot, session = Session, closed = Closed, gate = Gate} = S) ->
    S1 = gc(S),
    kino_trace_fallback_gate:open(Gate),
    Closed orelse [quiet(fun() -> trace:process(Session, Item, true, Flags) end) || {Item, Flags} <- Snapshot],
    S1#s{suspended = false}.

%% --- the gate and the tickets (kino_trace_fallback_gate) ---------------------------

%% The mailbox is empty: every return frame a ticket was taken for has sent its message
%% and it was taken in (but those of calls still running, and messages on their way),
%% so the tickets are given back while the node's memory is near its low (give_back/3);
%% then it waits for a message, or a millisecond holding one back (its caller may wait).
idle(#s{closed = true} = S) ->
    receive Msg -> handle(Msg, S) end;
idle(#s{gate = Gate, counters = C, low = Low0, mailbox_bytes = MaxBytes} = S0) ->
    {Wait, Low} = kino_trace_fallback_gate:give_back(Gate, Low0, MaxBytes div 8),
    Wait =:= infinity orelse atomics:add(C, ix(tickets_held), 1),
    receive Msg -> handle(Msg, S0#s{low = Low})
    after Wait -> loop(S0#s{low = Low})
    end.

%% A return or exception message may be huge, and stays on the heap once taken in until
%% a garbage collection: the next turn of the loop (the message no longer live) collects
%% once the heap grew by ?SWEEP_BYTES since the last one; its tickets bound what is in
%% flight, not what was taken in. A call that found no ticket left pushed no return frame: once the call is
%% offered, its return is counted as dropped (its process marked), or, when returns are
%% skipped, its process is marked only.
returned(Msg, S) when element(3, Msg) =:= return_from; element(3, Msg) =:= exception_from ->
    S#s{sweep = true};
returned(Msg, #s{skip_returns = Skip, counters = C, marks = Marks, closed = Closed} = S) ->
    case kino_trace_fallback_gate:noret(Msg) of
        false -> S;
        true when Skip -> atomics:add(Marks, erlang:phash2(element(2, Msg), ?MARK_SLOTS) + 1, 1), S;
        true ->
            atomics:add(C, ix(received), 1),
            drop(case Closed of true -> dropped_closed; false -> dropped_queue_full end, element(2, Msg), S)
    end.

sweep(#s{heap_after_gc = After} = S) ->
    {total_heap_size, Words} = erlang:process_info(self(), total_heap_size),
    case Words * erlang:system_info(wordsize) - After > ?SWEEP_BYTES of
        true -> gc(S#s{sweep = false});
        false -> S#s{sweep = false}
    end.

%% A call made while the gate was closed.
gated(Msg, #s{counters = C, closed = Closed} = S) ->
    atomics:add(C, ix(received), 1),
    drop(case Closed of true -> dropped_closed; false -> dropped_queue_full end, element(2, Msg), S).

%% --- the loop guard ----------------------------------------------------------------

%% The NIF's loop guard (c_src/core/loop_guard.hpp) as this process can run it: per
%% process, its open calls of the named modules, counted as their messages come (+1 a
%% call, -1 a return or exception). The messages come late: the process may have made
%% calls whose messages are still in the mailbox. So from ?LOOP_LOOK open calls on, the
%% mailbox's length counts too (it holds every call not yet counted, and more): when the
%% two reach ?LOOP_THRESHOLD, the process has at most that many frames, and it is held:
%% its call flag in the attached session is switched off (switch_off_calls/2: the VM
%% pushes no more return-trace frames for it), it is marked as having lost events, and
%% the owner gets `{kino_trace, Id, {loop, Pid, MFA}}' (it moves the process to a trace
%% without returns, or switches its flag back on and releases it).
loop_count(Msg, #s{loop_modules = Modules, loop = Loop} = S) ->
    case element(3, Msg) of
        call ->
            %% (a call that found no ticket pushed no frame: kino_trace_fallback_gate)
            case kino_trace_fallback_gate:noret(Msg) of
                true -> S;
                false -> loop_step(Msg, Modules, Loop, 1, S)
            end;
        return_from -> loop_step(Msg, Modules, Loop, -1, S);
        exception_from -> loop_step(Msg, Modules, Loop, -1, S);
        _ -> S
    end.

loop_step(Msg, Modules, Loop, Step, S) ->
    Who = element(2, Msg),
    case element(4, Msg) of
        {M, F, A} ->
            case lists:member(M, Modules) of
                true -> loop_add(Who, {M, F, A}, maps:get(Who, Loop, 0), Step, S);
                false -> S
            end;
        _ -> S
    end.

loop_add(_Who, _MFA, ?LOOP_EXEMPT, _Step, S) -> S;
%% Held, and still calling: messages sent before its flag went off, or its flags were set
%% again (the owner's restore after the mailbox guard): off again every ?LOOP_THRESHOLD.
loop_add(Who, _MFA, N, 1, #s{loop = Loop, session = Session} = S) when N >= ?LOOP_THRESHOLD ->
    (N + 1) rem ?LOOP_THRESHOLD =:= 0 andalso Session =/= undefined andalso switch_off_calls(Session, Who),
    S#s{loop = Loop#{Who => N + 1}};
loop_add(_Who, _MFA, N, _Step, S) when N >= ?LOOP_THRESHOLD -> S;
loop_add(Who, _MFA, N, -1, #s{loop = Loop} = S) when N =< 1 -> S#s{loop = maps:remove(Who, Loop)};
loop_add(Who, {M, F, A}, N, Step, #s{loop = Loop0} = S) ->
    Loop = case map_size(Loop0) >= ?LOOP_MAX_PIDS andalso not is_map_key(Who, Loop0) of
               true -> #{};
               false -> Loop0
           end,
    Open = N + Step,
    Held = Open >= ?LOOP_THRESHOLD orelse
        (Step =:= 1 andalso Open >= ?LOOP_LOOK andalso
         Open + element(2, erlang:process_info(self(), message_queue_len)) >= ?LOOP_THRESHOLD),
    case Held of
        true -> hold(Who, {M, F, if is_list(A) -> length(A); true -> A end}, S#s{loop = Loop#{Who => ?LOOP_THRESHOLD}});
        false -> S#s{loop = Loop#{Who => Open}}
    end.

hold(Who, MFA, #s{session = Session, marks = Marks, owner = Owner, id = Id} = S) ->
    Session =:= undefined orelse switch_off_calls(Session, Who),
    atomics:add(Marks, erlang:phash2(Who, ?MARK_SLOTS) + 1, 1),
    Owner ! {kino_trace, Id, {loop, Who, MFA}},
    S.

%% Switching a running process's flags takes its locks, which it holds while it runs:
%% trace:process/4 waits for them, while the process goes on pushing frames, for several
%% of its time slices on a loaded machine. Suspending it first waits (without holding a
%% scheduler) only until it next handles a signal, at the end of its time slice at the
%% latest; the flags then change at once. A suspension ends with this process, if not
%% before.
switch_off_calls(Session, Who) ->
    Suspended = quiet(fun() -> erlang:suspend_process(Who) end),
    _ = quiet(fun() -> trace:process(Session, Who, false, [call]) end),
    Suspended =:= true andalso quiet(fun() -> erlang:resume_process(Who) end).

%% --- one trace message -------------------------------------------------------------

offer(Msg, #s{skip_returns = true} = S) when element(3, Msg) =:= return_from -> S;
offer(_Msg, #s{closed = false, suspended = Suspended, counters = C} = S) when Suspended =/= false ->
    %% not looked at, so not kept alive: it is freed without being copied
    atomics:add(C, ix(received), 1),
    atomics:add(C, ix(dropped_queue_full), 1),   % the epoch marks it
    S;
offer(Msg, #s{counters = C} = S) ->
    atomics:add(C, ix(received), 1),
    Who = element(2, Msg),
    {Last, Time} = case element(1, Msg) of
                       trace_ts -> {tuple_size(Msg) - 1, timestamp(element(tuple_size(Msg), Msg))};
                       trace -> {tuple_size(Msg), erlang:monotonic_time(nanosecond)}
                   end,
    if
        S#s.closed -> drop(dropped_closed, Who, S);
        S#s.limit > 0, S#s.accepted >= S#s.limit -> drop(dropped_max_events, Who, S);
        true -> admit(Msg, Who, Last, Time, S)
    end.

timestamp(Ts) when is_integer(Ts) -> erlang:convert_time_unit(Ts, native, nanosecond);
timestamp({Ts, _Unique}) when is_integer(Ts) -> erlang:convert_time_unit(Ts, native, nanosecond);
timestamp(_) -> erlang:monotonic_time(nanosecond).

admit(Msg, Who, Last, Time, #s{interval = Interval, burst = Burst, tat = Tat} = S) ->
    Now = Time - S#s.start,
    Over = Interval > 0 andalso max(Tat, Now) + Interval - Now > Burst,
    Full = S#s.qlen >= S#s.queue_events orelse S#s.qbytes >= S#s.queue_bytes,
    if
        Over -> drop(dropped_rate, Who, S);
        Full -> drop(dropped_queue_full, Who, S);
        true ->
            S1 = case Interval of
                     0 -> S;
                     _ -> S#s{tat = max(Tat, Now) + Interval}
                 end,
            {Raw, Size} = kino_trace_fallback_event:event(Msg, Who, Last, Time, S#s.caps),
            Bytes = ?EVENT_BYTES + if Size > ?INLINE_PAYLOAD -> Size; true -> 0 end,
            case S1#s.qbytes =/= 0 andalso S1#s.qbytes + Bytes > S1#s.queue_bytes of
                true -> drop(dropped_queue_full, Who, S1);
                false -> accept(Raw, Who, Bytes, S1)
            end
    end.

drop(Reason, Who, #s{counters = C, marks = Marks} = S) ->
    atomics:add(C, ix(Reason), 1),
    atomics:add(Marks, erlang:phash2(Who, ?MARK_SLOTS) + 1, 1),
    S.

accept(Raw, Who, Bytes, #s{counters = C, marks = Marks, id = Id, owner = Owner, qlen = Len} = S) ->
    Mark = S#s.epoch + atomics:get(Marks, erlang:phash2(Who, ?MARK_SLOTS) + 1),
    atomics:add(C, ix(bytes_queued), Bytes),
    atomics:add(C, ix(accepted), 1),
    Accepted = S#s.accepted + 1,
    S1 = S#s{q = queue:in({setelement(#kino_trace_raw_event.mark, Raw, Mark), Bytes}, S#s.q), qlen = Len + 1, qbytes = S#s.qbytes + Bytes,
             accepted = Accepted},
    S2 = case Accepted =:= S#s.limit of
             true ->
                 atomics:put(C, ix(closed), 1),
                 atomics:put(C, ix(limit_reached), 1),
                 Owner ! {kino_trace, Id, limit_reached},
                 S#s.session =:= undefined orelse switch_off(S#s.session),
                 S1#s{closed = true};
             false -> S1
         end,
    Len =:= 0 andalso begin
                          atomics:add(C, ix(wakeups), 1),
                          Owner ! {kino_trace, Id, ready}
                      end,
    S2.
