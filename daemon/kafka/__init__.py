"""The Kafka source: a consumer group reading documents; results and dead letters go back to Kafka.

**Input.** A message's value is either a JSON object ``{"id": ..., "text": ..., "options": {...}}``
(``id`` and ``options`` optional; options as in :mod:`daemon.summary.options`) or the document's raw
bytes, whose id is the message key: plain UTF-8 text, Markdown, HTML, or a PDF, DOCX or ODT file,
the format detected from the bytes (:mod:`daemon.document.formats`; a ``content-type`` header such as
``application/pdf`` is a hint only). A value whose first non-blank byte is ``{`` is read as JSON,
unless the ``content-type`` header names another type (``application/json`` forces JSON). Without an
id or a key, the id is ``TOPIC-PARTITION-OFFSET``. The message's headers, key and coordinates go into the
work item's metadata, so they reach the result record. A malformed message (bad JSON or JSON nested
too deeply to parse, no text, a tombstone, a header whose value is null) fails with reason
``invalid_message``; a value over ``max_message_bytes``, a key or id over ``max_key_bytes`` or headers
over ``max_header_bytes`` with ``too_large``. None ever stops its partition: all become dead letters
and the offset moves on. So does a record the Kafka client itself cannot decode (a header name that
is not UTF-8, which brokers do not check): the rest of its record batch becomes one dead letter
naming the offsets skipped (:mod:`~daemon.kafka.undecodable`).

**Output.** :class:`~daemon.kafka.sink.KafkaSink`: results to ``output_topic`` (key: the document
id; value: the same record as the folder's result file; headers: the input's, plus ``model`` and
``prompt_version``), failure records to ``dead_letter_topic`` with the source topic, partition and
offset and the original value (its first ``dead_letter_payload_bytes`` and its size when larger).
Every output is built to fit ``max_request_bytes`` (bounded copies of key, headers and payload; a
dead letter that would not fit is reduced), and one the broker refuses anyway is replaced by its
reduced dead letter (:mod:`~daemon.kafka.messages`, :mod:`~daemon.kafka.committer`).

**Offsets.** Auto-commit is off. Documents finish out of order; per partition the committed offset
is the lowest one not yet finished (:mod:`daemon.kafka.offsets`): a result or dead letter is
acknowledged by the broker before its offset counts as finished. Commits run every
``commit_interval_seconds``, on rebalance (for the partitions being revoked; nothing is committed for
them afterwards) and on stop. Delivery is at least once: a crash re-reads what was not committed.

**Backpressure.** The service pulls an item only when it has room. Fetched messages wait in a local
buffer of ``max_buffered_messages`` and ``max_buffered_bytes``; when it is full every assigned
partition is paused, and resumed once there is room. The consumer keeps polling while paused, so
however long a document takes it stays in its group (heartbeats run in aiokafka's background task;
polls satisfy max.poll.interval).

**Exactly once** (opt-in, ``exactly_once = true``). Outputs are not sent one by one: a finished
document's result or dead letter is held until every earlier message of its partition is finished;
each commit then writes the held outputs below the new commit points and those offsets in one Kafka
transaction. A reader with ``isolation.level=read_committed`` sees each output once: a crash loses
only uncommitted transactions, whose inputs are read again and redone. Held outputs are bounded by
``max_pending_results`` (partitions pause when it is reached); outputs of a revoked partition that
were not yet committable are dropped and redone by its new owner. aiokafka does not send the group
generation with the offsets (KIP-447), so a daemon stalled past its session timeout that wakes up
after its partitions moved is not fenced by the broker; its transactional id fences only an
incarnation with the same id.

**Lag.** ``docsumd_kafka_consumer_lag{topic,partition}``: end offset minus committed offset, per owned
partition, refreshed every ``lag_interval_seconds``.

Where each concern lives (one place to change each):

* :mod:`~daemon.kafka.source`: :class:`KafkaSource`, a thin facade: lifecycle, fetch and
  backpressure (pause, resume, idle pause), the rebalance listener, the lag metric, work items.
* :mod:`~daemon.kafka.messages`: the input format (:func:`parse_message`), a work item's
  metadata, the output message of a result or a dead letter.
* :mod:`~daemon.kafka.committer`: the commit rule, at least once or transactional, chosen
  once at start (:func:`committer_for`).
* :mod:`~daemon.kafka.offsets`: which offset of a partition may be committed (pure logic).
* :mod:`~daemon.kafka.held`: exactly once, the outputs held for their transaction (pure logic).

The records themselves (result, failure, dead-letter envelope, headers) are shaped in
:mod:`daemon.records`; the producer is :mod:`daemon.kafka.sink`.
"""

from __future__ import annotations

from daemon.kafka.committer import (
    AtLeastOnceCommitter,
    Committer,
    TransactionalCommitter,
    committer_for,
)
from daemon.kafka.messages import ParsedMessage, parse_message
from daemon.kafka.source import SOURCE_NAME, KafkaSource, KafkaSourceError

__all__ = [
    "SOURCE_NAME",
    "AtLeastOnceCommitter",
    "Committer",
    "KafkaSource",
    "KafkaSourceError",
    "ParsedMessage",
    "TransactionalCommitter",
    "committer_for",
    "parse_message",
]
