%% @doc kino_trace's agent: a worker, one per trace of a traced node, started by the keeper
%% (kino_trace_agent, which has the whole picture).
%%
%% It owns the OTP trace session and the tracer's session (the NIF's, or a
%% kino_trace_fallback process when the NIF cannot load), runs the trace:F(Session,
%% Args...) calls its local session asks for, and answers drain requests with raw
%% events (decoded on the tracing node). It monitors that local session: when it ends,
%% or the connection drops, the worker destroys the trace session and ends. No agent
%% process is ever traced by its session.
%%
%% A recorder's worker (config key ring => #{events, bytes}) keeps the ring here
%% (kino_trace_agent_ring): on its tracer's wake-ups it drains the tracer itself into
%% the ring, which runs the triggers, and answers ring and take_snapshots requests with
%% raw events (the local session decodes them). Nothing of the trace leaves this node
%% until a snapshot asks.
%%
%% A trace with `to:' writes this node's events to trace files on this node: the
%% tracing node's writer (KinoTrace.File.Writer) sends the ready frames here
%% (kino_trace_files messages after a files_open request), and kino_trace_agent_files
%% writes them within the cap (the writer catches up, files_sync, before the trace
%% ends here). The files get their end frames when the worker ends, and stay.
-module(kino_trace_agent_worker).

-export([run/5]).

-include("kino_trace_raw_event.hrl").

-define(TRACER, kino_trace_tracer).
-define(FALLBACK, kino_trace_fallback).
-define(TRACE_FUNS, [process, function, send, recv, info]).

-record(worker, {
    owner :: pid(),
    owner_ref :: reference(),
    id :: term(),
    module :: module() | none,
    handle :: term(),
    session :: term() | undefined,
    mode :: native | {fallback, binary()} | counters,
    %% every agent process on this node (this worker, its tracer, the keeper, the other
    %% workers and theirs): never traced by this worker's session
    agents = [] :: [pid()],
    %% the process flags set in this session, newest first: what the fallback's mailbox
    %% guard has the worker set again after it switched tracing off
    flags = [] :: [list()],
    %% a recorder's ring, or undefined (the local session drains the tracer)
    ring :: map() | undefined,
    %% the trace files of this node's events (the `to:' option), or undefined
    files :: kino_trace_agent_files:state() | undefined
}).

