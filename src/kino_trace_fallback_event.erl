%% @doc The raw event of a fallback trace message, as the NIF makes it (see
%% kino_trace_fallback): the tracer process (kino_trace_fallback_process) gives each
%% trace message it accepts to event/5.
-module(kino_trace_fallback_event).

-export([event/5]).

-include("kino_trace_raw_event.hrl").

%% @doc The raw event of a trace message (kino_trace_raw_event.hrl, its mark 0) and the
%% payload's size in the NIF's format. `Last' is the index of the
%% message's last data element, `Time' its time (ns), `Caps' the session's caps.
%% Data elements: those after the tag, then the scheduler id when the flags ask for it
%% (the last integer; a call has one or two data elements: its MFA and the match spec's
%% message).
-spec event(tuple(), term(), pos_integer(), integer(), term()) -> {tuple(), non_neg_integer()}.
event(Msg, Who, Last, Time, Caps) ->
    Tag = element(3, Msg),
    Extra = Last - 3,
    {N, Sched} = case data_count(Tag) of
                     call when Extra =:= 3 -> {2, element(Last, Msg)};
                     call when Extra =:= 2 -> sched_or_data(element(Last, Msg), 1, 2);
                     call -> {Extra, 0};
                     other when Extra >= 2 -> sched_or_data(element(Last, Msg), Extra - 1, Extra);
                     other -> {Extra, 0};
                     K when Extra =:= K + 1 -> sched_or_data(element(Last, Msg), K, Extra);
                     _ -> {Extra, 0}
                 end,
    Pid = if
              is_pid(Who), node(Who) =:= node() -> Who;
              is_port(Who), node(Who) =:= node() -> Who;
              true -> undefined
          end,
    Data = fun(I) when I =< N -> {ok, element(3 + I, Msg)}; (_) -> none end,
    Copy = fun({ok, T}, U) -> kino_trace_fallback_terms:copy(T, Caps, U); (none, U) -> {undefined, U + 9} end,
    {Data1, Data2} = call_data(Tag, Data(1), Data(2)),
    {{M, F, A}, First, U1} =
        case {Data1, data_count(Tag)} of
            {{ok, {M0, F0, Args}}, call} when is_list(Args) ->
                {Copied, U0} = kino_trace_fallback_terms:copy_args(Args, Caps, 0),
                {{M0, F0, length(Args)}, Copied, U0};
            {{ok, {M0, F0, {cut, A0}}}, call} ->
                {Cuts, U0} = kino_trace_fallback_terms:cut_args(A0, 0),
                {{M0, F0, A0}, Cuts, U0};
            {{ok, {M0, F0, A0}}, Kind} when Kind =:= call; Tag =:= return_from; Tag =:= exception_from; Tag =:= return_to ->
                {{M0, F0, A0}, undefined, 9};
            {D1, _} ->
                {Copied, U0} = Copy(D1, 0),
                {{undefined, undefined, 0}, Copied, U0}
        end,
    {Second, U2} = Copy(Data2, U1),
    Raw = #kino_trace_raw_event{pid = Pid, time = Time, scheduler = Sched, module = M, function = F,
                                arity = A, first = First, second = Second, mark = 0},
    {setelement(1, Raw, Tag), U2}.

%% A call traced with `arity' and a match spec of trace_args/3: its MFA with the
%% arguments its message carries (or `{cut, Arity}'), and the match spec's own message.
call_data(call, {ok, {M, F, A}}, {ok, Message}) when is_integer(A), is_tuple(Message), tuple_size(Message) >= 1 ->
    case Message of
        {kino_trace_args, Args} when is_list(Args) -> {{ok, {M, F, Args}}, none};
        {kino_trace_args, Args, Extra} when is_list(Args) -> {{ok, {M, F, Args}}, {ok, Extra}};
        {kino_trace_cut} -> {{ok, {M, F, {cut, A}}}, none};
        {kino_trace_cut, Extra} -> {{ok, {M, F, {cut, A}}}, {ok, Extra}};
        {kino_trace_cut_noret} -> {{ok, {M, F, {cut, A}}}, none};
        {kino_trace_cut_noret, Extra} -> {{ok, {M, F, {cut, A}}}, {ok, Extra}};
        _ -> {{ok, {M, F, A}}, {ok, Message}}
    end;
call_data(_, Data1, Data2) -> {Data1, Data2}.

sched_or_data(Sched, N, _) when is_integer(Sched), Sched >= 0 -> {N, Sched};
sched_or_data(_, _, Extra) -> {Extra, 0}.

data_count(call) -> call;
data_count(T) when T =:= return_from; T =:= exception_from; T =:= send; T =:= send_to_non_existing_process;
                   T =:= spawn; T =:= spawned -> 2;
data_count(T) when T =:= return_to; T =:= 'receive'; T =:= exit; T =:= link; T =:= unlink;
                   T =:= getting_linked; T =:= getting_unlinked; T =:= register; T =:= unregister -> 1;
data_count(_) -> other.
