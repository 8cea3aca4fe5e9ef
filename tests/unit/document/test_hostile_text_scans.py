"""Every scan of untrusted text is linear in time and memory: each one fed a 16 MiB input
(``limits.max_input_bytes``) of each hostile shape its patterns key on.

The scans: what the daemon's own process runs on a document's text (decoding, format detection,
the Markdown and reST heading scans, the clean-up of extracted text, the chunker's break finding, a
worker's reply) and what the extraction workers run (the text writer, the HTML reader, the PDF
clean-up and the PDF screen). The shapes: a run of each character a pattern repeats, each sequence
it repeats (``- - -``, ``[a](``, ``<a ``), what makes a search fail late (``# a``, spaces, ``#x``;
letters, a digit and a hyphen), and the shapes that cost the most per character (many words, many
lines, many controls).

Each scan runs in a forked child, on an input built there, under ``RLIMIT_CPU`` (the kernel stops a
runaway, whatever code it is in) and a generous ``RLIMIT_AS``; the bounds are its CPU time and how
far its peak resident memory rose over the memory it had with the input built. A backtracking
pattern kept an entry per repetition (a long line of them cost many times the line), a quadratic
search ran for hours; a linear scan stays well under both bounds on a loaded 2-core machine.

Not fed here: the tokenizer (Rust, in segments of bounded size: linear by construction, and slow
enough per token that 16 MiB would take minutes), and :func:`daemon.summary.tidy.tidy`, which reads
the model's output (bounded by the output token limit), not a document.
"""

from __future__ import annotations

import collections
import json
import os
import resource
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import pytest

from daemon.document import text as pieces
from daemon.document.decode import decode_text
from daemon.document.extract import html, markup, pdf, pdf_screen
from daemon.document.formats import detect_format
from daemon.document.headings import text_layout
from daemon.document.reader import clean_extracted
from daemon.document.sandbox.protocol import parse_reply
from daemon.document.types import ExtractLimits, Format
from daemon.errors import DocumentError
from daemon.summary import chunking

MIB: Final = 1 << 20
SIZE: Final = 16 * MIB
"""Characters of each input (``limits.max_input_bytes``: a text input is at most that many bytes)."""
CPU_SECONDS: Final = 12.0
"""CPU seconds a scan may take: several times what the slowest linear one takes."""
MEMORY_FACTOR: Final = 4
"""A scan may allocate this many times its input's size (in memory), plus :data:`MEMORY_SLACK`."""
MEMORY_SLACK: Final = 16 * MIB
LIMITS: Final = ExtractLimits(max_output_chars=4 * SIZE)


