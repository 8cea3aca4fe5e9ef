"""The daemon end to end on the folder path, with the real vLLM engine and the tiny model.

One daemon run covers: the start-up scan, files arriving while it runs, every kind of bad input,
a file written in place while the daemon watches, staged (map-reduce) summaries of documents longer
than the context (among them 1 MB on a single line), per-document options from sidecars (valid and
invalid), the result records, the endpoints, the logs, and a SIGTERM that exits 0 with no engine
process left.
"""

from __future__ import annotations

import hashlib
import json
import re
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.corpus import BAD_CORPUS_REASONS
from tests.e2e.harness import DaemonProcess, Layout, drop_file, wait_for

pytestmark = pytest.mark.engine

GOOD_AT_START = [
    "legal-common-apache-2.0.txt",
    "paper-pmc-pone-0000217.txt",  # longer than the context: summarized in parts
    "tech-pydoc-library-stdtypes.txt",  # 212 KB
]
GOOD_LATER = [
    "legal-debian-social-contract.txt",
    "paper-aclsum-w99-0615.txt",
    "reg-debian-policy-ch-controlfields.txt",
]
BAD_EXPECTED = BAD_CORPUS_REASONS
# Odd but valid inputs: they must be summarized.
ODD_BUT_GOOD = ["utf16_bom.txt", "one_giant_line.txt"]
MAX_SUMMARY_TOKENS = 32
BAD_OPTIONS = "reg-debian-policy-ch-controlfields.txt"  # its sidecar asks for an unknown style
GOOD_SIDECAR = "legal-debian-social-contract.options.json"
BAD_SIDECAR = f"{BAD_OPTIONS}.options.json"
# Documents under a profile that fails a summary with unsupported items: plain lower-case text without
# a number or a name, so that any number, name or abbreviation the tiny model writes is unsupported.
STRICT = {
    f"strict-{n}.txt": " ".join(
        f"the {a} cat sat on the {b} mat and looked at the open door of the quiet {c} house."
        for a, b, c in zip(
            ["grey", "small", "old"] * 20,
            ["red", "blue", "warm"] * 20,
            ["stone", "wooden"] * 30,
            strict=False,
        )
    )[n * 7 :].encode()
    for n in range(4)
}
STRICT_PROFILE = '\n[profiles.strict]\non_unsupported = "fail"\n'


