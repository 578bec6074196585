%% kino_trace's native tracer: an erl_tracer module whose callbacks are NIFs
%% (c_src/nif/kino_trace_nif.cpp), and the NIFs that make, drain and close its sessions.
%%
%% It is written in Erlang, and needs nothing but OTP, so that a node that never
%% installed kino_trace (no Elixir either) can load it: the remote agent sends this
%% module's object code and the NIF library, sets the persistent_term
%% {kino_trace_tracer, nif_path} to where it put the library, calls
%% code:load_binary/3 and erases the term again. Here, with kino_trace installed, the
%% library is found in code:priv_dir(kino_trace).
%%
%% KinoTrace.Tracer (lib/kino_trace/tracer.ex) is the documented Elixir API; it
%% delegates to this module. Give this module, not the facade, to
%% trace:session_create/3:
%%
%%     Resource = kino_trace_tracer:new_session(self(), #{limit => 100}),
%%     Session = trace:session_create(my_trace, {kino_trace_tracer, Resource}, []),
%%     {Events, More} = kino_trace_tracer:drain(Resource, 500).
%%
%% A failed load never fails the module: loaded/0 is then false and load_error/0 says
%% why, a binary naming the library's path. The reason is kept in the persistent_term
%% {kino_trace_tracer, load_error}, put only when a load fails (and erased by the next
%% load that works), so a successful load leaves nothing behind.
-module(kino_trace_tracer).

-export([enabled/3, enabled_call/3, enabled_send/3, enabled_receive/3, enabled_procs/3,
         trace/5, trace_call/5, trace_send/5, trace_receive/5, trace_procs/5]).
-export([new_session/2, session_id/1, drain/2, counters/1, close/1, roundtrip/2, limits/0,
         set_loop_modules/2, loop_release/3, struct_keys/0, nif_loaded/0, term_layout/0]).
-export([new_decoder/2, decoder_no_returns/2, decoder_unpair/2, decoder_take_callers/1,
         decoder_put_names/2, drain_events/3, decode_events/2]).
-export([alloc_faults/3]).
-export([loaded/0, load_error/0]).

-nifs([enabled/3, enabled_call/3, enabled_send/3, enabled_receive/3, enabled_procs/3,
       trace/5, trace_call/5, trace_send/5, trace_receive/5, trace_procs/5,
       new_session/2, session_id/1, drain/2, counters/1, close/1, roundtrip/2, limits/0,
       set_loop_modules/2, loop_release/3, struct_keys/0, nif_loaded/0, term_layout/0,
       new_decoder/2, decoder_no_returns/2, decoder_unpair/2, decoder_take_callers/1,
       decoder_put_names/2, drain_events/3, decode_events/2,
       alloc_faults/3]).

-on_load(on_load/0).

%% A native session: the tracer state given to trace:session_create/3.
-type resource() :: reference().
-type tracee() :: pid() | port() | undefined.
%% {Tag, Pid | Port | undefined, MonotonicNs, Scheduler, M | undefined, F | undefined,
%%  Arity, First, Second, DropMark}: the record of kino_trace_raw_event.hrl, its tag in the
%% name slot (KinoTrace.Tracer.Decoder reads them).
-type raw_event() :: {atom(), tracee(), integer(), non_neg_integer(), module() | undefined,
                      atom() | undefined, non_neg_integer(), term(), term(), non_neg_integer()}.
%% A native decoder: the call pairing of one trace (KinoTrace.Tracer.NativeDecoder).
-type decoder() :: reference().
%% What a drain says is left: true (drain again), false (nothing: the next event wakes
%% the owner) or recheck (nothing, and the queue just went to sleep: an event whose
%% wake-up was missed may come in; drain once more a moment later, see
%% c_src/core/session_core.hpp, "Wake-up").
-type more() :: boolean() | recheck.
-export_type([resource/0, raw_event/0, decoder/0, more/0]).

-define(LIBRARY, "kino_trace_nif").
-define(PATH_KEY, {?MODULE, nif_path}).
-define(ERROR_KEY, {?MODULE, load_error}).
%% A test sets it (a binary such as <<"OTP 27">>) to make the NIF check only that term
%% layout at load, as on a release whose layout it does not know.
-define(LAYOUT_KEY, {?MODULE, term_layout}).

%% --- erl_tracer callbacks (NIFs) -------------------------------------------------------
%% (No -behaviour(erl_tracer): the VM calls enabled/3 and trace/5 for the kinds of event
%% left out here, such as running_procs, and erl_tracer does not make them optional.)

-spec enabled(atom(), resource(), tracee()) -> trace | discard | remove.
enabled(_Tag, _State, _Tracee) -> not_loaded().
-spec enabled_call(atom(), resource(), tracee()) -> trace | discard | remove.
enabled_call(_Tag, _State, _Tracee) -> not_loaded().
-spec enabled_send(atom(), resource(), tracee()) -> trace | discard | remove.
enabled_send(_Tag, _State, _Tracee) -> not_loaded().
-spec enabled_receive(atom(), resource(), tracee()) -> trace | discard | remove.
enabled_receive(_Tag, _State, _Tracee) -> not_loaded().
-spec enabled_procs(atom(), resource(), tracee()) -> trace | discard | remove.
enabled_procs(_Tag, _State, _Tracee) -> not_loaded().
-spec trace(atom(), resource(), tracee(), term(), map()) -> ok.
trace(_Tag, _State, _Tracee, _Term, _Opts) -> not_loaded().
-spec trace_call(atom(), resource(), tracee(), term(), map()) -> ok.
trace_call(_Tag, _State, _Tracee, _Term, _Opts) -> not_loaded().
-spec trace_send(atom(), resource(), tracee(), term(), map()) -> ok.
trace_send(_Tag, _State, _Tracee, _Term, _Opts) -> not_loaded().
-spec trace_receive(atom(), resource(), tracee(), term(), map()) -> ok.
trace_receive(_Tag, _State, _Tracee, _Term, _Opts) -> not_loaded().
-spec trace_procs(atom(), resource(), tracee(), term(), map()) -> ok.
trace_procs(_Tag, _State, _Tracee, _Term, _Opts) -> not_loaded().

%% --- sessions (NIFs; KinoTrace.Tracer documents them) --------------------------------

-spec new_session(pid(), map()) -> resource().
new_session(_Owner, _Limits) -> not_loaded().
-spec session_id(resource()) -> pos_integer().
session_id(_Resource) -> not_loaded().
-spec drain(resource(), pos_integer()) -> {[raw_event()], more()}.
drain(_Resource, _Max) -> not_loaded().
-spec counters(resource()) -> #{atom() => non_neg_integer() | boolean()}.
counters(_Resource) -> not_loaded().
-spec close(resource()) -> ok.
close(_Resource) -> not_loaded().
-spec roundtrip(term(), map()) -> {term(), non_neg_integer()}.
roundtrip(_Term, _Caps) -> not_loaded().
%% The defaults a session starts with and the bounds new_session/2 checks, #{Name =>
%% {Default, Max}} named as KinoTrace.Limits (lib/kino_trace/limits.ex) names them.
-spec limits() -> #{atom() => {non_neg_integer(), pos_integer()}}.
limits() -> not_loaded().
%% The loop guard (c_src/core/loop_guard.hpp): the modules whose open calls it counts per
%% process ([]: off). A process that reaches its threshold has its calls discarded (no
%% return-trace frame pushed) and the owner gets {kino_trace, Id, {loop, Pid, {M, F, A}}}.
-spec set_loop_modules(resource(), [module()]) -> ok.
set_loop_modules(_Resource, _Modules) -> not_loaded().
%% The loop guard counts Pid from 0 again (false), or never again (true: moved to a
%% trace without returns).
-spec loop_release(resource(), pid(), boolean()) -> ok.
loop_release(_Resource, _Pid, _Exempt) -> not_loaded().
-spec struct_keys() -> [{module(), [atom()]}].
struct_keys() -> not_loaded().
-spec nif_loaded() -> true.
nif_loaded() -> not_loaded().
%% The ERTS term layout chosen at load (c_src/core/erts_layout.hpp): the one named for
%% the running release (chosen_by release), or, for a release with none of its own, the
%% one whose readers read the load-time probe terms right (chosen_by check).
-spec term_layout() -> #{name := binary(), otp_release := pos_integer(), chosen_by := release | check}.
term_layout() -> not_loaded().

