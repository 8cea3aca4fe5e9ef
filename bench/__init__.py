"""docsumd's benchmarks: one module per experiment, run from the repository root as
``.venv/bin/python -m bench.NAME`` (``--help`` says what each measures and how); what they share is
in :mod:`bench.lib`. Results go to ``bench/results/`` (named by date, machine and experiment, indexed
in ``bench/results/INDEX.md``), their reading to ``bench/RESULTS.md``."""
