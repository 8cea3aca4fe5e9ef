"""The one typed configuration tree of docsumd: the schema, and loading it.

Loaded once at start from a TOML file, then overridden by ``DOCSUMD_*`` environment variables
(nested keys joined by ``__``, e.g. ``DOCSUMD_ENGINE__MAX_MODEL_LEN=8192``), and validated before
anything starts. Relative paths in the file (every key typed ``Path``) are resolved against the
file's own folder, so a config means the same thing whatever the working directory of the process
is. Deprecated key names (:data:`RENAMED_KEYS`) are still accepted, with a warning at start.

Only the schema lives here: typed sections, their own checks, and the clear message of a bad file.
Checks that need another stage's code run where the daemon is assembled (every command, through
:func:`daemon.cli.load_checked_config`, and again before the engine starts): the profiles (shipped
ones merged in, instruction files read, names known) in :mod:`daemon.summary.profiles`, with the
length rules of :mod:`daemon.summary.budget`. aiokafka's options are :mod:`daemon.kafka.client`'s.

Business code receives a :class:`Config` (or one of its sections); it never reads the environment.
"""

from __future__ import annotations

import os
import tomllib
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Final, Literal, Self
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    PrivateAttr,
    SecretStr,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
    model_validator,
)
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from daemon.errors import ConfigError
from daemon.fs.safe_read import NotRegularFileError, read_bounded
from daemon.typing import DEFAULT_PROFILE, OnUnsupported, ProfileName, StopString, Strategy, Style

ENV_PREFIX = "DOCSUMD_"
MAX_CONFIG_BYTES: Final = 1 << 20
"""The largest config file read (1 MiB); a larger one is a configuration error."""


class _Section(BaseModel):
    """Base of every config section: unknown keys are errors, so a typo never passes silently;
    floats must be finite (``inf`` and ``nan`` are refused everywhere, from the file or the
    environment)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def read_config_file(path: Path, limit: int) -> bytes:
    """The bytes of a file the configuration names (the config file, an instruction file) if it is a
    regular file (a link to one is followed) of at most ``limit`` bytes. ValueError (with the reason)
    if it is not a regular file or is larger; OSError if it cannot be read. Never blocks on a FIFO and
    never reads more than ``limit + 1`` bytes (:func:`daemon.fs.safe_read.read_bounded`)."""

    def refuse_larger(size: int) -> None:
        if size > limit:
            raise ValueError(f"{size} bytes, larger than the limit of {limit}")

    try:
        data = read_bounded(path, limit, check_size=refuse_larger, follow_symlinks=True)
    except NotRegularFileError as exc:
        raise ValueError(f"{exc.kind}, not a regular file") from None
    if len(data) > limit:  # grew since the fstat
        raise ValueError(f"larger than the limit of {limit} bytes")
    return data


class SpeculativeConfig(_Section):
    """``[engine.speculative]``: speculative decoding without a draft model, mirroring vLLM's
    ``speculative_config`` (the same key names). The section being present turns it on.

    Random weights make its acceptance rate meaningless, and at high batch sizes it can be slower
    than off (the docs: Guides, Engine settings): measure it on your own model and documents before
    keeping it."""

    method: Literal["ngram", "suffix"] = Field(
        description='"ngram": prompt lookup (drafts tokens by matching the last n-gram of the output in '
        'the prompt: summaries quote their document); "suffix": suffix decoding (needs the '
        "arctic-inference package, checked before the engine starts)."
    )
    num_speculative_tokens: int | None = Field(
        default=None,
        ge=1,
        le=32,
        description="Tokens drafted per step; required for ngram; suffix defaults to its tree depth.",
    )
    prompt_lookup_max: int | None = Field(
        default=None, ge=1, description="ngram: the longest n-gram matched (vLLM's default when unset)."
    )
    prompt_lookup_min: int | None = Field(
        default=None, ge=1, description="ngram: the shortest n-gram matched (vLLM's default when unset)."
    )
    suffix_decoding_max_tree_depth: int | None = Field(
        default=None, ge=1, description="suffix: vLLM's setting of the same name (its default when unset)."
    )
    suffix_decoding_max_cached_requests: int | None = Field(
        default=None, ge=0, description="suffix: vLLM's setting of the same name (its default when unset)."
    )
    suffix_decoding_max_spec_factor: float | None = Field(
        default=None, gt=0.0, description="suffix: vLLM's setting of the same name (its default when unset)."
    )
    suffix_decoding_min_token_prob: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="suffix: vLLM's setting of the same name (its default when unset).",
    )

    @model_validator(mode="after")
    def _keys_of_the_method(self) -> Self:
        given = {name for name, value in self if value is not None}
        other = "suffix_decoding_" if self.method == "ngram" else "prompt_lookup_"
        foreign = sorted(name for name in given if name.startswith(other))
        if foreign:
            raise ValueError(f"{', '.join(foreign)}: not a setting of method {self.method!r}")
        if self.method == "ngram" and self.num_speculative_tokens is None:
            raise ValueError("method 'ngram' needs num_speculative_tokens")
        low, high = self.prompt_lookup_min, self.prompt_lookup_max
        if low is not None and high is not None and low > high:
            raise ValueError(f"prompt_lookup_min ({low}) is larger than prompt_lookup_max ({high})")
        return self

    def vllm_config(self) -> dict[str, Any]:
        """vLLM's ``speculative_config`` for this section: the keys set (vLLM's defaults for the rest)."""
        return self.model_dump(exclude_none=True)


class RemoteEngineConfig(_Section):
    """``[engine.remote]``: the OpenAI-compatible servers docsumd sends its requests to when
    ``engine.mode = "remote"`` (vLLM servers, or one router URL in front of several; see
    daemon/engine/remote/). Prompts are still built and counted with the local tokenizer
    (``engine.model`` / ``engine.tokenizer``), which start-up checks against every server."""

    endpoints: list[str] = Field(
        min_length=1,
        description='Base URLs of the servers ("http://host:8000", "https://host/prefix"), each once; '
        "no credentials, query or fragment.",
    )
    model: str | None = Field(
        default=None,
        min_length=1,
        description="The model name the servers serve it under (their --served-model-name); default: "
        "engine.served_model_name, else the one model each server lists.",
    )
    api_key: SecretStr | None = Field(
        default=None,
        description="Bearer token for the servers (vLLM's --api-key); better from the environment "
        "(DOCSUMD_ENGINE__REMOTE__API_KEY) or api_key_file than in the file. Shown as **********.",
    )
    api_key_file: Path | None = Field(
        default=None, description="A file holding the bearer token (its first line; read at start)."
    )
    ca_file: Path | None = Field(
        default=None,
        description="PEM CA bundle that https endpoints' certificates are verified against "
        "(default: the system's).",
    )
    client_cert_file: Path | None = Field(
        default=None, description="PEM client certificate for mutual TLS (with client_key_file)."
    )
    client_key_file: Path | None = Field(default=None, description="PEM key of client_cert_file.")
    verify_tls: bool = Field(
        default=True, description="false accepts any server certificate (warned at start; tests only)."
    )
    connect_timeout_seconds: float = Field(
        default=5.0, gt=0.0, le=300.0, description="The longest a connection to a server may take."
    )
    timeout_base_seconds: float = Field(
        default=60.0,
        gt=0.0,
        description="A request's deadline is this, plus its prompt at timeout_prefill_tokens_per_second, "
        "plus its output budget at timeout_decode_tokens_per_second: long prompts get longer, short ones "
        "are not left hanging. The first output must come within the first two terms. A safety net for a "
        "server that hangs while it answers its /metrics (one that stops answering those is found down "
        "within seconds): a request past it is lost, and sent again.",
    )
    timeout_prefill_tokens_per_second: float = Field(
        default=250.0,
        gt=0.0,
        description="The slowest prefill a request's deadline allows for its prompt (see "
        "timeout_base_seconds).",
    )
    timeout_decode_tokens_per_second: float = Field(
        default=2.0,
        gt=0.0,
        description="The slowest decoding a request's deadline allows for its output budget (see "
        "timeout_base_seconds).",
    )
    metrics_interval_seconds: float = Field(
        default=1.0,
        gt=0.0,
        le=60.0,
        description="How often each server's load is read (its /metrics; /health for servers without "
        "vLLM's metrics). A reading older than 3 of these counts as busy.",
    )
    down_after_failures: int = Field(
        default=2,
        ge=1,
        description="Consecutive failed load reads after which a server is down: its requests in flight "
        "move to other servers. A refused connection marks it down at once.",
    )
    backoff_first_seconds: float = Field(
        default=0.2, gt=0.0, description="The first wait of the backoff (see backoff_max_seconds)."
    )
    backoff_max_seconds: float = Field(
        default=10.0,
        gt=0.0,
        description="Refused (503, 429, 502) or lost requests are sent again, to another server where "
        "one is usable, after a jittered wait up to this (exponential from backoff_first_seconds), and "
        "at least the server's Retry-After.",
    )
    max_lost_tries: int = Field(
        default=3,
        ge=1,
        description="A request whose answer was lost this many times (stream cut, timeout, server "
        "error after it started) fails its document ('engine_error'): it may be what kills servers. "
        "Refusals and servers found down are not counted.",
    )
    load_factor: float = Field(
        default=1.25,
        ge=1.0,
        description="Document affinity: a new document goes to its own server unless that would hold "
        "more than this times the fleet's mean of docsumd's tokens in flight.",
    )
    busy_kv_cache_usage: float = Field(
        default=0.95,
        gt=0.0,
        le=1.0,
        description="A server whose KV cache is at least this full takes no new documents while "
        "another is free.",
    )
    schedules_by_priority: bool = Field(
        default=False,
        description="The servers run with --scheduling-policy priority: requests carry admission's "
        "priority (light before heavy). Servers do not tell, so say it here.",
    )

    @model_validator(mode="after")
    def _endpoints_are_base_urls(self) -> Self:
        seen: set[str] = set()
        for url in self.endpoints:
            problem = _base_url_problem(url)
            if problem:
                raise ValueError(f"endpoint {url!r}: {problem}")
            normal = url.rstrip("/").lower()
            if normal in seen:
                raise ValueError(f"endpoint {url!r} is listed twice")
            seen.add(normal)
        if (self.client_cert_file is None) != (self.client_key_file is None):
            raise ValueError("client_cert_file and client_key_file go together")
        if self.api_key is not None and self.api_key_file is not None:
            raise ValueError("set api_key or api_key_file, not both")
        return self


def _base_url_problem(url: str) -> str | None:
    """Why ``url`` is not a server's base URL, or None."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        return str(exc)
    if parts.scheme not in ("http", "https"):
        return "not an http:// or https:// URL"
    if not parts.hostname:
        return "no host"
    if parts.username or parts.password:
        return "credentials do not belong in the URL (use api_key_file)"
    if parts.query or parts.fragment:
        return "a base URL has no query or fragment"
    if port == 0:
        return "port 0"
    return None


