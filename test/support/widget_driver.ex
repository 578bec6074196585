defmodule KinoTraceTest.WidgetDriver do
  @moduledoc false
  # Runs a trace widget's controller (KinoTrace.Widget.Controller, or KinoTrace.Widget.Views
  # around it) as the widget's process would, every payload checked against the wire's
  # schema (KinoTraceTest.WireSchema).

  import ExUnit.Assertions

  alias KinoTrace.Widget.Controller
  alias KinoTraceTest.WireSchema

  @doc """
  Handles the widget's messages until `done?` accepts the effects sent so far, carrying
  out its timers as its process would, but its ticks (left to the test); returns the
  controller and those effects. Fails when no message came for 10 s.
  """
  def drive(controller, done?, sent \\ []) do
    if done?.(sent) do
      {controller, sent}
    else
      receive do
        message ->
          case Controller.handle_info(controller, message) do
            {:ok, effects, controller} ->
              WireSchema.check_effects!(effects)

              more =
                Enum.flat_map(effects, fn
                  {:send_after, :tick, _ms} ->
                    []

                  {:send_after, message, ms} ->
                    Process.send_after(self(), message, ms)
                    []

                  effect ->
                    [effect]
                end)

              drive(controller, done?, sent ++ more)

            :unknown ->
              drive(controller, done?, sent)
          end
      after
        10_000 -> flunk("timed out; sent so far: #{inspect(sent, limit: 5)}")
      end
    end
  end

  @doc "The event rows that `sent` (effects) broadcast, in order."
  def rows(sent), do: for({:broadcast, "events", %{events: rows}} <- sent, row <- rows, do: row)

  @doc """
  `module.handle_event/3` (Controller or Views) of `state`, its effects checked; returns
  `{effects, state}`.
  """
  def event(module, state, event, payload) do
    {effects, state} = module.handle_event(state, event, payload)
    WireSchema.check_effects!(effects)
    {effects, state}
  end

  @doc """
  `module.handle_info/2` (Controller or Views) of `state` for a message it handles, its
  effects checked; returns `{effects, state}`.
  """
  def info(module, state, message) do
    {:ok, effects, state} = module.handle_info(state, message)
    WireSchema.check_effects!(effects)
    {effects, state}
  end
end
