%% @doc A recorder's triggers (Kino.Trace.record/2's on:): the one definition of when an
%% event fires one (issue 37 items 2 and 4).
%%
%% Plain OTP, so that it runs wherever a ring is kept: in a session of this node
%% (KinoTrace.Session.Recorder, on decoded events, which are maps with the keys below)
%% and in kino_trace's agent on another node (kino_trace_agent_worker, on its raw events
%% seen through view/2), which may have no Elixir. KinoTrace.Plan.Record checks the
%% triggers' options and makes them; this module runs them.
%%
%% A trigger, as KinoTrace.Plan.Record makes it (plain terms, shipped to another node as
%% they are):
%%
%%   * {exception, true}: an exception raised out of a traced call, once where it is
%%     raised: as it goes up through more traced calls of its process (their exception
%%     events, with no other event of that process between) it fires nothing again;
%%   * {slower_than, Ms}: a return or exception whose call took more than Ms (its
%%     duration, from the call pairing);
%%   * {match, {Text, {M, F, A}, MatchSpec}}: a call of M:F/A (each may be '_') whose
%%     argument list MatchSpec matches;
%%   * {message, {Text, MatchSpec}}: a message sent or received; MatchSpec matches
%%     [Peer, Message] (the receiver, or the receiving process);
%%   * {telemetry, EventNames}: a :telemetry event, which is no trace event: it never
%%     fires here; a session of this node attaches a handler for it
%%     (KinoTrace.Session.Recorder).
%%
%% compile/1 compiles the match specs on the node that runs them (a compiled match spec
%% is a reference valid on its own node only).
-module(kino_trace_trigger).

-export([compile/1, fires/3, raising/2, names/0, view/2]).

%% processes whose last event was an exception: past this many, all are forgotten
-define(MAX_RAISING, 1000).

-type trigger() :: {exception, boolean()} | {slower_than, pos_integer()}
                 | {match, {binary(), {atom(), atom(), arity() | '_'}, term()}}
                 | {message, {binary(), term()}}
                 | {telemetry, [[atom()]]}.
%% pid => true: processes whose last event was an exception
-type raising() :: #{pid() | port() => true}.
-export_type([trigger/0, raising/0]).

%% @doc The triggers with their match specs compiled here.
-spec compile([trigger()]) -> [trigger()].
compile(Triggers) -> [compile_one(T) || T <- Triggers].

compile_one({match, {Text, Mfa, Spec}}) -> {match, {Text, Mfa, ets:match_spec_compile(Spec)}};
compile_one({message, {Text, Spec}}) -> {message, {Text, ets:match_spec_compile(Spec)}};
compile_one(Trigger) -> Trigger.

%% @doc The name of the trigger Event fires among (compiled) Triggers, or nil. Raising:
%% the processes whose last event was an exception (raising/2 keeps it).
-spec fires([trigger()], map(), raising()) -> exception | slower_than | match | message | nil.
fires([], _Event, _Raising) ->
    nil;
fires([Trigger | Rest], Event, Raising) ->
    case fire(Trigger, Event) of
        nil -> fires(Rest, Event, Raising);
        exception ->
            case is_map_key(maps:get(pid, Event), Raising) of
                true -> fires(Rest, Event, Raising);
                false -> exception
            end;
        Name -> Name
    end.

fire({exception, true}, #{kind := exception}) ->
    exception;
fire({slower_than, Ms}, #{kind := Kind, duration := Ns})
  when (Kind =:= return orelse Kind =:= exception), is_integer(Ns), Ns > Ms * 1000000 ->
    slower_than;
fire({match, {_Text, {M, F, A}, Spec}},
     #{kind := call, module := EM, function := EF, arity := EA, args := Args})
  when (M =:= '_' orelse M =:= EM), (F =:= '_' orelse F =:= EF), (A =:= '_' orelse A =:= EA),
       is_list(Args) ->
    case ets:match_spec_run([Args], Spec) of
        [] -> nil;
        _ -> match
    end;
fire({message, {_Text, Spec}}, #{kind := Kind, pid := Pid, peer := Peer, data := Message})
  when Kind =:= send; Kind =:= send_to_non_existing; Kind =:= 'receive' ->
    Who = case Peer of
              nil -> Pid;
              _ -> Peer
          end,
    case ets:match_spec_run([[Who, Message]], Spec) of
        [] -> nil;
        _ -> message
    end;
fire(_Trigger, _Event) ->
    nil.

%% @doc Raising after Event: its process is raising when it is an exception, and no
%% longer on any other of its events.
-spec raising(raising(), map()) -> raising().
raising(Raising, #{kind := exception, pid := Pid}) when map_size(Raising) >= ?MAX_RAISING ->
    #{Pid => true};
raising(Raising, #{kind := exception, pid := Pid}) ->
    Raising#{Pid => true};
raising(Raising, #{pid := Pid}) ->
    maps:remove(Pid, Raising).

%% @doc The triggers' names, each fired count's key.
-spec names() -> [atom()].
names() -> [exception, slower_than, match, message, telemetry].

%% @doc What the triggers (and kino_trace_open_calls) read of a raw event
%% (kino_trace_raw_event.hrl), as the decoder names it (KinoTrace.Tracer.Decoder: kind,
%% and the fields below), with Duration (nil when its call is not paired) and its drop
%% mark. TimeoutMarker: a receive's that timed out.
-spec view(tuple(), {integer() | nil, atom()}) -> map().
view(Raw, {Duration, TimeoutMarker}) ->
    {Tag, Pid, _Time, _Scheduler, M, F, A, First, Second, Mark} = pad(Raw),
    Base = #{pid => Pid, module => M, function => F, arity => A, duration => Duration,
             args => nil, peer => nil, data => nil, mark => Mark},
    case Tag of
        call -> Base#{kind => call, args => First};
        return_from -> Base#{kind => return};
        exception_from -> Base#{kind => exception};
        send -> Base#{kind => send, data => First, peer => Second};
        send_to_non_existing_process -> Base#{kind => send_to_non_existing, data => First, peer => Second};
        'receive' when Second =:= TimeoutMarker -> Base#{kind => timeout};
        'receive' -> Base#{kind => 'receive', data => First};
        Other -> Base#{kind => Other}
    end.

%% (an event without its mark is read as mark 0)
pad(Raw) when tuple_size(Raw) =:= 9 -> erlang:append_element(Raw, 0);
pad(Raw) -> Raw.