EngineMode = Literal["local", "remote"]


class EngineConfig(_Section):
    """How the vLLM engine is built (one engine per daemon), or, with ``mode = "remote"``, which
    servers are used instead (``[engine.remote]``).

    ``quantization``, ``kv_cache_dtype``, ``speculative`` and the names in ``extra`` are checked
    against the installed vLLM's own lists where the daemon is assembled and again before the engine
    starts (:mod:`daemon.engine.vllm_args`); here only their shape."""

    mode: EngineMode = Field(
        default="local",
        description='"local": docsumd runs vLLM in its own process (AsyncLLM); "remote": it sends requests '
        "to the OpenAI-compatible servers of [engine.remote] (no local engine, no GPU needed).",
    )
    remote: RemoteEngineConfig | None = Field(
        default=None, description="[engine.remote]: the servers of the remote mode."
    )
    model: str = Field(
        description="Local model folder or a model id (ids need a reachable model hub). In remote mode "
        "only its tokenizer is loaded, and results carry its name."
    )
    tokenizer: str | None = Field(default=None, description="Tokenizer folder or id; defaults to the model.")
    dtype: str = Field(
        default="auto",
        description='vLLM dtype. "auto": the model\'s dtype, but float32 on an x86 CPU engine without bf16 '
        "instructions (AVX512-BF16 or AMX), where vLLM's bf16 is several times slower.",
    )
    max_model_len: int = Field(
        default=4096, ge=256, description="Context length in tokens: prompt plus summary, per request."
    )
    max_num_seqs: int = Field(default=64, ge=1, description="Requests vLLM runs at once (its batch).")
    max_num_batched_tokens: int = Field(
        default=4096,
        ge=256,
        description="Tokens per engine step; chunked prefill splits longer prompts. Smaller favours short "
        "documents' latency, larger throughput.",
    )
    enable_chunked_prefill: bool = Field(
        default=True,
        description="Long prompts are prefilled in chunks, so they do not stall others' decoding.",
    )
    enable_prefix_caching: bool = Field(
        default=True,
        description="The shared instruction at the start of every prompt is computed once and reused.",
    )
    kv_cache_memory_bytes: int | None = Field(
        default=None,
        ge=1 << 20,
        description="KV cache size in bytes. Required on CPU (vLLM would otherwise claim most of a NUMA "
        "node); on GPU leave it unset and use gpu_memory_utilization.",
    )
    gpu_memory_utilization: float | None = Field(
        default=None,
        gt=0.0,
        le=1.0,
        description="GPU share for weights and KV cache (when kv_cache_memory_bytes is unset). Unset: left "
        "to vLLM where it sizes its KV cache from measured memory (vLLM 0.34 on, where a value only takes "
        "memory from the cache), 0.90 on older vLLM (0.26, 0.32).",
    )
    tensor_parallel_size: int = Field(
        default=1, ge=1, description="vLLM's tensor parallelism: GPUs of one host that split every layer."
    )
    data_parallel_size: int = Field(
        default=1, ge=1, description="vLLM's data parallelism: engine replicas of one host behind one daemon."
    )
    enforce_eager: bool = Field(
        default=False,
        description="Skip torch.compile and CUDA graphs: a faster start, slower steps (use on CPU and in "
        "tests).",
    )
    load_format: str = Field(
        default="auto", description='"dummy" runs random weights from config.json alone.'
    )
    seed: int = Field(default=0, description="The engine's random seed (passed to vLLM).")
    structured_outputs_backend: Literal["xgrammar", "guidance", "outlines", "lm-format-enforcer"] = Field(
        default="xgrammar",
        description="vLLM's backend for the final step of profiles with json_schema_file (free whitespace "
        "is turned off with xgrammar and guidance).",
    )
    trust_remote_code: bool = Field(
        default=False, description="Let vLLM run Python code shipped with the model (passed to vLLM)."
    )
    served_model_name: str | None = Field(
        default=None,
        description="The model name written into results; defaults to the model path's last part.",
    )
    quantization: str | None = Field(
        default=None,
        min_length=1,
        description='"fp8" quantizes bf16/fp16 weights to FP8 at load (Hopper and newer GPUs); a '
        'pre-quantized checkpoint names its format ("awq", "gptq", "compressed-tensors", ...), which vLLM '
        "also reads from the checkpoint's config. Unset: the checkpoint's own. One of the installed "
        "vLLM's quantization methods.",
    )
    kv_cache_dtype: str = Field(
        default="auto",
        min_length=1,
        description='"auto": the model\'s dtype; "fp8" (= "fp8_e4m3" on NVIDIA) stores the KV cache in '
        "FP8: twice the tokens in the same memory. One of the installed vLLM's KV cache dtypes.",
    )
    speculative: SpeculativeConfig | None = Field(
        default=None, description="[engine.speculative]: speculative decoding (off when absent)."
    )
    extra: dict[str, Any] = Field(
        default_factory=dict,
        description="[engine.extra]: any other vLLM engine argument (a field of vLLM's AsyncEngineArgs) "
        "by its own name, passed as given (TOML types kept). Not one a key above sets, nor one docsumd "
        "owns (the docs: Guides, Engine settings).",
    )

    @model_validator(mode="after")
    def _batched_tokens_cover_context(self) -> Self:
        if not self.enable_chunked_prefill and self.max_num_batched_tokens < self.max_model_len:
            raise ValueError(
                "max_num_batched_tokens must be >= max_model_len when enable_chunked_prefill is false "
                f"(got {self.max_num_batched_tokens} < {self.max_model_len})"
            )
        return self

    @model_validator(mode="after")
    def _remote_table_with_remote_mode(self) -> Self:
        if self.mode == "remote" and self.remote is None:
            raise ValueError('engine.mode = "remote" needs an [engine.remote] table with endpoints')
        if self.mode == "local" and self.remote is not None:
            raise ValueError(
                '[engine.remote] is set but engine.mode is "local": set mode = "remote" or remove it'
            )
        return self

    @property
    def schedules_by_priority(self) -> bool:
        """Whether vLLM orders the requests it holds by their priority (``[engine.extra]
        scheduling_policy = "priority"``, or ``engine.remote.schedules_by_priority``): admission then
        sends priorities, and light requests go before heavy prefill already in the engine."""
        if self.remote is not None:
            return self.remote.schedules_by_priority
        return self.extra.get("scheduling_policy") == "priority"

    def local_only_keys(self) -> list[str]:
        """The keys set (in the file or the environment) that only the local engine reads: in remote
        mode they change nothing (the servers have their own settings)."""
        if self.mode != "remote":
            return []
        remote_keys = {"mode", "remote", "model", "tokenizer", "trust_remote_code", "served_model_name"}
        # max_model_len (checked against the servers), max_num_seqs and max_num_batched_tokens (each
        # server's, for admission's defaults) still count.
        remote_keys |= {"max_model_len", "max_num_seqs", "max_num_batched_tokens"}
        return sorted(f"engine.{key}" for key in self.model_fields_set - remote_keys)

    @property
    def model_name(self) -> str:
        """The name results carry: served_model_name, else the last part of the model path or id."""
        return self.served_model_name or Path(self.model.rstrip("/")).name


