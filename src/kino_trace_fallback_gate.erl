%% @doc The gate of a kino_trace_fallback session: a bit of the node's trace control word,
%% read by the call match specs of kino_trace_fallback:trace_args/3 at each call. While it
%% is set, those match specs send `{kino_trace_off}' (the call's MFA alone, no return
%% action), so the VM copies neither arguments nor return values. The mailbox guard
%% (kino_trace_fallback_process) sets it the moment it trips: a `:trace' switch-off
%% waits for the running processes, which go on calling meanwhile (one time slice:
%% thousands of calls), while a match spec reads the word at each call. 16 bits (the
%% word's high half): sessions beyond share them (a gate closed by one drops the calls of
%% the others too, counted there as well).
-module(kino_trace_fallback_gate).

-export([bit/1, close/1, open/1, closed_guard/1, gated/1]).

-define(GATE_BITS, 16).            % the trace control word's bits the gates take (its high half)

%% @doc The bit of the trace control word that is the gate of the session `Id'.
-spec bit(pos_integer()) -> pos_integer().
bit(Id) -> 1 bsl (32 - ?GATE_BITS + Id rem ?GATE_BITS).

%% @doc Closes the gate `Bit'.
-spec close(pos_integer()) -> ok.
close(Bit) -> tcw(fun(W) -> W bor Bit end).

%% @doc Opens the gate `Bit'.
-spec open(pos_integer()) -> ok.
open(Bit) -> tcw(fun(W) -> W band (bnot Bit) end).

%% The word has no compare-and-swap, only an exchange: a change made by another session
%% between the read and the write is written again (a few tries).
tcw(F) -> tcw(F, erlang:system_info(trace_control_word), 8).

tcw(F, Old, Tries) ->
    case erlang:system_flag(trace_control_word, F(Old)) of
        Old -> ok;
        Other when Tries > 0 -> tcw(F, Other, Tries - 1);
        _ -> ok
    end.

%% @doc A match spec guard true while the gate `Bit' is closed.
-spec closed_guard(pos_integer()) -> tuple().
closed_guard(Bit) -> {'=/=', {'band', {get_tcw}, Bit}, 0}.

%% @doc Whether a trace message is a call made while the gate was closed.
-spec gated(tuple()) -> boolean().
gated(Msg) ->
    element(3, Msg) =:= call andalso tuple_size(Msg) >= 5 andalso element(5, Msg) =:= {kino_trace_off}.
