# Kino-dependent tests run only when Kino is available (it cannot be fetched offline);
# browser tests need the widget's npm packages (scripts/setup.sh installs them);
# benchmarks run only when asked for (mix test --only bench).
kino = if Code.ensure_loaded?(Kino.JS.Live), do: [], else: [:kino]
browser = if File.dir?(Path.expand("../assets/node_modules/playwright-core", __DIR__)), do: [], else: [:browser]
ExUnit.start(exclude: [:bench] ++ kino ++ browser)
