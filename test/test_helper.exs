# Kino-dependent tests run only when Kino is available (it cannot be fetched offline);
# benchmarks run only when asked for (mix test --only bench).
exclude = [:bench] ++ if(Code.ensure_loaded?(Kino.JS.Live), do: [], else: [:kino])
ExUnit.start(exclude: exclude)
