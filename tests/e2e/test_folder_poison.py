"""Poison inputs on the folder path (issue 10), with the real daemon and the real engine (tiny model).

One daemon run gets, together with ordinary documents, every folder input that used to take the
service down or leak: a 240-byte and a 250-byte name, a name that is not UTF-8, a FIFO sidecar, a
symlink to a file outside the inbox (refused as ``not_regular`` and moved, itself, to ``failed/``;
it used to stay in the inbox with no record), a sidecar symlink to a JSON file outside it, files
swapped for such a link as they settle, ``p`` and ``p.error.json`` that both fail, a name reused
after its first file was done, and editors' lock and backup files. It shows: the daemon stays up
and healthy; every input ends with a result or a failure record that names it exactly; nothing
outside the inbox is read; every input's bytes are in ``done/`` or ``failed/``, nothing
overwritten; and a restart is clean (nothing redone, nothing left in flight).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import DaemonProcess, Layout, drop_file, wait_for
from tests.record_schemas import assert_valid

pytestmark = pytest.mark.engine

LONG_240 = "long-" + "x" * 231 + ".txt"
LONG_250 = "longer-" + "y" * 239 + ".txt"
NOT_UTF8 = os.fsdecode(b"bad-\xff\xfe-caf\xe9.txt")
SECRET = b"TOP SECRET: outside the inbox; must never be read, hashed or summarized.\n" * 20
SECRET_OPTIONS = b'{"private_key_field": "never-copied", "style": "bullets"}'
IGNORED = ["~$report.docx", "report.txt~", "report.txt.swx", "#report.txt#", ".report.txt.swp"]
SWAP_DELAYS = (0.0, 0.4, 0.55, 0.7)


def _text(corpus: Path, name: str, label: str) -> bytes:
    return f"{label}\n\n".encode() + (corpus / "docs" / name).read_bytes()[:2500]


def _records(folder: Path, suffix: str) -> dict[bytes, list[dict[str, Any]]]:
    """The records in ``folder`` by the exact bytes of the input name they carry."""
    found: dict[bytes, list[dict[str, Any]]] = {}
    for path in sorted(folder.iterdir()):
        if path.name.endswith(suffix) and path.is_file():
            record = json.loads(path.read_bytes())
            assert_valid(record, "result" if suffix == ".summary.json" else "failure")
            metadata = record["metadata"]
            raw = (
                base64.b64decode(metadata["file_name_b64"])
                if "file_name_b64" in metadata
                else metadata["file_name"].encode()
            )
            found.setdefault(raw, []).append(record)
    return found


def _contents(folder: Path) -> list[bytes]:
    return [path.read_bytes() for path in folder.iterdir() if path.is_file() and not path.is_symlink()]


def test_poison_inputs_leave_the_daemon_up_and_every_input_accounted_for(
    layout: Layout, start_daemon: Callable[..., DaemonProcess], corpus: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_bytes(SECRET)
    (outside / "secret.options.json").write_bytes(SECRET_OPTIONS)
    secret_sha = hashlib.sha256(SECRET).hexdigest()

    good = {
        "legal-debian-social-contract.txt": _text(corpus, "legal-debian-social-contract.txt", "one"),
        LONG_240: _text(corpus, "legal-cal-cc0-1.0.txt", "two"),
        LONG_250: _text(corpus, "legal-cal-ofl-1.1.txt", "three"),
        NOT_UTF8: _text(corpus, "legal-common-artistic.txt", "four"),
        "again.txt": _text(corpus, "legal-cal-ms-rl.txt", "five"),
    }
    bad = {  # name -> (bytes, reason)
        "p": (b"", "empty"),
        "p.error.json": (b"", "empty"),
        "fifo-options.txt": (_text(corpus, "legal-cal-ecl-2.0.txt", "six"), "invalid_options"),
        "linked-options.txt": (_text(corpus, "legal-cal-osl-3.0.txt", "seven"), "invalid_options"),
    }
    for name, data in [*good.items(), *((name, data) for name, (data, _) in bad.items())]:
        drop_file(layout.inbox, name, data)
    os.mkfifo(layout.inbox / "fifo-options.txt.options.json")  # once froze a worker thread for good
    (layout.inbox / "linked-options.options.json").symlink_to(outside / "secret.options.json")
    (layout.inbox / "link-to-secret.txt").symlink_to(outside / "secret.txt")
    for name in IGNORED:
        (layout.inbox / name).write_bytes(b"an editor's file\n")

    began = time.monotonic()
    daemon = start_daemon()
    daemon.wait_ready()
    print(f"ready after {time.monotonic() - began:.0f} s")
    # Files swapped for a link to the secret while they settle: whichever step the swap lands on
    # (before the file is seen, while it settles, after it is claimed), the secret is never read.
    for number, delay in enumerate(SWAP_DELAYS):
        name = f"swap-{number}.txt"
        drop_file(layout.inbox, name, f"swap {number}: inside the inbox.\n".encode() * 40)
        time.sleep(delay)  # around settle_seconds (0.3) plus the watcher's debounce (0.2)
        (layout.inbox / f".{name}.link").symlink_to(outside / "secret.txt")
        os.replace(layout.inbox / f".{name}.link", layout.inbox / name)

    # The same name again, once the first is done: a new input, and the first stays as it was.
    wait_for(lambda: "again.txt" in layout.inputs_in(layout.done), 120, "the first again.txt")
    again_2 = _text(corpus, "legal-debian-social-contract.txt", "five, second version")
    drop_file(layout.inbox, "again.txt", again_2)
    swapped = {f"swap-{number}.txt" for number in range(len(SWAP_DELAYS))}
    everything = set(good) | set(bad) | {"link-to-secret.txt"} | swapped
    wait_for(lambda: not (everything & layout.pending()), 120, "every input to be settled")
    wait_for(lambda: "again.txt~2" in layout.inputs_in(layout.done), 60, "the second again.txt")
    wait_for(lambda: not layout.inputs_in_work(), 60, "the swapped files to settle")
    print(f"all settled {time.monotonic() - began:.0f} s after the start")

    assert daemon.proc is not None
    assert daemon.proc.poll() is None, daemon.log_tail()
    assert daemon.http_get("/healthz")[0] == 200
    assert daemon.http_get("/readyz")[0] == 200

    results, failures = _records(layout.outbox, ".summary.json"), _records(layout.failed, ".error.json")
    # Every good input: summarized, its result naming it exactly, moved to done/ byte-exact.
    for name, data in good.items():
        first, *later = results[os.fsencode(name)]
        assert first["id"] == first["metadata"]["file_name"]
        assert first["sha256"] == hashlib.sha256(data).hexdigest()
        assert (layout.done / name).read_bytes() == data
        assert len(later) == (1 if name == "again.txt" else 0)
    assert (layout.outbox / f"{LONG_240}.summary.json").exists()  # 253 bytes: still fits
    (shortened,) = [name for name in os.listdir(layout.outbox) if name.startswith("longer-")]
    assert len(os.fsencode(shortened)) < 140  # NAME.summary.json would not: a prefix and a hash
    assert results[os.fsencode(NOT_UTF8)][0]["metadata"]["file_name"] == "bad-\\xff\\xfe-caf\\xe9.txt"
    assert (layout.done / "again.txt~2").read_bytes() == again_2
    assert json.loads((layout.outbox / "again.txt~2.summary.json").read_bytes())["sha256"] == (
        hashlib.sha256(again_2).hexdigest()
    )
    # Every bad input: its failure record with the reason, its bytes in failed/, nothing overwritten.
    for name, (_, reason) in bad.items():
        (failure,) = failures[name.encode()]
        assert failure["reason"] == reason, failure
    assert (layout.failed / "p").read_bytes() == b""
    assert (layout.failed / "p.error.json~2").read_bytes() == b""  # never a record's name
    assert (layout.failed / "fifo-options.txt.options.json").is_fifo()
    assert "FIFO" in failures[b"fifo-options.txt"][0]["message"]
    assert (layout.failed / "linked-options.options.json").is_symlink()
    assert "symbolic link" in failures[b"linked-options.txt"][0]["message"]
    for name in ("fifo-options.txt", "linked-options.txt"):
        assert (layout.failed / name).read_bytes() == bad[name][0]
    # A link dropped in: refused unread (not_regular), the link itself moved to failed/.
    (link_failure,) = failures[b"link-to-secret.txt"]
    assert (link_failure["reason"], link_failure["sha256"]) == ("not_regular", None)
    assert "symbolic link" in link_failure["message"]
    assert (layout.failed / "link-to-secret.txt").is_symlink()
    # Swapped files: summarized as themselves, or refused as links (not_regular); a file claimed
    # before its swap is summarized, and the link that then took its name refused: both recorded.
    for name in swapped:
        raw = name.encode()
        assert results.get(raw) or failures.get(raw), name  # never left in the inbox unrecorded
        for failure in failures.get(raw, []):
            assert failure["reason"] == "not_regular"
            assert failure["sha256"] is None
    # Nothing outside the inbox was read: not its hash, not its bytes, not its options' keys.
    records = [path for folder in (layout.outbox, layout.failed) for path in folder.glob("*.json")]
    written = b"\n".join(path.read_bytes() for path in records if path.is_file() and not path.is_symlink())
    assert secret_sha.encode() not in written
    assert b"private_key_field" not in written
    assert SECRET not in _contents(layout.done) + _contents(layout.failed)
    # Ignored names are left where they are, untouched; the links' target too.
    for name in IGNORED:
        assert (layout.inbox / name).read_bytes() == b"an editor's file\n"
    assert not (layout.inbox / "link-to-secret.txt").is_symlink()
    assert (outside / "secret.txt").read_bytes() == SECRET

    # Stop, start again: clean both times, nothing redone, nothing left in flight.
    daemon.signal(signal.SIGTERM)
    assert daemon.wait_exit() == 0, daemon.log_tail()
    before = sorted(os.listdir(layout.outbox)), sorted(os.listdir(layout.failed))
    second = start_daemon()
    second.wait_ready()
    time.sleep(1.0)
    second.signal(signal.SIGTERM)
    assert second.wait_exit() == 0, second.log_tail()
    assert (sorted(os.listdir(layout.outbox)), sorted(os.listdir(layout.failed))) == before
    assert list(layout.work.iterdir()) == []  # nothing left in flight
    events = daemon.log_events() + second.log_events()
    assert not [event for event in events if str(event.get("event", "")).startswith("fatal")]
    per_doc = [event for event in events if event.get("event") in {"document summarized", "document failed"}]
    assert all(event.get("doc_id") for event in per_doc)  # every line about a document names it
