%% @doc kino_trace's agent: what runs on a traced node of a multi-node trace.
%%
%% The tracing node ships this module (and kino_trace_agent_worker,
%% kino_trace_agent_native, the fallback tracer's modules, and the native tracer
%% kino_trace_tracer with its NIF library when it can load there) to a node that does not
%% have kino_trace, for the duration of its traces, with code:load_binary/3. It is plain
%% OTP: it calls no Elixir module, so the node's Elixir version (or its lack of Elixir)
%% does not matter.
%%
%% Two kinds of process run there:
%%
%%   * the keeper, this module, registered as kino_trace_agent: one per node. It starts
%%     as soon as this module is loaded (in the same call: hold/3), holding for the
%%     tracing process that shipped it, and loads the other modules it was sent; it loads
%%     the native tracer once (kino_trace_agent_native: its NIF library is written to a
%%     private temporary directory, loaded, and deleted at once with its directory: the
%%     loaded library needs no file), starts the workers and keeps them from tracing one
%%     another. When its last worker has ended and no tracing process holds it (one that
%%     died before its worker started counts as ended), it deletes and purges every
%%     module it was sent, itself last, and exits: nothing of kino_trace is left on the
%%     node.
%%   * a worker per trace (kino_trace_agent_worker): it owns the OTP trace session and
%%     the tracer's session (the NIF's, or a kino_trace_fallback process when the NIF
%%     cannot load), runs the trace:F(Session, Args...) calls its local session asks
%%     for, and answers drain requests with raw events (decoded on the tracing node). It
%%     monitors that local session: when it ends, or the connection drops, the worker
%%     destroys the trace session and ends.
%%
%% Invariants: no agent process is ever traced by an agent's trace session (each session
%% untraces every agent process, including those started later); a worker never outlives
%% its local session; the keeper never outlives its last worker. This module is loaded
%% first and removed last: the agent's other modules call its quiet/1 and format/2.
-module(kino_trace_agent).
-behaviour(gen_server).

-export([hold/3, release/1, start_worker/1, end_worker/1, version/0]).
-export([init/1, handle_call/3, handle_cast/2, handle_info/2, terminate/2]).
-export([quiet/1, format/2, registered_name/1]).

%% The tracer a worker runs (kino_trace_agent_worker): the NIF, the pure-Erlang one
%% (and why), or none (call counters only).
-type mode() :: native | {fallback, binary()} | counters.
%% A worker's config (start_worker/1 says what its keys are).
-type config() :: #{atom() => term()}.

-define(KEEPER, kino_trace_agent).
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
    owners = #{} :: #{reference() => pid()},
    %% tracing processes between shipping and their worker's start => their monitor: the
    %% keeper stays for them, and leaves (unloading) if they die before the worker starts
    holders = #{} :: #{pid() => reference()},
    %% who asked to end the last worker (end_worker/1): answered once all is unloaded
    ending :: gen_server:from() | undefined
}).
-type state() :: #keeper{}.

%% --- API, called over erpc by the tracing node ---------------------------------------

%% @doc Starts the keeper (or finds it) and has it hold for Starter, the tracing node's
%% process that is starting a trace here: Shipped are the modules it just loaded here
%% (this one, when it was missing: the tracing node loads it and calls this in one
%% remote evaluation), Load the other missing ones, {Module, ObjectCode}, which the keeper
%% loads. Whatever happens to Starter, what it sent leaves with the keeper: if Starter
%% dies before its worker starts, the keeper ends (with no other worker or holder),
%% unloading it. Returns ok or {error, Message}.
-spec hold(pid(), [module()], [{module(), binary()}]) -> ok | {error, binary()}.
hold(Starter, Shipped, Load) ->
    case keeper() of
        {ok, Keeper} -> gen_server:call(Keeper, {hold, Starter, Shipped, Load}, 60000);
        {error, _} = Error -> Error
    end.

%% @doc Starter no longer holds the keeper (its start failed): the keeper ends if nothing
%% else holds it.
-spec release(pid()) -> ok.
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
-spec start_worker(config()) -> {ok, pid(), mode()} | {error, binary()}.
start_worker(Config) ->
    case keeper() of
        {ok, Keeper} -> gen_server:call(Keeper, {start_worker, Config}, 60000);
        {error, _} = Error -> Error
    end.