class SamplingKeys(_Section):
    """How a summary request samples its output: the keys ``[summary]`` and every
    ``[profiles.NAME]`` share, declared once with ``[summary]``'s defaults (:data:`SAMPLING_KEYS`
    lists them; :class:`daemon.contracts.Sampling` carries them to the engine under the same names).
    """

    temperature: float = Field(default=0.3, ge=0.0, description="Sampling temperature (0: greedy).")
    top_p: float = Field(
        default=0.9, gt=0.0, le=1.0, description="Nucleus sampling: the top-p mass sampled from."
    )
    repetition_penalty: float = Field(
        default=1.1,
        gt=0.0,
        description="Penalty on tokens already in the prompt or output (1: none; 1.05-1.15 suits summaries).",
    )
    presence_penalty: float = Field(
        default=0.0, ge=-2.0, le=2.0, description="Penalty on tokens already in the output (0: none)."
    )
    frequency_penalty: float = Field(
        default=0.0,
        ge=-2.0,
        le=2.0,
        description="Penalty on tokens by how often they are already in the output (0: none).",
    )
    stop: tuple[StopString, ...] = Field(
        default=(), description="Strings that end a summary where the model writes them (not included)."
    )
    seed: int | None = Field(
        default=None,
        description="Per-request sampling seed, for reproducible output. GPU only: vLLM's CPU backend "
        "crashes on it, so it is refused there (exit 2).",
    )


SAMPLING_KEYS: Final[tuple[str, ...]] = tuple(SamplingKeys.model_fields)
"""The sampling keys (:class:`SamplingKeys`), in declaration order."""


class SummaryConfig(SamplingKeys):
    """What a summary asks of the model, and how documents longer than the context are handled; its
    sampling is also that of every profile that sets none."""

    max_summary_tokens: int = Field(
        default=256,
        ge=16,
        description="Length of the final summary, in tokens (at most half of engine.max_model_len); a "
        "document's options may ask for another.",
    )
    style: Style = Field(
        default="prose",
        description='"prose" paragraphs or "bullets" (a list of points); a document\'s options may ask for '
        "the other.",
    )
    strategy: Strategy = Field(
        default="map_reduce",
        description='For documents over the context: "map_reduce" summarizes parts, then combines the part '
        'summaries, in stages until they fit (reads everything); "head" keeps the start of the document; '
        '"head_tail" keeps its start and end. Truncation says so in the result (dropped_tokens).',
    )
    part_summary_tokens: int | None = Field(
        default=None,
        ge=16,
        description="Length of each part's summary and of intermediate combined summaries (map_reduce); "
        "defaults to max_summary_tokens, at most a sixth of engine.max_model_len.",
    )
    chunk_overlap_tokens: int = Field(
        default=64, ge=0, description="Tokens consecutive parts share (at most a quarter of a part)."
    )
    max_part_tokens: int | None = Field(
        default=None,
        ge=256,
        description="Most tokens of a document one part carries (map_reduce). Unset: as many as a part "
        "request has room for in engine.max_model_len. Smaller parts make an edited document cheaper "
        "with the summary cache (an edit redoes the parts around it, so their size is its cost), at "
        "the price of more requests and combine steps on a first run (the docs: Guides, The summary "
        "cache).",
    )
    opening_tokens: int = Field(
        default=384,
        ge=0,
        description="map_reduce: the final combine step also reads the document's first this many tokens "
        "verbatim (title, parties, abstract, preamble), as far as they fit beside the part summaries; "
        '0: part summaries only (its effect on quality: bench/RESULTS.md, "summary-v3 and v4").',
    )
    max_parts: int = Field(
        default=1024,
        ge=2,
        description="A document needing more parts fails with reason 'too_long' (a 16 MiB input is about "
        "1,000 parts of 4,000 tokens).",
    )
    max_parallel_requests_per_document: int = Field(
        default=8,
        ge=1,
        description="Engine requests one document may have waiting or running at once (its fan-out), so "
        "one huge document cannot crowd out the rest.",
    )
    profile: ProfileName = Field(
        default=DEFAULT_PROFILE,
        description="The profile of documents whose source and options name none (see [profiles]).",
    )


