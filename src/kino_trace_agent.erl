%% @doc kino_trace's agent: what runs on a traced node of a multi-node trace.
%%
%% The tracing node ships this module (and kino_trace_fallback, and the native tracer
%% kino_trace_tracer with its NIF library when it can load there) to a node that does not
%% have kino_trace, for the duration of its traces, with code:load_binary/3. It is plain
%% OTP: it calls no Elixir module, so the node's Elixir version (or its lack of Elixir)
%% does not matter.
%%
%% Two kinds of process run this module:
%%
%%   * the keeper, registered as kino_trace_agent: one per node. It loads the native
%%     tracer once (its NIF library is written to a private temporary directory, loaded,
%%     and deleted at once with its directory: the loaded library needs no file), starts
%%     the workers and keeps them from tracing one another. When its last worker ends it
%%     deletes and purges every module the tracing node loaded, itself last, and exits:
%%     nothing of kino_trace is left on the node.
%%   * a worker per trace: it owns the OTP trace session and the tracer's session (the
%%     NIF's, or a kino_trace_fallback process when the NIF cannot load), runs the
%%     trace:F(Session, Args...) calls its local session asks for, and answers drain
%%     requests with raw events (decoded on the tracing node). It monitors that local
%%     session: when it ends, or the connection drops, the worker destroys the trace
%%     session and ends.
%%
%% Invariants: no agent process is ever traced by an agent's trace session (each session
%% untraces every agent process, including those started later); a worker never outlives
%% its local session; the keeper never outlives its last worker.
-module(kino_trace_agent).
-behaviour(gen_server).

-export([start_worker/1, version/0]).
-export([init/1, handle_call/3, handle_cast/2, handle_info/2, terminate/2]).
-export([worker/5]).

-define(KEEPER, kino_trace_agent).
-define(TRACER, kino_trace_tracer).
-define(FALLBACK, kino_trace_fallback).
-define(TRACE_FUNS, [process, function, send, recv, info]).
%% how long a worker has to end after its local session did, before the keeper ends it
-define(REAP_MS, 2000).

-record(keeper, {
    %% modules the tracing nodes loaded here: deleted and purged when the keeper ends
    shipped = [] :: [module()],
    %% the native tracer here: unknown (not tried yet), ok, or {error, Reason}
    native = unknown :: unknown | ok | {error, binary()},
    %% worker pid => {monitor, its pids (the worker and its tracer), its trace session}
    workers = #{} :: #{pid() => {reference(), [pid()], term()}},
    %% monitor of a worker's local session => the worker
    owners = #{} :: #{reference() => pid()}
}).

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
    flags = [] :: [list()]
}).

%% --- API, called over erpc by the tracing node ---------------------------------------