%% raw events drained into the ring per wake-up, before the mailbox is looked at again
-define(RING_FILL, 2000).
%% at most this many before a request is answered (what is queued now, bounded: under a
%% flood the tracer's queue never empties)
-define(REQUEST_FILL, 100000).

%% A worker is a plain process, not a gen_server: its first act is to leave the other
%% traces of this node (a trace of every new process, or of gen_server's functions,
%% would otherwise see it start), before it runs anything else. It answers gen calls.
run(Keeper, Config, Mode, Agents, Sessions) ->
    [untrace(Session, [self()]) || Session <- Sessions],
    process_flag(trap_exit, true),
    #{owner := Owner, id := Id, limits := Limits} = Config,
    Ring = kino_trace_agent_ring:new(maps:get(ring, Config, undefined), Mode),
    {Module, Handle, Tracer} =
        case Mode of
            native ->
                H = ?TRACER:new_session(self(), Limits),
                {?TRACER, H, {?TRACER, H}};
            {fallback, _} ->
                H = ?FALLBACK:new_session(self(), Limits),
                {?FALLBACK, H, ?FALLBACK:tracer(H)};
            counters ->
                %% the VM's call counters only: no trace message is ever sent
                {none, undefined, self()}
        end,
    Session = trace:session_create(kino_trace, Tracer, []),
    State0 = #worker{owner = Owner, owner_ref = erlang:monitor(process, Owner), id = Id,
                     module = Module, handle = Handle, session = Session, mode = Mode,
                     ring = Ring},
    Own = [self() | tracer_pids(State0)],
    [untrace(Other, Own) || Other <- Sessions],
    case Module of
        ?FALLBACK -> ok = ?FALLBACK:attach(Handle, Session, owner);
        _ -> ok
    end,
    State = State0#worker{agents = lists:usort(Own ++ Agents)},
    untrace(Session, State#worker.agents),
    Keeper ! {self(), started, Own, Session},
    worker_loop(State).

worker_loop(#worker{owner = Owner, owner_ref = OwnerRef, id = Id} = State) ->
    receive
        {'$gen_call', From, Request} ->
            {Reply, Next} = request(Request, State),
            gen:reply(From, Reply),
            worker_loop(Next);
        %% the fallback's mailbox guard switched tracing off, and its mailbox is empty
        {kino_trace, _TracerId, restore} ->
            restore(State),
            worker_loop(State);
        %% a recorder's ring takes in what its tracer queued
        {kino_trace, _NativeId, ready} when State#worker.ring =/= undefined ->
            worker_loop(fill(State, ?RING_FILL));
        ring_fill ->
            worker_loop(fill(State, ?RING_FILL));
        %% a recorder's after-window ended (what is queued goes in first)
        {ring_after, Ref} ->
            worker_loop(window_ended(fill(State, ?REQUEST_FILL), Ref));
        %% the tracer's wake-ups go on to the local session, under its id
        {kino_trace, _NativeId, Message} ->
            Owner ! {kino_trace, Id, Message},
            worker_loop(State);
        %% the tracing node's writer: frames for this node's trace files
        {kino_trace_files, Op} ->
            worker_loop(State#worker{files = kino_trace_agent_files:handle(Op, State#worker.files)});
        {untrace, Pids} ->
            untrace(State#worker.session, Pids),
            worker_loop(State#worker{agents = lists:usort(Pids ++ State#worker.agents)});
        {'DOWN', OwnerRef, process, _, _} ->
            end_trace(State);
        %% the keeper ends it: its local session is ending (kino_trace_agent:end_worker/1)
        stop ->
            end_trace(State);
        _Other ->
            worker_loop(State)
    end.

request({trace, Fun, Args}, State) ->
    Result = trace_call(State, Fun, Args),
    {Result, log_flags(Fun, Args, Result, State)};
request({trace_many, Calls}, State) ->
    {[trace_call(State, Fun, Args) || {Fun, Args} <- Calls], State};
request({trace_all, Ops, After}, State) ->
    Result =
        try run_ops(State, Ops)
        after run_ops(State, After)
        end,
    {Result, State};
%% (a recorder's tracer is drained into its ring, here)
request({drain, _Max}, #worker{ring = Ring} = State) when Ring =/= undefined ->
    {{[], false, #{}, erlang:time_offset(nanosecond)}, State};
request({drain, Max}, #worker{module = M, handle = H} = State) ->
    {Raw, More} = M:drain(H, Max),
    {{Raw, More, names(Raw), erlang:time_offset(nanosecond)}, State};
request(ring, #worker{ring = undefined} = State) ->
    {{error, not_a_recorder}, State};
request(ring, State0) ->
    %% (what is queued now goes in first)
    State = fill(State0, ?REQUEST_FILL),
    Ring = State#worker.ring,
    Raw = kino_trace_agent_ring:events(Ring),
    {{Raw, names(Raw), erlang:time_offset(nanosecond), kino_trace_agent_ring:figures(Ring)}, State};
%% a recorder's triggered snapshots, oldest first, taken away: {[{Meta, Raw}], Names,
%% TimeOffset}; Meta: its trigger, the triggering event's pid and time (monotonic, here),
%% taken_at (system microseconds here)
request(take_snapshots, #worker{ring = undefined} = State) ->
    {{error, not_a_recorder}, State};
request(take_snapshots, State0) ->
    State = fill(State0, ?REQUEST_FILL),
    {Taken, Ring} = kino_trace_agent_ring:take_snapshots(State#worker.ring),
    Names = names(lists:append([Raw || {_, Raw} <- Taken])),
    {{Taken, Names, erlang:time_offset(nanosecond)}, State#worker{ring = Ring}};
%% a recorder's counters have its ring's figures
request(counters, #worker{ring = Ring} = State0) when Ring =/= undefined ->
    State = fill(State0, ?REQUEST_FILL),
    {Counters, _} = request(counters, State#worker{ring = undefined}),
    {maps:put(ring, kino_trace_agent_ring:figures(State#worker.ring), Counters), State};
request(counters, #worker{module = ?FALLBACK, handle = H} = State) ->
    %% and what only the fallback knows: what it received, how often it switched off
    {maps:put(fallback, ?FALLBACK:info(H), ?FALLBACK:counters(H)), State};
request(counters, #worker{module = M, handle = H} = State) ->
    {M:counters(H), State};
%% the trace files of this node's events start (kino_trace_agent_files)
request({files_open, Paths, PerFile, Frames}, #worker{files = Files} = State) ->
    {Reply, Next} = kino_trace_agent_files:start(Paths, PerFile, Frames, Files),
    {Reply, State#worker{files = Next}};
%% (answered after the frames the writer sent before: they are in the files)
request(files_sync, State) ->
    {ok, State};
request(close, #worker{module = none} = State) ->
    {ok, State};
request(close, #worker{module = M, handle = H} = State) ->
    {M:close(H), State};
request(destroy, State) ->
    {ok, destroy(State)};
request(_Request, State) ->
    {{error, unknown_request}, State}.

%% The process flags set, kept for restore/1 (the fallback only).
log_flags(process, Args, {ok, _}, #worker{module = ?FALLBACK, flags = Flags} = State) ->
    State#worker{flags = [Args | Flags]};
log_flags(_Fun, _Args, _Result, State) ->
    State.

%% Sets the process flags again, in the order they were set, then keeps the agent's
%% processes out: the session is as it was before the guard switched it off.
restore(#worker{flags = Flags} = State) ->
    [trace_call(State, process, Args) || Args <- lists:reverse(Flags)],
    untrace(State#worker.session, State#worker.agents).

%% The local session is gone (ended, or the connection dropped): so is the trace here
%% (its files get their end frames: complete files, which stay).
end_trace(#worker{module = M, handle = H} = State) ->
    _ = M =/= none andalso kino_trace_agent:quiet(fun() -> M:close(H) end),
    _ = kino_trace_agent_files:handle(close, State#worker.files),
    destroy(State),
    exit(normal).

trace_call(#worker{session = Session, module = Module} = State, Fun, Args0) ->
    %% the fallback's process flags and call match specs (see kino_trace_fallback:trace_args/3)
    Args = case Module of
               ?FALLBACK -> ?FALLBACK:trace_args(State#worker.handle, Fun, Args0);
               _ -> Args0
           end,
    case lists:member(Fun, ?TRACE_FUNS) andalso Session =/= undefined of
        true ->
            try {ok, erlang:apply(trace, Fun, [Session | Args])}
            catch Class:Reason -> {error, {Class, Reason}}
            after
                %% flags set on every process reach the agent's own: take them off again
                case {Fun, Args} of
                    {process, [Every, true | _]} when Every =:= all; Every =:= existing ->
                        untrace(Session, State#worker.agents);
                    _ ->
                        ok
                end
            end;
        false ->
            {error, {error, badarg}}
    end.

run_ops(State, Ops) ->
    lists:foldl(
        fun({Fun, Args}, ok) ->
                case trace_call(State, Fun, Args) of
                    {ok, _} -> ok;
                    Error -> Error
                end;
           (_Op, Error) ->
                Error
        end, ok, Ops).

destroy(#worker{session = undefined} = State) ->
    State;
destroy(#worker{session = Session} = State) ->
    _ = kino_trace_agent:quiet(fun() -> trace:session_destroy(Session) end),
    State#worker{session = undefined}.

tracer_pids(#worker{module = ?FALLBACK, handle = H}) -> [?FALLBACK:tracer(H)];
tracer_pids(_State) -> [].

untrace(Session, Pids) ->
    _ = [kino_trace_agent:quiet(fun() -> trace:process(Session, Pid, false, [all]) end) || Pid <- Pids, is_pid(Pid)],
    ok.

%% --- a recorder's ring (kino_trace_agent_ring) ---------------------------------------

%% Drains the tracer into the ring, Budget events at most (then a ring_fill message goes
%% on, so requests are answered meanwhile); a drain that put the native queue to sleep is
%% followed by one more a moment later (kino_trace_tracer:more()).
fill(#worker{ring = undefined} = State, _Budget) ->
    State;
fill(#worker{module = none} = State, _Budget) ->
    State;
fill(State, Budget) when is_integer(Budget), Budget =< 0 ->
    self() ! ring_fill,
    State;
fill(#worker{module = M, handle = H, ring = Ring} = State, Budget) ->
    {Raw, More} = M:drain(H, 500),
    Next = State#worker{ring = kino_trace_agent_ring:push(Raw, Ring)},
    case More of
        true -> fill(Next, Budget - length(Raw));
        recheck -> erlang:send_after(1, self(), ring_fill), Next;
        _ -> Next
    end.

window_ended(#worker{ring = undefined} = State, _Ref) ->
    State;
window_ended(#worker{ring = Ring} = State, Ref) ->
    State#worker{ring = kino_trace_agent_ring:window_ended(Ring, Ref)}.

%% The registered names of the processes of a batch, for the tracing node.
names(Raw) ->
    Pids = lists:usort([Pid || Event <- Raw, Pid <- [element(#kino_trace_raw_event.pid, Event)], is_pid(Pid)]),
    maps:from_list([{Pid, kino_trace_agent:registered_name(Pid)} || Pid <- Pids]).