class ProfileConfig(SamplingKeys):
    """A named summary profile (``[profiles.NAME]``): wording, default style and length, sampling.

    Every key is optional. Wording a profile leaves out is docsumd's own (the ``default`` profile's);
    lengths, style and sampling it leaves out come from ``[summary]`` (:attr:`defaults_from`). A name
    docsumd ships a profile under (daemon/profiles.toml) starts from that profile: the section changes
    only the keys it sets. Resolving it so (and reading ``instruction_file``) is
    :mod:`daemon.summary.profiles`'s part.

    The sampling keys are :class:`SamplingKeys`'s: where the section leaves one out its attribute
    holds that class's default, not ``[summary]``'s value, so what a profile sets is
    :meth:`summary_overrides` (pydantic's ``model_fields_set``), and its sampling is that of its
    resolved summary (:func:`daemon.summary.profiles.profile_summary`). Its dumps hold only the
    sampling keys it sets, so a dump read back means the same profile.
    """

    defaults_from: ClassVar[Mapping[str, str]] = types.MappingProxyType(
        {key: f"summary.{key}" for key in ("style", "max_summary_tokens", *SAMPLING_KEYS)}
    )
    """The keys a section that leaves them out takes from ``[summary]`` -> that key."""

    description: str | None = Field(
        default=None, description="What the profile is for (shown by check-config)."
    )
    instruction: str | None = Field(
        default=None,
        min_length=1,
        description="The system message every request of the profile starts with (the shared prefix).",
    )
    instruction_file: Path | None = Field(
        default=None,
        description="A UTF-8 text file holding the instruction instead (relative to the config file).",
    )
    json_schema_file: Path | None = Field(
        default=None,
        description="A JSON Schema (relative to the config file) the final summary must follow: the "
        "final step is constrained to it and its output validated (the docs: Guides, Structured output).",
    )
    document_instruction: str | None = Field(
        default=None, min_length=1, description="What a request for a whole document asks, before the text."
    )
    part_instruction: str | None = Field(
        default=None, min_length=1, description="What a request for one part of a long document asks."
    )
    combine_instruction: str | None = Field(
        default=None, min_length=1, description="What a request combining part summaries asks."
    )
    style: Style | None = Field(
        default=None, description="The profile's default style (a document's own option wins)."
    )
    max_summary_tokens: int | None = Field(
        default=None,
        ge=16,
        description="The profile's default summary length (a document's own option wins).",
    )
    on_unsupported: OnUnsupported | None = Field(
        default=None,
        description="What to do with a summary whose grounding check finds numbers, dates, names or other "
        'items its source does not hold (the result\'s checks.unsupported): "flag" keeps it and lists them '
        '(unset: flag); "retry" draws the final step once more (another seed where the profile sets one) '
        'and keeps the summary with fewer; "fail" fails the document with reason unsupported_claims, its '
        "failure record keeping the summary and the checks (the docs: Guides, Checking a summary).",
    )
    reuse_cached: bool | None = Field(
        default=None,
        description="Whether the profile's documents may reuse summaries in the cache ([cache]): parts, "
        "combine steps and whole documents made before under the same model, settings and wording are "
        "returned instead of being made again. Unset: yes. With temperature > 0 a summary is one draw "
        "among many: reuse returns the earlier draw instead of a new one (set false where each "
        "submission must be drawn anew). false: the profile neither reads nor writes the cache.",
    )

    @property
    def reuses_cached(self) -> bool:
        """Whether the profile reuses cached summaries (``reuse_cached``, on unless set false)."""
        return self.reuse_cached is not False

    def summary_overrides(self) -> dict[str, Any]:
        """The keys it shares with ``[summary]`` (:attr:`defaults_from`) that it sets, with their values."""
        return {
            key: getattr(self, key)
            for key in self.defaults_from
            if key in self.model_fields_set and getattr(self, key) is not None
        }

    @model_serializer(mode="wrap")
    def _dump_set_sampling_only(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # A sampling key left out holds SamplingKeys' default: dumped, it would read back as set.
        data: dict[str, Any] = handler(self)
        for key in SAMPLING_KEYS:
            if key not in self.model_fields_set:
                data.pop(key, None)
        return data

    @model_validator(mode="after")
    def _one_instruction(self) -> Self:
        if self.instruction is not None and self.instruction_file is not None:
            raise ValueError("set instruction or instruction_file, not both")
        return self


class AdmissionConfig(_Section):
    """What the engine is given at once, and in which order (see daemon/engine/admission.py).

    Every limit left unset is derived from the engine's settings, so nothing needs tuning per workload.
    """

    enabled: bool = Field(
        default=True,
        description="false sends requests to the engine in arrival order with no bounds beyond "
        "service.max_inflight_documents (plain FIFO; for comparison).",
    )
    max_inflight_requests: int | None = Field(
        default=None,
        ge=1,
        description="Requests in the engine at once; defaults to engine.max_num_seqs.",
    )
    max_inflight_tokens: int | None = Field(
        default=None,
        ge=256,
        description="Tokens (prompt plus output budget) in the engine at once; defaults to what the KV "
        "cache holds (32 x engine.max_num_batched_tokens if unknown), at least max_model_len.",
    )
    light_prompt_tokens: int | None = Field(
        default=None,
        ge=0,
        description="Requests with prompts up to this many tokens are light: they go first and decode in "
        "waves that heavy prefill does not slow; defaults to engine.max_num_batched_tokens / 8 "
        "(0: no request is light).",
    )
    prefill_queue_tokens: int | None = Field(
        default=None,
        ge=1,
        description="Prompt tokens admitted but not yet prefilled by the engine, at most, when a "
        "request is admitted (a request alone always fits); defaults to 6 x engine.max_num_batched_tokens.",
    )
    heavy_queue_beside_light_tokens: int | None = Field(
        default=None,
        ge=0,
        description="While light requests in the engine are not yet prefilled, a heavy request is "
        "admitted only while the engine's prefill queue, counting it, stays within this many tokens: "
        "light requests that follow them then wait behind less long-document prefill; defaults to "
        "engine.max_num_batched_tokens, one engine step (0: prefill_queue_tokens, as for any request).",
    )
    wave_min_requests: int | None = Field(
        default=None,
        ge=1,
        description="Light requests in the engine from which heavy requests wait (unless aged) so the "
        "light ones decode in light steps; defaults to engine.max_num_seqs / 4.",
    )
    wave_max_requests: int | None = Field(
        default=None,
        ge=1,
        description="Light requests in one wave at most; by default the waiting ones are split into the "
        "fewest waves max_inflight_requests allows, of equal size.",
    )
    aging_seconds: float = Field(
        default=30.0,
        ge=0.0,
        description="Aging: a heavy request waits behind light ones, and their waves, at most this long "
        "after its document arrived; then it goes ahead of light requests that arrived later "
        "(``window_seconds`` is read as this key).",
    )
    stage_lead_seconds: float = Field(
        default=10.0,
        ge=0.0,
        description="A request its document follows with another (a part of a document summarized in "
        "stages) is ordered as if its document had arrived this much earlier, so a backlog ends with "
        "requests that end documents instead of combine steps decoding alone (0: plain arrival order).",
    )


class LimitsConfig(_Section):
    """Input limits: what is refused before it costs engine time."""

    max_input_bytes: int = Field(
        default=16 * 1024 * 1024,
        ge=1,
        description="Larger inputs fail with reason 'too_large' without being read into memory.",
    )
    max_inflight_bytes: int = Field(
        default=64 * 1024 * 1024,
        ge=1,
        description="Input bytes of the documents read and in progress at once. A document waits, before "
        "it is read when its size is known (else right after), until its bytes fit; one larger than the "
        "whole budget runs alone. Bounds the main process's memory (the docs: Guides, Sizing and memory).",
    )


class ExtractConfig(_Section):
    """PDF, DOCX, ODT and HTML inputs. Their format is detected from their bytes; their text is
    extracted in separate worker processes under the limits below (a worker over a limit fails that
    document with ``extract_failed`` and is replaced), then checked like any text input."""

    enabled: bool = Field(
        default=True,
        description="false: PDF, DOCX and ODT inputs fail as 'binary' and HTML is read as plain text; "
        "no worker is started.",
    )
    workers: int = Field(
        default=2, ge=1, le=64, description="Worker processes, so extractions at once (one CPU core each)."
    )
    memory_mib: int = Field(
        default=1024,
        ge=256,
        description="A worker's address-space limit (RLIMIT_AS), in MiB: an extraction that needs more "
        "fails with 'extract_failed'. The daemon's memory grows by at most workers x this.",
    )
    cpu_seconds: float = Field(
        default=60.0, gt=0.0, description="CPU time one extraction may use (RLIMIT_CPU of its worker)."
    )
    timeout_seconds: float = Field(
        default=120.0,
        gt=0.0,
        description="Wall-clock time one extraction may take once a worker has it (keep it above "
        "cpu_seconds + 1).",
    )
    max_tasks_per_worker: int = Field(
        default=200, ge=1, description="A worker is replaced after this many documents (bounds leaks)."
    )
    max_pages: int = Field(
        default=2000, ge=1, description="PDFs with more pages fail with 'too_large' before any is read."
    )
    max_output_chars: int = Field(
        default=20_000_000,
        ge=1,
        description="Extracted text over this many characters fails with 'too_large'; the text must then "
        "also fit limits.max_input_bytes as UTF-8, like any input.",
    )
    max_expansion_ratio: float = Field(
        default=20.0,
        ge=1.0,
        description="Extracted text (as UTF-8) over this many times its input's bytes fails with "
        "'too_expanded', once it is over expansion_floor_bytes: a small file must not hold the memory "
        "and engine time of a large one. Extraction stops as soon as the text passes it, and the "
        "service's byte budget counts each extracted document at this cap until its text is known.",
    )
    expansion_floor_bytes: int = Field(
        default=1024 * 1024,
        ge=0,
        description="Extracted text up to this many bytes (as UTF-8) is never refused for its "
        "expansion ratio, however small its input.",
    )
    max_unpacked_bytes: int = Field(
        default=200 * 1024 * 1024,
        ge=1,
        description="DOCX/ODT (ZIP archives): the bytes their entries may unpack to, counted while "
        "unpacking; PDF: what its Flate streams inflate to; over it: 'too_large'.",
    )
    max_compression_ratio: float = Field(
        default=200.0,
        ge=1.0,
        description="DOCX/ODT entries and PDF streams (past 8 MiB) unpacking to more than this many "
        "times their packed size are bombs ('too_large').",
    )


DEFAULT_WORK_FOLDER = ".{inbox}.docsumd-work"
"""The work folder's name beside the inbox (``{inbox}``: the inbox's name) when ``sources.folder.work``
is not set: outside the inbox, so no inbox writer can rename, replace or pre-create it, and on the
same file system as long as the inbox is not a mount point itself."""


class FolderSourceConfig(_Section):
    """The watched-folder source and its result folders: four distinct folders, none inside the inbox."""

    inbox: Path = Field(description="Where documents arrive: every regular file directly in it is one.")
    outbox: Path = Field(description="Results: NAME.summary.json (STEM.summary.json for long or odd names).")
    done: Path = Field(description="Inputs move here once their result is written.")
    failed: Path = Field(description="Refused inputs move here, after their NAME.error.json is written.")
    work: Path | None = Field(
        default=None,
        description="The private folder inputs are claimed into (one atomic rename) while they are in "
        "flight; default .INBOXNAME.docsumd-work beside the inbox. It must be on the inbox's file system, "
        "outside the inbox, and docsumd's alone (owned by its user, mode 0700; created so).",
    )
    crash_loop_exits: int = Field(
        default=3,
        ge=1,
        description="An input in flight at this many unclean exits of docsumd (crash, kill, power cut, "
        "fatal error) is set aside to failed/ with reason 'crash_loop' instead of being tried again.",
    )
    io_timeout_seconds: float = Field(
        default=30.0,
        gt=0.0,
        description="The longest one file operation may take (reading an input or a sidecar, writing a "
        "record, moving a file). A read that takes longer fails its document ('unreadable'); a write or "
        "move that takes longer is fatal (the output folders hang).",
    )
    settle_seconds: float = Field(
        default=1.0,
        ge=0.0,
        description="A file is read only once its size and mtime stayed the same for this long "
        "(protects against half-written inputs from writers that do not rename into the inbox).",
    )
    rescan_seconds: float = Field(
        default=30.0,
        gt=0.0,
        description="Full rescan period, a safety net for missed file events.",
    )
    profile: ProfileName | None = Field(
        default=None, description="The profile of this folder's documents; default summary.profile."
    )

    @property
    def work_folder(self) -> Path:
        """Where inputs in flight are: ``work``, or the hidden default beside the inbox."""
        if self.work is not None:
            return self.work
        inbox = self.inbox.absolute()
        return inbox.parent / DEFAULT_WORK_FOLDER.format(inbox=inbox.name)

    @model_validator(mode="after")
    def _folders_distinct(self) -> Self:
        folders = {"inbox": self.inbox, "outbox": self.outbox, "done": self.done, "failed": self.failed}
        resolved = {name: path.resolve() for name, path in folders.items()}
        if len(set(resolved.values())) != len(resolved):
            raise ValueError(f"inbox, outbox, done and failed must be four different folders, got {folders}")
        if any(resolved["inbox"] in path.parents for name, path in resolved.items() if name != "inbox"):
            raise ValueError("outbox, done and failed must not lie inside the inbox (they would be re-read)")
        self._check_work_folder(self.work_folder.resolve(), resolved)
        return self

    @staticmethod
    def _check_work_folder(work: Path, others: dict[str, Path]) -> None:
        if others["inbox"] in work.parents:
            raise ValueError(
                "work must not lie inside the inbox: anyone who can write to the inbox could rename, "
                "replace or pre-create it (put it beside the inbox, on the same file system)"
            )
        for name, path in others.items():
            if work == path or work in path.parents or path in work.parents:
                raise ValueError(f"work must be a folder of its own, not {name}, inside it or around it")

    def profile_keys(self) -> dict[str, str]:
        """Config key -> the profile it names, for the keys of this section that name one."""
        return {} if self.profile is None else {"sources.folder.profile": self.profile}

    def profile_uses(self, default: str) -> dict[str, str]:
        """What this source reads -> the profile of its documents (``default``: summary.profile)."""
        return {"sources.folder": self.profile or default}


STATIC_SESSION_TIMEOUT_MS: Final = 300_000
"""A static member's default session timeout: a daemon's restart (drain, engine stop, a new process,
the engine's start) fits in it, so its partitions wait for it instead of moving."""
DYNAMIC_SESSION_TIMEOUT_MS: Final = 30_000
"""A dynamic member's default session timeout."""
_JOIN_MARGIN_MS: Final = 5_000
"""rebalance_timeout_ms stays this far below request_timeout_ms (the Java client's JoinGroup timeout is
the rebalance timeout plus 5 s; aiokafka uses request_timeout_ms)."""


class KafkaSourceConfig(_Section):
    """The Kafka source: a consumer group reading documents, results and dead letters produced back.

    The connection and security keys are passed through to aiokafka's consumer and producer.
    """

    bootstrap_servers: str | list[str] = Field(description='"host:port" or a list of them.')
    input_topics: list[str] = Field(min_length=1, description="Topics to read documents from.")
    profile: ProfileName | None = Field(
        default=None, description="The profile of documents from these topics; default summary.profile."
    )
    topic_profiles: dict[str, ProfileName] = Field(
        default_factory=dict,
        description="Input topic -> profile, for topics whose documents need another profile than profile.",
    )
    group_id: str = Field(
        min_length=1, description="The consumer group; daemons sharing it split partitions."
    )
    output_topic: str = Field(min_length=1, description="Results go here (key: document id).")
    dead_letter_topic: str = Field(min_length=1, description="Failure records go here (key: document id).")
    client_id: str = Field(default="docsumd", description="The client id the broker sees (aiokafka's).")
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        default="PLAINTEXT", description="How to reach the brokers (aiokafka's security_protocol)."
    )
    sasl_mechanism: Literal["PLAIN", "GSSAPI", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"] | None = (
        Field(
            default=None, description="Required with a SASL_* security_protocol (aiokafka's sasl_mechanism)."
        )
    )
    sasl_plain_username: str | None = Field(default=None, description="SASL user name (PLAIN, SCRAM).")
    sasl_plain_password: SecretStr | None = Field(
        default=None, description="Shown as ********** by check-config."
    )
    ssl_cafile: Path | None = Field(
        default=None, description="CA certificates to check the brokers with (SSL, SASL_SSL); PEM."
    )
    ssl_certfile: Path | None = Field(
        default=None, description="This client's certificate (PEM), if required."
    )
    ssl_keyfile: Path | None = Field(default=None, description="This client's private key (PEM).")
    auto_offset_reset: Literal["earliest", "latest"] = Field(
        default="earliest", description="Where a group with no committed offset starts."
    )
    max_message_bytes: int = Field(
        default=16 * 1024 * 1024,
        ge=1,
        description="Larger message values fail with reason 'too_large' (the dead letter keeps their "
        "first dead_letter_payload_bytes and their size).",
    )
    dead_letter_payload_bytes: int = Field(
        default=64 * 1024,
        ge=0,
        description="How much of the original message value a dead letter carries, at most.",
    )
    max_buffered_messages: int = Field(
        default=32,
        ge=1,
        description="Messages fetched and not yet taken in; when full, partitions are paused (the "
        "consumer stays in its group) and resumed when there is room.",
    )
    max_buffered_bytes: int = Field(
        default=64 * 1024 * 1024,
        ge=1024,
        description="Bytes (keys, values, headers) of the messages fetched and not yet taken in; at this "
        "many, partitions are paused as when max_buffered_messages is reached. Also the consumer's "
        "fetch_max_bytes, so the client's own read-ahead is bounded by the same figure, and with "
        "max_message_bytes what one compressed batch may inflate to: max(this, 2 * max_message_bytes); "
        "a larger batch is one dead letter (invalid_message).",
    )
    max_key_bytes: int = Field(
        default=1024,
        ge=16,
        description="Message keys and document ids longer than this fail with reason 'too_large' (the "
        "dead letter keeps their first max_key_bytes, their size and SHA-256). Results carry the key and "
        "the id, so this bounds what they copy.",
    )
    max_header_bytes: int = Field(
        default=16 * 1024,
        ge=64,
        description="A message's headers, names and values together (plus 4 bytes per header), at most; "
        "more fail with reason 'too_large'. Results carry the headers (as headers and in metadata), so "
        "this bounds what they copy.",
    )
    exactly_once: bool = Field(
        default=False,
        description="Transactional output: each commit writes the finished results and dead letters "
        "together with the consumed offsets in one Kafka transaction, so a consumer reading with "
        "isolation.level=read_committed sees every result exactly once, even across crashes. A "
        "result becomes visible only once every earlier message of its partition is finished.",
    )
    transactional_id: str | None = Field(
        default=None,
        min_length=1,
        description="exactly_once: the producer's transactional.id; default docsumd-GROUP_ID-HOSTNAME. "
        "It must be stable across restarts of one daemon (the new producer fences the old one and "
        "aborts its open transaction) and distinct between daemons running at the same time.",
    )
    max_pending_results: int = Field(
        default=1024,
        ge=1,
        description="exactly_once: finished results held until every earlier message of their "
        "partition is finished; when this many are held, partitions are paused.",
    )
    idle_pause_ms: int = Field(
        default=400,
        ge=0,
        le=10_000,
        description="After a poll that brought nothing, fetching stops this long (new messages wait at "
        "most this long). Guards against brokers that answer empty fetches at once instead of waiting "
        "fetch.max.wait.ms, which would keep a core busy; 0 turns it off.",
    )
    commit_interval_seconds: float = Field(
        default=1.0,
        gt=0.0,
        description="How often finished offsets are committed (also on stop, rebalance).",
    )
    lag_interval_seconds: float = Field(default=10.0, gt=0.0, description="Consumer lag metric period.")
    static_membership: bool = Field(
        default=True,
        description="Join the group as a static member (KIP-345) under group_instance_id: a daemon that "
        "restarts within session_timeout_ms gets its partitions back without a rebalance of the others. "
        "It never leaves the group on purpose (aiokafka sends no LeaveGroup for a static member): a "
        "daemon stopped for good leaves its partitions idle until its session times out. false: a "
        "dynamic member (leaves on stop; every join or leave rebalances the group).",
    )
    group_instance_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=249,
        pattern=r"^[A-Za-z0-9._-]+$",
        description="static_membership: this daemon's member id, stable across its restarts and distinct "
        "between daemons running at once (on Kubernetes a StatefulSet's pod name). Default: the host "
        "name and the metrics port (HOST-PORT); with metrics off or on port 0 there is no stable default "
        "and the daemon joins as a dynamic member (with a warning).",
    )
    session_timeout_ms: int | None = Field(
        default=None,
        ge=1000,
        description="Kafka drops a member silent this long. Default 300000 for a static member (covers a "
        "restart of the daemon and its engine), 30000 for a dynamic one (longer than aiokafka's 10 s: a "
        "host busy with the engine can stall the event loop for seconds, and a needless rebalance redoes "
        "work). Brokers accept group.min.session.timeout.ms to group.max.session.timeout.ms (Kafka's "
        "defaults: 6000 to 1800000).",
    )
    rebalance_timeout_ms: int = Field(
        default=30_000,
        ge=1000,
        description="How long the broker waits, in a rebalance, for the members to join again (aiokafka "
        "would take session_timeout_ms). Below request_timeout_ms: aiokafka waits that long for the "
        "join the broker holds.",
    )
    heartbeat_interval_ms: int = Field(
        default=3_000,
        ge=100,
        description="Consumer heartbeat period (at most a third of session_timeout_ms).",
    )
    max_poll_interval_ms: int = Field(
        default=300_000,
        ge=1000,
        description="The consumer polls even while partitions are paused, so a long document never "
        "pushes it out of the group; this bounds a stalled event loop.",
    )
    request_timeout_ms: int = Field(
        default=40_000, ge=1000, description="Consumer and producer request timeout (aiokafka's)."
    )
    max_request_bytes: int = Field(
        default=16 * 1024 * 1024 + 1024 * 1024,
        ge=8192,
        description="The producer's largest record: every result and dead letter is built to fit it (a "
        "result that would not fails its document with 'too_large'; a dead letter sheds its payload, then "
        "its headers). The topics' max.message.bytes should allow it; a record the broker refuses anyway "
        "is replaced by its reduced dead letter (the docs: Guides, Kafka).",
    )

    compression_type: Literal["gzip", "snappy", "lz4", "zstd"] | None = Field(
        default=None,
        description="How the producer compresses results and dead letters (none by default). Input "
        "batches of every codec are read whatever this says.",
    )

    def profile_for(self, topic: str) -> str | None:
        """The profile of documents read from ``topic`` (None: summary.profile)."""
        return self.topic_profiles.get(topic, self.profile)

    def profile_keys(self) -> dict[str, str]:
        """Config key -> the profile it names, for the keys of this section that name one."""
        keys = {} if self.profile is None else {"sources.kafka.profile": self.profile}
        keys.update(
            {f"sources.kafka.topic_profiles.{topic}": name for topic, name in self.topic_profiles.items()}
        )
        return keys

    def profile_uses(self, default: str) -> dict[str, str]:
        """What this source reads -> the profile of its documents (``default``: summary.profile)."""
        return {
            f"sources.kafka topic {topic!r}": self.profile_for(topic) or default
            for topic in self.input_topics
        }

    @model_validator(mode="after")
    def _topics_distinct(self) -> Self:
        unread = sorted(set(self.topic_profiles) - set(self.input_topics))
        if unread:
            raise ValueError(f"topic_profiles names topics that are not input_topics: {unread}")
        outputs = {self.output_topic, self.dead_letter_topic}
        if len(outputs) != 2:
            raise ValueError("output_topic and dead_letter_topic must differ")
        if outputs & set(self.input_topics):
            raise ValueError("output_topic and dead_letter_topic must not be input topics (a loop)")
        if self.sasl_mechanism is None and self.security_protocol.startswith("SASL"):
            raise ValueError(f"security_protocol {self.security_protocol} needs sasl_mechanism")
        if self.heartbeat_interval_ms * 3 > self.session_timeout(static=False):
            raise ValueError("heartbeat_interval_ms must be at most a third of session_timeout_ms")
        if self.rebalance_timeout_ms + _JOIN_MARGIN_MS > self.request_timeout_ms:
            raise ValueError(
                f"rebalance_timeout_ms ({self.rebalance_timeout_ms}) must be at least {_JOIN_MARGIN_MS} "
                f"below request_timeout_ms ({self.request_timeout_ms}): aiokafka waits request_timeout_ms "
                "for a join the broker may hold for rebalance_timeout_ms"
            )
        return self

    def session_timeout(self, *, static: bool) -> int:
        """The session timeout in ms: ``session_timeout_ms``, or the default of a static or dynamic member."""
        if self.session_timeout_ms is not None:
            return self.session_timeout_ms
        return STATIC_SESSION_TIMEOUT_MS if static else DYNAMIC_SESSION_TIMEOUT_MS


