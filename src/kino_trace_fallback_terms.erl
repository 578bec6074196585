%% @doc The fallback tracer's term cutter: copies a traced term with the caps of
%% kino_trace's native term codec (c_src/core/term_codec.hpp) and gives the same result:
%% the same `Kino.Trace.Cut' maps in the same places, and the same size, counted in the
%% bytes the native codec's format would take (a 9-byte word per atom, number, local pid
%% or `[]'; a 9-byte header per tuple or map, 6 per list; 13 bytes plus the kept bytes
%% per binary; 5 bytes plus the external format per term copied whole (a fun, a
%% reference, a bitstring or a bignum of at most `max_binary' bytes); 2 per cut). The
%% byte budget (`max_bytes') is checked where the native codec checks it, so an event
%% is cut at the same place. OTP only: no Elixir module is called.
%%
%% Unlike the native codec, the walk runs on a copy the VM already made (the trace
%% message), so it bounds what is kept, not what was copied.
-module(kino_trace_fallback_terms).

-export([caps/4, copy/3, copy_args/3, cut_args/2, roundtrip/2]).

-record(caps, {depth, items, binary, bytes}).

-define(INT64_MIN, -16#8000000000000000).
-define(INT64_MAX, 16#7FFFFFFFFFFFFFFF).
-define(LEAF, 64).      % kLeafEstimate: a pid, port, reference or external fun
-define(FUN, 96).       % kFunEstimate: a local fun's own fields
-define(MIN_NODE, 16).  % kMinNode

-opaque caps() :: #caps{}.
-export_type([caps/0]).

%% @doc Caps: max_depth, max_items, max_binary, max_bytes (already validated).
-spec caps(non_neg_integer(), non_neg_integer(), non_neg_integer(), non_neg_integer()) -> caps().
caps(Depth, Items, Binary, Bytes) -> #caps{depth = Depth, items = Items, binary = Binary, bytes = Bytes}.

%% @doc Copies `Term' as the payload's next term (at depth 0), `Used' bytes already
%% written: `{Copy, Used1}'.
-spec copy(term(), caps(), non_neg_integer()) -> {term(), non_neg_integer()}.
copy(Term, Caps, Used) -> t(Term, 0, Caps, Used).

%% @doc Copies a call's arguments (a list whose elements are at depth 1), as the native
%% tracer does: the list itself is never cut for depth.
-spec copy_args(list(), caps(), non_neg_integer()) -> {list(), non_neg_integer()}.
copy_args(Args, Caps, Used) -> list(Args, 0, Caps, Used).

%% @doc The arguments of a call whose arguments were not copied (kino_trace_fallback's
%% match spec found them huge): `Arity' cuts of the `bytes' kind, as a list (at depth 0)
%% whose elements the byte budget stopped.
-spec cut_args(non_neg_integer(), non_neg_integer()) -> {list(), non_neg_integer()}.
cut_args(Arity, Used) -> {[cut(bytes) || _ <- lists:seq(1, Arity)], Used + 6 + 2 * Arity}.

%% @doc What `KinoTrace.Tracer.roundtrip/2' returns for one term: the copy and its size.
-spec roundtrip(term(), caps()) -> {term(), non_neg_integer()}.
roundtrip(Term, Caps) -> t(Term, 0, Caps, 0).

cut(Kind) -> cut(Kind, nil, nil).
cut(Kind, Value, Size) ->
    #{'__struct__' => 'Elixir.Kino.Trace.Cut', kind => Kind, value => Value, size => Size}.

room(U, #caps{bytes = B}) when U < B -> B - U;
room(_, _) -> 0.

t(_, _, #caps{bytes = B}, U) when U >= B -> {cut(bytes), U + 2};
t(T, _, _, U) when is_atom(T); T =:= []; is_float(T) -> {T, U + 9};
t(T, _, _, U) when is_integer(T), T >= ?INT64_MIN, T =< ?INT64_MAX -> {T, U + 9};
t(T, _, C, U) when is_integer(T) -> bignum(T, C, U);
t(T, _, C, U) when is_bitstring(T) -> bits(T, C, U);
t(T, _, _, U) when is_pid(T), node(T) =:= node(); is_port(T), node(T) =:= node() -> {T, U + 9};
t(_, D, #caps{depth = Max}, U) when D >= Max -> {cut(depth), U + 2};
t(T, D, C, U) when is_tuple(T) -> tuple(T, D, C, U);
t(T, D, C, U) when is_list(T) -> list(T, D, C, U);
t(T, D, C, U) when is_map(T) -> map(T, D, C, U);
t(T, _, C, U) when is_function(T) -> fn(T, C, U);
t(T, _, C, U) -> external(T, ?LEAF, C, U).

%% A term copied whole in the external format; `Est': the codec's estimate of its size,
%% which decides (with the real size) whether it fits the event's budget.
external(T, Est, C, U) ->
    Room = room(U, C),
    case Est > Room of
        true -> {cut(bytes), U + 2};
        false ->
            Bin = term_to_binary(T),
            case byte_size(Bin) > Room of
                true -> {cut(bytes), U + 2};
                false -> {binary_to_term(Bin), U + 5 + byte_size(Bin)}
            end
    end.

bits(T, #caps{binary = Max} = C, U) ->
    Bits = bit_size(T),
    Whole = Bits div 8,
    Tail = Bits rem 8 =/= 0,
    Room = room(U, C),
    case Tail andalso Whole + 1 =< Max andalso 7 + Whole =< Room of
        true -> external(T, 7 + Whole, C, U);
        false ->
            Keep = min(Whole, min(Max, Room)),
            <<Prefix:Keep/binary, _/bitstring>> = T,
            Copy = if
                       Tail -> cut(bitstring, own(Prefix), Bits);
                       Keep =:= Whole -> own(T);
                       true -> cut(binary, own(Prefix), Whole)
                   end,
            {Copy, U + 13 + Keep}
    end.

%% A binary that holds no more memory than its bytes.
own(B) ->
    case binary:referenced_byte_size(B) > byte_size(B) of
        true -> binary:copy(B);
        false -> B
    end.

bignum(N, #caps{binary = Max} = C, U) ->
    Abs = abs(N),
    Bits = bit_length(Abs),
    Bytes = (Bits + 7) div 8,
    case Bytes =< Max of
        true -> external(N, 7 + Bytes, C, U);
        false ->
            LeadBits = 57 + (Bits - 57) rem 4,
            Lead = Abs bsr (Bits - LeadBits),
            {cut(integer, if N < 0 -> -Lead; true -> Lead end, Bits), U + 19}
    end.

bit_length(0) -> 0;
bit_length(N) ->
    <<First, _/binary>> = Bin = binary:encode_unsigned(N),
    (byte_size(Bin) - 1) * 8 + byte_bits(First, 0).

byte_bits(0, N) -> N;
byte_bits(B, N) -> byte_bits(B bsr 1, N + 1).

tuple(T, D, #caps{items = Items, bytes = B} = C, U) ->
    Arity = tuple_size(T),
    Elems = fun Loop(I, Acc, Ui) when I =< Arity, I =< Items, Ui < B ->
                    {E, Ui1} = t(element(I, T), D + 1, C, Ui),
                    Loop(I + 1, [E | Acc], Ui1);
                Loop(I, Acc, Ui) -> {I - 1, lists:reverse(Acc), Ui}
            end,
    case Elems(1, [], U + 9) of
        {Arity, Kept, U1} -> {list_to_tuple(Kept), U1};
        {_, Kept, U1} -> {cut(tuple, Kept, Arity), U1}
    end.

%% A list at depth D: its elements (and an improper tail) at D + 1.
list(L, D, C, U) -> list(L, D + 1, C, U + 6, 0, []).

list([_ | _], _, #caps{items = Items, bytes = B}, U, K, Acc) when K >= Items; U >= B ->
    {lists:reverse(Acc, [cut(items)]), U};
list([H | T], D, C, U, K, Acc) ->
    {H1, U1} = t(H, D, C, U),
    list(T, D, C, U1, K + 1, [H1 | Acc]);
list([], _, _, U, _, Acc) -> {lists:reverse(Acc), U};
list(Tail, D, C, U, _, Acc) ->
    {T1, U1} = t(Tail, D, C, U),
    {lists:reverse(Acc, T1), U1}.

%% A struct cut short keeps its '__struct__' pair first, as the native codec does, so
%% that it still reads as the struct.
map(M, D, #caps{items = Items} = C, U) ->
    Total = map_size(M),
    Limit = min(Total, Items),
    {Kept, Pairs, U1} = case {Limit, M} of
                            {0, _} -> {0, [], U + 9};
                            {_, #{'__struct__' := Module}} when Limit < Total, U + 9 < C#caps.bytes ->
                                {K1, U2} = t('__struct__', D + 1, C, U + 9),
                                {V1, U3} = t(Module, D + 1, C, U2),
                                case Limit of
                                    1 -> {1, [{K1, V1}], U3};
                                    _ -> pairs(maps:next(maps:iterator(M)), D + 1, C, U3, 1, Limit, [{K1, V1}], skip_struct)
                                end;
                            _ -> pairs(maps:next(maps:iterator(M)), D + 1, C, U + 9, 0, Limit, [], keep_all)
                        end,
    Map = maps:from_list(Pairs),
    case Kept of
        Total -> {Map, U1};
        _ -> {cut(map, Map, Total), U1}
    end.

%% The pairs in the map's order; with skip_struct, not the '__struct__' one (kept first).
pairs(none, _, _, U, K, _, Acc, _) -> {K, lists:reverse(Acc), U};
pairs({'__struct__', _, I}, D, C, U, K, Limit, Acc, skip_struct) -> pairs(maps:next(I), D, C, U, K, Limit, Acc, skip_struct);
pairs(_, _, #caps{bytes = B}, U, K, _, Acc, _) when U >= B -> {K, lists:reverse(Acc), U};
pairs({Key, V, I}, D, C, U, K, Limit, Acc, Skip) ->
    {K1, U1} = t(Key, D, C, U),
    {V1, U2} = t(V, D, C, U1),
    case K + 1 < Limit of
        true -> pairs(maps:next(I), D, C, U2, K + 1, Limit, [{K1, V1} | Acc], Skip);
        false -> {K + 1, lists:reverse([{K1, V1} | Acc]), U2}
    end.

%% An external fun, or a local one whose captured values fit in max_binary bytes, is
%% copied whole; other local funs are described by their identity.
fn(F, #caps{binary = Max} = C, U) ->
    case erlang:fun_info(F, type) of
        {type, external} -> external(F, ?LEAF, C, U);
        {type, local} ->
            {env, Env} = erlang:fun_info(F, env),
            case fits_all(Env, Max, 0, C) of
                false ->
                    Identity = maps:from_list([erlang:fun_info(F, Key) || Key <- [module, index, uniq, arity]]),
                    {cut('fun', Identity, length(Env)), U + 25};
                Left -> external(F, ?FUN + Max - Left, C, U)
            end
    end.

%% Whether `T''s external format fits in `B' bytes, by the codec's estimate (every node
%% charged at least ?MIN_NODE bytes): what is left of B, or false.
fits(_, _, D, #caps{depth = Max}) when D >= Max -> false;
fits(T, B, _, _) when is_atom(T) -> take(3 + byte_size(atom_to_binary(T, utf8)), B);
fits([], B, _, _) -> take(1, B);
fits(T, B, _, _) when is_integer(T), T >= ?INT64_MIN, T =< ?INT64_MAX -> take(11, B);
fits(T, B, _, _) when is_integer(T) ->
    Bytes = (bit_length(abs(T)) + 7) div 8,
    Bytes < B andalso take(7 + Bytes, B);
fits(T, B, _, _) when is_float(T) -> take(9, B);
fits(T, B, _, _) when is_bitstring(T) ->
    Bits = bit_size(T),
    Bits div 8 < B andalso take(6 + (Bits + 7) div 8, B);
fits(T, B, D, C) when is_tuple(T) -> fits_all(tuple_to_list(T), take(5, B), D + 1, C);
fits([_ | _] = L, B, D, C) -> fits_list(L, take(5, B), D + 1, C);
fits(T, B, D, C) when is_map(T) ->
    case take(5, B) of
        false -> false;
        B1 when map_size(T) > B1 div (2 * ?MIN_NODE) -> false;
        B1 -> fits_all(lists:append([[K, V] || K := V <- T]), B1, D + 1, C)
    end;
fits(T, B, D, C) when is_function(T) ->
    case erlang:fun_info(T, type) of
        {type, external} -> take(?LEAF, B);
        {type, local} -> fits_all(element(2, erlang:fun_info(T, env)), take(?FUN, B), D + 1, C)
    end;
fits(_, B, _, _) -> take(?LEAF, B).

fits_all(_, false, _, _) -> false;
fits_all([], B, _, _) -> B;
fits_all([H | T], B, D, C) -> fits_all(T, fits(H, B, D, C), D, C).

fits_list(_, false, _, _) -> false;
fits_list([H | T], B, D, C) -> fits_list(T, fits(H, B, D, C), D, C);
fits_list(Tail, B, D, C) -> fits(Tail, B, D, C).

take(N, B) when N < ?MIN_NODE -> take(?MIN_NODE, B);
take(N, B) when N > B -> false;
take(N, B) -> B - N.
