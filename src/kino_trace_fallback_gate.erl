%% @doc The gate and return credit of a kino_trace_fallback session: a slot of ?SLOT_BITS
%% bits in the high half of the node's trace control word, read (and, for the credit,
%% written) by the call match specs of kino_trace_fallback:trace_args/3 at each call.
%%
%% The VM copies a return value whole into its `return_from' message (and with
%% `exception_trace' also when only exceptions are traced), and no match spec can look at
%% it; a caller that goes on calling while the tracer process does not get to run (a
%% loaded machine) would fill the node's memory with them. So once a session is metered,
%% return frames are credit: a call match spec asks for its return action only while
%% the slot holds credit, and takes one; the tracer gives one back as each return or
%% exception message comes in. At most ?CREDIT calls per session are then in flight
%% with a return frame whose message the tracer has not taken in: the node holds at most
%% ?CREDIT return values of a session at once, whatever the callers do. A call made
%% without credit sends its arguments (the `_noret' tags) and no return frame; the
%% tracer counts its return as dropped (`dropped_queue_full').
%%
%% The slot's value: 0, open and not metered (at rest: a session leaves the word as it
%% found it; a call whose arguments look huge meters it at once, taking a credit); 1 +
%% the credit taken (1 to 1 + ?CREDIT), metered; all ones, the gate is closed (the
%% mailbox guard tripped: calls send their MFA alone, `{kino_trace_off}', and no return
%% action, so the VM copies neither arguments nor return values). The word has no
%% compare-and-swap: a match spec's take and the tracer's writes are read-then-exchange,
%% and a write racing another one loses it. A take that races another takes from what it
%% reads again, never beyond ?CREDIT; the tracer sets a metered slot from its own count
%% whenever its mailbox is empty, so a lost update lasts until then. ?SLOTS slots:
%% sessions beyond share them (each takes and gives back its own credit there; a gate
%% closed by one closes the others', counted there as well).
-module(kino_trace_fallback_gate).

-export([slot/1, close/1, open/3, refill/1, closed_guard/1, credit_guard/1, take/2, frame/1, credit/0, held/3, alive/1]).

-define(SLOT_BITS, 4).
-define(SLOTS, 4).                 % ?SLOT_BITS * ?SLOTS: the word's high half
-define(CREDIT, 4).                % return frames in flight per session, at most
-define(CLOSED, (1 bsl ?SLOT_BITS) - 1).

%% @doc The return frames a session may have in flight.
-spec credit() -> pos_integer().
credit() -> ?CREDIT.

%% @doc The offset in the trace control word of the slot of the session `Id'.
-spec slot(pos_integer()) -> pos_integer().
slot(Id) -> 16 + ?SLOT_BITS * (Id rem ?SLOTS).

mask(Off) -> ((1 bsl ?SLOT_BITS) - 1) bsl Off.

%% @doc Closes the gate of the slot `Off'.
-spec close(pos_integer()) -> ok.
close(Off) -> update(Off, fun(_) -> ?CLOSED end).

%% @doc Opens the gate of the slot `Off': unmetered (0), or metered with the credit less
%% the `Open' return frames in flight (1 + taken).
-spec open(pos_integer(), non_neg_integer(), boolean()) -> ok.
open(Off, _Open, false) -> update(Off, fun(_) -> 0 end);
open(Off, Open, true) -> update(Off, fun(_) -> 1 + min(Open, ?CREDIT) end).

%% @doc Gives back one credit to the slot `Off' (up to ?CREDIT; a closed gate stays so).
-spec refill(pos_integer()) -> ok.
refill(Off) -> update(Off, fun(V) when V >= 2, V =< ?CREDIT + 1 -> V - 1; (V) -> V end).

update(Off, F) ->
    Mask = mask(Off),
    tcw(fun(W) -> (W band (bnot Mask)) bor (F((W band Mask) bsr Off) bsl Off) end).

%% A change made by another session between the read and the write is written again (a
%% few tries).
tcw(F) -> tcw(F, erlang:system_info(trace_control_word), 8).

tcw(F, Old, Tries) ->
    case erlang:system_flag(trace_control_word, F(Old)) of
        Old -> ok;
        Other when Tries > 0 -> tcw(F, Other, Tries - 1);
        _ -> ok
    end.

%% @doc A match spec guard true while the gate of the slot `Off' is closed.
-spec closed_guard(pos_integer()) -> tuple().
closed_guard(Off) -> {'==', {'band', {get_tcw}, mask(Off)}, mask(Off)}.

%% @doc A match spec guard true while the slot `Off' holds credit.
-spec credit_guard(pos_integer()) -> tuple().
credit_guard(Off) -> {'=<', {'band', {get_tcw}, mask(Off)}, ?CREDIT bsl Off}.

%% @doc The match spec action that takes one credit from the slot `Off': the slot's
%% value read again, plus one when it is metered with credit left (1 to ?CREDIT; not
%% beyond, as after a take that raced another). Unmetered (0), a `plain' call takes
%% nothing and a `huge' one (arguments that look huge: its return value may be too)
%% meters the slot at once, taking one (2).
-spec take(pos_integer(), plain | huge) -> tuple().
take(Off, Kind) ->
    Value = {'band', {'bsr', {get_tcw}, Off}, ?CLOSED},
    Metered = {'bsr', {'+', Value, ?CLOSED}, ?SLOT_BITS},                % 1 when Value >= 1
    Left = {'bsr', {'-', ?CREDIT + ?CLOSED + 1, Value}, ?SLOT_BITS},     % 1 when Value =< ?CREDIT
    Step = {'band', Metered, Left},
    Steps = case Kind of
                plain -> Step;
                huge -> {'+', Step, {'*', 2, {'bsr', {'-', ?CLOSED + 1, Value}, ?SLOT_BITS}}}   % + 2 when Value =:= 0
            end,
    {set_tcw, {'+', {get_tcw}, {'*', Steps, 1 bsl Off}}}.

%% @doc What a trace message does to the credit: `off' (a call made while the gate was
%% closed), `ret' (a call that took credit: its return frame is in flight; `huge' when
%% its arguments looked huge: that meters the session's returns), `noret' (a
%% call that had to do without), `back' (a return or exception: credit comes back), or
%% `none'.
-spec frame(tuple()) -> off | ret | huge | noret | back | none.
frame(Msg) when element(3, Msg) =:= call, tuple_size(Msg) >= 5 ->
    case element(5, Msg) of
        {kino_trace_off} -> off;
        T when is_tuple(T), tuple_size(T) >= 1 -> call_frame(element(1, T));
        _ -> none
    end;
