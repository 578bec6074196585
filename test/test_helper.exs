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
# calls/2 returns after at most 1 s still setting up (the default :setup_wait): on a
# loaded machine's full run, a test that calls the traced functions right after would
# miss them. Here calls/2 waits until its trace is set up; the churn test checks the
# bounded start with the default (test/kino/trace/calls/churn_test.exs).
Application.put_env(:kino_trace, :setup_wait, :infinity)

ExUnit.start(exclude: [:bench] ++ kino ++ browser, assert_receive_timeout: 2_000)
