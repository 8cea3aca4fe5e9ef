"""Summary profiles end to end: the real daemon (real vLLM engine, tiny model) with a watched folder
and a Kafka topic that use different profiles, documents that ask for a known and an unknown
profile, and configurations with a bad profile, which ``docsumd run`` refuses with exit 2 before
the engine starts.
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from daemon.config import load_config
from daemon.records import OUTPUT_BYTES
from daemon.summary.profiles import resolve_profiles, shipped_profiles
from tests.corpus import corpus_text
from tests.e2e.harness import DaemonProcess, Layout, configure_kafka, drop_file, run_cli, wait_for
from tests.kafka_broker import KafkaBroker, Topics, all_committed, create_topics, produce, read_all

pytestmark = [pytest.mark.engine, pytest.mark.kafka]

PROFILES = "\n[profiles.brief]\n\n[profiles.abstract]\ntemperature = 0.1\n\n[profiles.contract]\n"


def _records(broker: KafkaBroker, topic: str) -> list[Any]:
    return asyncio.run(read_all(broker.bootstrap, topic))


def _expected_versions(layout: Layout) -> dict[str, str]:
    """Each profile's version, computed from the daemon's own config file as check-config does."""
    return {spec.name: spec.version for spec in resolve_profiles(load_config(layout.config))}


def test_folder_and_kafka_topic_with_different_profiles_in_one_daemon(
    layout: Layout, start_daemon: Callable[..., DaemonProcess], corpus: Path, kafka_broker: KafkaBroker
) -> None:
    topics = Topics()
    asyncio.run(create_topics(kafka_broker.bootstrap, [topics.input, topics.output, topics.dead]))
    # The folder's documents are legal briefs; the topic's are abstracts of papers.
    configure_kafka(
        layout,
        kafka_broker,
        topics,
        **{
            "sources.folder.profile": '"brief"',
            "sources.kafka.topic_profiles": json.dumps({topics.input: "abstract"}).replace(":", " ="),
        },
    )
    with layout.config.open("a", encoding="utf-8") as config:
        config.write(PROFILES)
    versions = _expected_versions(layout)
    assert set(versions) == {"default", "brief", "abstract", "contract"}
    assert len(set(versions.values())) == 4

    # Folder: one document under the folder's profile, one asking for a known profile, one for an
    # unknown one. Sidecars first: they are read with their document.
    layout.inbox.mkdir(parents=True, exist_ok=True)
    (layout.inbox / "asks-abstract.options.json").write_text(json.dumps({"profile": "abstract"}))
    (layout.inbox / "odd.options.json").write_text(json.dumps({"profile": "poem"}))
    drop_file(layout.inbox, "contract.txt", corpus_text(corpus, "legal-cal-ms-rl.txt"))
    drop_file(layout.inbox, "asks-abstract.txt", corpus_text(corpus, "legal-cal-ofl-1.1.txt"))
    drop_file(layout.inbox, "odd.txt", corpus_text(corpus, "legal-cal-cc0-1.0.txt"))
    # Kafka: the topic's profile, a document asking for the default, one asking for an unknown one.
    text = corpus_text(corpus, "legal-debian-social-contract.txt").decode()
    asyncio.run(
        produce(
            kafka_broker.bootstrap,
            topics.input,
            [
                (b"k-topic", text.encode(), [("content-type", b"text/plain")]),
                (b"k-default", json.dumps({"text": text, "options": {"profile": "default"}}).encode(), []),
                (b"k-poem", json.dumps({"text": text, "options": {"profile": "poem"}}).encode(), []),
                # The shipped structured profile: a result whose `structured` validates, or (random
                # weights) an invalid_output dead letter; never lost.
                (b"k-contract", json.dumps({"text": text, "options": {"profile": "contract"}}).encode(), []),
            ],
        )
    )
    daemon = start_daemon()
    daemon.wait_ready()

    def finished() -> bool:
        written = _records(kafka_broker, topics.output) + _records(kafka_broker, topics.dead)
        return (
            {record.key for record in written} >= {b"k-topic", b"k-default", b"k-poem", b"k-contract"}
            and {"contract.txt", "asks-abstract.txt"} <= layout.inputs_in(layout.done)
            and "odd.txt" in layout.inputs_in(layout.failed)
        )

    wait_for(finished, 300, "every document to have a result or a failure record", interval=1.0)
    wait_for(lambda: all_committed(kafka_broker, topics), 30, "the group to commit", interval=0.5)

    _, metrics = daemon.http_get("/metrics")
    for profile, outcome, count in (
        ("brief", "ok", 1),
        ("abstract", "ok", 2),
        ("default", "ok", 1),
        ("brief", "invalid_options", 1),  # the folder's document that asked for "poem"
        ("abstract", "invalid_options", 1),  # the topic's
    ):
        sample = f'docsumd_profile_documents_total{{outcome="{outcome}",profile="{profile}"}} {float(count)}'
        assert sample in metrics, sample
    assert 'profile="poem"' not in metrics  # labels are the config's names only
    assert 'docsumd_profile_cached_prompt_tokens_total{profile="abstract"}' in metrics
    budgets = {e["profile"] for e in daemon.log_events() if e.get("event") == "context budget"}
    assert budgets == {"default", "brief", "abstract", "contract"}

    daemon.signal(signal.SIGTERM)
    assert daemon.wait_exit() == 0, daemon.log_tail()

    # Results carry the profile and its version; folder files and Kafka messages alike.
    folder = {name: layout.result(name) for name in ("contract.txt", "asks-abstract.txt")}
    assert folder["contract.txt"]["profile"] == "brief"
    assert folder["contract.txt"]["style"] == "bullets"  # the brief's default style
    assert folder["asks-abstract.txt"]["profile"] == "abstract"
    kafka = {record.key.decode(): record for record in _records(kafka_broker, topics.output)}
    letters = {r.key.decode(): json.loads(r.value) for r in _records(kafka_broker, topics.dead)}
    _check_structured(kafka, letters, metrics)
    kafka.pop("k-contract", None)
    letters.pop("k-contract", None)
    assert set(kafka) == {"k-topic", "k-default"}
    results = {**folder, **{key: json.loads(record.value) for key, record in kafka.items()}}
    assert results["k-topic"]["profile"] == "abstract"
    assert results["k-default"]["profile"] == "default"
    for name, result in results.items():
        assert result["profile_version"] == versions[result["profile"]], name
        assert result["prompt_version"] == "summary-v5", name
    for key, record in kafka.items():
        headers = dict(record.headers)
        assert headers["profile"].decode() == results[key]["profile"]
        assert headers["profile_version"].decode() == results[key]["profile_version"]

    # An unknown profile fails its document with invalid_options, naming the known ones.
    expected = "unknown profile 'poem'; this daemon has: default, brief, abstract, contract"
    assert layout.error("odd.txt")["reason"] == "invalid_options"
    assert layout.error("odd.txt")["message"] == expected
    assert set(letters) == {"k-poem"}
    assert (letters["k-poem"]["reason"], letters["k-poem"]["message"]) == ("invalid_options", expected)


def _check_structured(outputs: dict[str, Any], letters: dict[str, Any], metrics: str) -> None:
    """The Kafka message asking for the shipped ``contract`` profile ended as an output message whose
    ``structured`` validates against the profile's schema, or as an ``invalid_output`` dead letter
    keeping the model's output; counted once by the structured metrics and the profile's outcome."""
    if "k-contract" in outputs:
        result = json.loads(outputs["k-contract"].value)
        schema_file = shipped_profiles()["contract"].json_schema_file
        assert schema_file is not None
        jsonschema.validate(result["structured"], json.loads(schema_file.read_text(encoding="utf-8")))
        assert (result["profile"], result["style"]) == ("contract", "json")
        assert json.loads(result["summary"]) == result["structured"]
        outcome = "ok"
    else:
        letter = letters["k-contract"]
        assert letter["reason"] == "invalid_output", letter
        # The model's last output, kept and bounded; the message names both tries' problems.
        assert isinstance(letter["output"], str)
        assert 0 < len(letter["output"].encode()) <= OUTPUT_BYTES, len(letter["output"])
        assert "try 1: " in letter["message"], letter["message"]
        assert "try 2: " in letter["message"], letter["message"]
        outcome = "invalid_output"
    sample = f'docsumd_profile_documents_total{{outcome="{outcome}",profile="contract"}} 1.0'
    assert sample in metrics, sample
    counted = [
        line
        for line in metrics.splitlines()
        if line.startswith("docsumd_structured_outputs_total{") and line.endswith(" 1.0")
    ]
    assert len(counted) == 1, counted


@pytest.mark.parametrize(
    ("overrides", "extra", "named"),
    [
        (
            {"sources.folder.profile": '"legal"'},
            "",
            "sources.folder.profile: unknown profile 'legal' (profiles: default)",
        ),
        ({}, '\n[profiles.memo]\ninstruction_file = "memo.txt"\n', "profiles.memo.instruction_file"),
        ({}, '\n[profiles.record]\njson_schema_file = "record.json"\n', "profiles.record.json_schema_file"),
        (
            {},
            "\n[profiles.contract]\nmax_summary_tokens = 128\n",
            "profiles.contract.json_schema_file: the longest output the schema allows is",
        ),
    ],
    ids=[
        "unknown-profile-in-a-source",
        "missing-instruction-file",
        "missing-schema-file",
        "schema-longer-than-the-summary",
    ],
)
def test_a_bad_profile_is_refused_with_exit_2_naming_the_key(
    layout: Layout, overrides: dict[str, str], extra: str, named: str
) -> None:
    layout.write_config(**overrides)
    with layout.config.open("a", encoding="utf-8") as config:
        config.write(extra)
    for command in (["run", "--config", str(layout.config)], ["check-config", str(layout.config)]):
        proc = run_cli(layout, *command)
        assert proc.returncode == 2, proc.stderr
        assert named in proc.stderr, proc.stderr
        assert "engine starting" not in proc.stderr