%% @doc Starts a worker for one trace; returns {ok, Worker, Mode} or {error, Message}.
%% Config: owner (the local session), id (what its messages carry), limits (as
%% kino_trace_tracer:new_session/2 takes them), shipped (modules just loaded for it),
%% native: {Beam, Nif} (the tracer's object code and NIF library bytes to load here),
%% preloaded (the tracer is loaded here already, in this version), or {fallback, Reason};
%% or counters => true: a session for the VM's call counters only (no tracer, no events).
start_worker(Config) ->
    case keeper(Config) of
        {ok, Keeper} -> gen_server:call(Keeper, {start_worker, Config}, 60000);
        {error, _} = Error -> Error
    end.

%% @doc The agent's version: its own object code's md5.
version() -> erlang:get_module_info(?MODULE, md5).

keeper(Config) ->
    case gen_server:start({local, ?KEEPER}, ?MODULE, {keeper, Config}, []) of
        {ok, Pid} -> {ok, Pid};
        {error, {already_started, Pid}} -> {ok, Pid};
        {error, Reason} -> {error, iolist_to_binary(io_lib:format("the agent did not start: ~p", [Reason]))}
    end.

%% --- gen_server ------------------------------------------------------------------------

init({keeper, _Config}) ->
    process_flag(trap_exit, true),
    {ok, #keeper{}}.

handle_call({start_worker, Config}, _From, #keeper{} = State0) ->
    State1 = State0#keeper{shipped = lists:usort(maps:get(shipped, Config, []) ++ State0#keeper.shipped)},
    {Mode, State} = mode(Config, State1),
    Workers = State#keeper.workers,
    Agents = [self() | lists:append([Pids || {_, Pids, _} <- maps:values(Workers)])],
    Sessions = [Session || {_, _, Session} <- maps:values(Workers)],
    {Worker, Ref} = spawn_monitor(?MODULE, worker, [self(), Config, Mode, Agents, Sessions]),
    receive
        {Worker, started, Pids, Session} ->
            %% the other workers keep the new ones out of their traces from now on
            [W ! {untrace, Pids} || W <- maps:keys(Workers)],
            %% a worker that does not end with its local session (hung) is ended
            OwnerRef = erlang:monitor(process, maps:get(owner, Config)),
            {reply, {ok, Worker, Mode}, State#keeper{workers = Workers#{Worker => {Ref, Pids, Session}},
                                                     owners = (State#keeper.owners)#{OwnerRef => Worker}}};
        {'DOWN', Ref, process, Worker, Reason} ->
            maybe_end({error, format("the agent's worker did not start: ~tp", [Reason])}, State)
    end;
handle_call(_Request, _From, State) ->
    {reply, {error, unknown_request}, State}.

handle_cast(_Message, State) ->
    {noreply, State}.

%% a worker ended, or a worker's local session did: the worker has a moment to end
handle_info({'DOWN', Ref, process, Pid, _}, #keeper{workers = Workers, owners = Owners} = State) ->
    case {Workers, Owners} of
        {#{Pid := {Ref, _, _}}, _} ->
            maybe_end(ok, State#keeper{workers = maps:remove(Pid, Workers)});
        {_, #{Ref := Worker}} ->
            erlang:send_after(?REAP_MS, self(), {reap, Worker}),
            {noreply, State#keeper{owners = maps:remove(Ref, Owners)}};
        _ ->
            {noreply, State}
    end;
handle_info({reap, Worker}, #keeper{workers = Workers} = State) ->
    is_map_key(Worker, Workers) andalso exit(Worker, kill),
    {noreply, State};
handle_info(_Message, State) ->
    {noreply, State}.

terminate(_Reason, #keeper{} = State) ->
    unload(State#keeper.shipped).

%% --- keeper ----------------------------------------------------------------------------

%% The tracer this worker gets: the native one unless the config asks for the fallback or
%% the NIF cannot load here; tried once per keeper.
mode(#{counters := true}, State) ->
    {counters, State};
mode(#{native := {fallback, Why}}, State) ->
    {{fallback, to_binary(Why)}, State};
mode(#{native := Native} = Config, #keeper{native = unknown, shipped = Shipped} = State) ->
    case load_native(Native) of
        {ok, Loaded} -> mode(Config, State#keeper{native = ok, shipped = lists:usort(Loaded ++ Shipped)});
        {error, _} = Error -> mode(Config, State#keeper{native = Error})
    end;
mode(_Config, #keeper{native = ok} = State) ->
    {native, State};
mode(_Config, #keeper{native = {error, Why}} = State) ->
    {{fallback, Why}, State}.

%% Writes the NIF library to a new private directory, loads the tracer module (whose
%% on_load reads the path from a persistent_term set for that moment), and deletes the
%% file and the directory at once.
load_native(preloaded) ->
    loaded_native([]);
load_native({Beam, Nif}) ->
    case nif_dir() of
        {ok, Dir} ->
            Lib = filename:join(Dir, "kino_trace_nif"),
            %% the name erlang:load_nif/2 looks for: Lib and the system's suffix
            Suffix = case os:type() of {win32, _} -> ".dll"; _ -> ".so" end,
            try file:write_file(Lib ++ Suffix, Nif) of
                ok ->
                    persistent_term:put({?TRACER, nif_path}, Lib),
                    try code:load_binary(?TRACER, "kino_trace_tracer.beam", Beam)
                    after persistent_term:erase({?TRACER, nif_path})
                    end,
                    case loaded_native([?TRACER]) of
                        {ok, _} = Ok ->
                            Ok;
                        Error ->
                            %% the tracer keeps why it did not load: nothing may stay here
                            _ = persistent_term:erase({?TRACER, load_error}),
                            unload([?TRACER]),
                            Error
                    end;
                {error, Reason} ->
                    {error, format("cannot write the native tracer to ~ts (~p)", [Dir, Reason])}
            after
                _ = file:delete(Lib ++ Suffix),
                _ = file:del_dir(Dir)
            end;
        {error, _} = Error ->
            Error
    end.

loaded_native(Loaded) ->
    case quiet(fun() -> ?TRACER:loaded() end) of
        true -> {ok, Loaded};
        _ -> {error, format("the native tracer did not load: ~ts", [load_error()])}
    end.

load_error() ->
    case quiet(fun() -> ?TRACER:load_error() end) of
        Reason when is_binary(Reason) -> Reason;
        Other -> format("~p", [Other])
    end.

%% F's value, or {'EXIT', {Class, Reason}} when it raises: what the deprecated
%% `catch Expr` was used for.
quiet(F) ->
    try F()
    catch Class:Reason -> {'EXIT', {Class, Reason}}
    end.

%% A new directory of our own under the node's temporary directory ($TMPDIR or /tmp).
nif_dir() ->
    Base = case os:getenv("TMPDIR") of
               false -> "/tmp";
               "" -> "/tmp";
               Dir -> Dir
           end,
    Name = "kino_trace-" ++ os:getpid() ++ "-" ++ integer_to_list(erlang:unique_integer([positive])),
    Path = filename:join(Base, Name),
    case file:make_dir(Path) of
        ok ->
            _ = file:change_mode(Path, 8#700),
            {ok, Path};
        {error, Reason} ->
            {error, format("cannot create a directory in ~ts for the native tracer (~p)", [Base, Reason])}
    end.

%% The keeper ends with its last worker, unloading what was shipped.
maybe_end(Reply, #keeper{workers = Workers} = State) when map_size(Workers) =:= 0 ->
    case Reply of
        ok -> {stop, normal, State};
        _ -> {stop, normal, Reply, State}
    end;
maybe_end(ok, State) ->
    {noreply, State};
maybe_end(Reply, State) ->
    {reply, Reply, State}.

%% Deletes and purges the modules the tracing nodes loaded. This module goes last, and
%% its purge runs in a process of its own (a purge kills whoever still runs the old code:
%% this process, once it is done).
unload(Modules) ->
    Others = [M || M <- Modules, M =/= ?MODULE],
    lists:foreach(fun(M) -> _ = code:delete(M), _ = code:purge(M) end, Others),
    case lists:member(?MODULE, Modules) of
        true ->
            _ = code:delete(?MODULE),
            _ = spawn(code, purge, [?MODULE]),
            ok;
        false ->
            ok
    end.

%% --- worker ----------------------------------------------------------------------------

%% A worker is a plain process, not a gen_server: its first act is to leave the other
%% traces of this node (a trace of every new process, or of gen_server's functions,
%% would otherwise see it start), before it runs anything else. It answers gen calls.
worker(Keeper, Config, Mode, Agents, Sessions) ->
    [untrace(Session, [self()]) || Session <- Sessions],
    process_flag(trap_exit, true),
    #{owner := Owner, id := Id, limits := Limits} = Config,
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
                     module = Module, handle = Handle, session = Session, mode = Mode},
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
        %% the tracer's wake-ups go on to the local session, under its id
        {kino_trace, _NativeId, Message} ->
            Owner ! {kino_trace, Id, Message},
            worker_loop(State);
        {untrace, Pids} ->
            untrace(State#worker.session, Pids),
            worker_loop(State#worker{agents = lists:usort(Pids ++ State#worker.agents)});
        {'DOWN', OwnerRef, process, _, _} ->
            end_worker(State);
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
request({drain, Max}, #worker{module = M, handle = H} = State) ->
    {Raw, More} = M:drain(H, Max),
    {{Raw, More, names(Raw), erlang:time_offset(nanosecond)}, State};
request(counters, #worker{module = ?FALLBACK, handle = H} = State) ->
    %% and what only the fallback knows: what it received, how often it switched off
    {maps:put(fallback, ?FALLBACK:info(H), ?FALLBACK:counters(H)), State};
request(counters, #worker{module = M, handle = H} = State) ->
    {M:counters(H), State};
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

%% The local session is gone (ended, or the connection dropped): so is the trace here.
end_worker(#worker{module = M, handle = H} = State) ->
    _ = M =/= none andalso quiet(fun() -> M:close(H) end),
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
    _ = quiet(fun() -> trace:session_destroy(Session) end),
    State#worker{session = undefined}.

tracer_pids(#worker{module = ?FALLBACK, handle = H}) -> [?FALLBACK:tracer(H)];
tracer_pids(_State) -> [].

untrace(Session, Pids) ->
    _ = [quiet(fun() -> trace:process(Session, Pid, false, [all]) end) || Pid <- Pids, is_pid(Pid)],
    ok.

%% The registered names of the processes of a batch, for the tracing node.
names(Raw) ->
    Pids = lists:usort([element(2, Event) || Event <- Raw, is_pid(element(2, Event))]),
    maps:from_list([{Pid, name(Pid)} || Pid <- Pids]).

name(Pid) ->
    case erlang:process_info(Pid, registered_name) of
        {registered_name, Name} when is_atom(Name) -> Name;
        _ -> nil
    end.

format(Format, Args) -> iolist_to_binary(io_lib:format(Format, Args)).

to_binary(B) when is_binary(B) -> B;
to_binary(Other) -> format("~tp", [Other]).
