"""The model and tokenizer the config names, checked before transformers or vLLM open them.

A model folder is the operator's, but it can still be broken in ways that the libraries do not report
well: transformers takes a ``tokenizer.json`` that is a FIFO, a folder or a link to nothing for a
missing file and silently builds a tokenizer of three special tokens that turns every text into no
tokens, vLLM's loader blocks for good opening a FIFO, a garbage ``config.json`` ends in a traceback,
and a huge tokenizer file is read whole into memory. So before either opens anything
(:func:`check_model_files`), each a :class:`~daemon.errors.ConfigError` naming ``engine.model`` or
``engine.tokenizer`` (exit 2, one line):

1. a name that looks like a path (absolute, ``./``, ``../``, ``~``, or anything but ``ORG/NAME``)
   must exist; ``ORG/NAME`` that is not a folder here is a model id, left to the hub and its cache;
2. a folder's entries (not its subfolders) are regular files or folders, links followed: a FIFO, a
   socket, a device or a link to nothing is refused unopened (links are followed because the Hugging
   Face cache is made of them: ``snapshots/REV/config.json`` points into ``blobs/``);
3. every regular file there can be opened for reading (opened without blocking, then closed);
4. the files the tokenizer and config are read from are not folders, and not larger than
   :data:`MAX_METADATA_BYTES` (``config.json``, ``tokenizer_config.json``...) or
   :data:`MAX_TOKENIZER_FILE_BYTES` (``tokenizer.json``, ``vocab.json``, ``tokenizer.model``...);
   weights are not limited;
5. each JSON settings file there (``config.json``, ``generation_config.json``,
   ``tokenizer_config.json``...) is a JSON object, and ``config.json`` names the model's kind
   (``model_type``, ``architectures`` or ``auto_map``: vLLM stops without one). A folder without a
   ``config.json`` is let through: some formats keep their settings elsewhere (``params.json``).

Then :func:`load_tokenizer` loads the tokenizer with transformers and turns any failure into one
line, and refuses a tokenizer that turns a sentence into no tokens (what transformers builds when
the tokenizer's files are missing).
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from daemon.config import read_config_file
from daemon.errors import ConfigError
from daemon.fs.safe_read import describe_mode

if TYPE_CHECKING:
    from daemon.config import EngineConfig

MAX_METADATA_BYTES: Final = 16 << 20
"""The largest ``config.json``, ``tokenizer_config.json`` or other small metadata file read (16 MiB)."""
MAX_TOKENIZER_FILE_BYTES: Final = 256 << 20
"""The largest tokenizer file read (256 MiB): a vocabulary of a few hundred thousand tokens takes tens
of MB; transformers reads the file whole."""
METADATA_FILES: Final = frozenset(
    {
        "config.json",
        "generation_config.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "added_tokens.json",
        "chat_template.json",
        "chat_template.jinja",
        "preprocessor_config.json",
        "processor_config.json",
        "params.json",
    }
)
TOKENIZER_FILES: Final = frozenset(
    {
        "tokenizer.json",
        "tokenizer.model",
        "vocab.json",
        "vocab.txt",
        "merges.txt",
        "spiece.model",
        "sentencepiece.bpe.model",
        "tekken.json",
    }
)
_MODEL_KINDS: Final = ("model_type", "architectures", "auto_map")
PROBE_TEXT: Final = "The quick brown fox jumps over the lazy dog."
_MAX_REASON: Final = 400
_OPEN_FLAGS: Final = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)


def looks_local(name: str) -> bool:
    """Whether ``name`` is meant as a path rather than a hub id (``ORG/NAME``)."""
    return Path(name).is_absolute() or name.startswith((".", "~")) or name.count("/") != 1


def check_model_files(config: EngineConfig) -> None:
    """Checks 1-5 of the module's doc for ``engine.model`` and ``engine.tokenizer`` (when set)."""
    check_model_path(config.model, "engine.model")
    if config.tokenizer is not None:
        check_model_path(config.tokenizer, "engine.tokenizer")


def check_model_path(name: str, key: str) -> None:
    """Checks 1-5 for one model or tokenizer path ``name`` given as ``key``; ConfigError if not."""
    path = Path(name)
    try:
        found = path.stat()
    except FileNotFoundError:
        if looks_local(name):
            # A configuration problem, not a crash: restarting would not help (exit code 2, not 1).
            raise ConfigError(
                f"{key}: model folder {name!r} does not exist (build the demo model with "
                "'docsumd make-tiny-model DIR', or set it to a model folder or id)"
            ) from None
        return  # a model id: the hub's (or its cache's)
    except OSError as exc:
        raise ConfigError(f"{key}: cannot look at {name!r}: {exc.strerror or exc}") from None
    if stat.S_ISREG(found.st_mode):
        return  # a single-file model (GGUF); its tokenizer is engine.tokenizer's
    if not stat.S_ISDIR(found.st_mode):
        raise ConfigError(f"{key}: {name!r} is {describe_mode(found.st_mode)}, not a model folder")
    entries = _entries(path, key)
    for entry in entries:
        _check_entry(path / entry, key)
    for entry in sorted(METADATA_FILES.intersection(entries)):
        if entry.endswith(".json"):
            _check_json_object(path / entry, key)


