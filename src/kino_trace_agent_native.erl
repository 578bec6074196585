%% @doc kino_trace's agent: loading the native tracer on a traced node, for the keeper
%% (kino_trace_agent) when a trace there asks for it.
%%
%% The tracer's NIF library goes to a new private directory under the node's temporary
%% directory, is loaded from there by the tracer module's on_load, and is deleted with
%% its directory at once (the loaded library needs no file). Nothing is left when the
%% tracer does not load: the module is deleted and purged, its reason kept in the error.
-module(kino_trace_agent_native).

-export([load/1]).

-define(TRACER, kino_trace_tracer).
%% names tried for the NIF's private directory before giving up (another user's entries)
-define(DIR_TRIES, 10).

-include_lib("kernel/include/file.hrl").

%% @doc Loads the native tracer: preloaded (it is loaded here already, in this version)
%% or {Beam, Nif}, its object code and NIF library. Returns {ok, Loaded}, the modules
%% it loaded here (to remove when the agent leaves), or {error, Message}. It writes the
%% NIF library to a new private directory, loads the tracer module (whose on_load reads
%% the path from a persistent_term set for that moment), and deletes the file and the
%% directory at once.
load(preloaded) ->
    loaded_native([]);
load({Beam, Nif}) ->
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
                            _ = code:delete(?TRACER),
                            _ = code:purge(?TRACER),
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
    case kino_trace_agent:quiet(fun() -> ?TRACER:loaded() end) of
        true -> {ok, Loaded};
        _ -> {error, kino_trace_agent:format("the native tracer did not load: ~ts", [load_error()])}
    end.

load_error() ->
    case kino_trace_agent:quiet(fun() -> ?TRACER:load_error() end) of
        Reason when is_binary(Reason) -> Reason;
        Other -> kino_trace_agent:format("~p", [Other])
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
            {error, kino_trace_agent:format("cannot put the native tracer in ~ts: other users can write there and it is "
                           "not sticky (mode ~.8B)", [Base, Mode band 8#7777])};
        {ok, #file_info{type = directory}} ->
            ok;
        {ok, #file_info{type = Type}} ->
            {error, kino_trace_agent:format("cannot create a directory in ~ts for the native tracer (it is a ~p)", [Base, Type])};
        {error, Reason} ->
            {error, kino_trace_agent:format("cannot create a directory in ~ts for the native tracer (~p)", [Base, Reason])}
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
            {error, kino_trace_agent:format("cannot create a directory in ~ts for the native tracer (~p)", [Base, Reason])}
    end.

make_private({win32, _}, _Dir) ->
    ok;
make_private(_Unix, Dir) ->
    Mode = 8#700,
    case {file:change_mode(Dir, Mode), file:read_link_info(Dir)} of
        {ok, {ok, #file_info{type = directory, mode = M, uid = Uid}}} when M band 8#7777 =:= Mode ->
            case own_uid(Uid) of
                true -> clear(Dir);
                false -> {error, kino_trace_agent:format("~ts is not this node's user's (uid ~p): not used for the native tracer", [Dir, Uid])}
            end;
        {ok, {ok, #file_info{type = Type, mode = M}}} ->
            {error, kino_trace_agent:format("~ts is not a private directory (a ~p, mode ~.8B): not used for the native tracer",
                           [Dir, Type, M band 8#7777])};
        {Changed, Info} ->
            {error, kino_trace_agent:format("cannot make ~ts private for the native tracer (~p, ~p)", [Dir, Changed, Info])}
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
                Left -> {error, kino_trace_agent:format("cannot clear ~ts for the native tracer: another user's ~p", [Dir, Left])}
            end;
        {error, Reason} ->
            {error, kino_trace_agent:format("cannot read ~ts for the native tracer (~p)", [Dir, Reason])}
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
            {error, kino_trace_agent:format("cannot write the native tracer to ~ts (~p)", [Dir, Reason])};
        {ok, Info, _} ->
            {error, kino_trace_agent:format("the native tracer written to ~ts is not what was written (~p): not loaded", [Dir, Info])}
    end.

%% 128 bits no other user can guess, as hex: crypto's where the node has it loaded
%% (it is not loaded for this: the node keeps its modules as they were), else a digest
%% of clocks, counters and figures of this node no one else can read to the nanosecond.
random_name() ->
    Bytes = case erlang:module_loaded(crypto) andalso kino_trace_agent:quiet(fun() -> crypto:strong_rand_bytes(16) end) of
                <<_:128>> = Strong ->
                    Strong;
                _ ->
                    erlang:md5(term_to_binary({os:system_time(), erlang:monotonic_time(), make_ref(),
                                               erlang:unique_integer(), self(), os:getpid(),
                                               erlang:statistics(runtime), erlang:memory(total)}))
            end,
    lists:flatten([io_lib:format("~2.16.0b", [B]) || <<B>> <= Bytes]).