def test_folder_end_to_end(layout: Layout, start_daemon: Callable[..., DaemonProcess], corpus: Path) -> None:
    inputs: dict[str, bytes] = {}
    bad_names = sorted(BAD_EXPECTED)
    # Half of everything is in the inbox before start (start-up scan), half arrives later (watch).
    at_start = GOOD_AT_START + bad_names[::2] + ODD_BUT_GOOD[:1]
    later = GOOD_LATER + bad_names[1::2] + ODD_BUT_GOOD[1:]
    for name in at_start:
        inputs[name] = _corpus_file(corpus, name).read_bytes()
        drop_file(layout.inbox, name, inputs[name])
    # Too large for the configured limit (refused without being read).
    inputs["too_big.txt"] = b"word " * 250_000
    drop_file(layout.inbox, "too_big.txt", inputs["too_big.txt"])
    # Per-document options: a valid sidecar (bullets, shorter), and one asking for an unknown style.
    (layout.inbox / GOOD_SIDECAR).write_text(json.dumps({"style": "bullets", "max_summary_tokens": 16}))
    (layout.inbox / BAD_SIDECAR).write_text('{"style": "haiku"}')
    # Ignored by convention: hidden and temporary names are never read.
    (layout.inbox / ".still-writing.txt").write_text("not yet")
    (layout.inbox / "upload.txt.part").write_text("not yet")

    for name, data in STRICT.items():
        (layout.inbox / f"{name}.options.json").write_text(json.dumps({"profile": "strict"}))
        inputs[name] = data
        drop_file(layout.inbox, name, data)

    # The cache off: the counts below are of engine work (corpus texts share clauses, which it would
    # reuse).
    layout.write_config(**{"limits.max_input_bytes": str(1_100_000), "cache.enabled": "false"})
    with layout.config.open("a", encoding="utf-8") as config:
        config.write(STRICT_PROFILE)
    daemon = start_daemon()
    daemon.wait_ready()

    for name in later:
        inputs[name] = _corpus_file(corpus, name).read_bytes()
        drop_file(layout.inbox, name, inputs[name])
    # A writer that writes in place, slowly: the daemon must wait for the whole file.
    slow = _corpus_file(corpus, "legal-common-gpl-3.txt").read_bytes()
    inputs["written-in-place.txt"] = slow
    with (layout.inbox / "written-in-place.txt").open("wb") as stream:
        for start in range(0, len(slow), len(slow) // 4 + 1):
            stream.write(slow[start : start + len(slow) // 4 + 1])
            stream.flush()
            time.sleep(0.15)  # under settle_seconds (0.3): the file is still "growing"

    def all_settled() -> bool:
        return not (set(inputs) & layout.pending())

    wait_for(all_settled, 300, "every input to leave the inbox")

    # Status and metrics while running.
    assert daemon.http_get("/healthz")[0] == 200
    assert daemon.http_get("/readyz")[0] == 200
    status, metrics = daemon.http_get("/metrics")
    assert status == 200
    strict_failed = {name for name in STRICT if (layout.failed / name).exists()}
    good_names = [
        name
        for name in GOOD_AT_START + GOOD_LATER + ODD_BUT_GOOD + ["written-in-place.txt"]
        if name != BAD_OPTIONS
    ] + sorted(set(STRICT) - strict_failed)
    assert f'docsumd_documents_total{{outcome="ok",source="folder"}} {float(len(good_names))}' in metrics
    assert f'outcome="unsupported_claims",source="folder"}} {float(len(strict_failed))}' in metrics
    assert 'docsumd_grounding_checked_summaries_total{profile="strict"} 4.0' in metrics
    assert (
        f'docsumd_grounding_flagged_summaries_total{{profile="strict"}} {float(len(strict_failed))}'
        in metrics
    )
    assert 'docsumd_documents_total{outcome="binary",source="folder"} 2.0' in metrics
    assert 'docsumd_documents_total{outcome="invalid_options",source="folder"} 1.0' in metrics
    assert 'docsumd_engine_requests_total{kind="part"}' in metrics
    assert "docsumd_chunks_per_document_bucket" in metrics
    assert "vllm:prompt_tokens_total" in metrics  # the engine's own metrics, same endpoint

    # Stop with SIGTERM: exit 0, no engine process left.
    daemon.signal(signal.SIGTERM)
    assert daemon.wait_exit() == 0, daemon.log_tail()
    assert daemon.leftover_processes() == [], daemon.stop_log()  # every process of the daemon exits with it

    # Every good input: moved to done, with a complete result.
    assert layout.inputs_in(layout.done) == {
        *good_names,
        GOOD_SIDECAR,
        *(f"{name}.options.json" for name in set(STRICT) - strict_failed),
    }
    for name in good_names:
        _check_result(layout, name, inputs[name])
    # The strict profile: the tiny model's random text names things a plain lower-case text does not
    # hold, so its summaries fail with unsupported_claims, their record keeping summary and checks.
    assert strict_failed, "no summary of the strict profile had an unsupported item"
    for name in strict_failed:
        failure = layout.error(name)
        assert failure["reason"] == "unsupported_claims", failure
        assert failure["checks"]["counts"]["unsupported"] == len(failure["checks"]["unsupported"]) >= 1
        _check_items(failure["summary"], failure["checks"], failure["evidence"])
    for name in set(STRICT) - strict_failed:
        assert layout.result(name)["checks"]["counts"]["unsupported"] == 0
    assert layout.result("written-in-place.txt")["sha256"] == hashlib.sha256(slow).hexdigest()
    assert layout.result("utf16_bom.txt")["encoding"] in {"utf-16-le", "utf-16-be"}
    for long_name in ("paper-pmc-pone-0000217.txt", "tech-pydoc-library-stdtypes.txt", "one_giant_line.txt"):
        staged = layout.result(long_name)
        assert staged["strategy"] == "map_reduce", staged
        assert staged["truncated"] is False
        assert staged["dropped_tokens"] == 0
        assert staged["parts"] >= 2
        assert staged["depth"] >= 2
        assert staged["requests"] >= staged["parts"] + 1  # every part, then at least one combine
        assert staged["prompt_tokens"] > staged["document_tokens"]  # every token was read
    giant = layout.result("one_giant_line.txt")
    assert giant["parts"] >= giant["document_tokens"] // 4096  # 1 MB on one line, cut anyway
    assert giant["requests"] == giant["parts"] + giant["depth"] - 1 or giant["depth"] >= 3
    single = layout.result("legal-common-apache-2.0.txt")
    assert (single["strategy"], single["parts"], single["depth"], single["requests"]) == ("single", 1, 1, 1)
    assert single["style"] == "prose"
    # The sidecar's options were applied, and the sidecar went along with its document.
    bullets = layout.result("legal-debian-social-contract.txt")
    assert (bullets["style"], bullets["max_summary_tokens"]) == ("bullets", 16)
    assert 0 < bullets["summary_tokens"] <= 16
    assert (layout.done / GOOD_SIDECAR).exists()
    assert (layout.failed / BAD_SIDECAR).exists()

    # Every bad input: moved to failed, with a failure record giving the reason.
    expected_failures = {
        **BAD_EXPECTED,
        "too_big.txt": "too_large",
        BAD_OPTIONS: "invalid_options",
        **dict.fromkeys(strict_failed, "unsupported_claims"),
    }
    assert layout.inputs_in(layout.failed) == {
        *expected_failures,
        BAD_SIDECAR,
        *(f"{name}.options.json" for name in strict_failed),
    }
    for name, reason in expected_failures.items():
        record = layout.error(name)
        assert record["reason"] == reason, (name, record)
        assert record["id"] == name
        assert len(record["message"]) > 10
        assert (layout.failed / name).read_bytes() == inputs[name]  # the input itself, untouched
    assert "style" in layout.error(BAD_OPTIONS)["message"]

    # Nothing else written; ignored files untouched; no temp files left.
    assert layout.names(layout.outbox, ".summary.json") == {f"{n}.summary.json" for n in good_names}
    assert layout.inputs_in(layout.inbox) == {"upload.txt.part"}
    assert (layout.inbox / ".still-writing.txt").exists()
    assert not [p for p in layout.outbox.iterdir() if p.name.startswith(".")]

    # Logs: JSON lines, and every line about a document names it.
    events = daemon.log_events()
    per_doc = [e for e in events if e.get("event") in {"document summarized", "document failed"}]
    assert len(per_doc) == len(good_names) + len(expected_failures)
    assert all(e.get("doc_id") in inputs for e in per_doc)
    assert any(e.get("event") == "docsumd stopped" for e in events)


def _check_result(layout: Layout, name: str, data: bytes) -> None:
    result = layout.result(name)
    assert result["id"] == name
    assert result["source"] == "folder"
    assert isinstance(result["summary"], str)
    assert result["model"] == layout.model.name
    assert result["sha256"] == hashlib.sha256(data).hexdigest()
    assert result["input_bytes"] == len(data)
    assert 0 < result["summary_tokens"] <= result["max_summary_tokens"] <= MAX_SUMMARY_TOKENS
    assert result["prompt_tokens"] <= result["requests"] * (4096 - result["max_summary_tokens"])
    assert result["prompt_tokens"] > result["document_tokens"] - result["dropped_tokens"]
    assert result["generated_tokens"] >= result["summary_tokens"]
    assert result["truncated"] == (result["dropped_tokens"] > 0)
    assert result["prompt_version"]
    for key in ("queued_s", "engine_s", "check_s", "total_s"):
        assert result["timings"][key] >= 0
    # Evidence and checks: every sentence of the summary, in order; each passage within a part read.
    _check_items(result["summary"], result["checks"], result["evidence"])
    read = [part["chars"] for part in result["sources"]]
    for entry in result["evidence"]:
        for passage in entry["parts"]:
            start, end = read[passage["part"] - 1]
            assert start <= passage["chars"][0] < passage["chars"][1] <= end, (name, passage, read)
    json.dumps(result)  # plain JSON all the way down


def _check_items(summary: str, checks: dict[str, Any], evidence: list[dict[str, Any]]) -> None:
    """The checks and evidence of ``summary`` hang together: sentences in order, within the summary;
    every unsupported item where its chars say, in the sentence its index names."""
    assert [entry["sentence"] for entry in evidence] == list(range(len(evidence)))
    assert bool(evidence) == bool(re.search(r"\w", summary))  # a sentence needs a letter or digit
    for entry in evidence:
        start, end = entry["chars"]
        assert " ".join(summary[start:end].split()) == entry["text"]
    counts = checks["counts"]
    assert counts["unsupported"] == len(checks["unsupported"])
    assert sum(kind["supported"] + kind["unsupported"] for kind in checks["by_kind"].values()) == (
        counts["supported"] + counts["unsupported"]
    )
    for item in checks["unsupported"]:
        start, end = item["chars"]
        assert summary[start:end] == item["text"]
        sentence = evidence[item["sentence"]]["chars"]
        assert sentence[0] <= start < end <= sentence[1]


def _corpus_file(corpus: Path, name: str) -> Path:
    for folder in ("docs", "bad"):
        if (corpus / folder / name).exists():
            return corpus / folder / name
    raise FileNotFoundError(name)
