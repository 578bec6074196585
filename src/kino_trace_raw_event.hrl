%% The raw event: one traced event as a tracer hands it out, before it is decoded. The
%% one definition of its shape (issue 35):
%%   * the fallback tracer builds it (kino_trace_fallback_event:event/5) and the agent
%%     reads it (kino_trace_agent_worker) with this record;
%%   * Elixir reads it with `Record.extract/2' (KinoTrace.Tracer.RawEvent, used by
%%     KinoTrace.Tracer.Decoder);
%%   * the native tracer builds it (drain/2, c_src/nif/session_nifs.cpp) and reads it
%%     (decode_events/2, c_src/nif/decoder_nifs.cpp) with the field positions of
%%     c_src/core/raw_event.hpp, which `mix kino_trace.limits' generates from this file.
%% test/kino_trace/tracer/fallback_test.exs checks both tracers' raw events of a call, a
%% return, an exception and messages against this record: its size, its field order and
%% each field's type.
%%
%% The record's name slot holds the event's tag (the trace message's: call, return_from,
%% exception_from, return_to, send, 'receive', spawn, exit, link...), so a raw event is
%% `{Tag, Pid, Time, Scheduler, Module, Function, Arity, First, Second, Mark}':
%% build one with `setelement(1, #kino_trace_raw_event{...}, Tag)'; read or set a field
%% with element/2 or setelement/3 and `#kino_trace_raw_event.Field' (its position), never
%% with `Event#kino_trace_raw_event.Field' (which requires the record's name in the slot).
%% An event without its last field (mark) is read as mark 0.
-record(kino_trace_raw_event, {
    %% the traced process or port; undefined for another node's (the fallback's view)
    pid = undefined :: pid() | port() | undefined,
    %% when it happened: erlang:monotonic_time(nanosecond)
    time = 0 :: integer(),
    %% the scheduler it ran on (0 when the trace flags do not ask for it)
    scheduler = 0 :: non_neg_integer(),
    %% a call's, return's, exception's or return_to's function; undefined otherwise
    module = undefined :: module() | undefined,
    function = undefined :: atom() | undefined,
    arity = 0 :: non_neg_integer(),
    %% a call: its arguments (a list, copied within the caps; undefined when the call
    %% is traced with its arity only); a message event: its first data element;
    %% a return or an exception: undefined
    first = undefined :: term(),
    %% a call: the match spec's message (its caller), a return: the value, an exception:
    %% {Class, Reason}, a message event: its second data element; undefined when none
    second = undefined :: term(),
    %% the process's drop mark: changes when the tracer dropped one of its events
    mark = 0 :: non_neg_integer()
}).
