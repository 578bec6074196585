%% @doc A pure-Erlang (OTP only) pid tracer with the session API of kino_trace's native
%% tracer (`Kino.Trace.Tracer': new_session/2, session_id/1, drain/2, counters/1,
%% close/1), for a node where the NIF cannot be loaded. It returns the same raw events:
%% `{Tag, Pid | Port | undefined, MonotonicNs, Scheduler, M | undefined, F | undefined,
%% Arity, First, Second, DropMark}', with terms cut as the NIF cuts them
%% (kino_trace_fallback_terms), and the same counters.
%%
%% ```
%% H = kino_trace_fallback:new_session(self(), #{limit => 100}),
%% S = trace:session_create(my_trace, kino_trace_fallback:tracer(H), []),
%% ok = kino_trace_fallback:attach(H, S),          % before any process flag is set
%% trace:process(S, Pid, true, kino_trace_fallback:flags([call, scheduler_id])),
%% %% the owner gets {kino_trace, Id, ready}; then
%% {Events, More} = kino_trace_fallback:drain(H, 500).
%% '''
%%
%% Invariants and differences from the NIF:
%% <ul>
%% <li>Every trace message the tracer receives is accepted or dropped with one reason,
%%   and `accepted = delivered + queued + discarded' (discarded: freed by close/1 or
%%   when the owner exits). `info/1' tells how many it received: received = accepted +
%%   all `dropped_*'. The counters live in an `atomics' array, readable without asking
%%   the tracer process (also after it ended).</li>
%% <li>Limits are read and checked as the NIF reads them (same keys, defaults, bounds
%%   and ArgumentError messages); two more keys bound the tracer's mailbox: `mailbox'
%%   (messages, default 10000) and `mailbox_bytes' (bytes, default 64 MB).</li>
%% <li>Mailbox guard: the VM copies every trace message whole into the tracer's
%%   mailbox (off its heap), and no cap applies before the tracer sees it. When the
%%   mailbox holds more than `mailbox' messages or `mailbox_bytes' bytes (it looks
%%   every 16 messages and at least every millisecond while messages come, with
%%   `process_info(self(), [memory, total_heap_size])': the process's memory less its
%%   heap is its mailbox, in-transit messages included), the tracer switches the
%%   attached trace session's process flags off (recording who had which: the flags of
%%   every process and port, and those given to new ones), counts every message still
%%   in its mailbox as `dropped_queue_full', and switches the recorded flags back on
%%   once its mailbox is empty (after a garbage collection that frees the dropped
%%   messages; it also collects once its heap grew by half of `mailbox_bytes', as
%%   messages it has handled stay until then). Processes spawned meanwhile by traced
%%   ones are not traced (their parent's set_on_spawn was off). Without attach/2 it can
%%   only drop until the mailbox is empty. Recording the flags asks each process
%%   (`trace:info/3'): ~10 us per process, longer for a busy one, during which the
%%   mailbox goes on growing; so the bound is soft: the flood test (2 cores shared with
%%   other work) sees up to ~4 times `mailbox' with 10 000 at times. A single message
%%   can exceed the bound: the guard sees it only once the VM has built it.</li>
%% <li>Huge arguments: sessions set up through trace_args/3 trace calls with `arity'
%%   and match specs that send the arguments only when guards do not find them huge (a
%%   long list, a large tuple or map, a deep nesting), so the VM never builds those
%%   messages; such a call's arguments are cuts (`bytes'). The guards look at the first
%%   levels only: what they let through is bounded by the mailbox guard.</li>
%% <li>Rate limit: the NIF's token bucket, run on each event's own timestamp; an event
%%   over the rate is dropped (`dropped_rate') and tracing goes on.</li>
%% <li>Drop marks: `Epoch + Slot', Slot counting the drops of the processes hashed to
%%   the same of 1024 slots (as the NIF does), Epoch counting the guard's switch-offs
%%   (every process may have lost events then). Both only grow, so a process's mark
%%   changes whenever it may have lost events. Unlike the NIF, every drop is marked:
%%   the VM has always produced the event (and, for a call, pushed the frame its return
%%   will pop).</li>
%% <li>Timestamps: from the message when the flags ask for `monotonic_timestamp' or
%%   `strict_monotonic_timestamp' (flags/1 adds it), exact like the NIF's; otherwise
%%   the time the tracer receives the message, which lags by the mailbox's wait.
%%   Scheduler: from the `scheduler_id' flag (the plan always sets it), else 0. A
%%   call message with one element after its MFA is read as the scheduler id when it
%%   is an integer, else as the match spec's message (kino_trace's match specs never
%%   send an integer).</li>
%% <li>Queue bytes: each event counts the NIF's footprint for the same payload (208
%%   bytes, plus the encoded payload when over 112 bytes), so byte caps and
%%   `bytes_queued' match the NIF's. The queued Erlang terms take a different amount
%%   of heap than that count (tuples and list cells are larger, immediates smaller);
%%   the flood test bounds the tracer's memory from the caps.</li>
%% <li>The tracer ends when its owner exits or on close/1: the queue is discarded
%%   (counted), the attached session's process flags are switched off, what is still in
%%   its mailbox is counted as `dropped_closed'. On reaching `limit', it closes for new
%%   events (as the NIF) and switches the flags off, but keeps its queue for drain/2.
%%   A trace message still on its way when the process ends is not counted.</li>
%% <li>The tracer process runs at high priority with an off-heap mailbox, so it keeps
%%   up with its producers where it can; it is monitored by nobody and links to
%%   nothing.</li>
%% </ul>
-module(kino_trace_fallback).

-export([new_session/2, tracer/1, attach/2, attach/3, session_id/1, drain/2, counters/1, info/1, close/1,
         roundtrip/2, flags/1, process_flags/1, trace_args/3]).

-define(TICK, 16).                 % messages between two looks at the mailbox
-define(EVENT_BYTES, 208).         % sizeof(kino_trace::Event)
-define(INLINE_PAYLOAD, 112).      % its inline payload buffer
-define(MARK_SLOTS, 1024).
-define(U64, 16#FFFFFFFFFFFFFFFF).
-define(CHECK_NS, 1000000).        % nanoseconds between two looks at the mailbox, at most
-define(MAILBOX_BYTES, 64 bsl 20). % default bound of the mailbox, in bytes
-define(ARG_POSITIONS, 8).         % the arguments a call match spec looks at (the first ones)
-define(MAX_SPINE, 16).            % the deepest nesting it looks for
-define(KEYS, [accepted, delivered, discarded, bytes_queued, dropped_closed, dropped_rate,
               dropped_queue_full, dropped_max_events, dropped_no_memory, wakeups, closed,
               limit_reached, received, guard_trips, mailbox_peak, trip_us, mailbox_bytes_peak]).

-record(h, {pid, id, counters, items, depth}).
-record(s, {owner, id, counters, marks, caps, skip_returns, limit, interval, burst, tat = 0, start,
            queue_events, queue_bytes, mailbox, mailbox_bytes, checked, heap_after_gc = 0, accepted = 0, q = queue:new(), qlen = 0, qbytes = 0, epoch = 0,
            closed = false, session, suspended = false, tick = ?TICK, restore = snapshot}).

-opaque handle() :: #h{}.
-export_type([handle/0]).


ix(accepted) -> 1; ix(delivered) -> 2; ix(discarded) -> 3; ix(bytes_queued) -> 4;
ix(dropped_closed) -> 5; ix(dropped_rate) -> 6; ix(dropped_queue_full) -> 7;
ix(dropped_max_events) -> 8; ix(dropped_no_memory) -> 9; ix(wakeups) -> 10; ix(closed) -> 11;
ix(limit_reached) -> 12; ix(received) -> 13; ix(guard_trips) -> 14; ix(mailbox_peak) -> 15; ix(trip_us) -> 16;
ix(mailbox_bytes_peak) -> 17.

%% --- API ---------------------------------------------------------------------------

%% @doc Starts a tracer process owned (and drained) by `Owner', with the NIF's limits.
%% Raises an Elixir ArgumentError (as a map) on a bad owner or limit.
-spec new_session(pid(), map()) -> handle().
new_session(Owner, Limits) ->
    is_pid(Owner) andalso node(Owner) =:= node() orelse argument_error(<<"expected the owner to be a local pid">>),
    is_map(Limits) orelse argument_error(<<"expected the limits to be a map">>),
    L = read_limits(Limits),
    Id = erlang:unique_integer([positive, monotonic]),
    Counters = atomics:new(length(?KEYS), [{signed, false}]),
    {Interval, Burst} = rate(maps:get(rate, L)),
    S = #s{owner = Owner, id = Id, counters = Counters, marks = atomics:new(?MARK_SLOTS, [{signed, false}]),
           caps = kino_trace_fallback_terms:caps(maps:get(max_depth, L), maps:get(max_items, L),
                                                 maps:get(max_binary, L), maps:get(max_bytes, L)),
           skip_returns = maps:get(skip_returns, L), limit = maps:get(limit, L), interval = Interval,
           burst = Burst, start = erlang:monotonic_time(nanosecond), queue_events = maps:get(events, L),
           queue_bytes = maps:get(bytes, L), mailbox = maps:get(mailbox, L),
           mailbox_bytes = maps:get(mailbox_bytes, L), checked = erlang:monotonic_time(nanosecond) - ?CHECK_NS},
    Pid = spawn_opt(fun() -> init(S) end, [{message_queue_data, off_heap}, {priority, high}]),
    #h{pid = Pid, id = Id, counters = Counters, items = maps:get(max_items, L), depth = maps:get(max_depth, L)}.

%% @doc The pid to give `trace:session_create/3' as the tracer.
-spec tracer(handle()) -> pid().
tracer(#h{pid = Pid}) -> Pid.

%% @doc Gives the tracer its trace session (a handle from `trace:session_create/3'; it
%% keeps only the weak part), so it can switch the session's process flags off and on.
%% The tracer untraces itself in it: call this before setting any process flag.
-spec attach(handle(), term()) -> ok.
attach(H, Session) -> attach(H, Session, snapshot).

%% @doc As attach/2, with how the guard switches tracing back on: `snapshot' (it records
%% every process's flags when it switches off, and sets them again), or `owner' (it
%% switches off at once, without recording, and sends the owner `{kino_trace, Id,
%% restore}' when the mailbox is empty: the owner, which set the flags, sets them again).
%% Recording asks every process of the node, which takes long on a node of many
%% processes while the mailbox goes on growing; `owner' costs one call.
-spec attach(handle(), term(), snapshot | owner) -> ok.
attach(H, {Strong, Weak}, Restore) when is_reference(Strong) -> attach(H, Weak, Restore);
attach(H, Weak, Restore) when Restore =:= snapshot; Restore =:= owner ->
    case call(H, {attach, Weak, Restore}) of
        noproc -> ok;
        ok -> ok
    end.

%% @doc The session's id, as in its `{kino_trace, Id, _}' messages.
-spec session_id(handle()) -> pos_integer().
session_id(#h{id = Id}) -> Id.

%% @doc Takes up to `Max' (1..10000) events, oldest first, and whether more are queued.
-spec drain(handle(), pos_integer()) -> {[tuple()], boolean()}.
drain(H, Max) when is_integer(Max), Max >= 1, Max =< 10000 ->
    case call(H, {drain, Max}) of
        noproc -> {[], false};
        Reply -> Reply
    end;
drain(_, _) -> error(badarg).

%% @doc The NIF's counters, with exactly its keys.
-spec counters(handle()) -> map().
counters(#h{id = Id, counters = C}) ->
    Get = fun(Key) -> atomics:get(C, ix(Key)) end,
    Delivered = Get(delivered),   % the consumer's side first: accepted never lags it
    Discarded = Get(discarded),
    Accepted = Get(accepted),
    Drops = maps:from_list([{K, Get(K)} || K <- [bytes_queued, dropped_closed, dropped_rate, dropped_queue_full,
                                                    dropped_max_events, dropped_no_memory, wakeups]]),
    Drops#{id => Id, accepted => Accepted, delivered => Delivered, discarded => Discarded,
           queued => Accepted - Delivered - Discarded, closed => Get(closed) =:= 1,
           limit_reached => Get(limit_reached) =:= 1}.

%% @doc The fallback's own figures: trace messages received (= accepted + all drops),
%% how often the mailbox guard switched tracing off, the longest mailbox it saw (in
%% messages and in bytes), and the time its switch-offs took in all (microseconds).
-spec info(handle()) -> #{received | guard_trips | mailbox_peak | mailbox_bytes_peak | trip_us := non_neg_integer()}.
info(#h{counters = C}) ->
    maps:from_list([{K, atomics:get(C, ix(K))} || K <- [received, guard_trips, mailbox_peak, mailbox_bytes_peak, trip_us]]).

%% @doc Closes the session: queued events are discarded (counted), the attached
%% session's process flags are switched off and the tracer process ends before this
%% returns. Idempotent.
-spec close(handle()) -> ok.
close(H) ->
    _ = call(H, close),
    ok.

%% @doc What the tracer keeps of `Term' with the caps of `Limits' and its size in the
%% NIF's bytes: `Kino.Trace.Tracer.roundtrip/2'.
-spec roundtrip(term(), map()) -> {term(), non_neg_integer()}.
roundtrip(Term, Limits) ->
    is_map(Limits) orelse argument_error(<<"expected the limits to be a map">>),
    L = read_limits(Limits),
    kino_trace_fallback_terms:roundtrip(Term, kino_trace_fallback_terms:caps(
        maps:get(max_depth, L), maps:get(max_items, L), maps:get(max_binary, L), maps:get(max_bytes, L))).

%% @doc Process flags for a session traced by this tracer: `Flags' and
%% `monotonic_timestamp' (unless a timestamp flag is there), so events carry the time
%% the VM made them rather than the time the tracer received them.
-spec flags([atom()]) -> [atom()].
flags(Flags) ->
    Stamps = [timestamp, cpu_timestamp, monotonic_timestamp, strict_monotonic_timestamp],
    case [F || F <- Flags, lists:member(F, Stamps)] of
        [] -> Flags ++ [monotonic_timestamp];
        _ -> Flags
    end.

%% @doc What to give `trace:Fun(Session, Args...)' in a session traced by this tracer,
%% for `Args' as the native tracer's session takes them: process flags with `call' get
%% `arity' (and a timestamp, as flags/1), and every call match spec (also `true') gets
%% clauses that send the arguments in the match spec's message, unless they look huge.
%%
%% The VM copies a call trace message whole, before any cap applies, so a call whose
%% arguments flatten to gigabytes (a long list, a term shared many times) would fill the
%% node's memory. With `arity' the message holds the arity alone, and the match spec
%% decides what else it holds: the argument list (`{kino_trace_args, Args[, Message]}')
%% or, when a guard finds one of the first ?ARG_POSITIONS arguments huge, nothing of them
%% (`{kino_trace_cut[, Message]}'), and the event's arguments are then cuts (`bytes').
%% Huge here: a list of more than `max(4 * max_items, 200)' elements, a tuple or map of
%% more, or lists or tuples nested deeper than `min(max_depth, ?MAX_SPINE) + 2' along
%% their first elements. The guards see only that much; the mailbox guard bounds the rest.
-spec trace_args(handle(), atom(), list()) -> list().
trace_args(#h{}, process, [Who, true, Flags]) -> [Who, true, process_flags(Flags)];
trace_args(#h{} = H, function, [MFA, Spec, Flags]) when is_list(Flags) ->
    Counters = [call_count, call_time, call_memory],
    case [F || F <- Flags, lists:member(F, Counters)] of
        [] -> [MFA, match_spec(H, Spec), Flags];
        _ -> [MFA, Spec, Flags]
    end;
trace_args(#h{}, _Fun, Args) -> Args.

match_spec(H, Spec) when Spec =:= true; Spec =:= [] -> match_spec(H, [{'_', [], []}]);
match_spec(H, [_ | _] = Spec) -> lists:append([clauses(H, Clause) || Clause <- Spec]);
match_spec(_, Spec) -> Spec.

%% A clause becomes a clause per argument looked at (its guards and one that finds that
%% argument huge: the cut message), then the clause itself sending the arguments.
clauses(H, {Head, Guards, Body}) when is_list(Guards), is_list(Body) ->
    IsMessage = fun(Action) -> is_tuple(Action) andalso tuple_size(Action) =:= 2 andalso element(1, Action) =:= message end,
    {Messages, Actions} = lists:partition(IsMessage, Body),
    Extra = case Messages of
                [] -> [];
                _ -> case lists:last(Messages) of
                         {message, true} -> [];
                         {message, false} -> false;
                         {message, X} -> [X]
                     end
            end,
    case Extra of
        false ->
            %% the clause sends no message: the VM copies nothing
            [{Head, Guards, Body}];
        _ ->
            Positions = case Head of
                            [_ | _] -> min(length(Head), ?ARG_POSITIONS);
                            [] -> 0;
                            _ -> ?ARG_POSITIONS
                        end,
            Cut = {message, {list_to_tuple([kino_trace_cut | Extra])}},
            Args = {message, {list_to_tuple([kino_trace_args, '$_' | Extra])}},
            [{Head, Guards ++ [huge(H, I)], Actions ++ [Cut]} || I <- lists:seq(1, Positions)] ++
                [{Head, Guards, Actions ++ [Args]}]
    end;
clauses(_, Clause) -> [Clause].

%% A guard true when the call has an I-th argument and it looks huge. `length/1' comes
%% last: it raises on an improper list (the clause then fails: not found huge).
huge(#h{items = Items, depth = Depth}, I) ->
    Limit = max(4 * Items, 200),
    Spine = min(Depth, ?MAX_SPINE) + 2,
    X = nth(I, '$_'),
    Wide = {'orelse', {'andalso', {is_tuple, X}, {'>', {tuple_size, X}, Limit}},
                      {'andalso', {is_map, X}, {'>', {map_size, X}, Limit}}},
    Deep = {'orelse', spine(X, Spine, list), spine(X, Spine, tuple)},
    Long = {'andalso', {is_list, X}, {'>', {length, X}, Limit}},
    {'andalso', {'>=', {length, '$_'}, I}, {'orelse', Wide, {'orelse', Deep, Long}}}.

nth(1, L) -> {hd, L};
nth(I, L) -> nth(I - 1, {tl, L}).

%% X is a non-empty list (tuple) whose first element is one, N levels down.
spine(X, 0, list) -> {'andalso', {is_list, X}, {'=/=', X, []}};
spine(X, N, list) -> {'andalso', spine(X, 0, list), spine({hd, X}, N - 1, list)};
spine(X, 0, tuple) -> {'andalso', {is_tuple, X}, {'>', {tuple_size, X}, 0}};
spine(X, N, tuple) -> {'andalso', spine(X, 0, tuple), spine({element, 1, X}, N - 1, tuple)}.

%% @doc The process flags trace_args/3 sets for `Flags': flags/1's, and `arity' with
%% `call' (the session's call match specs must then come from trace_args/3).
-spec process_flags([atom()]) -> [atom()].
process_flags(Flags) ->
    case lists:member(call, Flags) andalso not lists:member(arity, Flags) of
        true -> flags(Flags ++ [arity]);
        false -> flags(Flags)
    end.

call(#h{pid = Pid}, Request) ->
    Ref = erlang:monitor(process, Pid),
    Pid ! {'$kino_trace_fallback', self(), Ref, Request},
    receive
        {Ref, Reply} when Request =:= close ->
            receive {'DOWN', Ref, _, _, _} -> Reply end;
        {Ref, Reply} ->
            erlang:demonitor(Ref, [flush]),
            Reply;
        {'DOWN', Ref, _, _, _} -> noproc
    end.

%% --- limits (as c_src/nif/session_nifs.cpp reads them) -----------------------------

argument_error(Message) ->
    error(#{'__struct__' => 'Elixir.ArgumentError', '__exception__' => true, message => Message}).

invalid(Option, Expected) ->
    argument_error(iolist_to_binary(["invalid value for :", Option, ": expected ", Expected])).

read_limits(M) ->
    Get = fun(Key, Default, Read) ->
                  case maps:find(Key, M) of
                      {ok, V} -> Read(V);
                      error -> Default
                  end
          end,
    Limit = Get(limit, 0, fun read_limit/1),
    Rate = Get(rate, none, fun read_rate/1),
    {Events, Bytes} = Get(queue, {100000, 64 bsl 20}, fun read_queue/1),
    Cap = fun(Key, Default, Max) -> Get(Key, Default, fun(V) -> read_cap(V, atom_to_list(Key), Max) end) end,
    #{limit => Limit, rate => Rate, events => Events, bytes => Bytes,
      max_depth => Cap(max_depth, 10, 100), max_items => Cap(max_items, 50, 16#FFFFFFFF),
      max_binary => Cap(max_binary, 512, 16#FFFFFFFF), max_bytes => Cap(max_bytes, 16384, 16#FFFFFFFF),
      skip_returns => Get(skip_returns, false, fun read_skip_returns/1),
      mailbox => Get(mailbox, 10000, fun(V) -> read_positive(V, "mailbox") end),
      mailbox_bytes => Get(mailbox_bytes, ?MAILBOX_BYTES, fun(V) -> read_positive(V, "mailbox_bytes") end)}.

count(V, Max) when is_integer(V), V >= 0, V =< Max -> {ok, V};
count(V, _) when is_integer(V), V > 0 -> too_large;
count(_, _) -> not_count.

read_limit(nil) -> 0;
read_limit(V) ->
    case count(V, ?U64) of
        {ok, N} -> N;
        too_large -> invalid("limit", ["at most ", integer_to_list(?U64)]);
        not_count -> invalid("limit", "nil or a non-negative integer")
    end.

read_rate(nil) -> none;
read_rate({Count, Period}) ->
    Shape = "nil or {count, period_ms} with non-negative integers",
    C = case count(Count, 1000000000) of
            {ok, N} -> N;
            too_large -> invalid("rate", "a count of at most 1000000000");
            not_count -> invalid("rate", Shape)
        end,
    case count(Period, 86400000) of
        {ok, P} -> {C, P * 1000000};
        too_large -> invalid("rate", "a period of at most 86400000 ms");
        not_count -> invalid("rate", Shape)
    end;
read_rate(_) -> invalid("rate", "nil or {count, period_ms} with non-negative integers").

read_queue(V) -> read_queue(V, {100000, 64 bsl 20}, []).

read_queue([{Key, V} | T], {E, B}, Seen) when Key =:= events; Key =:= bytes ->
    N = case count(V, ?U64) of
            {ok, X} -> X;
            too_large -> invalid("queue", [":", atom_to_list(Key), " of at most ", integer_to_list(?U64)]);
            not_count -> queue_shape()
        end,
    Acc = case {lists:member(Key, Seen), Key} of
              {true, _} -> {E, B};          % the first of a repeated key counts
              {false, events} -> {N, B};
              {false, bytes} -> {E, N}
          end,
    read_queue(T, Acc, [Key | Seen]);
read_queue([], Acc, _) -> Acc;
read_queue(_, _, _) -> queue_shape().

queue_shape() -> invalid("queue", "a keyword list with :events and/or :bytes as non-negative integers").

read_cap(V, Option, Max) ->
    case count(V, Max) of
        {ok, N} -> N;
        too_large -> invalid(Option, ["at most ", integer_to_list(Max)]);
        not_count -> invalid(Option, "a non-negative integer")
    end.

read_skip_returns(V) when is_boolean(V) -> V;
read_skip_returns(_) -> invalid("skip_returns", "a boolean").

read_positive(V, _) when is_integer(V), V > 0 -> V;
read_positive(_, Option) -> invalid(Option, "a positive integer").

%% The NIF's token bucket (c_src/core/rate_limiter.hpp): `interval' ns per token,
%% a burst of `count' tokens.
rate({Count, PeriodNs}) when Count > 0, PeriodNs > 0 ->
    Interval = max(1, PeriodNs div Count),
    {Interval, Interval * Count};
rate(_) -> {0, 0}.

%% --- the tracer process ----------------------------------------------------------

init(#s{owner = Owner} = S) ->
    erlang:monitor(process, Owner),
    loop(S).

%% The guard looks at the mailbox before a message is taken from it: a message it then
%% drops is never held while the process runs (a garbage collection would copy it).
loop(#s{suspended = false} = S0) ->
    case guard(S0) of
        #s{suspended = false} = S -> receive Msg -> handle(Msg, S) end;
        S -> loop(S)
    end;
loop(S) ->
    receive Msg -> handle(Msg, S)
    after 0 -> loop(resume(S))
    end.

handle(Msg, S) when element(1, Msg) =:= trace; element(1, Msg) =:= trace_ts ->
    loop(offer(Msg, S));
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
request(close, S) ->
    shut(S),
    {stop, ok}.

%% Closes for good: discards the queue, switches tracing off, counts what is left in
%% the mailbox as dropped_closed. The process then ends.
shut(#s{counters = C, qlen = Len, qbytes = Bytes, session = Session}) ->
    atomics:put(C, ix(closed), 1),
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

suspend(#s{session = Session, counters = C, epoch = Epoch} = S) ->
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
resume(#s{suspended = owner, closed = Closed, owner = Owner, id = Id} = S) ->
    S1 = gc(S),
    Closed orelse (Owner ! {kino_trace, Id, restore}),
    S1#s{suspended = false};
resume(#s{suspended = Snapshot, session = Session, closed = Closed} = S) ->
    S1 = gc(S),
    Closed orelse [quiet(fun() -> trace:process(Session, Item, true, Flags) end) || {Item, Flags} <- Snapshot],
    S1#s{suspended = false}.

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
            {Raw, Size} = event(Msg, Who, Last, Time, S#s.caps),
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
    S1 = S#s{q = queue:in({setelement(10, Raw, Mark), Bytes}, S#s.q), qlen = Len + 1, qbytes = S#s.qbytes + Bytes,
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

%% The raw event of a trace message: `{Tag, Who, Time, Scheduler, M, F, Arity, First,
%% Second, 0}' and the payload's size in the NIF's format. Data elements: those after
%% the tag, then the scheduler id when the flags ask for it (the last integer; a call
%% has one or two data elements: its MFA and the match spec's message).
event(Msg, Who, Last, Time, Caps) ->
    Tag = element(3, Msg),
    Extra = Last - 3,
    {N, Sched} = case data_count(Tag) of
                     call when Extra =:= 3 -> {2, element(Last, Msg)};
                     call when Extra =:= 2 -> sched_or_data(element(Last, Msg), 1, 2);
                     call -> {Extra, 0};
                     other when Extra >= 2 -> sched_or_data(element(Last, Msg), Extra - 1, Extra);
                     other -> {Extra, 0};
                     K when Extra =:= K + 1 -> sched_or_data(element(Last, Msg), K, Extra);
                     _ -> {Extra, 0}
                 end,
    Pid = if
              is_pid(Who), node(Who) =:= node() -> Who;
              is_port(Who), node(Who) =:= node() -> Who;
              true -> undefined
          end,
    Data = fun(I) when I =< N -> {ok, element(3 + I, Msg)}; (_) -> none end,
    Copy = fun({ok, T}, U) -> kino_trace_fallback_terms:copy(T, Caps, U); (none, U) -> {undefined, U + 9} end,
    {Data1, Data2} = call_data(Tag, Data(1), Data(2)),
    {{M, F, A}, First, U1} =
        case {Data1, data_count(Tag)} of
            {{ok, {M0, F0, Args}}, call} when is_list(Args) ->
                {Copied, U0} = kino_trace_fallback_terms:copy_args(Args, Caps, 0),
                {{M0, F0, length(Args)}, Copied, U0};
            {{ok, {M0, F0, {cut, A0}}}, call} ->
                {Cuts, U0} = kino_trace_fallback_terms:cut_args(A0, 0),
                {{M0, F0, A0}, Cuts, U0};
            {{ok, {M0, F0, A0}}, Kind} when Kind =:= call; Tag =:= return_from; Tag =:= exception_from; Tag =:= return_to ->
                {{M0, F0, A0}, undefined, 9};
            {D1, _} ->
                {Copied, U0} = Copy(D1, 0),
                {{undefined, undefined, 0}, Copied, U0}
        end,
    {Second, U2} = Copy(Data2, U1),
    {{Tag, Pid, Time, Sched, M, F, A, First, Second, 0}, U2}.

%% A call traced with `arity' and a match spec of trace_args/3: its MFA with the
%% arguments its message carries (or `{cut, Arity}'), and the match spec's own message.
call_data(call, {ok, {M, F, A}}, {ok, Message}) when is_integer(A), is_tuple(Message), tuple_size(Message) >= 1 ->
    case Message of
        {kino_trace_args, Args} when is_list(Args) -> {{ok, {M, F, Args}}, none};
        {kino_trace_args, Args, Extra} when is_list(Args) -> {{ok, {M, F, Args}}, {ok, Extra}};
        {kino_trace_cut} -> {{ok, {M, F, {cut, A}}}, none};
        {kino_trace_cut, Extra} -> {{ok, {M, F, {cut, A}}}, {ok, Extra}};
        _ -> {{ok, {M, F, A}}, {ok, Message}}
    end;
call_data(_, Data1, Data2) -> {Data1, Data2}.

sched_or_data(Sched, N, _) when is_integer(Sched), Sched >= 0 -> {N, Sched};
sched_or_data(_, _, Extra) -> {Extra, 0}.

data_count(call) -> call;
data_count(T) when T =:= return_from; T =:= exception_from; T =:= send; T =:= send_to_non_existing_process;
                   T =:= spawn; T =:= spawned -> 2;
data_count(T) when T =:= return_to; T =:= 'receive'; T =:= exit; T =:= link; T =:= unlink;
                   T =:= getting_linked; T =:= getting_unlinked; T =:= register; T =:= unregister -> 1;
data_count(_) -> other.
