"""Cache keys: what identifies a summary, so that a key is the same exactly when the output would be.

Three kinds of entry, three keys (:class:`CacheKey`), each a SHA-256 over length-prefixed fields
(no concatenation of two fields can read as another), starting with :data:`SCHEMA_VERSION` and the
daemon's :class:`KeyScope`:

* ``part`` (:meth:`KeyMaker.part`): one request over document text: a part of a staged document,
  or a whole document that fits one request. Its fields: the request's text (its token ids, or its
  characters), its template's token ids around the text (prefix and suffix: the profile's wording,
  the chat template, the style and length hints, all as the engine sees them), the request's
  sampling (length, temperature, top_p, penalties, stop strings, seed, JSON schema), and the
  prompt and profile versions. Hashing the template as tokens makes a change of wording or chat
  template a new key even where a version was not bumped.
* ``combine`` (:meth:`KeyMaker.combine`): one request over other requests' outputs. Its children's
  keys stand for their outputs (a Merkle tree: a part's edit changes its key, and so every key
  above it, and nothing beside it); with them what the request adds of its own: each child's label
  (pages, section), any verbatim text (the document's opening in the final step), its template and
  sampling.
* ``document`` (:meth:`KeyMaker.document`): the whole-document shortcut: the input's bytes (their
  SHA-256), the document's options, the settings of its summary (see the method), and the version
  of docsumd: an upgrade may extract, cut or tidy differently, so it starts this level afresh,
  while parts, whose keys hold their exact engine input, stay valid.

**The scope** (:class:`KeyScope`) is what every key of one daemon shares: the model's revision
(:func:`model_revision`: a fingerprint of the model folder's files, so hosts that copied the same
model share a Redis store, and a folder changed in place is a new revision), the tokenizer's when
it is another folder, the engine settings that change numerics (:data:`NUMERIC_ARGUMENTS`, from the
same keywords vLLM is given: the resolved dtype, quantization, KV cache dtype, ...), and
``cache.namespace``. Settings that change only scheduling or memory (batch sizes, parallelism,
prefix caching, CUDA graphs) are left out (:data:`SCHEDULING_ARGUMENTS`): they change outputs no
more than the batch a request happens to share, and scaling a deployment keeps its cache.

A key never comes from untrusted text alone: the text is one field among the scope and settings,
and never a document's name, id or metadata.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from daemon import __version__
from daemon.contracts import Sampling

SCHEMA_VERSION: Final = 1
"""The key scheme's version, hashed into every key and written in its id: change it whenever what a
key holds, or the meaning of a stored value, changes."""

Kind = Literal["part", "combine", "document"]
KINDS: Final[tuple[Kind, ...]] = ("part", "combine", "document")

NUMERIC_ARGUMENTS: Final = frozenset(
    {
        "dtype",
        "quantization",
        "kv_cache_dtype",
        "load_format",
        "seed",
        "speculative_config",
        "structured_outputs_config",
    }
)
"""vLLM engine arguments (:func:`daemon.engine.vllm_args.engine_kwargs`) that change what the model
computes, or how outputs are drawn: part of every key. ``load_format = "dummy"`` draws random weights
from ``seed``; speculative decoding changes which random numbers a sampled token uses."""

SCHEDULING_ARGUMENTS: Final = frozenset(
    {
        "model",  # its revision is fingerprinted instead (a path says nothing of its files)
        "tokenizer",  # likewise
        "served_model_name",
        "trust_remote_code",  # the code it allows is in the model folder, fingerprinted
        "max_model_len",
        "max_num_seqs",
        "max_num_batched_tokens",
        "enable_chunked_prefill",
        "enable_prefix_caching",
        "kv_cache_memory_bytes",
        "gpu_memory_utilization",
        "tensor_parallel_size",
        "data_parallel_size",
        "enforce_eager",
        "stream_interval",
    }
)
"""Engine arguments docsumd sets that change scheduling, memory or parallelism only: left out of
keys. An ``[engine.extra]`` argument is in every key unless listed here or in
:data:`SCHEDULING_EXTRA_ARGUMENTS` (an unknown one is assumed to matter)."""

SCHEDULING_EXTRA_ARGUMENTS: Final = frozenset(
    {
        "scheduling_policy",
        "max_num_partial_prefills",
        "max_long_partial_prefills",
        "long_prefill_token_threshold",
        "disable_log_stats",
        "enable_log_requests",
        "kv_cache_metrics",
        "swap_space",
        "cpu_offload_gb",
        "pipeline_parallel_size",
        "distributed_executor_backend",
        "disable_custom_all_reduce",
        "async_scheduling",
    }
)
"""``[engine.extra]`` arguments known to change scheduling, logging or placement only."""

REVISION_DIGITS: Final = 16

_WEIGHT_SUFFIXES: Final = frozenset(
    {".safetensors", ".bin", ".pt", ".pth", ".gguf", ".ckpt", ".h5", ".msgpack"}
)
_WHOLE_FILE_BYTES: Final = 256 << 20
"""Files up to this size are hashed whole (configs, tokenizers, chat templates, small models)."""
_SAMPLE_BLOCKS: Final = 256
_SAMPLE_BYTES: Final = 4096
_MAX_HEADER_BYTES: Final = 100 << 20
_MAX_FILES: Final = 10_000
_HUB_BLOB: Final = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
"""A Hugging Face cache blob's name: the git SHA-1 of a small file, or the SHA-256 of an LFS file."""