%% --- the native decoder (NIFs; KinoTrace.Tracer.NativeDecoder uses them) ---------------------

-spec new_decoder(boolean(), node()) -> decoder().
new_decoder(_Pairing, _Node) -> not_loaded().
-spec decoder_no_returns(decoder(), [mfa()]) -> ok.
decoder_no_returns(_Decoder, _Mfas) -> not_loaded().
-spec decoder_unpair(decoder(), pid()) -> ok.
decoder_unpair(_Decoder, _Pid) -> not_loaded().
-spec decoder_take_callers(decoder()) -> [pid()].
decoder_take_callers(_Decoder) -> not_loaded().
-spec decoder_put_names(decoder(), [{pid(), atom()}]) -> ok.
decoder_put_names(_Decoder, _Names) -> not_loaded().
-spec drain_events(resource(), decoder(), pos_integer()) -> {[tuple()], more()} | {names, [pid()]}.
drain_events(_Resource, _Decoder, _Max) -> not_loaded().
-spec decode_events(decoder(), [raw_event()]) -> [tuple()] | {names, [pid()]}.
decode_events(_Decoder, _Raw) -> not_loaded().

%% --- tests ----------------------------------------------------------------------------

%% Calls the NIF Name/length(Args) with the calling thread's allocations failing after
%% the first Allowed (c_src/nif/alloc_faults.cpp): {Result, Failed}, Failed being how many
%% failed, or what the NIF raised (RuntimeError when it ran out of memory). unsupported
%% unless the library was built for tests (KINO_TRACE_FAULT_INJECTION; `mix test` does).
-spec alloc_faults(non_neg_integer(), atom(), [term()]) -> {term(), non_neg_integer()} | unsupported.
alloc_faults(_Allowed, _Name, _Args) -> not_loaded().

