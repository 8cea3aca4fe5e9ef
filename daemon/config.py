"""The one typed configuration tree of docsumd.

Loaded once at start from a TOML file, then overridden by ``DOCSUMD_*`` environment variables
(nested keys joined by ``__``, e.g. ``DOCSUMD_ENGINE__MAX_MODEL_LEN=8192``), and validated before
anything starts. Relative paths in the file are resolved against the file's own folder, so a config
means the same thing whatever the working directory of the process is.

Business code receives a :class:`Config` (or one of its sections); it never reads the environment.
"""

from __future__ import annotations

import functools
import importlib.resources
import os
import stat
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Final, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from daemon.errors import ConfigError
from daemon.fs.safe_read import describe_mode
from daemon.summary.budget import check_lengths

ENV_PREFIX = "DOCSUMD_"
MAX_CONFIG_BYTES: Final = 1 << 20
"""The largest config file read (1 MiB); a larger one is a configuration error."""
MAX_INSTRUCTION_FILE_BYTES: Final = 256 << 10
"""The largest ``instruction_file`` read (256 KiB); a larger one is a configuration error."""
_OPEN_FLAGS: Final = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)


class _Section(BaseModel):
    """Base of every config section: unknown keys are errors, so a typo never passes silently;
    floats must be finite (``inf`` and ``nan`` are refused everywhere, from the file or the
    environment)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def read_regular_file(path: Path, limit: int) -> bytes:
    """The bytes of ``path`` if it is a regular file (a link to one is followed) of at most
    ``limit`` bytes. ValueError (with the reason) if it is not a regular file or is larger; OSError
    if it cannot be read. Never blocks on a FIFO (opened non-blocking, refused by ``fstat``) and never
    reads more than ``limit + 1`` bytes (a device such as /dev/zero is refused before any read)."""
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise ValueError(f"{describe_mode(os.stat(path).st_mode)}, not a regular file")
    fd = os.open(path, _OPEN_FLAGS)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):  # swapped since the stat
            raise ValueError(f"{describe_mode(info.st_mode)}, not a regular file")
        if info.st_size > limit:
            raise ValueError(f"{info.st_size} bytes, larger than the limit of {limit}")
        chunks: list[bytes] = []
        size = 0
        while size <= limit and (chunk := os.read(fd, limit + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:  # grew since the fstat
            raise ValueError(f"larger than the limit of {limit} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)


class EngineConfig(_Section):
    """How the vLLM engine is built (one engine per daemon)."""

    model: str = Field(description="Local model folder or a model id (ids need a reachable model hub).")
    tokenizer: str | None = Field(default=None, description="Tokenizer folder or id; defaults to the model.")
    dtype: str = "auto"
    max_model_len: int = Field(default=4096, ge=256)
    max_num_seqs: int = Field(default=64, ge=1)
    max_num_batched_tokens: int = Field(default=4096, ge=256)
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True
    kv_cache_memory_bytes: int | None = Field(
        default=None,
        ge=1 << 20,
        description="KV cache size in bytes. Required on CPU (vLLM would otherwise claim most of a NUMA "
        "node); on GPU leave it unset and use gpu_memory_utilization.",
    )
    gpu_memory_utilization: float = Field(default=0.90, gt=0.0, le=1.0)
    tensor_parallel_size: int = Field(default=1, ge=1)
    data_parallel_size: int = Field(default=1, ge=1)
    enforce_eager: bool = False
    load_format: str = Field(
        default="auto", description='"dummy" runs random weights from config.json alone.'
    )
    seed: int = 0
    trust_remote_code: bool = False
    served_model_name: str | None = Field(
        default=None,
        description="The model name written into results; defaults to the model path's last part.",
    )

    @model_validator(mode="after")
    def _batched_tokens_cover_context(self) -> Self:
        if not self.enable_chunked_prefill and self.max_num_batched_tokens < self.max_model_len:
            raise ValueError(
                "max_num_batched_tokens must be >= max_model_len when enable_chunked_prefill is false "
                f"(got {self.max_num_batched_tokens} < {self.max_model_len})"
            )
        return self

    @property
    def model_name(self) -> str:
        """The name results carry: served_model_name, else the last part of the model path or id."""
        return self.served_model_name or Path(self.model.rstrip("/")).name


Style = Literal["prose", "bullets"]
Strategy = Literal["map_reduce", "head", "head_tail"]
ProfileName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9_-]{0,31}$")]
"""A profile's name: lower-case letters, digits, ``-`` and ``_``, at most 32 (it is a metric label)."""
DEFAULT_PROFILE: Final = "default"
StopString = Annotated[str, StringConstraints(min_length=1)]