@dataclass(frozen=True, slots=True)
class CacheKey:
    """One entry's key: its kind and the digest of what went into it."""

    kind: Kind
    digest: str
    """SHA-256 (hex) of the key's fields."""
    parts: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)
    """What went in, readably (versions, model, revision; not the text): stored beside the value."""

    @property
    def id(self) -> str:
        """The key as stores write it: ``v1:part:<digest>``."""
        return f"v{SCHEMA_VERSION}:{self.kind}:{self.digest}"

    def __str__(self) -> str:
        return self.id


@dataclass(frozen=True, slots=True)
class ModelRevision:
    """Which files a model (or tokenizer) is: what keys hold instead of its path."""

    digest: str
    """The fingerprint (:func:`folder_fingerprint`), :data:`REVISION_DIGITS` hex digits."""
    how: Literal["folder", "file", "hub_snapshot"]
    """``folder``: a local folder; ``file``: one checkpoint file (GGUF); ``hub_snapshot``: a model id,
    read from its snapshot in the local Hugging Face cache."""
    files: int
    """Files fingerprinted."""


def model_revision(model: str) -> ModelRevision | None:
    """The revision of ``model`` (``engine.model`` or ``engine.tokenizer``): the fingerprint of its
    folder (or of its one file), or of the snapshot of a model id in the local Hugging Face cache
    (no network); None when none exists (the cache must then stay off: outputs of an unknown
    revision cannot be keyed).

    Reads files: call it off the event loop, once, where the daemon is assembled (after the engine
    started, a model id's snapshot is in the local cache)."""
    folder = Path(model).expanduser()
    if folder.is_dir():
        digest, files = folder_fingerprint(folder)
        return ModelRevision(digest=digest, how="folder", files=files)
    if folder.is_file():  # a single checkpoint file (vLLM reads a .gguf file so)
        single = hashlib.sha256(b"docsumd-model-file-v1\0")
        _update(single, b"size", str(folder.stat().st_size).encode())
        _update(single, b"content", _file_identity(folder, folder.stat().st_size))
        return ModelRevision(digest=single.hexdigest()[:REVISION_DIGITS], how="file", files=1)
    snapshot = _hub_snapshot(model)
    if snapshot is None:
        return None
    digest, files = folder_fingerprint(snapshot)
    return ModelRevision(digest=digest, how="hub_snapshot", files=files)


