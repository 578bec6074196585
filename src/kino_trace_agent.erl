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
%%   * the keeper, registered as kino_trace_agent: one per node. It starts as soon as
%%     this module is loaded (in the same call: hold/3), holding for the tracing process
%%     that shipped it, and loads the other modules it was sent; it loads the native
%%     tracer once (its NIF library is written to a private temporary directory, loaded,
%%     and deleted at once with its directory: the loaded library needs no file), starts
%%     the workers and keeps them from tracing one another. When its last worker has
%%     ended and no tracing process holds it (one that died before its worker started
%%     counts as ended), it deletes and purges every module it was sent, itself last,
%%     and exits: nothing of kino_trace is left on the node.
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

-export([hold/3, release/1, start_worker/1, end_worker/1, version/0]).
-export([init/1, handle_call/3, handle_cast/2, handle_info/2, terminate/2]).
-export([worker/5]).

-define(KEEPER, kino_trace_agent).
-define(TRACER, kino_trace_tracer).
-define(FALLBACK, kino_trace_fallback).
-define(TRACE_FUNS, [process, function, send, recv, info]).
%% how long a worker has to end after its local session did, before the keeper ends it
-define(REAP_MS, 2000).
%% names tried for the NIF's private directory before giving up (another user's entries)
-define(DIR_TRIES, 10).

-include_lib("kernel/include/file.hrl").