class SourcesConfig(_Section):
    """Where documents come from. A source runs when its section is present; both may run at once."""

    folder: FolderSourceConfig | None = None
    kafka: KafkaSourceConfig | None = None

    def present(self) -> list[FolderSourceConfig | KafkaSourceConfig]:
        """The sections present, in declaration order."""
        return [section for section in (self.folder, self.kafka) if section is not None]


class MetricsConfig(_Section):
    """The HTTP endpoint for /metrics, /healthz and /readyz."""

    enabled: bool = Field(default=True, description="Serve the endpoint (summarize never does).")
    host: str = Field(
        default="127.0.0.1",
        description="Address to listen on. The endpoint has no authentication: keep it on loopback or a "
        "private network.",
    )
    port: int = Field(default=9400, ge=0, le=65535, description="0 picks a free port (it is logged).")


class ServiceConfig(_Section):
    """How the service schedules and stops."""

    max_inflight_documents: int | None = Field(
        default=None,
        ge=1,
        description="Documents read and handed to the engine at once (the window in which admission "
        "reorders); defaults to 2 x engine.max_num_seqs (per server of [engine.remote] in remote mode) so "
        "the engine always has a full batch while results are written.",
    )
    drain_seconds: float = Field(
        default=60.0,
        ge=0.0,
        description="On SIGTERM/SIGINT, in-flight documents get this long to finish; the rest are "
        "aborted and left unacknowledged (they are processed again on the next start).",
    )
    status_interval_seconds: float = Field(
        default=30.0, gt=0.0, description="Period of the one-line status log (and systemd's STATUS=)."
    )
    stall_seconds: float = Field(
        default=600.0,
        ge=0.0,
        description="With documents in flight or waiting, no document finished and no engine request "
        "completed for this long: /healthz answers 503 and the systemd watchdog is no longer fed, so "
        "systemd restarts a wedged daemon. Idle with no work stays healthy. 0 turns it off.",
    )


