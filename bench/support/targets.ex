defmodule KinoTraceBench.Targets do
  @moduledoc false
  # Issue 40's targets, stated as what kino_trace adds on top of what the VM itself pays in
  # the same VM, in units of that VM's floor (row 2), and judged on the median across
  # fresh VMs (KinoTraceBench.VMs). One VM's result is a map:
  #   %{rows: %{key => {ns 1p, ns 2p}}, c2c: {before, after}, consumer: %{none:, one:}
  #     (M events/s), flood: delivered share in %}
  # (any part may be missing: its values are then nil).

  # {key, label, target label, ok?}
  def targets do
    [
      {:d3, "row 3 - row 2b, in floors", "<= 0.5", &(&1 <= 0.5)},
      {:d6, "row 6 - row 2r, in floors", "<= 0.8", &(&1 <= 0.8)},
      {:pid_api, "pid tracer / API (7 / 3)", ">= 2.0", &(&1 >= 2.0)},
      {:r7r6, "pid tracer with returns / return: true (7r / 6)", ">= 2.0", &(&1 >= 2.0)},
      {:scal3n, "3n two-process scaling / the untraced loop's", ">= 0.9", &(&1 >= 0.9)},
      {:consumer, "consumer, no subscriber, M events/s", ">= 4.0", &(&1 >= 4.0)},
      {:consumer1, "consumer, one subscriber, M events/s", ">= 2.5", &(&1 >= 2.5)},
      {:flood, "flood: events delivered, %", ">= 85", &(&1 >= 85)}
    ]
  end

  # Reported beside the targets: the rows' own cost in floors, and ns (the A/B's rows).
  @infos [
    {:x3, "row 3 / floor"},
    {:x3n, "row 3n / floor"},
    {:x6, "row 6 / floor"},
    {:ns3, "row 3, ns"},
    {:ns3n, "row 3n, ns"},
    {:ns6, "row 6, ns"},
    {:ns3n_2p, "row 3n on 2 processes, ns"},
    {:floor, "floor (row 2), ns"}
  ]

  # The cases the targets need (the other VMs than the first run only these).
  def cases,
    do:
      ~w(untraced floor floor_accept floor_return kino native kino_return pid_tracer pid_tracer_return)a

  def infos, do: @infos

  # Every target's and info's value for one VM: %{key => number | nil}.
  def values(vm) do
    rows = Map.get(vm, :rows, %{})
    one = fn key -> rows |> Map.get(key, {nil, nil}) |> elem(0) end
    two = fn key -> rows |> Map.get(key, {nil, nil}) |> elem(1) end
    floor = one.(:floor)

    diff = fn a, b ->
      with x when is_number(x) <- one.(a),
           y when is_number(y) <- one.(b),
           f when is_number(f) <- floor,
           do: (x - y) / f,
           else: (_ -> nil)
    end

    ratio = fn a, b -> if is_number(a) and is_number(b) and b != 0, do: a / b end
    consumer = Map.get(vm, :consumer, %{})

    %{
      d3: diff.(:kino, :floor_accept),
      d6: diff.(:kino_return, :floor_return),
      pid_api: ratio.(one.(:pid_tracer), one.(:kino)),
      r7r6: ratio.(one.(:pid_tracer_return), one.(:kino_return)),
      scal3n:
        ratio.(ratio.(one.(:native), two.(:native)), ratio.(one.(:untraced), two.(:untraced))),
      consumer: Map.get(consumer, :none),
      consumer1: Map.get(consumer, :one),
      flood: Map.get(vm, :flood),
      x3: ratio.(one.(:kino), floor),
      x3n: ratio.(one.(:native), floor),
      x6: ratio.(one.(:kino_return), floor),
      ns3: one.(:kino),
      ns3n: one.(:native),
      ns6: one.(:kino_return),
      ns3n_2p: two.(:native),
      floor: floor
    }
  end

  # :near, :far or :moved (the trip crossed `far_ns` during the VM's rounds), or nil.
  def state(%{c2c: {a, b}}, far_ns) when is_number(a) and is_number(b) do
    case {a >= far_ns, b >= far_ns} do
      {false, false} -> :near
      {true, true} -> :far
      _ -> :moved
    end
  end

  def state(_, _), do: nil

  # Median and spread (min, max) of the numbers in `list`; nil when there are none.
  def summary(list) do
    case list |> Enum.filter(&is_number/1) |> Enum.sort() do
      [] ->
        nil

      sorted ->
        n = length(sorted)
        mid = div(n, 2)

        med =
          if rem(n, 2) == 1,
            do: Enum.at(sorted, mid),
            else: (Enum.at(sorted, mid - 1) + Enum.at(sorted, mid)) / 2

        %{median: med, min: hd(sorted), max: List.last(sorted), n: n}
    end
  end

  def fmt(nil), do: "-"
  def fmt(x) when is_number(x) and abs(x) >= 100, do: Integer.to_string(round(x))
  def fmt(x) when is_number(x), do: :erlang.float_to_binary(x * 1.0, decimals: 2)

  def verdict(nil, _), do: "-"
  def verdict(v, ok?), do: if(ok?.(v), do: "met", else: "MISSED")
end
