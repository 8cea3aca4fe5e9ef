"""What the benchmarks share: one definition of each workload, engine wrapper, daemon pass and result.

- :mod:`bench.lib.workloads`: the corpus and mixed-length workloads, and the options that pick one.
- :mod:`bench.lib.engine`: :class:`~bench.lib.engine.RecordingEngine`, the real vLLM engine remembering
  every request it ran (the one wrapper every benchmark uses).
- :mod:`bench.lib.daemon_pass`: the real service over a fresh inbox (or a Kafka topic), timed.
- :mod:`bench.lib.raw_vllm`: what a hand-written batch script does with the daemon's own prompts.
- :mod:`bench.lib.counters`: this process's Prometheus counters that a pass reads before and after.
- :mod:`bench.lib.report`: a pass's statistics (throughput, latency percentiles, short and long).
- :mod:`bench.lib.results`: the result writer, which stamps commit, machine, date, command and
  config into every JSON file, and names the file by date, machine and experiment.

Each experiment is a module of :mod:`bench` run as ``python -m bench.NAME`` from the repository root.
"""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
"""The repository root (this checkout)."""

SHARED = REPO.parent / "shared"
"""The shared folder beside the checkout: the corpus and the notes."""