class TracingConfig(_Section):
    """``[tracing]``: one OpenTelemetry trace per document, exported over OTLP/HTTP (off by default).

    A document's span is the child of its Kafka message's ``traceparent`` (W3C trace context), or the
    root of a new trace (folder inputs, messages without one); its steps and engine requests are its
    children, vLLM's own ``llm_request`` spans theirs (daemon/ops/tracing.py)."""

    otlp_endpoint: str | None = Field(
        default=None,
        description='The OTLP/HTTP collector, e.g. "http://otel-collector:4318" (spans go to its '
        "/v1/traces; a URL with a path is used as given). Unset: no tracing, and nothing of "
        "OpenTelemetry is loaded.",
    )
    sampling_ratio: float = Field(
        default=1.0,
        ge=0.0,
        le=1.0,
        description="The share of new traces recorded (documents without a sampled parent); a Kafka "
        "message's traceparent decides for its document (parent-based sampling).",
    )
    service_name: str = Field(default="docsumd", min_length=1, description="The spans' service.name.")

    @model_validator(mode="after")
    def _endpoint_is_http(self) -> Self:
        if self.otlp_endpoint is not None:
            parts = urlsplit(self.otlp_endpoint)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(
                    f"otlp_endpoint must be an http:// or https:// URL with a host (OTLP over HTTP), "
                    f"got {self.otlp_endpoint!r}"
                )
        return self

    @property
    def traces_url(self) -> str | None:
        """Where spans are posted: the endpoint's /v1/traces, or the endpoint itself if it has a path."""
        if self.otlp_endpoint is None:
            return None
        base = self.otlp_endpoint.rstrip("/")
        return base if urlsplit(base).path else f"{base}/v1/traces"


