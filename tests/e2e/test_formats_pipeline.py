"""PDF, DOCX, ODT, HTML and Markdown through the watched folder, with the real vLLM engine (tiny model)
and the real sandboxed extraction workers: real documents from Debian's documentation packages and
generated hostile files (``tests/fixtures/documents/*/manifest.jsonl`` says where each came from).

One daemon run: every good file gets a result recording its detected format and where each part
came from (pages for the PDF, sections for the others); every hostile one fails with its reason
while the daemon stays up, and SIGTERM still exits 0 with no process left.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.harness import DaemonProcess, Layout, drop_file, wait_for

pytestmark = pytest.mark.engine

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "documents"
# Inbox name -> (fixture, expected format).
GOOD = {
    "manual.pdf": ("pdf/cnfsat.pdf", "pdf"),
    "contract.docx": ("docx/contract.docx", "docx"),
    "report.odt": ("odt/report.odt", "odt"),
    "policy.html": ("html/debian-policy-ch-binary.html", "html"),
    "changelog.md": ("markdown/fzf-changelog-head.md", "markdown"),
    # Named as text, read as what its bytes are: the name is only a hint.
    "misnamed.txt": ("html/python-tutorial-appetite.html", "html"),
}
# Inbox name -> (fixture, expected reason).
HOSTILE = {
    "bomb.docx": ("docx/bomb.docx", "too_large"),
    "xxe.docx": ("docx/xxe.docx", "malformed"),
    "laughs.docx": ("docx/billion-laughs.docx", "malformed"),
    "locked.docx": ("docx/encrypted.docx", "encrypted"),
    "truncated.docx": ("docx/truncated.docx", "malformed"),
    "photo.docx": ("docx/photo-jpeg.docx", "binary"),
    "scripts.html": ("html/scripts-only.html", "no_text"),
    "deep.html": ("html/deep-divs.html", "malformed"),
}


def test_mixed_formats_and_hostile_files_through_the_folder(
    layout: Layout, start_daemon: Callable[..., DaemonProcess]
) -> None:
    inputs: dict[str, bytes] = {}
    for name, (fixture, _) in {**GOOD, **HOSTILE}.items():
        inputs[name] = (FIXTURES / fixture).read_bytes()
    names = sorted(inputs)
    for name in names[::2]:  # half before the start, half while it runs
        drop_file(layout.inbox, name, inputs[name])
    layout.write_config(**{"extract.workers": "2", "extract.memory_mib": "512"})
    daemon = start_daemon()
    daemon.wait_ready()
    for name in names[1::2]:
        drop_file(layout.inbox, name, inputs[name])
    wait_for(lambda: not (set(inputs) & layout.pending()), 300, "every input to leave the inbox")
    assert daemon.http_get("/healthz")[0] == 200
    _, metrics = daemon.http_get("/metrics")
    assert 'docsumd_extractions_total{format="pdf",outcome="ok"} 1.0' in metrics
    assert 'docsumd_document_formats_total{format="docx"}' in metrics
    daemon.signal(signal.SIGTERM)
    assert daemon.wait_exit() == 0, daemon.log_tail()
    assert daemon.leftover_processes() == [], daemon.stop_log()

    assert layout.inputs_in(layout.done) == set(GOOD)
    for name, (_, fmt) in GOOD.items():
        result = layout.result(name)
        assert result["format"] == fmt, (name, result["format"])
        assert result["summary"], name
        assert result["input_bytes"] == len(inputs[name])
        sources = result["sources"]
        assert [source["part"] for source in sources] == list(range(1, len(sources) + 1))
        assert sources[-1]["chars"][1] > 0
    pdf = layout.result("manual.pdf")
    assert pdf["extraction"]["pages"] >= 1
    assert all("pages" in source for source in pdf["sources"])
    assert pdf["sources"][-1]["pages"][1] == pdf["extraction"]["pages"]
    assert any(
        source.get("section") or source.get("headings") for source in layout.result("policy.html")["sources"]
    )

    assert layout.inputs_in(layout.failed) == set(HOSTILE)
    for name, (_, reason) in HOSTILE.items():
        record = layout.error(name)
        assert record["reason"] == reason, (name, record)
        assert (layout.failed / name).read_bytes() == inputs[name]
