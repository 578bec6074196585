defmodule KinoTrace.File.CodecTest do
  # The term encoding of trace files: every term a trace holds comes back as itself
  # (funs as what they printed), whatever its shape.
  use ExUnit.Case, async: true

  import Bitwise

  alias KinoTrace.File.Codec

  doctest KinoTrace.File.Codec
  doctest KinoTrace.File.Checks
  doctest KinoTrace.File.Writer

  defp round_trip(term) do
    bin = term |> Codec.encode() |> IO.iodata_to_binary()
    {:ok, decoded, _} = Codec.decode(bin, byte_size(bin))
    decoded
  end

  test "terms of every type come back as themselves" do
    terms = [
      [],
      0,
      -1,
      1 <<< 63,
      -(1 <<< 63),
      -(1 <<< 64) - 7,
      1.5,
      -0.0,
      :ok,
      nil,
      true,
      :"with space",
      "",
      "bin",
      <<1::1>>,
      <<255, 3::5>>,
      [1 | 2],
      [1, [2, [3 | :tail]]],
      {},
      {:a, {:b}},
      %{},
      %{{1, 2} => [3], "k" => %{a: 1}},
      %Kino.Trace.Cut{kind: :items, size: 3},
      self(),
      make_ref(),
      hd(Port.list()),
      %Kino.Trace.Foreign{type: :pid, text: "#PID<1.2.3>"},
      %KinoTrace.Base.Name{text: "kt_codec_never_an_atom"}
    ]

    for term <- terms, do: assert(round_trip(term) === term, inspect(term))
    assert round_trip(terms) === terms
  end

  test "a fun comes back as what it printed, and encodes again as that" do
    fun = &Enum.map/2
    assert %Kino.Trace.Foreign{type: :fun, text: text} = round_trip(fun)
    assert text == inspect(fun)
    assert round_trip(round_trip(fun)) == round_trip(fun)
  end

  test "the item budget bounds what a small input decodes to" do
    bin =
      IO.iodata_to_binary([
        Codec.list_head(1000),
        List.duplicate(Codec.encode([]), 1000),
        Codec.encode([])
      ])

    assert {:error, reason, _} = Codec.decode(bin, 100)
    assert reason =~ "more terms than the caps allow"
  end
end