def _hub_snapshot(model_id: str) -> Path | None:
    """The local snapshot folder of hub model ``model_id`` (the cache only), or None."""
    try:
        from huggingface_hub import snapshot_download

        path = snapshot_download(model_id, local_files_only=True)
    except Exception:  # not cached, not an id, hub library missing: no revision
        return None
    return Path(path) if Path(path).is_dir() else None


def folder_fingerprint(folder: Path) -> tuple[str, int]:
    """(fingerprint, files counted) of a model folder's files, whatever their times or the folder's path.

    Each file (hidden folders skipped, links followed) adds its path in the folder and its size, then:

    * a link into a Hugging Face cache's ``blobs/`` (whose name is the file's SHA-256, or git SHA-1):
      that name, read for free;
    * a file of at most 256 MiB (configs, tokenizers, chat templates, remote code, small models): its
      whole content;
    * a larger one (weights): its header (a safetensors file's JSON header in full: tensor names,
      shapes, dtypes), then 256 blocks of 4 KiB spread evenly over it. A fine-tune or a merged
      adapter changes most blocks of the tensors it touches, so it is a new revision; reading 1 MiB
      a file keeps a 140 GB model's fingerprint to milliseconds on local disks.

    Modification times are left out on purpose: hosts that copied the same files get the same
    fingerprint and share a store. ``cache.namespace`` starts afresh where this cannot see a change."""
    digest = hashlib.sha256(b"docsumd-model-folder-v1\0")
    files = 0
    for relative, path in _model_files(folder):
        files += 1
        info = path.stat()
        _update(digest, b"path", relative.encode("utf-8", "surrogateescape"))
        _update(digest, b"size", str(info.st_size).encode())
        _update(digest, b"content", _file_identity(path, info.st_size))
    return digest.hexdigest()[:REVISION_DIGITS], files


def _model_files(folder: Path) -> Iterator[tuple[str, Path]]:
    """(path relative to ``folder``, path) of every regular file under it, sorted, hidden skipped."""
    found: list[tuple[str, Path]] = []
    for root, dirs, names in os.walk(folder, followlinks=True):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in names:
            if name.startswith("."):
                continue
            path = Path(root) / name
            try:
                if not stat.S_ISREG(path.stat().st_mode):
                    continue
            except OSError:  # a dangling link: not a file the engine can read either
                continue
            found.append((path.relative_to(folder).as_posix(), path))
            if len(found) > _MAX_FILES:
                raise ValueError(f"{folder}: more than {_MAX_FILES} files: not a model folder")
    yield from sorted(found)


