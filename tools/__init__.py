"""Developer profiling tools (A/B scripts, timers, single-run diagnostics); not packaged, results in tools/results/."""