frame(Msg) when element(3, Msg) =:= return_from; element(3, Msg) =:= exception_from -> back;
frame(_) -> none.

call_frame(kino_trace_args_ret) -> ret;
call_frame(kino_trace_cut_ret) -> huge;
call_frame(kino_trace_args_noret) -> noret;
call_frame(kino_trace_cut_noret) -> noret;
call_frame(_) -> none.

%% @doc The credit a tracer's processes hold (a map of each one's return frames in
%% flight, and their sum), with `Step' more (1, a call that took credit) or less (-1, a
%% return) for `Pid'.
-spec held(term(), 1 | -1, {map(), non_neg_integer()}) -> {map(), non_neg_integer()}.
held(Pid, Step, {Held, Sum}) when is_pid(Pid) ->
    case maps:get(Pid, Held, 0) + Step of
        N when N > 0 -> {Held#{Pid => N}, Sum + Step};
        _ when Step < 0, is_map_key(Pid, Held) -> {maps:remove(Pid, Held), Sum - 1};
        _ -> {Held, Sum}
    end;
held(_, _, Held) -> Held.

%% @doc The credit held by processes still alive: an ended process's return frames will
%% not come back.
-spec alive({map(), non_neg_integer()}) -> {map(), non_neg_integer()}.
alive({Held, _}) ->
    Alive = maps:filter(fun(Pid, _) -> erlang:is_process_alive(Pid) end, Held),
    {Alive, lists:sum(maps:values(Alive))}.