def _file_identity(path: Path, size: int) -> bytes:
    """What stands for a file's content (see :func:`folder_fingerprint`)."""
    if path.is_symlink():
        target = path.resolve()
        if target.parent.name == "blobs" and _HUB_BLOB.fullmatch(target.name):
            return b"blob:" + target.name.encode()
    content = hashlib.sha256()
    with path.open("rb") as file:
        if size <= _WHOLE_FILE_BYTES:
            while chunk := file.read(1 << 20):
                content.update(chunk)
            return b"sha256:" + content.digest()
        head = file.read(8)
        content.update(head)
        if path.suffix == ".safetensors" and len(head) == 8:
            header_bytes = min(int.from_bytes(head, "little"), _MAX_HEADER_BYTES)
            content.update(file.read(header_bytes))
        else:
            content.update(file.read(_SAMPLE_BYTES))
        step = max(size // _SAMPLE_BLOCKS, _SAMPLE_BYTES)
        for offset in range(0, size, step):
            file.seek(offset)
            content.update(file.read(_SAMPLE_BYTES))
        file.seek(max(size - _SAMPLE_BYTES, 0))
        content.update(file.read(_SAMPLE_BYTES))
    return b"sampled:" + content.digest()


@dataclass(frozen=True, slots=True)
class KeyScope:
    """What every key of one daemon holds: the model's and tokenizer's revisions, the engine's
    numerics, the namespace. Build it with :meth:`create`."""

    model: ModelRevision
    tokenizer: ModelRevision | None
    numerics: Mapping[str, Any]
    namespace: str
    digest: str
    """SHA-256 (hex) of the above: the first field of every key."""

    @classmethod
    def create(
        cls,
        engine_arguments: Mapping[str, Any],
        *,
        model: ModelRevision,
        tokenizer: ModelRevision | None = None,
        namespace: str = "",
    ) -> KeyScope:
        """The scope of an engine given ``engine_arguments`` (the keywords vLLM is given,
        :func:`daemon.engine.vllm_args.engine_kwargs`, so the dtype is the resolved one), serving
        ``model``, with ``tokenizer`` when it is another folder."""
        numerics = engine_numerics(engine_arguments)
        payload = {
            "model": model.digest,
            "tokenizer": tokenizer.digest if tokenizer is not None else None,
            "numerics": numerics,
            "namespace": namespace,
        }
        digest = hashlib.sha256(b"docsumd-scope\0" + canonical_json(payload)).hexdigest()
        return cls(model=model, tokenizer=tokenizer, numerics=numerics, namespace=namespace, digest=digest)


def engine_numerics(engine_arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The engine arguments of ``engine_arguments`` that go into keys: :data:`NUMERIC_ARGUMENTS`, and
    every other one that is not known to change scheduling only (``[engine.extra]``'s)."""
    return {
        name: value
        for name, value in engine_arguments.items()
        if name in NUMERIC_ARGUMENTS
        or (name not in SCHEDULING_ARGUMENTS and name not in SCHEDULING_EXTRA_ARGUMENTS)
    }


@dataclass(frozen=True, slots=True)
class Step:
    """What one engine request adds around its content: its template and sampling, and the versions
    results record."""

    template: tuple[Sequence[int], Sequence[int]]
    """The token ids before and after the content (``PromptBuilder.template_ids``)."""
    sampling: Sampling
    prompt_version: str
    profile_version: str


Content = str | Sequence[int]
"""A request's text: its characters, or its token ids (what the engine reads: exact)."""


class KeyMaker:
    """Makes the keys of one scope. Cheap to call (hashing only); safe from any thread."""

    def __init__(self, scope: KeyScope) -> None:
        self.scope = scope

    def part(self, content: Content, step: Step) -> CacheKey:
        """The key of a request over document text ``content`` (a part, or a whole document that fits
        one request) made as ``step`` says."""
        digest = self._start("part")
        _update_step(digest, step)
        _update_content(digest, b"content", content)
        return CacheKey("part", digest.hexdigest(), self._parts(step))

    def combine(
        self,
        children: Sequence[CacheKey],
        step: Step,
        *,
        labels: Sequence[str] = (),
        verbatim: Content = "",
    ) -> CacheKey:
        """The key of a request over the outputs of ``children`` (in order), each shown under its
        ``labels`` entry (``labels`` empty: none, else one per child), with ``verbatim`` text of the
        document beside them (the final step's opening), made as ``step`` says."""
        if labels and len(labels) != len(children):
            raise ValueError(f"{len(labels)} labels for {len(children)} children")
        digest = self._start("combine")
        _update_step(digest, step)
        _update(digest, b"children", str(len(children)).encode())
        for index, child in enumerate(children):
            _update(digest, b"child", child.id.encode())
            _update(digest, b"label", labels[index].encode("utf-8", "surrogatepass") if labels else b"")
        _update_content(digest, b"verbatim", verbatim)
        return CacheKey("combine", digest.hexdigest(), self._parts(step))

    def document(
        self, data_sha256: bytes, *, settings: Mapping[str, Any], options: Mapping[str, Any]
    ) -> CacheKey:
        """The whole-document key of an input whose bytes hash to ``data_sha256`` (32 bytes:
        :func:`sha256_of` over its raw bytes, before any extraction).

        ``settings`` must hold everything else its summary depends on, as JSON values: the profile's
        version and its resolved summary section (lengths, strategy, chunking, opening), the prompt
        version, the context length (it decides the cut), the extraction settings; ``options``: the
        document's own (sidecar, message). The scope and docsumd's version are added here."""
        if len(data_sha256) != 32:
            raise ValueError("data_sha256 must be a SHA-256 digest (32 bytes)")
        digest = self._start("document")
        _update(digest, b"docsumd", __version__.encode())
        _update(digest, b"settings", canonical_json(settings))
        _update(digest, b"options", canonical_json(options))
        _update(digest, b"input", data_sha256)
        parts = {**self._scope_parts(), "docsumd_version": __version__}
        return CacheKey("document", digest.hexdigest(), parts)

    def _start(self, kind: Kind) -> Any:
        digest = hashlib.sha256(f"docsumd-cache-key\0v{SCHEMA_VERSION}\0{kind}\0".encode())
        _update(digest, b"scope", self.scope.digest.encode())
        return digest

    def _scope_parts(self) -> dict[str, Any]:
        scope = self.scope
        parts: dict[str, Any] = {"model_revision": scope.model.digest}
        if scope.tokenizer is not None:
            parts["tokenizer_revision"] = scope.tokenizer.digest
        if scope.namespace:
            parts["namespace"] = scope.namespace
        return parts

    def _parts(self, step: Step) -> dict[str, Any]:
        return {
            **self._scope_parts(),
            "prompt_version": step.prompt_version,
            "profile_version": step.profile_version,
            "max_tokens": step.sampling.max_tokens,
        }


def sha256_of(chunks: Iterable[bytes]) -> bytes:
    """The SHA-256 digest of the bytes ``chunks`` hold, in order (an input read in pieces)."""
    digest = hashlib.sha256()
    for chunk in chunks:
        digest.update(chunk)
    return digest.digest()


def canonical_json(value: Any) -> bytes:
    """``value`` as canonical JSON (sorted keys, no spaces, UTF-8): equal values, equal bytes.
    TypeError for a value JSON cannot hold (a key's fields are never guessed)."""
    return json.dumps(
        value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), allow_nan=False
    ).encode("utf-8", "surrogatepass")


def _update(digest: Any, tag: bytes, data: bytes) -> None:
    """Add one field: its tag, its length, its bytes (so fields cannot run into each other)."""
    digest.update(tag + b"\0" + len(data).to_bytes(8, "little"))
    digest.update(data)


def _update_content(digest: Any, tag: bytes, content: Content) -> None:
    if isinstance(content, str):
        _update(digest, tag + b":text", content.encode("utf-8", "surrogatepass"))
    else:
        _update(digest, tag + b":ids", _ids_bytes(content))


def _update_step(digest: Any, step: Step) -> None:
    _update(digest, b"prompt_version", step.prompt_version.encode())
    _update(digest, b"profile_version", step.profile_version.encode())
    _update(digest, b"sampling", canonical_json(asdict(step.sampling)))
    prefix, suffix = step.template
    _update(digest, b"prefix", _ids_bytes(prefix))
    _update(digest, b"suffix", _ids_bytes(suffix))


def _ids_bytes(ids: Sequence[int]) -> bytes:
    """Token ids as little-endian 32-bit words (vocabularies are far below 2**32)."""
    packed = ids if isinstance(ids, array) and ids.typecode == "I" else array("I", ids)
    if packed.itemsize != 4:  # pragma: no cover - every platform docsumd runs on has 4-byte unsigned ints
        raise RuntimeError("array('I') is not 4 bytes here")
    return packed.tobytes() if _LITTLE_ENDIAN else _swapped(packed)


def _swapped(packed: array[int]) -> bytes:  # pragma: no cover - big-endian hosts only
    copy = array("I", packed)
    copy.byteswap()
    return copy.tobytes()


_LITTLE_ENDIAN: Final = array("I", [1]).tobytes()[0] == 1
