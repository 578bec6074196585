%% @doc The limits of kino_trace's fallback tracer (kino_trace_fallback), read and checked
%% as the NIF reads them (c_src/nif/session_nifs.cpp): the same keys, defaults, bounds and
%% ArgumentError messages, and two more keys that bound the tracer's mailbox: `mailbox'
%% (messages) and `mailbox_bytes' (bytes). The defaults and bounds are KinoTrace.Limits'
%% (lib/kino_trace/limits.ex, the one definition), through the generated
%% kino_trace_limits.hrl.
-module(kino_trace_fallback_limits).

-export([read/1, caps/1, argument_error/1, table/0]).

-include("kino_trace_limits.hrl").

%% @doc The defaults the tracer reads when none is given and the bounds it checks,
%% `#{Name => {Default, Max}}' (Max undefined: any positive integer), named as
%% KinoTrace.Limits names them (test/kino_trace/limits_test.exs compares them).
-spec table() -> #{atom() => {non_neg_integer(), pos_integer() | undefined}}.
table() ->
    D = read(#{}),
    {RateCount, RatePeriod} = case maps:get(rate, D) of none -> {0, 0}; {C, P} -> {C, P div 1000000} end,
    #{limit => {maps:get(limit, D), ?LIMIT_MAX},
      rate_count => {RateCount, ?RATE_COUNT_MAX}, rate_period_ms => {RatePeriod, ?RATE_PERIOD_MS_MAX},
      queue_events => {maps:get(events, D), ?QUEUE_EVENTS_MAX}, queue_bytes => {maps:get(bytes, D), ?QUEUE_BYTES_MAX},
      max_depth => {maps:get(max_depth, D), ?MAX_DEPTH_MAX}, max_items => {maps:get(max_items, D), ?MAX_ITEMS_MAX},
      max_binary => {maps:get(max_binary, D), ?MAX_BINARY_MAX}, max_bytes => {maps:get(max_bytes, D), ?MAX_BYTES_MAX},
      mailbox => {maps:get(mailbox, D), undefined}, mailbox_bytes => {maps:get(mailbox_bytes, D), undefined}}.

%% @doc Raises an Elixir ArgumentError (as a map) with Message.
-spec argument_error(binary()) -> no_return().
argument_error(Message) ->
    error(#{'__struct__' => 'Elixir.ArgumentError', '__exception__' => true, message => Message}).

invalid(Option, Expected) ->
    argument_error(iolist_to_binary(["invalid value for :", Option, ": expected ", Expected])).

%% @doc The limits of the map M, each given or its default; raises an ArgumentError
%% naming the first bad one.
-spec read(map()) -> map().
read(M) ->
    Get = fun(Key, Default, Read) ->
                  case maps:find(Key, M) of
                      {ok, V} -> Read(V);
                      error -> Default
                  end
          end,
    Limit = Get(limit, ?LIMIT_DEFAULT, fun read_limit/1),
    Rate = Get(rate, rate(?RATE_COUNT_DEFAULT, ?RATE_PERIOD_MS_DEFAULT), fun read_rate/1),
    {Events, Bytes} = Get(queue, {?QUEUE_EVENTS_DEFAULT, ?QUEUE_BYTES_DEFAULT}, fun read_queue/1),
    Cap = fun(Key, Default, Max) -> Get(Key, Default, fun(V) -> read_cap(V, atom_to_list(Key), Max) end) end,
    #{limit => Limit, rate => Rate, events => Events, bytes => Bytes,
      max_depth => Cap(max_depth, ?MAX_DEPTH_DEFAULT, ?MAX_DEPTH_MAX),
      max_items => Cap(max_items, ?MAX_ITEMS_DEFAULT, ?MAX_ITEMS_MAX),
      max_binary => Cap(max_binary, ?MAX_BINARY_DEFAULT, ?MAX_BINARY_MAX),
      max_bytes => Cap(max_bytes, ?MAX_BYTES_DEFAULT, ?MAX_BYTES_MAX),
      skip_returns => Get(skip_returns, false, fun read_skip_returns/1),
      mailbox => Get(mailbox, ?MAILBOX_DEFAULT, fun(V) -> read_positive(V, "mailbox") end),
      mailbox_bytes => Get(mailbox_bytes, ?MAILBOX_BYTES_DEFAULT, fun(V) -> read_positive(V, "mailbox_bytes") end)}.