-record(keeper, {
    %% modules the tracing nodes loaded here: deleted and purged when the keeper ends
    shipped = [] :: [module()],
    %% the native tracer here: unknown (not tried yet), ok, or {error, Reason}
    native = unknown :: unknown | ok | {error, binary()},
    %% worker pid => {monitor, its pids (the worker and its tracer), its trace session}
    workers = #{} :: #{pid() => {reference(), [pid()], term()}},
    %% monitor of a worker's local session => the worker
    owners = #{} :: #{reference() => pid()},
    %% tracing processes between shipping and their worker's start => their monitor: the
    %% keeper stays for them, and leaves (unloading) if they die before the worker starts
    holders = #{} :: #{pid() => reference()},
    %% who asked to end the last worker (end_worker/1): answered once all is unloaded
    ending :: gen_server:from() | undefined
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

%% @doc Starts the keeper (or finds it) and has it hold for Starter, the tracing node's
%% process that is starting a trace here: Shipped are the modules it just loaded here
%% (this one, when it was missing: the tracing node loads it and calls this in one
%% remote evaluation), Load the other missing ones, {Module, ObjectCode}, which the keeper
%% loads. Whatever happens to Starter, what it sent leaves with the keeper: if Starter
%% dies before its worker starts, the keeper ends (with no other worker or holder),
%% unloading it. Returns ok or {error, Message}.
hold(Starter, Shipped, Load) ->
    case keeper() of
        {ok, Keeper} -> gen_server:call(Keeper, {hold, Starter, Shipped, Load}, 60000);
        {error, _} = Error -> Error
    end.

%% @doc Starter no longer holds the keeper (its start failed): the keeper ends if nothing
%% else holds it.
release(Starter) ->
    case whereis(?KEEPER) of
        undefined -> ok;
        Keeper -> gen_server:call(Keeper, {release, Starter}, 60000)
    end.

%% @doc Starts a worker for one trace; returns {ok, Worker, Mode} or {error, Message}.
%% Config: owner (the local session), id (what its messages carry), limits (as
%% kino_trace_tracer:new_session/2 takes them), starter (the holder it replaces, see
%% hold/3), native: {Beam, Nif} (the tracer's object code and NIF library bytes to load
%% here), preloaded (the tracer is loaded here already, in this version), or {fallback,
%% Reason}; or counters => true: a session for the VM's call counters only (no tracer,
%% no events).
start_worker(Config) ->
    case keeper() of
        {ok, Keeper} -> gen_server:call(Keeper, {start_worker, Config}, 60000);
        {error, _} = Error -> Error
    end.

%% @doc Ends Worker (its trace, its tracer) and returns once it is gone: {removed, Purger}
%% when it was the last and the keeper has removed what it was sent (this module's last
%% purge runs in Purger, once the keeper has exited: `none' when it was the node's own),
%% or kept when other traces still run here.
end_worker(Worker) ->
    case whereis(?KEEPER) of
        undefined -> {removed, none};
        Keeper -> gen_server:call(Keeper, {end_worker, Worker}, 60000)
    end.

%% @doc The agent's version: its own object code's md5.
version() -> erlang:get_module_info(?MODULE, md5).

keeper() ->
    case gen_server:start({local, ?KEEPER}, ?MODULE, keeper, []) of
        {ok, Pid} -> {ok, Pid};
        {error, {already_started, Pid}} -> {ok, Pid};
        {error, Reason} -> {error, iolist_to_binary(io_lib:format("the agent did not start: ~p", [Reason]))}
    end.

%% --- gen_server ------------------------------------------------------------------------

init(keeper) ->
    process_flag(trap_exit, true),
    {ok, #keeper{}}.

handle_call({hold, Starter, Shipped, Load}, _From, #keeper{} = State0) ->
    State = hold_for(Starter, add_shipped(Shipped, State0)),
    case load(Load, State) of
        {ok, Next} -> {reply, ok, Next};
        %% the start fails: what was loaded for it goes, unless a trace runs here
        {{error, _} = Error, Next} -> maybe_end(Error, unhold(Starter, Next), reply)
    end;
handle_call({release, Starter}, _From, State) ->
    maybe_end(ok, unhold(Starter, State), reply);
handle_call({start_worker, Config}, _From, #keeper{} = State0) ->
    State1 = add_shipped(maps:get(shipped, Config, []), State0),
    {Mode, State2} = mode(Config, State1),
    %% the worker (or the failure) replaces the starter's hold
    State = unhold(maps:get(starter, Config, undefined), State2),
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
            maybe_end({error, format("the agent's worker did not start: ~tp", [Reason])}, State, reply)
    end;
handle_call({end_worker, Worker}, From, #keeper{workers = Workers} = State) ->
    case Workers of
        #{Worker := {Ref, Pids, _}} -> await_end(Worker, Ref, Pids);
        _ -> ok
    end,
    Owners = maps:filter(fun(_, W) -> W =/= Worker end, State#keeper.owners),
    [erlang:demonitor(R, [flush]) || R <- maps:keys(State#keeper.owners), not is_map_key(R, Owners)],
    maybe_end(kept, State#keeper{workers = maps:remove(Worker, Workers), owners = Owners}, {removed, From});
handle_call(_Request, _From, State) ->
    {reply, {error, unknown_request}, State}.

handle_cast(_Message, State) ->
    {noreply, State}.

%% a worker ended, a worker's local session did, or a holder died (its node too,
%% perhaps) before its worker started: the worker has a moment to end
handle_info({'DOWN', Ref, process, Pid, _}, #keeper{workers = Workers, owners = Owners, holders = Holders} = State) ->
    case {Workers, Owners, Holders} of
        {#{Pid := {Ref, _, _}}, _, _} ->
            maybe_end(ok, State#keeper{workers = maps:remove(Pid, Workers)}, noreply);
        {_, #{Ref := Worker}, _} ->
            erlang:send_after(?REAP_MS, self(), {reap, Worker}),
            {noreply, State#keeper{owners = maps:remove(Ref, Owners)}};
        {_, _, #{Pid := Ref}} ->
            maybe_end(ok, State#keeper{holders = maps:remove(Pid, Holders)}, noreply);
        _ ->
            {noreply, State}
    end;
handle_info({reap, Worker}, #keeper{workers = Workers} = State) ->
    is_map_key(Worker, Workers) andalso exit(Worker, kill),
    {noreply, State};
handle_info(_Message, State) ->
    {noreply, State}.

%% (this module may be deleted here: nothing after this calls into it)
terminate(_Reason, #keeper{shipped = Shipped, ending = Ending}) ->
    Purger = unload(Shipped),
    _ = Ending =/= undefined andalso gen_server:reply(Ending, {removed, Purger}),
    ok.

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
    case private_dir() of
        {ok, Dir} ->
            try write_private(Dir, Nif) of
                {ok, Lib} ->
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
                {error, _} = Error ->
                    Error
            after
                _ = file:del_dir_r(Dir)
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

%% The NIF library goes where no other user of this machine can reach it before it is
%% loaded (another user's library there would run in this node): a new directory under
%% the node's temporary directory ($TMPDIR or /tmp), under a name no one can guess
%% (another one is tried when the name is taken), made mode 0700 and checked to be a
%% directory (not a link) of this node's user with that mode alone. The temporary
%% directory must keep other users from renaming it: sticky (as /tmp), or writable by
%% its owner alone. Whatever another user put in it while it was new (its mode came from
%% the umask for that moment) is removed before anything is written.
private_dir() ->
    Base = case os:getenv("TMPDIR") of
               false -> "/tmp";
               "" -> "/tmp";
               Dir -> Dir
           end,
    case safe_base(os:type(), Base) of
        ok -> private_dir(Base, ?DIR_TRIES);
        {error, _} = Error -> Error
    end.

safe_base({win32, _}, _Base) ->
    ok;
safe_base(_Unix, Base) ->
    case file:read_file_info(Base) of
        {ok, #file_info{type = directory, mode = Mode}}
          when Mode band 8#022 =/= 0, Mode band 8#1000 =:= 0 ->
            {error, format("cannot put the native tracer in ~ts: other users can write there and it is "
                           "not sticky (mode ~.8B)", [Base, Mode band 8#7777])};
        {ok, #file_info{type = directory}} ->
            ok;
        {ok, #file_info{type = Type}} ->
            {error, format("cannot create a directory in ~ts for the native tracer (it is a ~p)", [Base, Type])};
        {error, Reason} ->
            {error, format("cannot create a directory in ~ts for the native tracer (~p)", [Base, Reason])}
    end.

private_dir(Base, Tries) ->
    Dir = filename:join(Base, "kino_trace-" ++ random_name()),
    case file:make_dir(Dir) of
        ok ->
            case make_private(os:type(), Dir) of
                ok ->
                    {ok, Dir};
                {error, _} = Error ->
                    _ = file:del_dir_r(Dir),
                    Error
            end;
        {error, eexist} when Tries > 1 ->
            private_dir(Base, Tries - 1);
        {error, Reason} ->
            {error, format("cannot create a directory in ~ts for the native tracer (~p)", [Base, Reason])}
    end.

make_private({win32, _}, _Dir) ->
    ok;
make_private(_Unix, Dir) ->
    Mode = 8#700,
    case {file:change_mode(Dir, Mode), file:read_link_info(Dir)} of
        {ok, {ok, #file_info{type = directory, mode = M, uid = Uid}}} when M band 8#7777 =:= Mode ->
            case own_uid(Uid) of
                true -> clear(Dir);
                false -> {error, format("~ts is not this node's user's (uid ~p): not used for the native tracer", [Dir, Uid])}
            end;
        {ok, {ok, #file_info{type = Type, mode = M}}} ->
            {error, format("~ts is not a private directory (a ~p, mode ~.8B): not used for the native tracer",
                           [Dir, Type, M band 8#7777])};
        {Changed, Info} ->
            {error, format("cannot make ~ts private for the native tracer (~p, ~p)", [Dir, Changed, Info])}
    end.

%% Whether Uid is this node's user's (the owner of /proc/self where there is one; else
%% the new directory is ours: mkdir made it, and the sticky or private temporary
%% directory keeps anyone else from putting another in its place).
own_uid(Uid) ->
    case file:read_file_info("/proc/self") of
        {ok, #file_info{uid = Own}} -> Own =:= Uid;
        {error, _} -> true
    end.

%% Removes whatever another user put in Dir while it was new; no one else can now.
clear(Dir) ->
    case file:list_dir_all(Dir) of
        {ok, []} ->
            ok;
        {ok, Names} ->
            _ = [file:del_dir_r(filename:join(Dir, Name)) || Name <- Names],
            case file:list_dir_all(Dir) of
                {ok, []} -> ok;
                Left -> {error, format("cannot clear ~ts for the native tracer: another user's ~p", [Dir, Left])}
            end;
        {error, Reason} ->
            {error, format("cannot read ~ts for the native tracer (~p)", [Dir, Reason])}
    end.

%% Writes the NIF library to a new file of Dir (created exclusively: never a file or
%% link that was there) and checks what is there before it is loaded: a regular file of
%% this user, with these very bytes. Returns the path erlang:load_nif/2 takes (no suffix).
write_private(Dir, Nif) ->
    Lib = filename:join(Dir, "kino_trace_nif_" ++ random_name()),
    %% the name erlang:load_nif/2 looks for: Lib and the system's suffix
    File = Lib ++ case os:type() of {win32, _} -> ".dll"; _ -> ".so" end,
    Written =
        case file:open(File, [write, exclusive, raw, binary]) of
            {ok, Fd} ->
                try file:write(Fd, Nif)
                after _ = file:close(Fd)
                end;
            {error, _} = Open ->
                Open
        end,
    Size = byte_size(Nif),
    case {Written, file:read_link_info(File), file:read_file(File)} of
        {ok, {ok, #file_info{type = regular, size = Size}}, {ok, Nif}} ->
            {ok, Lib};
        {{error, Reason}, _, _} ->
            {error, format("cannot write the native tracer to ~ts (~p)", [Dir, Reason])};
        {ok, Info, _} ->
            {error, format("the native tracer written to ~ts is not what was written (~p): not loaded", [Dir, Info])}
    end.

%% 128 bits no other user can guess, as hex: crypto's where the node has it loaded
%% (it is not loaded for this: the node keeps its modules as they were), else a digest
%% of clocks, counters and figures of this node no one else can read to the nanosecond.
random_name() ->
    Bytes = case erlang:module_loaded(crypto) andalso quiet(fun() -> crypto:strong_rand_bytes(16) end) of
                <<_:128>> = Strong ->
                    Strong;
                _ ->
                    erlang:md5(term_to_binary({os:system_time(), erlang:monotonic_time(), make_ref(),
                                               erlang:unique_integer(), self(), os:getpid(),
                                               erlang:statistics(runtime), erlang:memory(total)}))
            end,
    lists:flatten([io_lib:format("~2.16.0b", [B]) || <<B>> <= Bytes]).

%% The keeper ends with its last worker once nothing holds it, unloading what was
%% shipped (terminate/2). How it answers: reply (Reply, or the end), noreply, or
%% {removed, From} (end_worker/1: Reply while it stays; when it ends, {removed, Purger}
%% once all is unloaded, so From knows the node is as it was when Purger is gone).
maybe_end(Reply, #keeper{workers = Workers, holders = Holders} = State, How)
  when map_size(Workers) =:= 0, map_size(Holders) =:= 0 ->
    case How of
        noreply -> {stop, normal, State};
        reply -> {stop, normal, Reply, State};
        {removed, From} -> {stop, normal, State#keeper{ending = From}}
    end;
maybe_end(_Reply, State, noreply) ->
    {noreply, State};
maybe_end(Reply, State, _How) ->
    {reply, Reply, State}.

add_shipped(Modules, #keeper{shipped = Shipped} = State) ->
    State#keeper{shipped = lists:usort(Modules ++ Shipped)}.

hold_for(Starter, #keeper{holders = Holders} = State) when is_pid(Starter) ->
    case Holders of
        #{Starter := _} -> State;
        _ -> State#keeper{holders = Holders#{Starter => erlang:monitor(process, Starter)}}
    end.

unhold(Starter, #keeper{holders = Holders} = State) ->
    case maps:take(Starter, Holders) of
        {Ref, Rest} -> erlang:demonitor(Ref, [flush]), State#keeper{holders = Rest};
        error -> State
    end.

%% Loads the modules sent with a hold, each counted as shipped before it is loaded.
load([], State) ->
    {ok, State};
load([{Module, Beam} | Rest], State) ->
    Next = add_shipped([Module], State),
    case code:load_binary(Module, atom_to_list(Module) ++ ".beam", Beam) of
        {module, Module} -> load(Rest, Next);
        Other -> {{error, format("could not load ~p on node ~p: ~p", [Module, node(), Other])}, Next}
    end.

%% Ends a worker and waits until it and its tracer are gone (killed if they take longer
%% than ?REAP_MS).
await_end(Worker, Ref, Pids) ->
    Refs = [{Ref, Worker} | [{erlang:monitor(process, P), P} || P <- Pids, P =/= Worker]],
    Worker ! stop,
    lists:foreach(
        fun({R, P}) ->
                receive {'DOWN', R, process, P, _} -> ok
                after ?REAP_MS ->
                        exit(P, kill),
                        receive {'DOWN', R, process, P, _} -> ok end
                end
        end, Refs).

%% Deletes and purges the modules the tracing nodes loaded; returns the process that
%% purges this module, or none. This module goes last: it is deleted here, and purged
%% by a process of its own once the keeper has exited (a purge kills whoever still runs
%% the old code). That process runs erl_eval, so it runs none of this module's code.
unload(Modules) ->
    Others = [M || M <- Modules, M =/= ?MODULE],
    lists:foreach(fun(M) -> _ = code:delete(M), _ = code:purge(M) end, Others),
    case lists:member(?MODULE, Modules) of
        true ->
            _ = code:delete(?MODULE),
            purge_after_exit(self(), ?MODULE);
        false ->
            none
    end.

%% Ref = erlang:monitor(process, Pid), receive {'DOWN', Ref, process, _, _} -> code:purge(Module) end
%% (written as erl_eval takes it: no parser to load here)
purge_after_exit(Pid, Module) ->
    Exprs = [{match, 1, {var, 1, 'Ref'},
              {call, 1, {remote, 1, {atom, 1, erlang}, {atom, 1, monitor}}, [{atom, 1, process}, {var, 1, 'Pid'}]}},
             {'receive', 1,
              [{clause, 1,
                [{tuple, 1, [{atom, 1, 'DOWN'}, {var, 1, 'Ref'}, {atom, 1, process}, {var, 1, '_'}, {var, 1, '_'}]}],
                [],
                [{call, 1, {remote, 1, {atom, 1, code}, {atom, 1, purge}}, [{var, 1, 'Module'}]}]}]}],
    Bindings = erl_eval:add_binding('Module', Module, erl_eval:add_binding('Pid', Pid, erl_eval:new_bindings())),
    spawn(erl_eval, exprs, [Exprs, Bindings]).

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
            end_trace(State);
        %% the keeper ends it: its local session is ending (end_worker/1)
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
end_trace(#worker{module = M, handle = H} = State) ->
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
