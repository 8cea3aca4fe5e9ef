"""The summary cache end to end: the real daemon (real vLLM engine, tiny model), a watched folder, the
embedded SQLite store of its layout (tests/e2e/harness.py gives each test its own).

A long document is summarized; the same document with one clause edited reuses every part but the
edited one; the same bytes under another name reuse the whole result (no engine request, the same
summary); and after a restart the store still answers.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import DaemonProcess, Layout, drop_file, wait_for

pytestmark = pytest.mark.engine

EDIT = " The parties amended this clause in writing."


def _edited(text: str) -> str:
    """``text`` with a sentence added after the first sentence of its clause 9."""
    clause = re.search(r"\n\s*9\. ", text)
    assert clause is not None
    at = text.index(".", clause.end()) + 1
    return text[:at] + EDIT + text[at:]


def test_an_edited_document_reuses_its_other_parts_and_a_copy_reuses_all(
    layout: Layout, start_daemon: Callable[..., DaemonProcess], corpus: Path
) -> None:
    text = (corpus / "docs" / "legal-common-gpl-3.txt").read_text(encoding="utf-8")
    # The tiny model's random text never ends on its own, and an output cut off at its length limit is
    # never stored: a stop string ends its outputs as a real model's end.
    layout.write_config(
        **{"summary.temperature": "0.0", "summary.stop": '[" "]', "engine.max_model_len": "1024"}
    )
    daemon = start_daemon()
    daemon.wait_ready()

    def summarized(name: str, data: str) -> dict[str, Any]:
        drop_file(layout.inbox, name, data.encode())
        wait_for((layout.outbox / f"{name}.summary.json").exists, 300, f"{name}'s result")
        return layout.result(name)

    first = summarized("gpl.txt", text)
    assert first["strategy"] == "map_reduce"
    assert first["parts"] >= 4
    assert first["reused"] == {
        "document": False,
        "parts": 0,
        "requests": 0,
        "prompt_tokens": 0,
        "generated_tokens": 0,
    }
    edited = summarized("gpl-v2.txt", _edited(text))
    reused = edited["reused"]
    assert reused["document"] is False
    assert edited["parts"] == first["parts"]
    assert reused["parts"] >= first["parts"] - 2  # the edited part (and a neighbour at most) made anew
    assert edited["prompt_tokens"] < first["prompt_tokens"] / 2

    copy = summarized("gpl-copy.txt", text)
    assert copy["summary"] == first["summary"]
    assert (copy["requests"], copy["prompt_tokens"], copy["generated_tokens"]) == (0, 0, 0)
    assert copy["reused"] == {
        "document": True,
        "parts": first["parts"],
        "requests": first["requests"],
        "prompt_tokens": first["prompt_tokens"],
        "generated_tokens": first["generated_tokens"],
    }
    _, metrics = daemon.http_get("/metrics")
    assert 'docsumd_cache_lookups_total{kind="document",outcome="hit"} 1.0' in metrics
    assert "docsumd_cache_up 1.0" in metrics

    # A restart: the store is a file, so the next daemon reuses it.
    daemon.signal(signal.SIGTERM)
    assert daemon.wait_exit() == 0
    again = start_daemon()
    again.wait_ready()
    after_restart = summarized("gpl-again.txt", text)
    assert after_restart["summary"] == first["summary"]
    assert after_restart["requests"] == 0
    again.signal(signal.SIGTERM)
    assert again.wait_exit() == 0