%% A rate of Count events per PeriodMs as the tracer keeps it (none: no rate).
rate(Count, PeriodMs) when Count =:= 0; PeriodMs =:= 0 -> none;
rate(Count, PeriodMs) -> {Count, PeriodMs * 1000000}.

%% @doc The term caps of read limits L (kino_trace_fallback_terms:caps/4).
-spec caps(map()) -> term().
caps(L) ->
    kino_trace_fallback_terms:caps(maps:get(max_depth, L), maps:get(max_items, L),
                                   maps:get(max_binary, L), maps:get(max_bytes, L)).

count(V, Max) when is_integer(V), V >= 0, V =< Max -> {ok, V};
count(V, _) when is_integer(V), V > 0 -> too_large;
count(_, _) -> not_count.

read_limit(nil) -> 0;
read_limit(V) ->
    case count(V, ?LIMIT_MAX) of
        {ok, N} -> N;
        too_large -> invalid("limit", ["at most ", integer_to_list(?LIMIT_MAX)]);
        not_count -> invalid("limit", "nil or a non-negative integer")
    end.

read_rate(nil) -> none;
read_rate({Count, Period}) ->
    Shape = "nil or {count, period_ms} with non-negative integers",
    C = case count(Count, ?RATE_COUNT_MAX) of
            {ok, N} -> N;
            too_large -> invalid("rate", ["a count of at most ", integer_to_list(?RATE_COUNT_MAX)]);
            not_count -> invalid("rate", Shape)
        end,
    case count(Period, ?RATE_PERIOD_MS_MAX) of
        {ok, P} -> {C, P * 1000000};
        too_large -> invalid("rate", ["a period of at most ", integer_to_list(?RATE_PERIOD_MS_MAX), " ms"]);
        not_count -> invalid("rate", Shape)
    end;
read_rate(_) -> invalid("rate", "nil or {count, period_ms} with non-negative integers").

read_queue(V) -> read_queue(V, {?QUEUE_EVENTS_DEFAULT, ?QUEUE_BYTES_DEFAULT}, []).

read_queue([{Key, V} | T], {E, B}, Seen) when Key =:= events; Key =:= bytes ->
    Max = case Key of events -> ?QUEUE_EVENTS_MAX; bytes -> ?QUEUE_BYTES_MAX end,
    N = case count(V, Max) of
            {ok, X} -> X;
            too_large -> invalid("queue", [":", atom_to_list(Key), " of at most ", integer_to_list(Max)]);
            not_count -> queue_shape()
        end,
    Acc = case {lists:member(Key, Seen), Key} of
              {true, _} -> {E, B};          % the first of a repeated key counts
              {false, events} -> {N, B};
              {false, bytes} -> {E, N}
          end,
    read_queue(T, Acc, [Key | Seen]);
read_queue([], Acc, _) -> Acc;
read_queue(_, _, _) -> queue_shape().

queue_shape() -> invalid("queue", "a keyword list with :events and/or :bytes as non-negative integers").

read_cap(V, Option, Max) ->
    case count(V, Max) of
        {ok, N} -> N;
        too_large -> invalid(Option, ["at most ", integer_to_list(Max)]);
        not_count -> invalid(Option, "a non-negative integer")
    end.

read_skip_returns(V) when is_boolean(V) -> V;
read_skip_returns(_) -> invalid("skip_returns", "a boolean").

read_positive(V, _) when is_integer(V), V > 0 -> V;
read_positive(_, Option) -> invalid(Option, "a positive integer").