%% @doc Ends Worker (its trace, its tracer) and returns once it is gone: {removed, Purger}
%% when it was the last and the keeper has removed what it was sent (this module's last
%% purge runs in Purger, once the keeper has exited: `none' when it was the node's own),
%% or kept when other traces still run here.
-spec end_worker(pid()) -> {removed, pid() | none} | kept.
end_worker(Worker) ->
    case whereis(?KEEPER) of
        undefined -> {removed, none};
        Keeper -> gen_server:call(Keeper, {end_worker, Worker}, 60000)
    end.

%% @doc The agent's version: its own object code's md5.
-spec version() -> binary().
version() -> erlang:get_module_info(?MODULE, md5).

keeper() ->
    case gen_server:start({local, ?KEEPER}, ?MODULE, keeper, []) of
        {ok, Pid} -> {ok, Pid};
        {error, {already_started, Pid}} -> {ok, Pid};
        {error, Reason} -> {error, iolist_to_binary(io_lib:format("the agent did not start: ~p", [Reason]))}
    end.

%% --- gen_server ------------------------------------------------------------------------

-spec init(keeper) -> {ok, state()}.
init(keeper) ->
    process_flag(trap_exit, true),
    {ok, #keeper{}}.

-spec handle_call(term(), gen_server:from(), state()) ->
          {reply, term(), state()} | {stop, normal, term(), state()} | {stop, normal, state()}.
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
    {Worker, Ref} = spawn_monitor(kino_trace_agent_worker, run, [self(), Config, Mode, Agents, Sessions]),
    receive
        {Worker, started, Pids, Session} ->
            %% the other workers keep the new ones out of their traces from now on
            [W ! {untrace, Pids} || W <- maps:keys(Workers)],
            %% a worker that does not end with its local session (hung) is ended
            OwnerRef = erlang:monitor(process, maps:get(owner, Config)),
            {reply, {ok, Worker, Mode}, State#keeper{workers = Workers#{Worker => {Ref, Pids, Session}},
                                                     owners = (State#keeper.owners)#{OwnerRef => Worker}}};
        %% (a worker that refuses its config says why)
        {'DOWN', Ref, process, Worker, {refused, Message}} when is_binary(Message) ->
            maybe_end({error, Message}, State, reply);
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

-spec handle_cast(term(), state()) -> {noreply, state()}.
handle_cast(_Message, State) ->
    {noreply, State}.

%% a worker ended, a worker's local session did, or a holder died (its node too,
%% perhaps) before its worker started: the worker has a moment to end
-spec handle_info(term(), state()) -> {noreply, state()} | {stop, normal, state()}.
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
-spec terminate(term(), state()) -> ok.
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
    case kino_trace_agent_native:load(Native) of
        {ok, Loaded} -> mode(Config, State#keeper{native = ok, shipped = lists:usort(Loaded ++ Shipped)});
        {error, _} = Error -> mode(Config, State#keeper{native = Error})
    end;
mode(_Config, #keeper{native = ok} = State) ->
    {native, State};
mode(_Config, #keeper{native = {error, Why}} = State) ->
    {{fallback, Why}, State}.

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


%% --- for the agent's other modules too -------------------------------------------------

%% F's value, or {'EXIT', {Class, Reason}} when it raises: what the deprecated
%% `catch Expr` was used for.
-spec quiet(fun(() -> T)) -> T | {'EXIT', {error | exit | throw, term()}}.
quiet(F) ->
    try F()
    catch Class:Reason -> {'EXIT', {Class, Reason}}
    end.

%% A binary of io_lib:format/2's text.
-spec format(io:format(), [term()]) -> binary().
format(Format, Args) -> iolist_to_binary(io_lib:format(Format, Args)).

%% The registered name of Pid (a process of this node), or nil: what the tracing
%% node's decoder names its events with.
-spec registered_name(pid()) -> atom().
registered_name(Pid) ->
    case erlang:process_info(Pid, registered_name) of
        {registered_name, Name} when is_atom(Name) -> Name;
        _ -> nil
    end.

to_binary(B) when is_binary(B) -> B;
to_binary(Other) -> format("~tp", [Other]).