%% What a NIF of this module raises when the library is not loaded: an Elixir
%% RuntimeError saying why (Kino.Trace itself then runs on kino_trace_fallback).
not_loaded() ->
    Why = case persistent_term:get(?ERROR_KEY, undefined) of
              undefined -> <<"its library is not loaded">>;
              Message -> Message
          end,
    erlang:nif_error(#{'__struct__' => 'Elixir.RuntimeError', '__exception__' => true,
                       message => iolist_to_binary(["kino_trace's native tracer is not available (", Why,
                                                    "); Kino.Trace runs on its pure-Erlang tracer without it"])}).

%% --- loading ---------------------------------------------------------------------------

%% True when the NIF library is loaded; never raises.
-spec loaded() -> boolean().
loaded() ->
    try nif_loaded()
    catch error:_ -> false
    end.

%% Why the NIF library did not load, or undefined when it did: a binary such as
%% <<"kino_trace: could not load its native tracer from /path/kino_trace_nif: ...">>.
-spec load_error() -> binary() | undefined.
load_error() ->
    case loaded() of
        true -> undefined;
        false -> persistent_term:get(?ERROR_KEY, undefined)
    end.

%% The code server runs this in a process of its own, which then exits: what the NIF
%% sends to "the loading process" is read here. It always returns ok (the module loads
%% without its NIFs), whatever goes wrong.
on_load() ->
    {Path, Local} =
        case persistent_term:get(?PATH_KEY, undefined) of
            undefined -> {priv_path(), true};
            Given -> {Given, false}
        end,
    case try_load(Path) of
        ok ->
            forget_error();
        {not_built, Why} ->
            %% The build went without the library and said why when it did (one warning
            %% then): kino_trace runs on its pure-Erlang tracer, quietly.
            persistent_term:put(?ERROR_KEY, iolist_to_binary(["kino_trace: ", Why]));
        {error, Why} ->
            Message = iolist_to_binary(["kino_trace: could not load its native tracer from ",
                                        describe(Path), ": ", Why]),
            persistent_term:put(?ERROR_KEY, Message),
            %% Here it is a warning; the remote agent reports load_error/0 itself.
            case Local of
                true -> io:format(standard_error, "warning: ~ts~n", [Message]);
                false -> ok
            end
    end,
    ok.

priv_path() ->
    case code:priv_dir(kino_trace) of
        {error, _} = Error -> Error;
        Dir -> filename:join(Dir, ?LIBRARY)
    end.

try_load({error, Reason}) ->
    {error, io_lib:format("kino_trace's priv directory is not found (~0tp)", [Reason])};
try_load(Path) ->
    case not_built(Path) of
        {ok, Why} -> {not_built, Why};
        false -> load(Path)
    end.

%% The Mix compiler leaves <library>.skipped (its text: why) in place of a library it
%% did not build.
not_built(Path) ->
    case file:read_file(unicode:characters_to_list([Path, ".skipped"])) of
        {ok, Why} -> {ok, [string:trim(Why), setting_since(Why)]};
        {error, _} -> false
    end.

%% A library left out for KINO_TRACE_NATIVE=off, loaded where it is no longer set
%% without a compile in between (a cached Mix.install of a Hex dependency compiles it
%% no more): say so, and how to build it (issue 39 item 2).
setting_since(Why) ->
    Off = binary:match(Why, <<"KINO_TRACE_NATIVE=off">>) =/= nomatch,
    case Off andalso os:getenv("KINO_TRACE_NATIVE") =/= "off" of
        true ->
            <<" (it is not set now: compile kino_trace again to build it, e.g. "
              "Mix.install(..., force: true))">>;
        false ->
            <<>>
    end.

load(Path) ->
    try erlang:load_nif(unicode:characters_to_list(Path), persistent_term:get(?LAYOUT_KEY, 0)) of
        ok -> ok;
        %% Already loaded for this instance of the module: nothing to do.
        {error, {reload, _}} -> ok;
        {error, Reason} -> {error, reason(Reason)}
    catch
        Class:Reason -> {error, io_lib:format("~0tp", [{Class, Reason}])}
    end.

%% The NIF's own reason, when it gave one (erl_nif lets its load callback return only a
%% number, so it sends its reason, such as "unsupported term layout: ...", to this
%% process), then the VM's.
reason(Reason) ->
    receive
        {kino_trace_load_error, Message} -> [Message, io_lib:format(" (~0tp)", [Reason])]
    after 0 -> io_lib:format("~0tp", [Reason])
    end.

describe({error, _}) ->
    <<"kino_trace's priv directory">>;
describe(Path) ->
    try unicode:characters_to_binary(Path) of
        Text when is_binary(Text) -> Text;
        _ -> io_lib:format("~0tp", [Path])
    catch
        error:_ -> io_lib:format("~0tp", [Path])
    end.

forget_error() ->
    case persistent_term:get(?ERROR_KEY, undefined) of
        undefined -> ok;
        _ -> persistent_term:erase(?ERROR_KEY), ok
    end.