def _entries(folder: Path, key: str) -> list[str]:
    try:
        return sorted(os.listdir(folder))
    except OSError as exc:
        reason = exc.strerror or exc
        raise ConfigError(f"{key}: cannot list the model folder {str(folder)!r}: {reason}") from None


def _check_entry(path: Path, key: str) -> None:
    """Checks 2-4 for one entry of a model folder."""
    try:
        found = path.stat()  # links followed: the Hugging Face cache's files are links into blobs/
    except FileNotFoundError:
        raise ConfigError(f"{key}: {str(path)!r} is a symbolic link to nothing") from None
    except OSError as exc:
        raise ConfigError(f"{key}: cannot look at {str(path)!r}: {exc.strerror or exc}") from None
    known = path.name in METADATA_FILES or path.name in TOKENIZER_FILES
    if stat.S_ISDIR(found.st_mode):
        if known:
            raise ConfigError(f"{key}: {str(path)!r} is a folder, not a file")
        return  # subfolders are not read
    if not stat.S_ISREG(found.st_mode):
        raise ConfigError(
            f"{key}: {str(path)!r} is {describe_mode(found.st_mode)}, not a regular file (it would "
            "block or mislead the model's loader)"
        )
    limit = MAX_METADATA_BYTES if path.name in METADATA_FILES else MAX_TOKENIZER_FILE_BYTES
    if known and found.st_size > limit:
        raise ConfigError(f"{key}: {str(path)!r} is {found.st_size} bytes, larger than the limit of {limit}")
    try:
        os.close(os.open(path, _OPEN_FLAGS))
    except OSError as exc:
        raise ConfigError(f"{key}: cannot read {str(path)!r}: {exc.strerror or exc}") from None


def _check_json_object(path: Path, key: str) -> None:
    """Check 5 for one settings file that passed checks 2-4."""
    try:
        data = read_config_file(path, MAX_METADATA_BYTES)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{key}: cannot read {str(path)!r}: {exc}") from None
    try:
        value = json.loads(data)
    except RecursionError:
        raise ConfigError(f"{key}: {str(path)!r} is nested too deeply") from None
    except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise ConfigError(f"{key}: {str(path)!r} is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{key}: {str(path)!r} must hold a JSON object, not {type(value).__name__}")
    if path.name == "config.json" and not any(field in value for field in _MODEL_KINDS):
        # vLLM finds the model's kind from one of these, and stops without them.
        kinds = " or ".join(_MODEL_KINDS)
        raise ConfigError(f"{key}: {str(path)!r} is not a model's config: it has no {kinds}")


def load_tokenizer(config: EngineConfig) -> Any:
    """The served model's own Hugging Face tokenizer (the one vLLM loads for the same config), after
    :func:`check_model_files`. ConfigError in one line if it cannot be loaded, or turns text into no
    tokens."""
    from transformers import AutoTokenizer

    check_model_files(config)
    name = config.tokenizer or config.model
    key = "engine.tokenizer" if config.tokenizer else "engine.model"
    try:
        tokenizer = AutoTokenizer.from_pretrained(
            name,
            trust_remote_code=config.trust_remote_code,
            # Documents are longer than the model on purpose: we fit them to the context ourselves, so
            # transformers' "sequence length is longer than the maximum" warning would only be noise.
            model_max_length=sys.maxsize,
        )
    except Exception as exc:  # transformers and tokenizers raise many kinds, each with its reason
        where = "" if Path(name).exists() else " (a model id needs the Hugging Face hub, or its local cache)"
        reason = _first_line(exc)
        raise ConfigError(f"{key}: cannot load the tokenizer of {name!r}: {reason}{where}") from None
    try:
        probe = tokenizer.encode(PROBE_TEXT, add_special_tokens=False)
    except Exception as exc:
        reason = _first_line(exc)
        raise ConfigError(f"{key}: the tokenizer of {name!r} cannot encode text: {reason}") from None
    if not probe:
        raise ConfigError(
            f"{key}: the tokenizer of {name!r} turns text into no tokens (its tokenizer files are "
            "missing or unusable)"
        )
    return tokenizer


def _first_line(exc: BaseException) -> str:
    """The exception's message on one line (transformers writes some over several), cut short."""
    text = " ".join(str(exc).split())
    return text[:_MAX_REASON] if text else type(exc).__name__
