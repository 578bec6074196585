# Kino-dependent tests run only when Kino is available (it cannot be fetched offline);
# browser tests need the widget's npm packages (scripts/setup.sh installs them);
# benchmarks run only when asked for (mix test --only bench).
kino = if Code.ensure_loaded?(Kino.JS.Live), do: [], else: [:kino]

browser =
  if File.dir?(Path.expand("../assets/node_modules/playwright-core", __DIR__)),
    do: [],
    else: [:browser]

# assert_receive waits up to 2 s (ExUnit's default is 100 ms): a message that comes is
# taken at once, and on a loaded CI machine one that another process sends after some
# work (a traced call, a tracer's answer) can take longer than 100 ms.
ExUnit.start(exclude: [:bench] ++ kino ++ browser, assert_receive_timeout: 2_000)
