%% @doc kino_trace's agent: a recorder's ring, kept by its worker (kino_trace_agent_worker)
%% on the traced node. The worker drains its tracer into it (push/2), takes its events
%% for a snapshot by hand (events/1) and its triggered snapshots (take_snapshots/1).
%%
%% The ring keeps the newest raw events, bounded in events and bytes (each event's size
%% in memory), the older ones overwritten and counted.
%%
%% A recorder's triggers (ring key triggers, as KinoTrace.Plan.Record makes them) run
%% here, on each event as it goes into the ring, with kino_trace_trigger (the one
%% definition of when an event fires one): a trigger freezes the ring (the queue as it
%% is: nothing is copied) with the open calls of its process that the ring overwrote
%% (kino_trace_open_calls, the one definition of them, kept here as a recorder of the
%% tracing node keeps them: the calls that led to the trigger, within a quarter of the
%% ring's bytes), then the after-window adds what comes next (after: {events, N}, ended
%% at the latest window_ms after the trigger, or {ms, N}: a {ring_after, Ref} message to
%% the worker, which calls window_ended/2; at most the ring's bytes), and the snapshot is
%% kept here, at most `snapshots' of them and `snapshot_bytes' in all (the oldest go
%% first, counted), until the local session takes them (KinoTrace.Session.Recorder makes
%% them trace values). The durations slower_than needs come from the call pairing of the
%% native tracer's decoder (kino_trace_tracer:decode_events/2, the NIF's implementation
%% of the rule): a worker on the pure-Erlang tracer has no pairing, and refuses
%% slower_than.
-module(kino_trace_agent_ring).

-export([new/2, push/2, events/1, take_snapshots/1, window_ended/2, figures/1]).

-type ring() :: map().
-export_type([ring/0]).

%% @doc A ring for a recorder's config (the worker's config key ring), on a tracer of
%% Mode (the worker's); undefined for none. Exits {refused, Message} for slower_than on
%% the pure-Erlang tracer.
-spec new(map() | undefined, term()) -> ring() | undefined.
new(undefined, _Mode) ->
    undefined;
new(#{events := Events, bytes := Bytes} = Config, Mode) ->
    Triggers = maps:get(triggers, Config, []),
    Slower = lists:keymember(slower_than, 1, Triggers),
    Decoder =
        case {Slower, Mode} of
            {false, _} -> undefined;
            {true, native} -> kino_trace_tracer:new_decoder(true, node());
            {true, {fallback, Why}} ->
                exit({refused, kino_trace_agent:format(
                                 "slower_than: needs the calls paired with their returns, which only the "
                                 "native tracer does on another node, and node ~p runs the pure-Erlang one (~ts)",
                                 [node(), Why])})
        end,
    #{max_events => Events, max_bytes => Bytes, queue => queue:new(), size => 0, bytes => 0,
      overwritten => 0,
      %% the triggers, compiled here, what they keep, what they fired
      triggers => kino_trace_trigger:compile(Triggers), raising => #{}, decoder => Decoder,
      %% each process's open calls (a quarter of the ring's bytes at most), as raw events
      open_calls => kino_trace_open_calls:new(Bytes div 4),
      fields => maps:get(fields, Config, []), marker => maps:get(timeout_marker, Config, undefined),
      fired => maps:from_list([{Name, 0} || Name <- kino_trace_trigger:names()]),
      'after' => maps:get('after', Config, {events, 0}), window_ms => maps:get(window_ms, Config, 5000),
      %% an open after-window, the snapshots kept here (newest first) and their bounds
      pending => undefined, snaps => [], snap_bytes => 0, taken => 0, dropped => 0,
      max_snaps => maps:get(snapshots, Config, 1), max_snap_bytes => maps:get(snapshot_bytes, Config, Bytes)}.

%% @doc Its figures for the tracing node's info/1 (memory: the events' and, per event,
%% the queue's cons cell and {Bytes, Event} tuple).
-spec figures(ring()) -> map().
figures(#{size := Size, bytes := Bytes, overwritten := Overwritten} = Ring) ->
    #{kept => Size, kept_bytes => Bytes, overwritten => Overwritten,
      memory => Bytes + Size * 5 * erlang:system_info(wordsize),
      open_calls_bytes => kino_trace_open_calls:bytes(maps:get(open_calls, Ring)),
      fired => maps:get(fired, Ring), recording_after => maps:get(pending, Ring) =/= undefined,
      %% triggered snapshots kept here until taken, and those that went before
      snapshots_waiting => length(maps:get(snaps, Ring)),
      snapshots_dropped_waiting => maps:get(dropped, Ring)}.