class SummaryConfig(_Section):
    """What a summary asks of the model, and how documents longer than the context are handled."""

    max_summary_tokens: int = Field(default=256, ge=16, description="Length of the final summary, in tokens.")
    style: Style = Field(default="prose", description='"prose" paragraphs or "bullets" (a list of points).')
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
    temperature: float = Field(default=0.3, ge=0.0)
    top_p: float = Field(default=0.9, gt=0.0, le=1.0)
    repetition_penalty: float = Field(default=1.1, gt=0.0)
    presence_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    frequency_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    stop: tuple[StopString, ...] = Field(
        default=(), description="Strings that end a summary where the model writes them (not included)."
    )
    seed: int | None = Field(default=None, description="Per-request sampling seed, for reproducible output.")

    def part_tokens(self, max_model_len: int) -> int:
        """The effective length of part and intermediate summaries for a context of ``max_model_len``."""
        return self.part_summary_tokens or min(self.max_summary_tokens, max_model_len // 6)


_PROFILE_SUMMARY_KEYS: Final = (
    "style",
    "max_summary_tokens",
    "temperature",
    "top_p",
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
    "stop",
    "seed",
)
"""The keys a profile shares with [summary]: a profile that leaves one out takes [summary]'s."""


class ProfileConfig(_Section):
    """A named summary profile (``[profiles.NAME]``): wording, default style and length, sampling.

    Every key is optional. Wording a profile leaves out is docsumd's own (the ``default`` profile's);
    lengths, style and sampling it leaves out come from ``[summary]``. A name docsumd ships a profile
    under (daemon/profiles.toml) starts from that profile: the section changes only the keys it sets.
    """

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
    document_instruction: str | None = Field(
        default=None, min_length=1, description="What a request for a whole document asks, before the text."
    )
    part_instruction: str | None = Field(
        default=None, min_length=1, description="What a request for one part of a long document asks."
    )
    combine_instruction: str | None = Field(
        default=None, min_length=1, description="What a request combining part summaries asks."
    )
    style: Style | None = None
    max_summary_tokens: int | None = Field(default=None, ge=16)
    temperature: float | None = Field(default=None, ge=0.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    repetition_penalty: float | None = Field(default=None, gt=0.0)
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    stop: tuple[StopString, ...] | None = None
    seed: int | None = None

    @field_validator("instruction_file")
    @classmethod
    def _instruction_file_readable(cls, path: Path | None) -> Path | None:
        if path is not None:
            read_instruction_file(path)
        return path

    @model_validator(mode="after")
    def _one_instruction(self) -> Self:
        if self.instruction is not None and self.instruction_file is not None:
            raise ValueError("set instruction or instruction_file, not both")
        return self

    def instruction_text(self) -> str | None:
        """The instruction, from the file when ``instruction_file`` is set; None: docsumd's own."""
        if self.instruction_file is not None:
            return read_instruction_file(self.instruction_file)
        return self.instruction

    def summary_over(self, summary: SummaryConfig) -> SummaryConfig:
        """``summary`` with this profile's lengths, style and sampling where it sets them."""
        overrides = {
            key: getattr(self, key) for key in _PROFILE_SUMMARY_KEYS if getattr(self, key) is not None
        }
        return SummaryConfig.model_validate({**summary.model_dump(), **overrides})

    def over(self, base: ProfileConfig) -> ProfileConfig:
        """``base`` (a shipped profile) with the keys this section sets replaced."""
        update = self.model_dump(exclude_unset=True)
        if {"instruction", "instruction_file"} & update.keys():
            # Setting one of the two replaces the base's instruction, whichever way the base gave it.
            update = {"instruction": None, "instruction_file": None, **update}
        return base.model_copy(update=update)


def read_instruction_file(path: Path) -> str:
    """An instruction file's text; ValueError (a config error naming the key) if it is not usable:
    missing, not a regular file (a FIFO, a device, a folder), larger than
    :data:`MAX_INSTRUCTION_FILE_BYTES`, not UTF-8, or empty."""
    try:
        text = read_regular_file(path, MAX_INSTRUCTION_FILE_BYTES).decode("utf-8").strip()
    except FileNotFoundError:
        raise ValueError(f"instruction file {str(path)!r} does not exist") from None
    except (OSError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
        raise ValueError(f"cannot read instruction file {str(path)!r}: {exc}") from None
    if not text:
        raise ValueError(f"instruction file {str(path)!r} is empty")
    return text


@functools.cache
def shipped_profiles() -> Mapping[str, ProfileConfig]:
    """The profiles docsumd ships (daemon/profiles.toml), by name. Only ``default`` is on by itself;
    the others are used by naming them in the config (an empty ``[profiles.NAME]`` is enough)."""
    text = importlib.resources.files("daemon").joinpath("profiles.toml").read_text(encoding="utf-8")
    return {name: ProfileConfig.model_validate(table) for name, table in tomllib.loads(text).items()}


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
        "request is admitted (a request alone always fits); defaults to 4 x engine.max_num_batched_tokens.",
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
    window_seconds: float = Field(
        default=30.0,
        ge=0.0,
        description="Aging: a heavy request waits behind light ones, and their waves, at most this long "
        "after its document arrived; then it goes ahead of light requests that arrived later.",
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
        "whole budget runs alone. Bounds the main process's memory: see the README's sizing rule.",
    )


DEFAULT_WORK_FOLDER = ".{inbox}.docsumd-work"
"""The work folder's name beside the inbox (``{inbox}``: the inbox's name) when ``sources.folder.work``
is not set: outside the inbox, so no inbox writer can rename, replace or pre-create it, and on the
same file system as long as the inbox is not a mount point itself."""


class FolderSourceConfig(_Section):
    """The watched-folder source and its result folders."""

    inbox: Path
    outbox: Path
    done: Path
    failed: Path
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
    client_id: str = "docsumd"
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["PLAIN", "GSSAPI", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"] | None = None
    sasl_plain_username: str | None = None
    sasl_plain_password: SecretStr | None = Field(
        default=None, description="Shown as ********** by check-config."
    )
    ssl_cafile: Path | None = None
    ssl_certfile: Path | None = None
    ssl_keyfile: Path | None = None
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
        "fetch_max_bytes, so the client's own read-ahead is bounded by the same figure.",
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
    session_timeout_ms: int = Field(
        default=30_000,
        ge=1000,
        description="Kafka drops a member silent this long. Longer than aiokafka's 10 s: a host busy "
        "with the engine can stall the event loop for seconds, and a needless rebalance redoes work.",
    )
    heartbeat_interval_ms: int = Field(default=3_000, ge=100)
    max_poll_interval_ms: int = Field(
        default=300_000,
        ge=1000,
        description="The consumer polls even while partitions are paused, so a long document never "
        "pushes it out of the group; this bounds a stalled event loop.",
    )
    request_timeout_ms: int = Field(default=40_000, ge=1000)
    max_request_bytes: int = Field(
        default=16 * 1024 * 1024 + 1024 * 1024,
        ge=8192,
        description="The producer's largest record: every result and dead letter is built to fit it (a "
        "result that would not fails its document with 'too_large'; a dead letter sheds its payload, then "
        "its headers). The topics' max.message.bytes should allow it; a record the broker refuses anyway "
        "is replaced by its reduced dead letter (see the README).",
    )

    def client_options(self) -> dict[str, Any]:
        """Connection and security options common to aiokafka's consumer and producer."""
        options: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap_servers,
            "client_id": self.client_id,
            "security_protocol": self.security_protocol,
            "request_timeout_ms": self.request_timeout_ms,
        }
        if self.sasl_mechanism is not None:
            options["sasl_mechanism"] = self.sasl_mechanism
            options["sasl_plain_username"] = self.sasl_plain_username
            options["sasl_plain_password"] = (
                None if self.sasl_plain_password is None else self.sasl_plain_password.get_secret_value()
            )
        if self.security_protocol in ("SSL", "SASL_SSL"):
            import ssl

            from aiokafka.helpers import create_ssl_context

            context: ssl.SSLContext = create_ssl_context(
                cafile=None if self.ssl_cafile is None else str(self.ssl_cafile),
                certfile=None if self.ssl_certfile is None else str(self.ssl_certfile),
                keyfile=None if self.ssl_keyfile is None else str(self.ssl_keyfile),
            )
            options["ssl_context"] = context
        return options

    def profile_for(self, topic: str) -> str | None:
        """The profile of documents read from ``topic`` (None: summary.profile)."""
        return self.topic_profiles.get(topic, self.profile)

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
        if self.heartbeat_interval_ms * 3 > self.session_timeout_ms:
            raise ValueError("heartbeat_interval_ms must be at most a third of session_timeout_ms")
        return self


class SourcesConfig(_Section):
    """Where documents come from. A source runs when its section is present; both may run at once."""

    folder: FolderSourceConfig | None = None
    kafka: KafkaSourceConfig | None = None


class MetricsConfig(_Section):
    """The HTTP endpoint for /metrics, /healthz and /readyz."""

    enabled: bool = True
    host: str = "127.0.0.1"
    port: int = Field(default=9400, ge=0, le=65535, description="0 picks a free port (it is logged).")


class ServiceConfig(_Section):
    """How the service schedules and stops."""

    max_inflight_documents: int | None = Field(
        default=None,
        ge=1,
        description="Documents read and handed to the engine at once; defaults to 2 x engine.max_num_seqs "
        "so the engine always has a full batch while results are written.",
    )
    drain_seconds: float = Field(
        default=60.0,
        ge=0.0,
        description="On SIGTERM/SIGINT, in-flight documents get this long to finish; the rest are "
        "aborted and left unacknowledged (they are processed again on the next start).",
    )
    status_interval_seconds: float = Field(default=30.0, gt=0.0)
    stall_seconds: float = Field(
        default=600.0,
        ge=0.0,
        description="With documents in flight or waiting, no document finished and no engine request "
        "completed for this long: /healthz answers 503 and the systemd watchdog is no longer fed, so "
        "systemd restarts a wedged daemon. Idle with no work stays healthy. 0 turns it off.",
    )


class LoggingConfig(_Section):
    """Structured logs on stderr."""

    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["auto", "json", "console"] = Field(
        default="auto", description="auto: console on a terminal, JSON otherwise (journald, files, pipes)."
    )


class Config(BaseSettings):
    """The whole configuration. Build it with :func:`load_config`."""

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
    sources: SourcesConfig = SourcesConfig()
    metrics: MetricsConfig = MetricsConfig()
    service: ServiceConfig = ServiceConfig()
    logging: LoggingConfig = LoggingConfig()
    profiles: dict[ProfileName, ProfileConfig] = Field(
        default_factory=dict,
        description="Named summary profiles; an empty [profiles.NAME] turns on the shipped one of that name.",
    )

    @model_validator(mode="after")
    def _summary_fits_context(self) -> Self:
        # The context-budget rules that need no tokenizer, so that a wrong length fails on load;
        # daemon/summary/budget.py has them all and checks the rest in build_profiles, before the
        # engine starts.
        context = self.engine.max_model_len
        try:
            check_lengths(context, self.summary.max_summary_tokens, self.summary.part_tokens(context))
            for name, profile in self.profiles.items():
                if profile.max_summary_tokens is not None:
                    summary = profile.summary_over(self.summary)
                    check_lengths(
                        context,
                        summary.max_summary_tokens,
                        summary.part_tokens(context),
                        summary_key=f"profiles.{name}.max_summary_tokens",
                    )
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        return self

    @model_validator(mode="after")
    def _profiles_known(self) -> Self:
        # A source naming a profile this config does not have would fail every document it reads.
        known = self.effective_profiles()
        unknown = [
            f"{key}: unknown profile {name!r}"
            for key, name in self.profile_users().items()
            if name not in known
        ]
        if unknown:
            raise ValueError("; ".join(unknown) + f" (profiles: {', '.join(sorted(known))})")
        return self

    def effective_profiles(self) -> dict[str, ProfileConfig]:
        """Every profile of this config by name: ``default``, then each ``[profiles.NAME]`` (over
        the shipped profile of that name, if there is one)."""
        shipped = shipped_profiles()
        profiles = {DEFAULT_PROFILE: shipped[DEFAULT_PROFILE]}
        for name, section in self.profiles.items():
            profiles[name] = section.over(shipped[name]) if name in shipped else section
        return profiles

    def profile_users(self) -> dict[str, str]:
        """Config key -> the profile it names: the default, and each source's (or topic's) own."""
        users = {"summary.profile": self.summary.profile}
        folder, kafka = self.sources.folder, self.sources.kafka
        if folder is not None and folder.profile is not None:
            users["sources.folder.profile"] = folder.profile
        if kafka is not None:
            if kafka.profile is not None:
                users["sources.kafka.profile"] = kafka.profile
            for topic, name in kafka.topic_profiles.items():
                users[f"sources.kafka.topic_profiles.{topic}"] = name
        return users

    def source_profiles(self) -> dict[str, str]:
        """Each configured source (each Kafka input topic) -> the profile of its documents, unless a
        document's options ask for another."""
        default = self.summary.profile
        uses: dict[str, str] = {}
        if self.sources.folder is not None:
            uses["sources.folder"] = self.sources.folder.profile or default
        if self.sources.kafka is not None:
            for topic in self.sources.kafka.input_topics:
                uses[f"sources.kafka topic {topic!r}"] = self.sources.kafka.profile_for(topic) or default
        return uses

    def seeded_keys(self) -> list[str]:
        """The config keys that set a per-request sampling seed (some engines cannot take one)."""
        keys = ["summary.seed"] if self.summary.seed is not None else []
        keys += [
            f"profiles.{name}.seed" for name, profile in self.profiles.items() if profile.seed is not None
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
        """The effective bound on documents in flight."""
        return self.service.max_inflight_documents or 2 * self.engine.max_num_seqs

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
        text = read_regular_file(config_path, MAX_CONFIG_BYTES).decode("utf-8")
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


def _resolve_relative_paths(raw: dict[str, Any], base: Path) -> None:
    """Make the file's relative paths relative to the file's folder (in place)."""
    sources = raw.get("sources")
    folder = sources.get("folder") if isinstance(sources, dict) else None
    if isinstance(folder, dict):
        for key in ("inbox", "outbox", "done", "failed", "work"):
            if isinstance(folder.get(key), str):
                folder[key] = str(base / folder[key])
    kafka = sources.get("kafka") if isinstance(sources, dict) else None
    if isinstance(kafka, dict):
        for key in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
            if isinstance(kafka.get(key), str):
                kafka[key] = str(base / kafka[key])
    profiles = raw.get("profiles")
    if isinstance(profiles, dict):
        for profile in profiles.values():
            if isinstance(profile, dict) and isinstance(profile.get("instruction_file"), str):
                profile["instruction_file"] = str(base / profile["instruction_file"])
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


def _describe_validation_error(config_path: Path, exc: ValidationError) -> str:
    lines = [f"{config_path}: invalid configuration ({exc.error_count()} problem(s)):"]
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"]) or "(top level)"
        given = error.get("input")
        shown = f" (got {given!r})" if error["type"] != "missing" and not isinstance(given, dict) else ""
        lines.append(f"  {where}: {error['msg']}{shown}")
    lines.append(f"  (environment overrides use {ENV_PREFIX}SECTION__KEY, e.g. {ENV_PREFIX}ENGINE__MODEL)")
    return "\n".join(lines)
