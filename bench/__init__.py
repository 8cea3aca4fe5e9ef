"""docsumd benchmarks: runnable scripts (see bench/RESULTS.md). A package only so that mypy
names each module once (bench/scale.py imports bench.compare)."""
