%% @doc The limits of kino_trace's fallback tracer (kino_trace_fallback), read and checked
%% as the NIF reads them (c_src/nif/session_nifs.cpp): the same keys, defaults, bounds and
%% ArgumentError messages, and two more keys that bound the tracer's mailbox: `mailbox'
%% (messages, default 10000) and `mailbox_bytes' (bytes, default 64 MB).
-module(kino_trace_fallback_limits).

-export([read/1, caps/1, argument_error/1]).

-define(U64, 16#FFFFFFFFFFFFFFFF).
-define(MAX_PAYLOAD_CAP, 1 bsl 30). % max_binary, max_bytes: the NIF's kMaxPayloadCap
-define(MAILBOX_BYTES, 64 bsl 20). % default bound of the mailbox, in bytes

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
    Limit = Get(limit, 0, fun read_limit/1),
    Rate = Get(rate, none, fun read_rate/1),
    {Events, Bytes} = Get(queue, {100000, 64 bsl 20}, fun read_queue/1),
    Cap = fun(Key, Default, Max) -> Get(Key, Default, fun(V) -> read_cap(V, atom_to_list(Key), Max) end) end,
    #{limit => Limit, rate => Rate, events => Events, bytes => Bytes,
      max_depth => Cap(max_depth, 10, 100), max_items => Cap(max_items, 50, 16#FFFFFFFF),
      max_binary => Cap(max_binary, 512, ?MAX_PAYLOAD_CAP), max_bytes => Cap(max_bytes, 16384, ?MAX_PAYLOAD_CAP),
      skip_returns => Get(skip_returns, false, fun read_skip_returns/1),
      mailbox => Get(mailbox, 10000, fun(V) -> read_positive(V, "mailbox") end),
      mailbox_bytes => Get(mailbox_bytes, ?MAILBOX_BYTES, fun(V) -> read_positive(V, "mailbox_bytes") end)}.

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
    case count(V, ?U64) of
        {ok, N} -> N;
        too_large -> invalid("limit", ["at most ", integer_to_list(?U64)]);
        not_count -> invalid("limit", "nil or a non-negative integer")
    end.

read_rate(nil) -> none;
read_rate({Count, Period}) ->
    Shape = "nil or {count, period_ms} with non-negative integers",
    C = case count(Count, 1000000000) of
            {ok, N} -> N;
            too_large -> invalid("rate", "a count of at most 1000000000");
            not_count -> invalid("rate", Shape)
        end,
    case count(Period, 86400000) of
        {ok, P} -> {C, P * 1000000};
        too_large -> invalid("rate", "a period of at most 86400000 ms");
        not_count -> invalid("rate", Shape)
    end;
read_rate(_) -> invalid("rate", "nil or {count, period_ms} with non-negative integers").

read_queue(V) -> read_queue(V, {100000, 64 bsl 20}, []).

read_queue([{Key, V} | T], {E, B}, Seen) when Key =:= events; Key =:= bytes ->
    N = case count(V, ?U64) of
            {ok, X} -> X;
            too_large -> invalid("queue", [":", atom_to_list(Key), " of at most ", integer_to_list(?U64)]);
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