%% @doc Raw events (the tracer's drain) into the ring, with the triggers.
-spec push([tuple()], ring()) -> ring().
push(Raw, #{triggers := []} = Ring) ->
    lists:foldl(fun(Event, R) -> element(2, ring_in(Event, R)) end, Ring, Raw);
push(Raw0, Ring) ->
    %% (in time order, as the decoder takes them: each view is its event's)
    Raw = lists:keysort(3, Raw0),
    lists:foldl(fun step/2, Ring, lists:zip(Raw, views(Raw, Ring))).

ring_in(Event, #{queue := Q, size := Size, bytes := Bytes} = Ring) ->
    B = bytes_of(Event),
    {B, overwrite(Ring#{queue := queue:in({B, Event}, Q), size := Size + 1, bytes := Bytes + B})}.

%% (what one event takes in memory, in bytes)
bytes_of(Event) -> erts_debug:flat_size(Event) * erlang:system_info(wordsize).

%% One event into the ring, then the triggers, the open calls and the after-window. Its
%% key among the open calls is its number among the events the ring took in (the kept
%% and the overwritten): the ring holds those from overwritten + 1 on.
step({Event, View}, #{triggers := Triggers, raising := Raising, open_calls := Open} = Ring0) ->
    {B, #{overwritten := Overwritten, size := Size} = Ring1} = ring_in(Event, Ring0),
    Fired = kino_trace_trigger:fires(Triggers, View, Raising),
    Ring = Ring1#{raising := kino_trace_trigger:raising(Raising, View),
                  open_calls := kino_trace_open_calls:track(Open, View, Overwritten + Size, Event)},
    case {Fired, maps:get(pending, Ring)} of
        {nil, undefined} -> Ring;
        {nil, Window} -> feed(B, Event, Window, Ring);
        {Name, undefined} ->
            %% (its process's open calls before this event, which the ring holds)
            Missing = kino_trace_open_calls:overwritten(Open, maps:get(pid, View), Overwritten + 1),
            open(Name, Missing, count(Name, Ring));
        {Name, Window} -> feed(B, Event, Window, count(Name, Ring))
    end.

count(Name, #{fired := Fired} = Ring) ->
    Ring#{fired := maps:update_with(Name, fun(N) -> N + 1 end, Fired)}.

%% What the triggers see of each event: the native decoder's event when there is one
%% (slower_than needs durations), else the raw event's view.
views(Raw, #{decoder := undefined, marker := Marker}) ->
    [kino_trace_trigger:view(E, {nil, Marker}) || E <- Raw];
views(Raw, #{decoder := Decoder, fields := Fields} = Ring) ->
    case decode(Decoder, Raw) of
        Decoded when length(Decoded) =:= length(Raw) ->
            [maps:from_list(lists:zip(Fields, tuple_to_list(T))) || T <- Decoded];
        _ ->
            views(Raw, Ring#{decoder := undefined})
    end.

decode(Decoder, Raw) ->
    case kino_trace_tracer:decode_events(Decoder, Raw) of
        {names, Pids} ->
            ok = kino_trace_tracer:decoder_put_names(Decoder, [{P, kino_trace_agent:registered_name(P)} || P <- Pids]),
            decode(Decoder, Raw);
        Decoded ->
            Decoded
    end.

%% A trigger fired on the newest event: the ring is frozen with it, after the open calls
%% of its process that the ring overwrote (Missing, oldest first); the window opens.
open(Trigger, Missing, #{queue := Q, bytes := Bytes, window_ms := WindowMs,
                         max_events := MaxEvents} = Ring) ->
    MissingBytes = lists:sum([bytes_of(E) || E <- Missing]),
    Window = #{frozen => Q, frozen_bytes => Bytes + MissingBytes, missing => Missing,
               tail => [], bytes => 0, trigger => Trigger, timer => undefined},
    case maps:get('after', Ring) of
        {_, 0} -> finish(Ring#{pending := Window});
        {events, N} -> Ring#{pending := Window#{left => N, timer => timer(WindowMs)}};
        {ms, Ms} -> Ring#{pending := Window#{left => MaxEvents, timer => timer(Ms)}}
    end.

timer(Ms) ->
    Ref = make_ref(),
    {erlang:send_after(Ms, self(), {ring_after, Ref}), Ref}.

feed(B, Event, #{tail := Tail, left := Left, bytes := Bytes} = Window, #{max_bytes := Max} = Ring) ->
    Next = Window#{tail := [{B, Event} | Tail], left := Left - 1, bytes := Bytes + B},
    case Left - 1 =< 0 orelse Bytes + B >= Max of
        true -> finish(Ring#{pending := Next});
        false -> Ring#{pending := Next}
    end.

%% The open window's snapshot is made: kept here, the oldest going while over the bounds.
finish(#{pending := Window, snaps := Snaps, snap_bytes := SnapBytes, taken := Taken} = Ring) ->
    #{frozen := Q, frozen_bytes := FrozenBytes, missing := Missing, tail := Tail,
      bytes := Bytes, trigger := Trigger, timer := Timer} = Window,
    _ = case Timer of
            {TRef, _} -> erlang:cancel_timer(TRef);
            undefined -> ok
        end,
    Raw = Missing ++ [E || {_, E} <- queue:to_list(Q)] ++ [E || {_, E} <- lists:reverse(Tail)],
    %% (the triggering event is the frozen ring's newest)
    {value, {_, Fired}} = queue:peek_r(Q),
    Snap = #{trigger => Trigger, pid => element(2, Fired), time => element(3, Fired),
             taken_at => os:system_time(microsecond),
             raw => Raw, bytes => FrozenBytes + Bytes},
    evict(Ring#{pending := undefined, snaps := [Snap | Snaps],
                snap_bytes := SnapBytes + FrozenBytes + Bytes, taken := Taken + 1}).

evict(#{snaps := Snaps, snap_bytes := Bytes, max_snaps := Max, max_snap_bytes := MaxBytes,
        dropped := Dropped} = Ring)
  when length(Snaps) > 1, length(Snaps) > Max orelse Bytes > MaxBytes ->
    #{bytes := B} = lists:last(Snaps),
    evict(Ring#{snaps := lists:droplast(Snaps), snap_bytes := Bytes - B, dropped := Dropped + 1});
evict(Ring) ->
    Ring.

%% The oldest events go while the ring is over its bounds (the newest always stays).
overwrite(#{size := Size, bytes := Bytes, max_events := MaxEvents, max_bytes := MaxBytes,
            queue := Q, overwritten := Overwritten} = Ring)
  when Size > 1, Size > MaxEvents orelse Bytes > MaxBytes ->
    {{value, {B, _Event}}, Rest} = queue:out(Q),
    overwrite(Ring#{queue := Rest, size := Size - 1, bytes := Bytes - B,
                    overwritten := Overwritten + 1});
overwrite(Ring) ->
    Ring.


%% @doc The ring's events, oldest first.
-spec events(ring()) -> [tuple()].
events(#{queue := Q}) -> [Event || {_Bytes, Event} <- queue:to_list(Q)].

%% @doc The triggered snapshots, oldest first, taken away: [{Meta, Raw}]; Meta: its
%% trigger, the triggering event's pid and time (monotonic, here), taken_at (system
%% microseconds here).
-spec take_snapshots(ring()) -> {[{map(), [tuple()]}], ring()}.
take_snapshots(#{snaps := Snaps} = Ring) ->
    Taken = [{maps:with([trigger, pid, time, taken_at], Snap), Raw}
             || #{raw := Raw} = Snap <- lists:reverse(Snaps)],
    {Taken, Ring#{snaps := [], snap_bytes := 0}}.

%% @doc The after-window of timer Ref ended: its snapshot is made.
-spec window_ended(ring(), reference()) -> ring().
window_ended(#{pending := #{timer := {_, Ref}}} = Ring, Ref) -> finish(Ring);
window_ended(Ring, _Ref) -> Ring.
