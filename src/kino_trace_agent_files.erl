%% @doc kino_trace's agent: the trace files a trace's `to:' option writes on this node
%% (a worker's, kino_trace_agent_worker, for the events of this node).
%%
%% The tracing node's writer (KinoTrace.File.Writer) has the rules: the frame format and
%% when to rotate. It sends ready frames; this writes them to this node's disk and holds
%% the cap here: at most `length(Paths)' files (only those paths), each truncated when it
%% is opened and never written past PerFile bytes. Every write comes with the end frame
%% of the file as it would be after it; a write that would leave no room for that end
%% frame is refused (counted), so a file closed with the last end frame it was given
%% (here, or when the worker ends) is within PerFile too. A write that fails (a full
%% disk) closes the file; what comes after is refused until the next file is opened.
-module(kino_trace_agent_files).

-export([start/4, handle/2, open/3, rotate/4, write/3, close/1, figures/1]).

-type state() :: #{paths := tuple(), per_file := pos_integer(), index := non_neg_integer(),
                   io := file:io_device() | undefined, size := non_neg_integer(),
                   end_frame := binary(), written := non_neg_integer(),
                   refused := non_neg_integer(), error := term()}.
-export_type([state/0]).

%% @doc A worker's files_open request: Current (the files it writes, or undefined) are
%% closed, and these open (open/3): {Reply, the files it writes now}.
-spec start([file:filename_all()], pos_integer(), {binary(), binary()}, state() | undefined) ->
          {ok | {error, term()}, state() | undefined}.
start(Paths, PerFile, Frames, Current) ->
    _ = handle(close, Current),
    case open(Paths, PerFile, Frames) of
        {ok, Files} -> {ok, Files};
        Error -> {Error, undefined}
    end.

%% @doc What the tracing node's writer sends a worker, as {kino_trace_files, Op}: done to
%% the files it writes (nothing before its files_open; none after close).
-spec handle(term(), state() | undefined) -> state() | undefined.
handle(_Op, undefined) ->
    undefined;
handle({write, Frame, EndFrame}, Files) when is_binary(Frame), is_binary(EndFrame) ->
    write(Files, Frame, EndFrame);
handle({rotate, Index, Header, EndFrame}, Files) when is_binary(Header), is_binary(EndFrame) ->
    rotate(Files, Index, Header, EndFrame);
handle(close, Files) ->
    _ = close(Files),
    undefined;
handle(_Op, Files) ->
    Files.

%% @doc Starts writing: deletes every file of Paths (what was there under these names
%% counts against the cap), then opens the first with Header and EndFrame (the end frame
%% of an empty file). {ok, State}, or {error, Reason} (file:open/2's, or too_small).
-spec open([file:filename_all()], pos_integer(), {binary(), binary()}) ->
          {ok, state()} | {error, term()}.
open(Paths, PerFile, {Header, EndFrame}) ->
    _ = [file:delete(P) || P <- Paths],
    State = #{paths => list_to_tuple(Paths), per_file => PerFile, index => 0, io => undefined,
              size => 0, end_frame => <<>>, written => 0, refused => 0, error => none},
    case start_file(State, 0, Header, EndFrame) of
        #{io := undefined, error := Reason} ->
            {error, Reason};
        Next ->
            {ok, Next}
    end.

%% @doc The current file gets its end frame and is closed; file Index is started over.
-spec rotate(state(), non_neg_integer(), binary(), binary()) -> state().
rotate(#{paths := Paths} = State, Index, Header, EndFrame)
  when is_integer(Index), Index >= 0, Index < tuple_size(Paths) ->
    start_file(close(State), Index, Header, EndFrame);
rotate(#{refused := Refused} = State, _Index, _Header, _EndFrame) ->
    State#{refused := Refused + 1}.

%% @doc Frame goes into the current file if it leaves room for EndFrame; else refused.
-spec write(state(), binary(), binary()) -> state().
write(#{io := IO, size := Size, per_file := PerFile} = State, Frame, EndFrame)
  when IO =/= undefined, Size + byte_size(Frame) + byte_size(EndFrame) =< PerFile ->
    case file:write(IO, Frame) of
        ok ->
            State#{size := Size + byte_size(Frame), end_frame := EndFrame,
                   written := maps:get(written, State) + 1};
        {error, Reason} ->
            _ = file:close(IO),
            State#{io := undefined, error := Reason, refused := maps:get(refused, State) + 1}
    end;
write(#{refused := Refused} = State, _Frame, _EndFrame) ->
    State#{refused := Refused + 1}.

%% @doc The current file gets the last end frame it was given, and is closed.
-spec close(state()) -> state().
close(#{io := undefined} = State) ->
    State;
close(#{io := IO, end_frame := EndFrame} = State) ->
    _ = file:write(IO, EndFrame),
    _ = file:close(IO),
    State#{io := undefined}.

%% @doc What it wrote and refused.
-spec figures(state()) -> map().
figures(State) ->
    maps:with([index, size, written, refused, error], State).

start_file(#{paths := Paths, per_file := PerFile} = State, Index, Header, EndFrame)
  when byte_size(Header) + byte_size(EndFrame) =< PerFile ->
    Path = element(Index + 1, Paths),
    Opened = case file:open(Path, [write, binary, raw]) of
                 {ok, IO} ->
                     case file:write(IO, Header) of
                         ok -> {ok, IO};
                         Error -> _ = file:close(IO), Error
                     end;
                 Error ->
                     Error
             end,
    case Opened of
        {ok, File} ->
            State#{io := File, index := Index, size := byte_size(Header), end_frame := EndFrame};
        {error, Reason} ->
            State#{io := undefined, index := Index, error := Reason}
    end;
start_file(#{refused := Refused} = State, Index, _Header, _EndFrame) ->
    State#{io := undefined, index := Index, refused := Refused + 1,
           error := too_small}.