def _repeat(unit: str, size: int = SIZE, *, before: str = "", after: str = "") -> str:
    return before + unit * ((size - len(before) - len(after)) // len(unit)) + after


SHAPES: Final[dict[str, Callable[[], str]]] = {
    "letters": lambda: _repeat("a"),
    "letters-then-digit": lambda: _repeat("a", after="1-\nnext"),
    "spaces": lambda: _repeat(" ", after="x"),
    "tabs": lambda: _repeat("\t", after="x"),
    "newlines": lambda: _repeat("\n", before="x", after="x"),
    "crlf": lambda: _repeat("\r\n", before="x", after="x"),
    "blank-lines-with-spaces": lambda: _repeat("\n \t", before="x", after="x"),
    "form-feeds": lambda: _repeat("\f", before="x", after="x"),
    "controls": lambda: _repeat("\x01 ", before="x"),
    "words": lambda: _repeat("ab "),
    "no-break-spaces": lambda: _repeat("a\xa0"),
    "dash-space": lambda: _repeat("- ", after="x"),
    "star-space": lambda: _repeat("* ", after="x"),
    "underline-equals": lambda: _repeat("=", before="Title\n"),
    "underline-dashes": lambda: _repeat("-", before="Title\n"),
    "hashes": lambda: _repeat("#"),
    "atx-closing-after-spaces": lambda: _repeat(" ", before="# a", after="#x"),
    "atx-title-of-words": lambda: _repeat("ab ", before="# "),
    "backticks": lambda: _repeat("`"),
    "brackets": lambda: _repeat("["),
    "link-openers": lambda: _repeat("[a]("),
    "angles": lambda: _repeat("<"),
    "tag-openers": lambda: _repeat("<a "),
    "comment-openers": lambda: _repeat("<!--"),
    "parentheses": lambda: _repeat("("),
    "role-openers": lambda: _repeat(":a:"),
    "directives": lambda: _repeat(".. "),
    "hyphenated": lambda: _repeat("a-"),
    "numbering": lambda: _repeat("1.", before="x\n\n", after=" x"),
    "capitals": lambda: _repeat("A", before="x\n\n"),
    "sentence-ends": lambda: _repeat(".)"),
    "soft-hyphens": lambda: _repeat("\xad\n"),
    "ellipses": lambda: _repeat("\u2026 ", size=SIZE // 2),
    "stream-keywords": lambda: _repeat("stream\n"),
    "object-headers": lambda: _repeat("1 0 obj "),
    "percents": lambda: _repeat("%"),
}

COMMON: Final = ("letters", "spaces", "newlines", "words")


@dataclass(frozen=True)
class Scan:
    """A scan of untrusted text: ``run`` takes a shape's text; ``shapes``: those it is fed."""

    run: Callable[[Any], object]
    shapes: tuple[str, ...]
    memory_factor: float = MEMORY_FACTOR
    prepare: Callable[[str], Any] = str  # what the scan reads: the text itself, or a file's bytes


def _utf8(text: str) -> bytes:
    return text.encode("utf-8")


def _pdf(text: str) -> bytes:
    return b"%PDF-1.7\n" + _utf8(text) + b"\n%%EOF\n"


def _reply(text: str) -> bytes:
    ok = {"text": text, "format": "pdf", "layout": {"page_starts": [0], "headings": []}, "details": {}}
    return json.dumps({"ok": ok}).encode()


def _refused(scan: Callable[[], object]) -> object:
    """A refusal is an outcome too (binary input, no text, malformed): the scan ran to its end."""
    try:
        return scan()
    except DocumentError as error:
        return error.reason


def _writer(write: Callable[[markup.TextWriter], None]) -> object:
    writer = markup.TextWriter(4 * SIZE)
    write(writer)
    return writer.length


def _separators(text: str) -> object:
    for pattern in chunking.SEPARATOR_LEVELS:  # every match, as _cut_points reads them
        collections.deque(pattern.finditer(text), maxlen=0)
    return None


MARKUP_SHAPES: Final = (
    *COMMON, "tabs", "crlf", "dash-space", "star-space", "underline-equals", "underline-dashes",
    "hashes", "atx-closing-after-spaces", "atx-title-of-words", "backticks", "brackets",
    "link-openers", "angles", "role-openers", "directives", "numbering", "capitals",
)  # fmt: skip
CHUNKING_SHAPES: Final = (
    "newlines", "blank-lines-with-spaces", "form-feeds", "spaces", "hashes", "numbering", "capitals",
    "sentence-ends",
)  # fmt: skip
PDF_TEXT_SHAPES: Final = (
    *COMMON, "hyphenated", "letters-then-digit", "soft-hyphens", "sentence-ends", "numbering",
)  # fmt: skip
PDF_SHAPES: Final = (
    "stream-keywords", "object-headers", "percents", "angles", "parentheses", "brackets", "letters",
    "newlines", "words",
)  # fmt: skip
HTML_SHAPES: Final = ("letters", "words", "newlines", "angles", "tag-openers", "comment-openers", "controls")

SCANS: Final[dict[str, Scan]] = {
    # -- in the daemon's own process --
    "decode_text": Scan(
        lambda data: _refused(lambda: decode_text(data, 4 * SIZE)),
        (*COMMON, "no-break-spaces", "ellipses", "soft-hyphens"),
        prepare=_utf8,
    ),
    "detect_format": Scan(
        lambda data: [detect_format(data, hint) for hint in (None, "a.md", "a.rst", "a.html")],
        (*MARKUP_SHAPES, "tag-openers", "comment-openers", "ellipses", "stream-keywords"),
        prepare=_utf8,
    ),
    "text_layout(markdown)": Scan(lambda text: text_layout(text, Format.MARKDOWN), MARKUP_SHAPES),
    "text_layout(rst)": Scan(lambda text: text_layout(text, Format.RST), MARKUP_SHAPES),
    "short_line": Scan(pieces.short_line, (*COMMON, "controls", "tabs", "no-break-spaces")),
    "clean_extracted": Scan(clean_extracted, (*COMMON, "controls")),
    "chunking separators": Scan(_separators, CHUNKING_SHAPES),
    "chunking segments": Scan(
        lambda text: len(list(chunking._segment_ends(text, chunking.SEGMENT_CHARS))), (*COMMON, "tabs")
    ),
    "parse_reply": Scan(
        lambda data: parse_reply(data, LIMITS), ("letters", "controls", "words"), prepare=_reply
    ),
    # -- in an extraction worker --
    "one_line": Scan(pieces.one_line, (*COMMON, "controls", "tabs", "no-break-spaces", "crlf")),
    "TextWriter.heading": Scan(lambda text: _writer(lambda w: w.heading(2, text)), (*COMMON, "controls")),
    "TextWriter.preformatted": Scan(
        lambda text: _writer(lambda w: w.preformatted(text)),
        (*COMMON, "controls", "tabs", "crlf", "blank-lines-with-spaces"),
        memory_factor=8,  # its text can be four times as long: a tab is four spaces
    ),
    "decode_html": Scan(html.decode_html, ("letters", "angles", "tag-openers"), prepare=_utf8),
    "refuse_hostile_tags": Scan(
        lambda text: _refused(lambda: html.refuse_hostile_tags(text)),
        ("letters", "angles", "tag-openers", "comment-openers", "words", "spaces"),
    ),
    "extract_html": Scan(
        lambda data: _refused(lambda: html.extract_html(data, LIMITS)), HTML_SHAPES, prepare=_utf8
    ),
    "pdf assemble": Scan(lambda text: len(pdf.assemble([text])[0]), PDF_TEXT_SHAPES),
    "pdf sentence end": Scan(pdf._SENTENCE_END.search, ("sentence-ends", "letters")),
    "pdf screen": Scan(
        lambda data: _refused(lambda: pdf_screen.screen(data, LIMITS)), PDF_SHAPES, prepare=_pdf
    ),
}

CASES: Final = [(scan, shape) for scan, spec in SCANS.items() for shape in spec.shapes]


def _status_kib(field: str) -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise LookupError(field)


def _child(scan: str, shape: str, cpu_limit: float, report: int) -> None:
    """In a forked child: build the input, then run the scan under a CPU limit (``RLIMIT_CPU``: the
    kernel stops it, whatever it runs) and report its CPU time and peak resident memory growth."""
    outcome: dict[str, object] = {}
    try:
        text = SCANS[scan].prepare(SHAPES[shape]())
        with open("/proc/self/clear_refs", "w", encoding="ascii") as clear:
            clear.write("5")  # the peak resident memory starts again from here
        before = _status_kib("VmRSS")
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        resource.setrlimit(resource.RLIMIT_AS, (_status_kib("VmSize") * 1024 + 4 * 2**30, hard))
        used = resource.getrusage(resource.RUSAGE_SELF)
        _, hard = resource.getrlimit(resource.RLIMIT_CPU)
        resource.setrlimit(resource.RLIMIT_CPU, (int(used.ru_utime + used.ru_stime + cpu_limit) + 1, hard))
        started = time.process_time()
        SCANS[scan].run(text)
        outcome["cpu_s"] = time.process_time() - started
        outcome["peak_growth_bytes"] = (_status_kib("VmHWM") - before) * 1024
        outcome["input_bytes"] = sys.getsizeof(text)
    except MemoryError:
        outcome["error"] = "MemoryError"
    except BaseException as error:  # reported to the parent, which fails the test
        outcome["error"] = repr(error)[:500]
    finally:
        os.write(report, json.dumps(outcome).encode())
        os._exit(0)


def measure(scan: str, shape: str, cpu_limit: float = CPU_SECONDS) -> dict[str, Any]:
    """Runs one scan on one shape in a forked child (a runaway is stopped there, not here): its CPU
    seconds, its peak resident memory growth and its input's size; ``error`` if it failed, and
    ``signal`` if the kernel stopped it (``SIGXCPU``: over ``cpu_limit``)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read)
        _child(scan, shape, cpu_limit, write)
    os.close(write)
    with os.fdopen(read, "rb") as reply:
        written = reply.read()
    _, status = os.waitpid(pid, 0)
    outcome: dict[str, Any] = json.loads(written) if written else {}
    if os.WIFSIGNALED(status):
        outcome["signal"] = signal.Signals(os.WTERMSIG(status)).name
    return outcome


@pytest.mark.parametrize(("scan", "shape"), CASES, ids=[f"{scan}-{shape}" for scan, shape in CASES])
def test_a_scan_of_a_hostile_16_mib_input_is_linear(scan: str, shape: str) -> None:
    measured = measure(scan, shape)
    assert "signal" not in measured, f"{scan} on {shape}: stopped by {measured['signal']} (over time)"
    assert "error" not in measured, f"{scan} on {shape}: {measured['error']}"
    allowed = SCANS[scan].memory_factor * measured["input_bytes"] + MEMORY_SLACK
    growth = measured["peak_growth_bytes"]
    assert growth <= allowed, f"{scan} on {shape}: {growth / MIB:.0f} MiB, {allowed / MIB:.0f} allowed"
    assert measured["cpu_s"] < CPU_SECONDS


def test_every_shape_is_fed_to_some_scan() -> None:
    fed = {shape for spec in SCANS.values() for shape in spec.shapes}
    assert fed == set(SHAPES)
