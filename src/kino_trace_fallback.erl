%% @doc A pure-Erlang (OTP only) pid tracer with the session API of kino_trace's native
%% tracer (`KinoTrace.Tracer': new_session/2, session_id/1, drain/2, counters/1,
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
%%   heap is its mailbox, in-transit messages included), the tracer first closes the
%%   session's gate, then switches the attached trace session's process flags off (recording who had which: the flags of
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
%% <li>The gate: a slot of the node's trace control word held by each session's tracer
%%   (kino_trace_fallback_gate: 3 bits of its high half; sessions beyond 5 share one
%%   gate bit and take no ticket),
%%   read by the call match specs of trace_args/3 at each call. The switch-off waits for
%%   the running callers, which go on calling meanwhile (up to a time slice of calls,
%%   each copying its arguments or return value whole); a closed gate takes effect at
%%   the next call: the call sends its MFA alone (`{kino_trace_off}'), with no return
%%   action, and is counted as `dropped_queue_full'. The gate opens again with the
%%   flags; close/1 and a new tracer open it too. A user's own match specs that set the
%%   trace control word's high bits change gates.</li>
%% <li>Huge arguments: sessions set up through trace_args/3 trace calls with `arity'
%%   and match specs that send the arguments only when guards do not find them huge (a
%%   long list, a large tuple or map, a deep nesting), so the VM never builds those
%%   messages; such a call's arguments are cuts (`bytes'). The guards look at the first
%%   levels only: what they let through is bounded by the mailbox guard.</li>
%% <li>Return values: looked at by no match spec, the VM copies them whole into each
%%   `return_from' and `exception_from' message, also for a trace without returns that
%%   traces exceptions (`exception_trace' makes both; the tracer then drops the returns,
%%   `skip_returns'). A call whose arguments look huge may well return a huge term (its
%%   argument), so its return action takes a ticket of the session's slot: one between
%%   two moments the tracer's mailbox is empty (it gives it back then, while the node's
%%   memory is near its low of the last second: what it collected comes back to the
%%   node only when the caller's scheduler gets to it), so the bound holds whether the
%%   tracer runs or not (issue 36); a session beyond the 5 slots gets
%%   none. A call without a ticket sends its arguments' cut
%%   (`kino_trace_cut_noret') and no return action; the tracer counts its return as
%%   `dropped_queue_full' (with `skip_returns', its process is marked only). A function
%%   with small arguments returning a huge term in a sustained loop is bounded by the
%%   mailbox guard and its gate alone, which act only when the tracer gets to run.</li>
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
%% <li>Queue bytes: each event counts the NIF's footprint for the same payload
%%   (sizeof(kino_trace::Event), plus the encoded payload when it is over the inline
%%   buffer: EVENT_BYTES and INLINE_PAYLOAD in kino_trace_fallback_process), so byte caps and
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
%%
%% This module is the API; the tracer process is kino_trace_fallback_process, its gate
%% kino_trace_fallback_gate, its events made by kino_trace_fallback_event, the limits are read by kino_trace_fallback_limits and terms
%% cut by kino_trace_fallback_terms
%% (shipped and removed together with it: KinoTrace.Agent).
-module(kino_trace_fallback).

-export([new_session/2, tracer/1, gate/1, attach/2, attach/3, session_id/1, drain/2, counters/1, info/1, close/1,
         roundtrip/2, flags/1, process_flags/1, trace_args/3, set_loop_modules/2, loop_release/3]).

-define(ARG_POSITIONS, 8).         % the arguments a call match spec looks at (the first ones)
-define(MAX_SPINE, 16).            % the deepest nesting it looks for

-record(h, {pid, id, counters, items, depth, gate, arity = any}).

-opaque handle() :: #h{}.
-export_type([handle/0]).

%% --- API ---------------------------------------------------------------------------

