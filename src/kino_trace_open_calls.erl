%% @doc The calls still open in each process, as a recorder's events show them: a
%% trigger's snapshot adds those of the triggering process that its ring overwrote, the
%% calls that led to the trigger (issue 37 item 2). The one definition of them.
%%
%% Plain OTP, so that it runs wherever a ring is kept, as kino_trace_trigger does: in a
%% session of this node (KinoTrace.Session.Recorder, on decoded events) and in
%% kino_trace's agent on another node (kino_trace_agent_worker, on its raw events seen
%% through kino_trace_trigger:view/2, or decoded there), which may have no Elixir. An
%% event is a map with kind, pid, module, function and arity, and either lost (a decoded
%% event's) or mark (a raw event's drop mark), as those give them.
%%
%% The rule, the call pairing's (KinoTrace.Tracer.Decoder) on what a ring needs:
%%   * a call is pushed on its process's open calls;
%%   * a return or an exception pops the newest open call of its {M, F, A} and every call
%%     above it (tail calls out of traced code, returns lost to a limit); with none, it
%%     changes nothing;
%%   * an event that may follow lost events of its process (lost, or a drop mark other
%%     than the one noted when its first open call was pushed) forgets its open calls
%%     first;
%%   * an exit forgets its process's open calls.
%% Bounded: at most ?DEPTH open calls per process (the outermost go first), ?PIDS
%% processes and MaxBytes in all (each kept item's size in memory); beyond the last two,
%% every process's open calls are forgotten.
%%
%% Each open call is kept as the caller gives it (Item: the decoded event, or the raw
%% one) with its Key, its number in the ring's stream of events (increasing), so that
%% overwritten/3 gives those the ring no longer holds.
-module(kino_trace_open_calls).

-export([new/1, track/4, overwritten/3, bytes/1]).

-define(DEPTH, 32).
-define(PIDS, 1000).

%% {Key, {M, F, A}, Bytes, Item}
-type entry() :: {integer(), {atom(), atom(), arity()}, non_neg_integer(), term()}.
%% pid => {the drop mark noted, its open calls, innermost first}
-type open_calls() :: #{max_bytes := non_neg_integer(), bytes := non_neg_integer(),
                        stacks := #{pid() | port() => {term(), [entry()]}}}.
-export_type([open_calls/0]).

%% @doc No open call, within MaxBytes.
-spec new(non_neg_integer()) -> open_calls().
new(MaxBytes) when is_integer(MaxBytes), MaxBytes >= 0 ->
    #{max_bytes => MaxBytes, bytes => 0, stacks => #{}}.

%% @doc Their bytes in all.
-spec bytes(open_calls()) -> non_neg_integer().
bytes(#{bytes := Bytes}) -> Bytes.

%% @doc The open calls of Pid that the ring no longer holds (those with a Key before
%% FirstKept, the Key of the oldest event it holds; all of them for none), outermost
%% first, as their Items.
-spec overwritten(open_calls(), pid() | port(), integer() | none) -> [term()].
overwritten(#{stacks := Stacks}, Pid, FirstKept) ->
    case Stacks of
        #{Pid := {_Mark, Stack}} ->
            [Item || {Key, _Mfa, _Bytes, Item} <- lists:reverse(Stack),
                     FirstKept =:= none orelse Key < FirstKept];
        _ ->
            []
    end.

%% @doc After Event (Key its number in the ring's stream, Item what an open call keeps
%% of it): a call pushed, a return or exception popping its call.
-spec track(open_calls(), map(), integer(), term()) -> open_calls().
track(Open, #{pid := Pid} = Event, Key, Item) ->
    step(forget_lost(Open, Event, Pid), Event, Key, Item);
track(Open, _Event, _Key, _Item) ->
    Open.

step(#{stacks := Stacks} = Open0, #{kind := call, pid := Pid} = Event, Key, Item) ->
    Open = case map_size(Stacks) >= ?PIDS andalso not is_map_key(Pid, Stacks) of
               true -> forget(Open0);
               false -> Open0
           end,
    #{stacks := Stacks1, bytes := Total0, max_bytes := Max} = Open,
    {Mark, Old} = maps:get(Pid, Stacks1, {mark(Event), []}),
    {Kept, Gone} = split(?DEPTH - 1, Old),
    Bytes = erts_debug:flat_size(Item) * erlang:system_info(wordsize),
    Total = Total0 + Bytes - sum_bytes(Gone),
    Entry = {Key, mfa(Event), Bytes, Item},
    case Total > Max of
        true -> forget(Open);
        false -> Open#{stacks := Stacks1#{Pid => {Mark, [Entry | Kept]}}, bytes := Total}
    end;
step(#{stacks := Stacks, bytes := Total} = Open, #{kind := Kind, pid := Pid} = Event, _Key, _Item)
  when Kind =:= return; Kind =:= exception ->
    Mfa = mfa(Event),
    case Stacks of
        #{Pid := {Mark, Stack}} ->
            case lists:splitwith(fun({_, M, _, _}) -> M =/= Mfa end, Stack) of
                {Inner, [Call | Outer]} ->
                    Next = case Outer of
                               [] -> maps:remove(Pid, Stacks);
                               _ -> Stacks#{Pid := {Mark, Outer}}
                           end,
                    Open#{stacks := Next, bytes := Total - sum_bytes([Call | Inner])};
                {_, []} ->
                    Open
            end;
        _ ->
            Open
    end;
step(Open, #{kind := exit, pid := Pid}, _Key, _Item) ->
    forget(Open, Pid);
step(Open, _Event, _Key, _Item) ->
    Open.

%% The process may have lost events since its first open call: they are forgotten.
forget_lost(#{stacks := Stacks} = Open, Event, Pid) ->
    case Stacks of
        #{Pid := {Mark, _}} ->
            case maps:get(lost, Event, false) =:= true orelse mark(Event) =/= Mark of
                true -> forget(Open, Pid);
                false -> Open
            end;
        _ ->
            Open
    end.

forget(Open) -> Open#{stacks := #{}, bytes := 0}.

forget(#{stacks := Stacks, bytes := Total} = Open, Pid) ->
    case maps:take(Pid, Stacks) of
        {{_Mark, Stack}, Rest} -> Open#{stacks := Rest, bytes := Total - sum_bytes(Stack)};
        error -> Open
    end.

mark(Event) -> maps:get(mark, Event, 0).

mfa(#{module := M, function := F, arity := A}) -> {M, F, A}.

split(N, List) when length(List) =< N -> {List, []};
split(N, List) -> lists:split(N, List).

sum_bytes(Entries) -> lists:foldl(fun({_, _, Bytes, _}, Sum) -> Sum + Bytes end, 0, Entries).
