defmodule KinoTraceTest.PeerCase do
  @moduledoc false
  # The case of the suites that trace real peer nodes: this node made a distributed node
  # on loopback before their tests, KinoTraceTest.Peers imported, tagged :slow, with the
  # time peers take. `use KinoTraceTest.PeerCase, async: false`.

  use ExUnit.CaseTemplate

  using do
    quote do
      @moduletag :slow
      @moduletag timeout: 180_000

      import KinoTraceTest.Peers
    end
  end

  setup_all do
    KinoTraceTest.Peers.ensure_distribution()
  end
end