%% @doc Starts a tracer process owned (and drained) by `Owner', with the NIF's limits.
%% Raises an Elixir ArgumentError (as a map) on a bad owner or limit.
-spec new_session(pid(), map()) -> handle().
new_session(Owner, Limits) ->
    is_pid(Owner) andalso node(Owner) =:= node() orelse kino_trace_fallback_limits:argument_error(<<"expected the owner to be a local pid">>),
    is_map(Limits) orelse kino_trace_fallback_limits:argument_error(<<"expected the limits to be a map">>),
    L = kino_trace_fallback_limits:read(Limits),
    {Pid, Id, Counters, Gate} = kino_trace_fallback_process:start(Owner, L),
    #h{pid = Pid, id = Id, counters = Counters, items = maps:get(max_items, L), depth = maps:get(max_depth, L),
       gate = Gate}.

%% @doc The pid to give `trace:session_create/3' as the tracer.
-spec tracer(handle()) -> pid().
tracer(#h{pid = Pid}) -> Pid.

%% @doc The session's gate and tickets (kino_trace_fallback_gate).
-spec gate(handle()) -> kino_trace_fallback_gate:gate().
gate(#h{gate = G}) -> G.

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
%% Never `recheck' (as the NIF's drain may say): one process queues and wakes the owner,
%% so no wake-up is missed.
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
    Get = fun(Key) -> atomics:get(C, kino_trace_fallback_process:ix(Key)) end,
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
%% messages and in bytes), the time its switch-offs took in all (microseconds), and how
%% often it found its gate opened by a stale write while over its bound and closed it
%% again (kino_trace_fallback_gate), and how often its mailbox was empty while it kept
%% a return ticket back because the node's memory was up (`tickets_held').
-spec info(handle()) -> #{received | guard_trips | mailbox_peak | mailbox_bytes_peak | trip_us | gate_reasserts | tickets_held := non_neg_integer()}.
info(#h{counters = C}) ->
    maps:from_list([{K, atomics:get(C, kino_trace_fallback_process:ix(K))} || K <- [received, guard_trips, mailbox_peak, mailbox_bytes_peak, trip_us, gate_reasserts, tickets_held]]).

%% @doc The loop guard, as the NIF's (`kino_trace_tracer:set_loop_modules/2'): the
%% tracer counts per process its open calls of `Modules' as their messages come; a
%% process with too many has its call flag switched off in the attached session and the
%% owner gets `{kino_trace, Id, {loop, Pid, {M, F, A}}}'. `[]': off.
-spec set_loop_modules(handle(), [module()]) -> ok.
set_loop_modules(H, Modules) when is_list(Modules) ->
    lists:all(fun is_atom/1, Modules) orelse kino_trace_fallback_limits:argument_error(<<"expected the loop guard's modules to be atoms">>),
    case call(H, {loop_modules, Modules}) of
        noproc -> ok;
        ok -> ok
    end.

%% @doc A held process counts from 0 again (`false'; the owner sets its flags again), or
%% never again (`true': it was moved to a trace without returns).
-spec loop_release(handle(), pid(), boolean()) -> ok.
loop_release(H, Pid, Exempt) when is_pid(Pid), is_boolean(Exempt) ->
    case call(H, {loop_release, Pid, Exempt}) of
        noproc -> ok;
        ok -> ok
    end.

%% @doc Closes the session: queued events are discarded (counted), the attached
%% session's process flags are switched off and the tracer process ends before this
%% returns. Idempotent.
-spec close(handle()) -> ok.
close(H) ->
    _ = call(H, close),
    ok.

%% @doc What the tracer keeps of `Term' with the caps of `Limits' and its size in the
%% NIF's bytes: `KinoTrace.Tracer.roundtrip/2'.
-spec roundtrip(term(), map()) -> {term(), non_neg_integer()}.
roundtrip(Term, Limits) ->
    is_map(Limits) orelse kino_trace_fallback_limits:argument_error(<<"expected the limits to be a map">>),
    kino_trace_fallback_terms:roundtrip(Term, kino_trace_fallback_limits:caps(kino_trace_fallback_limits:read(Limits))).

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
        [] -> [MFA, match_spec(H#h{arity = arity(MFA)}, Spec), Flags];
        _ -> [MFA, Spec, Flags]
    end;
trace_args(#h{}, _Fun, Args) -> Args.

match_spec(H, Spec) when Spec =:= true; Spec =:= [] -> match_spec(H, [{'_', [], []}]);
match_spec(H, [_ | _] = Spec) -> lists:append([clauses(H, Clause) || Clause <- Spec]);
match_spec(_, Spec) -> Spec.

%% A clause becomes a clause for the closed gate (its guards and the gate's bit set: the
%% MFA alone, no action), a clause per argument looked at (its guards and one that finds
%% that argument huge: the cut message), then the clause itself sending the arguments.
clauses(H, {Head, Guards, Body}) when is_list(Guards), is_list(Body) ->
    Off = case [M || {message, M} <- Body] of
              [_ | _] = Messages -> lists:last(Messages) =/= false;
              [] -> true
          end,
    [{Head, Guards ++ [closed(H)], [{message, Off andalso {{kino_trace_off}}}]} | open_clauses(H, {Head, Guards, Body})];
clauses(_, Clause) -> [Clause].

%% A guard true while the session's gate is closed.
closed(#h{gate = G}) -> kino_trace_fallback_gate:closed_guard(G).

open_clauses(H, {Head, Guards, Body}) ->
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
            Positions = case {Head, H#h.arity} of
                            {[_ | _], _} -> min(length(Head), ?ARG_POSITIONS);
                            {[], _} -> 0;
                            {_, Arity} when is_integer(Arity) -> min(Arity, ?ARG_POSITIONS);
                            _ -> ?ARG_POSITIONS
                        end,
            Cut = {message, {list_to_tuple([kino_trace_cut | Extra])}},
            Args = {message, {list_to_tuple([kino_trace_args, '$_' | Extra])}},
            Huge = [huge(H, I) || I <- lists:seq(1, Positions)],
            case lists:partition(fun(A) -> A =:= {return_trace} orelse A =:= {exception_trace} end, Actions) of
                {[], _} ->
                    [{Head, Guards ++ [G], Actions ++ [Cut]} || G <- Huge];
                {_, Others} ->
                    %% a return action copies the return value whole (it may well be as
                    %% huge: a function returning its argument): the call takes a ticket
                    %% of the session's slot (kino_trace_fallback_gate) for it; with none
                    %% free, the cut comes without it (`kino_trace_cut_noret': the tracer
                    %% counts the return as dropped). A clause each (a guard that raises
                    %% fails its clause alone), the ticket's guard first (it is cheap).
                    NoRet = {message, {list_to_tuple([kino_trace_cut_noret | Extra])}},
                    Tickets = kino_trace_fallback_gate:ticket_guards(H#h.gate),
                    lists:append([[{Head, Guards ++ [Free, G], Actions ++ [Take, Cut]} || {Free, Take} <- Tickets] ++
                                      [{Head, Guards ++ [G], Others ++ [NoRet]}]
                                  || G <- Huge])
            end ++ [{Head, Guards, Actions ++ [Args]}]
    end.

%% The arity a pattern `{M, F, A}' names, or any.
arity({_, _, A}) when is_integer(A) -> A;
arity(_) -> any.

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
