if Code.ensure_loaded?(Kino.JS.Live) do
  defmodule KinoTrace.Widget.Live do
    @moduledoc false
    # The Kino.JS.Live callbacks the widgets share. A widget module says
    #
    #     use KinoTrace.Widget.Live,
    #       assets_path: "lib/assets/trace/build",
    #       controller: KinoTrace.Widget.Controller
    #
    # and each callback hands over to the plain controller (`init/2`, `connect/1`,
    # `handle_event/3`, `handle_info/2`, tested without Kino), then carries out the
    # effects it returns: broadcasts, replies to the asking client, timers.

    defmacro __using__(opts) do
      assets_path = Keyword.fetch!(opts, :assets_path)
      controller = Keyword.fetch!(opts, :controller)

      quote do
        use Kino.JS, assets_path: unquote(assets_path)
        use Kino.JS.Live

        @impl true
        def init({source, opts}, ctx) do
          {controller, effects} = unquote(controller).init(source, opts)
          {:ok, KinoTrace.Widget.Live.run(effects, assign(ctx, controller: controller))}
        end

        @impl true
        def handle_connect(ctx) do
          {payload, controller} = unquote(controller).connect(ctx.assigns.controller)
          {:ok, payload, assign(ctx, controller: controller)}
        end

        @impl true
        def handle_event(event, payload, ctx) do
          {effects, controller} =
            unquote(controller).handle_event(ctx.assigns.controller, event, payload)

          {:noreply, KinoTrace.Widget.Live.run(effects, assign(ctx, controller: controller))}
        end

        @impl true
        def handle_info(message, ctx) do
          case unquote(controller).handle_info(ctx.assigns.controller, message) do
            {:ok, effects, controller} ->
              {:noreply, KinoTrace.Widget.Live.run(effects, assign(ctx, controller: controller))}

            :unknown ->
              {:noreply, ctx}
          end
        end
      end
    end

    @doc false
    def run(effects, ctx) do
      Enum.each(effects, fn
        {:broadcast, event, payload} ->
          Kino.JS.Live.Context.broadcast_event(ctx, event, payload)

        {:reply, event, payload} ->
          Kino.JS.Live.Context.send_event(ctx, ctx.origin, event, payload)

        {:send_after, message, ms} ->
          Process.send_after(self(), message, ms)
      end)

      ctx
    end
  end
end