class LoggingConfig(_Section):
    """Structured logs on stderr."""

    level: Literal["debug", "info", "warning", "error"] = Field(
        default="info", description="The lowest level logged."
    )
    format: Literal["auto", "json", "console"] = Field(
        default="auto", description="auto: console on a terminal, JSON otherwise (journald, files, pipes)."
    )


CACHE_FILE_NAME: Final = "summaries.sqlite3"


def default_cache_path() -> Path:
    """Where the embedded summary cache lives unless ``cache.path`` says otherwise: the folder
    systemd gives the unit (``CacheDirectory=``, exported as ``$CACHE_DIRECTORY``), else
    ``$XDG_CACHE_HOME/docsumd``, else ``~/.cache/docsumd``. A cache folder, not a state folder: the
    file can be deleted at any time and is rebuilt (every entry can be made again by the engine)."""
    systemd = os.environ.get("CACHE_DIRECTORY", "").split(":")[0]
    if systemd:
        return Path(systemd) / CACHE_FILE_NAME
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
    return base / "docsumd" / CACHE_FILE_NAME


class RedisCacheConfig(_Section):
    """``[cache.redis]``: the shared store of ``cache.backend = "redis"`` (Redis or Valkey), for
    daemons on several hosts. Bound it on the server: ``maxmemory`` with ``maxmemory-policy
    allkeys-lru`` on a server (or database) of its own, or ``volatile-lru`` on a shared one (docsumd's
    entries carry a TTL, the server's other keys are kept)."""

    url: SecretStr = Field(
        description='"redis://[[USER]:PASSWORD@]HOST:PORT/DB", "rediss://..." for TLS, or '
        '"unix:///PATH/redis.sock?db=N". Shown as ********** by check-config (it may hold a password).'
    )
    timeout_seconds: float = Field(
        default=0.25,
        gt=0.0,
        le=60.0,
        description="The longest one lookup or write may take, connecting included; longer is a miss "
        "(the store is then skipped for cache.retry_seconds), never a stall.",
    )
    ttl_seconds: int = Field(
        default=30 * 24 * 3600,
        ge=0,
        description="An entry not read for this long expires (each hit renews it); 0: no expiry (then "
        "only the server's maxmemory policy bounds the store).",
    )
    key_prefix: str = Field(
        default="docsumd:",
        max_length=128,
        description="Prefix of every key docsumd writes, so a shared server's other keys are apart.",
    )
    max_connections: int = Field(default=16, ge=1, le=1024, description="Connections to the server, at most.")

    @model_validator(mode="after")
    def _url_scheme(self) -> Self:
        url = self.url.get_secret_value()
        scheme = url.partition("://")[0]
        if scheme not in ("redis", "rediss", "unix"):
            raise ValueError("url must start with redis://, rediss:// or unix://")
        try:
            _ = urlsplit(url).port
        except ValueError:
            # Not the parser's message: it quotes the text after the host's colon, which is part of
            # the password when the password holds a "/".
            raise ValueError(
                "url is not a valid URL: a port that is not a number, or a password with a / ? or # "
                "that is not percent-encoded (the url is not shown: it may hold a password)"
            ) from None
        return self


class CacheConfig(_Section):
    """``[cache]``: a content-addressed cache of summaries (part summaries, combine steps, whole
    documents), so an edited document costs only its edits and a resubmitted one nothing.

    On by default with an embedded SQLite store (no set-up). Keys hold everything that changes an
    output (the text, the model's revision, the engine's numerics, the prompt and profile versions,
    the sampling), so a change of any of these is a miss, never a stale summary. A failing store is
    a miss with a warning, never a failed document; turn it off for benchmarks of the engine itself
    (``enabled = false``), or per profile with ``reuse_cached = false``."""

    enabled: bool = Field(default=True, description="false: no lookups, no writes, no store opened.")
    backend: Literal["sqlite", "redis"] = Field(
        default="sqlite",
        description='"sqlite": an embedded file (path); "redis": a shared server ([cache.redis]), for '
        "daemons on several hosts.",
    )
    path: Path = Field(
        default_factory=default_cache_path,
        description="The SQLite store (WAL mode; beside it its -wal and -shm files). Default: "
        "$CACHE_DIRECTORY (systemd's CacheDirectory), else $XDG_CACHE_HOME/docsumd, else "
        "~/.cache/docsumd, then summaries.sqlite3. Daemons on one host may share it.",
    )
    max_bytes: int = Field(
        default=1 << 30,
        ge=1 << 20,
        description="The SQLite store's size bound (its used pages); the least recently used entries "
        "are evicted past it. Its -wal file adds a few MiB.",
    )
    max_value_bytes: int = Field(
        default=1 << 20,
        ge=1024,
        description="An entry larger than this (encoded) is not stored.",
    )
    timeout_seconds: float = Field(
        default=2.0,
        gt=0.0,
        le=60.0,
        description="The longest one SQLite lookup or write may take (waiting for another daemon's "
        "write included); longer is a miss, and the store is skipped for retry_seconds.",
    )
    retry_seconds: float = Field(
        default=30.0,
        ge=0.0,
        description="After a failure (timeout, unreadable, read-only, server down) the store is skipped "
        "this long (every lookup a miss at no cost), then tried again.",
    )
    namespace: str = Field(
        default="",
        max_length=256,
        description="A label added to every key: change it to start afresh (e.g. after changing the "
        "model folder's files in a way its fingerprint may not see), or to keep teams apart on one "
        "shared server.",
    )
    redis: RedisCacheConfig | None = Field(
        default=None, description='[cache.redis]: the shared store; required with backend = "redis".'
    )

    @model_validator(mode="after")
    def _backend_configured(self) -> Self:
        if self.backend == "redis" and self.redis is None:
            raise ValueError('backend "redis" needs a [cache.redis] section with its url')
        return self


RENAMED_KEYS: Final[Mapping[str, str]] = {
    "admission.window_seconds": "admission.aging_seconds",
}
"""Deprecated dotted keys -> their new names. An old name is still accepted, in the file and in the
environment (``DOCSUMD_ADMISSION__WINDOW_SECONDS``), and warned of at start
(:attr:`Config.renamed_keys`); setting both names is an error. Renaming a key is one line here."""


