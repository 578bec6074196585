%% @doc The gate and the return tickets of a kino_trace_fallback session: bits of the
%% high half of the node's trace control word, read (and, for a ticket, set) by the call
%% match specs of kino_trace_fallback:trace_args/3 at each call.
%%
%% The gate: while its bit is set, those match specs send `{kino_trace_off}' (the call's
%% MFA alone, no return action), so the VM copies neither arguments nor return values.
%% The mailbox guard (kino_trace_fallback_process) closes it the moment it trips: a
%% `:trace' switch-off waits for the running processes, which go on calling meanwhile
%% (one time slice: thousands of calls), while a match spec reads the word at each call.
%%
%% The tickets: a call whose arguments look huge (the match spec's guards find them so)
%% may well return a huge term (a function returning its argument, or a part of it), and
%% the VM copies the return value whole into its `return_from' or `exception_from'
%% message, which no match spec can look at. A sustained loop of such calls made GBs of
%% them while the tracer process did not run (issue 36). So such a call asks for its
%% return action only with a ticket: one of ?TICKETS bits of its session's slot, free,
%% which it sets; with none free, it sends its arguments' cut with no return action
%% (`kino_trace_cut_noret') and the tracer counts its return as dropped. The tracer
%% clears them whenever its mailbox is empty: between two such moments at most ?TICKETS
%% such return frames are pushed, whatever the callers do and whether the tracer runs or
%% not. Calls whose arguments do not look huge take no ticket.
%%
%% Taken in and collected, such a message is not yet memory the node has back: the
%% scheduler that allocated it (the caller's) frees it when it next gets to, which it
%% does not while the caller runs on it, and a caller whose every call copies its
%% return value runs long time slices (an eager loop put +991 MiB in flight, issue 36).
%% So the tracer gives tickets back only while the node's memory is within an eighth of
%% `mailbox_bytes' of the lowest it saw in the last second (give_back/3);
%% otherwise the calls go on without return actions (their returns counted as dropped),
%% the caller's slices end, and the memory comes back.
%%
%% A slot (a gate bit and ?TICKETS ticket bits) is a session's alone: its tracer process
%% holds it by a registered name (claim/1), freed when the process ends; a tracer that
%% finds every one of the ?SLOTS taken gets the shared gate (bit ?SHARED_BIT) and no
%% ticket (its calls with huge arguments never get a return action).
%%
%% The word has no compare-and-swap: a match spec's ticket is a read and a write of the
%% whole word, which writes back the bits it read. A gate closed (by any session) between
%% the two is opened again, a stale write: so a tracer over its bound looks at its gate
%% at every message and closes it again (reassert/1). Two callers taking the same ticket
%% at the same instant on two schedulers push one frame more (the next empty mailbox
%% clears it).
-module(kino_trace_fallback_gate).

-export([claim/1, close/1, open/1, give_back/3, reassert/1, closed_guard/1, ticket_guards/1, gated/1, noret/1,
         tickets/1]).

-define(SLOTS, 5).                 % slots of 1 + ?TICKETS bits, from the word's top down
-define(TICKETS, 1).               % return frames of calls with huge arguments per window
-define(SHARED_BIT, 16).           % the gate of the sessions without a slot
-define(LOW_MS, 1000).             % how long the node's lowest memory seen is kept (give_back/3)
-define(HOLD_MS, 1).               % how long a ticket held back waits before another look

-type gate() :: {slot, 0..31} | shared.
-type low() :: none | {Bytes :: non_neg_integer(), SinceMs :: integer(), HeldAtMs :: integer() | none}.
-export_type([gate/0, low/0]).

%% @doc Takes a free slot for the tracer process `Pid' (held by a registered name until
%% it ends), or the shared gate when none is free. Its gate starts open, its tickets free
%% (a tracer that was killed with its gate closed left it so).
-spec claim(pid()) -> gate().
claim(Pid) -> claim(Pid, 0).

claim(_Pid, ?SLOTS) -> shared;
claim(Pid, N) ->
    Name = name(N),
    case whereis(Name) =:= undefined andalso quiet_register(Name, Pid) of
        true ->
            G = {slot, 32 - (1 + ?TICKETS) * (N + 1)},
            open(G),
            G;
        false -> claim(Pid, N + 1)
    end.

name(0) -> kino_trace_fallback_slot_0;
name(1) -> kino_trace_fallback_slot_1;
name(2) -> kino_trace_fallback_slot_2;
name(3) -> kino_trace_fallback_slot_3;
name(4) -> kino_trace_fallback_slot_4.

quiet_register(Name, Pid) ->
    try register(Name, Pid)
    catch error:badarg -> false
    end.

%% @doc The return frames of calls with huge arguments the session of `Gate' may push
%% between two empty mailboxes of its tracer.
-spec tickets(gate()) -> non_neg_integer().
tickets({slot, _}) -> ?TICKETS;
tickets(shared) -> 0.

closed_bit({slot, Off}) -> 1 bsl Off;
closed_bit(shared) -> 1 bsl ?SHARED_BIT.

ticket_bits({slot, Off}) -> [1 bsl (Off + I) || I <- lists:seq(1, ?TICKETS)];
ticket_bits(shared) -> [].

all_bits(G) -> lists:foldl(fun(B, Acc) -> Acc bor B end, closed_bit(G), ticket_bits(G)).

%% @doc Closes the gate `G'.
-spec close(gate()) -> ok.
close(G) -> set(closed_bit(G), 0).

%% @doc Opens the gate `G', with every ticket free.
-spec open(gate()) -> ok.
open(G) -> set(0, all_bits(G)).

%% While the session is not over its bound: opens a gate a stale write closed and,
%% with `Tickets', frees the tickets taken. Writes the word only when a bit is set. (The
%% shared gate is left as it is: another session may be over its bound.)
-spec refill(gate(), boolean()) -> ok.
refill(shared, _Tickets) -> ok;
refill(G, true) ->
    case erlang:system_info(trace_control_word) band all_bits(G) of
        0 -> ok;
        _ -> open(G)
    end;
refill(G, false) ->
    Bit = closed_bit(G),
    case erlang:system_info(trace_control_word) band Bit of
        0 -> ok;
        _ -> set(0, Bit)
    end.

%% Whether a ticket of `G' is taken.
-spec taken(gate()) -> boolean().
taken(G) ->
    lists:any(fun(B) -> erlang:system_info(trace_control_word) band B =/= 0 end, ticket_bits(G)).

%% @doc The tracer's mailbox is empty and its session is not over its bound: opens a gate
%% a stale write closed and gives the tickets taken back, while the node's memory is
%% within `Slack' bytes of the lowest seen here in the last ?LOW_MS. Holding a ticket
%% back, it looks again ?HOLD_MS later at the soonest (a look costs tens of
%% microseconds; messages may come faster). Returns how long the tracer may wait for a
%% message before it calls this again (`infinity' unless it holds a ticket back), and
%% `Low' for the next call (`none' at first).
-spec give_back(gate(), low(), non_neg_integer()) -> {timeout(), low()}.
give_back(G, Low, Slack) ->
    case {taken(G), Low} of
        {false, _} -> refill(G, false), {infinity, Low};
        {true, {_, _, HeldAt}} when is_integer(HeldAt) ->
            case erlang:monotonic_time(millisecond) - HeldAt of
                Ago when Ago < ?HOLD_MS -> {?HOLD_MS - Ago, Low};
                _ -> look(G, Low, Slack)
            end;
        {true, _} -> look(G, Low, Slack)
    end.

look(G, Low0, Slack) ->
    Memory = erlang:memory(total),
    Now = erlang:monotonic_time(millisecond),
    {L, Since} = case Low0 of
                     {L0, T, _} when Now - T < ?LOW_MS -> {min(L0, Memory), T};
                     _ -> {Memory, Now}
                 end,
    Free = Memory =< L + Slack,
    refill(G, Free),
    case Free of
        true -> {infinity, {L, Since, none}};
        false -> {?HOLD_MS, {L, Since, Now}}
    end.

%% @doc While the session is over its bound: closes its gate again if a stale write
%% opened it. Whether it had to.
-spec reassert(gate()) -> boolean().
reassert(G) ->
    Bit = closed_bit(G),
    case erlang:system_info(trace_control_word) band Bit of
        0 -> close(G), true;
        _ -> false
    end.

%% Sets the bits `Set' and clears the bits `Clear' of the word. No compare-and-swap,
%% only an exchange: a change made by another session or a match spec between the read
%% and the write is written again (a few tries).
set(Set, Clear) ->
    F = fun(W) -> (W band (bnot Clear)) bor Set end,
    tcw(F, erlang:system_info(trace_control_word), 8).

tcw(F, Old, Tries) ->
    case erlang:system_flag(trace_control_word, F(Old)) of
        Old -> ok;
        Other when Tries > 0 -> tcw(F, Other, Tries - 1);
        _ -> ok
    end.

%% @doc A match spec guard true while the gate `G' is closed.
-spec closed_guard(gate()) -> tuple().
closed_guard(G) -> {'=/=', {'band', {get_tcw}, closed_bit(G)}, 0}.

%% @doc For each ticket of `G': a guard true while it is free and the action that takes
%% it (sets its bit: no carry into another session's bits).
-spec ticket_guards(gate()) -> [{tuple(), tuple()}].
ticket_guards(G) ->
    [{{'==', {'band', {get_tcw}, B}, 0}, {set_tcw, {'bor', {get_tcw}, B}}} || B <- ticket_bits(G)].

%% @doc Whether a trace message is a call made while the gate was closed.
-spec gated(tuple()) -> boolean().
gated(Msg) ->
    element(3, Msg) =:= call andalso tuple_size(Msg) >= 5 andalso element(5, Msg) =:= {kino_trace_off}.

%% @doc Whether a trace message is a call that found no ticket left: its return frame was
%% not pushed.
-spec noret(tuple()) -> boolean().
noret(Msg) ->
    element(3, Msg) =:= call andalso tuple_size(Msg) >= 5 andalso is_tuple(element(5, Msg)) andalso
        tuple_size(element(5, Msg)) >= 1 andalso element(1, element(5, Msg)) =:= kino_trace_cut_noret.
