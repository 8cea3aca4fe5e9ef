"""What the test broker (noida-db) keeps of the writes it acknowledged around a restart.

A producer (``acks="all"``, idempotent, as the daemon's sink) writes small records as fast as it can;
after ``--before`` seconds the broker is told to stop (``noida-db down``) and, once it no longer
listens, started again; then every record is read back. Per round: how many writes were
acknowledged, how many before ``down`` began, and which acknowledged ones are missing, with their
acknowledgement time relative to ``down``. With ``--paused`` the producer stops (and its last
answers are waited for) before ``down``: what the broker-restart test does with the daemon
(``tests/e2e/test_kafka_resilience.py``).

    .venv/bin/python -m bench.broker_restart_loss [--rounds 8] [--before 2] [--paused] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import socket
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer

from bench.lib.results import write_result
from tests.e2e.harness import free_port
from tests.kafka_broker import KafkaBroker, create_topics, read_all

SEND_TIMEOUT_S = 2.0
SETTLE_S = 1.0


async def _write(bootstrap: str, topic: str, acks: list[tuple[int, float]], stop: threading.Event) -> None:
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, request_timeout_ms=3000
    )
    await producer.start()
    number = 0
    try:
        while not stop.is_set():
            key = str(number).encode()

            async def one(key: bytes = key) -> None:
                await (await producer.send(topic, key=key, value=b"x" * 2000))

            try:
                await asyncio.wait_for(one(), SEND_TIMEOUT_S)
                acks.append((number, time.time()))
            except Exception:  # the broker is going or gone: a failed write is not acknowledged
                await asyncio.sleep(0.05)
            number += 1
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(producer.stop(), 5)


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def one_round(broker: KafkaBroker, topic: str, before: float, paused: bool) -> dict[str, Any]:
    asyncio.run(create_topics(broker.bootstrap, [topic]))
    acks: list[tuple[int, float]] = []
    stop = threading.Event()
    writer = threading.Thread(target=lambda: asyncio.run(_write(broker.bootstrap, topic, acks, stop)))
    writer.start()
    time.sleep(before)
    if paused:
        stop.set()
        writer.join()
        time.sleep(SETTLE_S)
    down = time.time()
    broker.down()
    while _listening(broker.port):
        time.sleep(0.05)
    stopped = time.time()
    stop.set()
    writer.join()
    broker.up()
    kept = {int(record.key) for record in asyncio.run(read_all(broker.bootstrap, topic, timeout=60))}
    lost = [(number, round(at - down, 3)) for number, at in acks if number not in kept]
    return {
        "acknowledged": len(acks),
        "acknowledged_before_down": sum(1 for _, at in acks if at < down),
        "lost": len(lost),
        "lost_acknowledged_before_down": sum(1 for _, after in lost if after < 0),
        "first_lost_after_down_s": min((after for _, after in lost), default=None),
        "last_lost_after_down_s": max((after for _, after in lost), default=None),
        "down_s": round(stopped - down, 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--before", type=float, default=2.0, help="seconds of writes before the restart")
    parser.add_argument("--paused", action="store_true", help="stop writing before the broker stops")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    rounds = []
    with tempfile.TemporaryDirectory(prefix="docsumd-broker-loss-") as scratch:
        broker = KafkaBroker(port=free_port(), data_dir=Path(scratch) / "broker")
        broker.up()
        try:
            for index in range(args.rounds):
                result = one_round(broker, f"loss-{index}", args.before, args.paused)
                rounds.append(result)
                print(json.dumps({"round": index, **result}), flush=True)
        finally:
            broker.down()
    summary = {
        "paused": args.paused,
        "rounds": len(rounds),
        "rounds_with_loss": sum(1 for r in rounds if r["lost"]),
        "lost_acknowledged_before_down": sum(r["lost_acknowledged_before_down"] for r in rounds),
    }
    print(json.dumps(summary), flush=True)
    if args.json is not None:
        payload = {"bench": "broker_restart_loss", "date": datetime.now(UTC).isoformat(timespec="seconds")}
        write_result(args.json, {**payload, "summary": summary, "rounds": rounds}, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