class Config(BaseSettings):
    """The whole configuration. Build it with :func:`load_config`; the checks of its profiles and
    lengths are :func:`daemon.summary.profiles.resolve_profiles`'s."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
        allow_inf_nan=False,
    )

    engine: EngineConfig
    summary: SummaryConfig = SummaryConfig()
    admission: AdmissionConfig = AdmissionConfig()
    limits: LimitsConfig = LimitsConfig()
    extract: ExtractConfig = ExtractConfig()
    sources: SourcesConfig = SourcesConfig()
    metrics: MetricsConfig = MetricsConfig()
    service: ServiceConfig = ServiceConfig()
    logging: LoggingConfig = LoggingConfig()
    tracing: TracingConfig = TracingConfig()
    cache: CacheConfig = Field(default_factory=CacheConfig)
    profiles: dict[ProfileName, ProfileConfig] = Field(
        default_factory=dict,
        description="Named summary profiles; an empty [profiles.NAME] turns on the shipped one of that name.",
    )
    _renamed: tuple[str, ...] = PrivateAttr(default=())

    @model_validator(mode="wrap")
    @classmethod
    def _accept_renamed_keys(cls, data: Any, handler: ModelWrapValidatorHandler[Self]) -> Self:
        # Here, not in load_config: environment overrides are merged into the data only now.
        renamed: list[str] = []
        if isinstance(data, dict):
            data = _rename_deprecated(data, renamed)
        config = handler(data)
        if renamed:
            config._renamed = tuple(renamed)
        return config

    @property
    def renamed_keys(self) -> dict[str, str]:
        """The deprecated keys this config was given -> their new names, for the warning at start
        (the config is loaded before logging is configured)."""
        return {old: RENAMED_KEYS[old] for old in self._renamed}

    def seeded_keys(self) -> list[str]:
        """The config keys that set a per-request sampling seed (some engines cannot take one)."""
        keys = ["summary.seed"] if self.summary.seed is not None else []
        keys += [
            f"profiles.{name}.seed"
            for name, profile in self.profiles.items()
            if "seed" in profile.summary_overrides()
        ]
        return keys

    def require_source(self) -> None:
        """Raise :class:`ConfigError` unless at least one source is configured (the service needs one)."""
        kinds = list(SourcesConfig.model_fields)
        if all(getattr(self.sources, kind) is None for kind in kinds):
            sections = " or ".join(f"[sources.{kind}]" for kind in kinds)
            raise ConfigError(f"no source configured: add a {sections} section")

    @property
    def inflight_documents(self) -> int:
        """The effective bound on documents in flight (in remote mode, twice a server's batch per
        server of ``[engine.remote]``)."""
        servers = len(self.engine.remote.endpoints) if self.engine.remote is not None else 1
        return self.service.max_inflight_documents or 2 * self.engine.max_num_seqs * servers

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Environment beats the file (passed as init values); no .env or secrets files.
        return (env_settings, init_settings)


def load_config(path: Path | str) -> Config:
    """Read ``path`` (TOML), apply ``DOCSUMD_*`` overrides and validate. Raises :class:`ConfigError`.

    The file must be a regular file (or a link to one) of at most :data:`MAX_CONFIG_BYTES`: a FIFO
    or a device is refused without blocking or reading it."""
    config_path = Path(path)
    try:
        text = read_config_file(config_path, MAX_CONFIG_BYTES).decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{config_path}: no such config file") from None
    except (OSError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
        raise ConfigError(f"{config_path}: cannot read the config file: {exc}") from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{config_path}: not valid TOML: {exc}") from None
    except RecursionError:
        raise ConfigError(f"{config_path}: not valid TOML: nested too deeply") from None
    except (ValueError, TypeError, MemoryError) as exc:
        raise ConfigError(f"{config_path}: not valid TOML: {exc}") from None
    _resolve_relative_paths(raw, config_path.resolve().parent)
    try:
        return Config(**raw)
    except ValidationError as exc:
        try:
            message = _describe_validation_error(config_path, exc)
        except RecursionError:
            message = f"{config_path}: invalid configuration (values nested too deeply)"
        raise ConfigError(message) from None
    except RecursionError:
        raise ConfigError(f"{config_path}: invalid configuration: values nested too deeply") from None
    except ValueError as exc:  # e.g. an environment override that is not valid JSON
        raise ConfigError(f"{config_path}: invalid configuration: {exc}") from None


_UNSET: Final = object()


def _rename_deprecated(data: dict[str, Any], renamed: list[str]) -> dict[str, Any]:
    """``data`` with each old name of :data:`RENAMED_KEYS` moved to its new one (the dicts on the way
    copied, the caller's left as they are); the old names found are added to ``renamed``."""
    for old, new in RENAMED_KEYS.items():
        value = _dotted_get(data, old)
        if value is _UNSET:
            continue
        if _dotted_get(data, new) is not _UNSET:
            raise ValueError(
                f"{old} and {new} are both set: {old} is the deprecated name of {new}, set only {new}"
            )
        data = _dotted_set(_dotted_set(data, old, _UNSET), new, value)
        renamed.append(old)
    return data


def _dotted_get(data: Mapping[str, Any], key: str) -> Any:
    node: Any = data
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return _UNSET
        node = node[part]
    return node


def _dotted_set(data: Mapping[str, Any], key: str, value: Any) -> dict[str, Any]:
    """A copy of ``data`` with ``key`` set to ``value`` (removed for ``_UNSET``)."""
    head, _, rest = key.partition(".")
    copy = dict(data)
    if rest:
        child = copy.get(head)
        copy[head] = _dotted_set(child if isinstance(child, dict) else {}, rest, value)
    elif value is _UNSET:
        copy.pop(head, None)
    else:
        copy[head] = value
    return copy


def _resolve_relative_paths(raw: dict[str, Any], base: Path) -> None:
    """Make the file's relative paths relative to the file's folder (in place): every key typed
    ``Path`` (found from the sections' types), and the model and tokenizer when they are paths."""
    _resolve_typed_paths(Config, raw, base)
    engine = raw.get("engine")
    if isinstance(engine, dict):
        for key in ("model", "tokenizer"):
            value = engine.get(key)
            # A model id ("Qwen/Qwen2.5-7B-Instruct") stays as it is; a path that exists relative to
            # the config file, or one written as ./ or ../, is made absolute.
            if isinstance(value, str) and not Path(value).is_absolute():
                candidate = base / value
                if candidate.exists() or value.startswith(("./", "../")):
                    engine[key] = str(candidate)


def _resolve_typed_paths(annotation: Any, value: Any, base: Path) -> Any:
    """``value``, given for a key typed ``annotation``, with each string given for a ``Path`` made
    relative to ``base``: through sections (``Section``, ``Section | None``) and tables of them
    (``dict[str, Section]``). A value of another shape is left for validation to report."""
    kinds = _union_members(annotation)
    if isinstance(value, str) and Path in kinds:
        return str(base / value)
    if isinstance(value, dict):
        for kind in kinds:
            if isinstance(kind, type) and issubclass(kind, BaseModel):
                for name, field in kind.model_fields.items():
                    if name in value:
                        value[name] = _resolve_typed_paths(field.annotation, value[name], base)
            elif typing.get_origin(kind) is dict:
                for key in value:
                    value[key] = _resolve_typed_paths(typing.get_args(kind)[1], value[key], base)
    return value


def _union_members(annotation: Any) -> tuple[Any, ...]:
    """``X | Y`` -> (X, Y); anything else -> (itself,)."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return typing.get_args(annotation)
    return (annotation,)


def _describe_validation_error(config_path: Path, exc: ValidationError) -> str:
    lines = [f"{config_path}: invalid configuration ({exc.error_count()} problem(s)):"]
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"]) or "(top level)"
        given = error.get("input")
        shown = f" (got {given!r})" if error["type"] != "missing" and not isinstance(given, dict) else ""
        lines.append(f"  {where}: {error['msg']}{shown}")
    lines.append(f"  (environment overrides use {ENV_PREFIX}SECTION__KEY, e.g. {ENV_PREFIX}ENGINE__MODEL)")
    return "\n".join(lines)
