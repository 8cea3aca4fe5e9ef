"""What one compressed Kafka record batch costs the daemon when it inflates: peak memory and time.

aiokafka decompresses a whole record batch in memory, on the event loop, when the fetcher hands its
records out; ``fetch_max_bytes``, ``max_partition_fetch_bytes`` and the broker's ``message.max.bytes``
bound the *compressed* bytes only. This measures how far that goes, without a broker.

Each case builds one record batch with aiokafka's own builder (``DefaultRecordBatchBuilder``, the
codecs aiokafka uses: gzip from the standard library, lz4 and zstd through cramjam) holding one
record whose value is ``SIZE`` MiB of zero bytes (what compresses best), in a process of its own, and
writes its bytes to a temporary file. A second fresh process reads the file, then hands the bytes to
what the daemon's consumer runs on a fetched record set: aiokafka's ``PartitionRecords`` (CRCs
checked, ``read_committed``, as the source configures its consumer) over
``daemon.kafka.undecodable``'s ``_TolerantRecords`` (installed as the fetcher's
``MemoryRecords``), iterates it to the end and takes ``message_bytes`` of each message, as the source
does before it buffers one. That process's peak RSS (``getrusage(RUSAGE_SELF).ru_maxrss``, read at
its end: nothing else runs in it) and the seconds the iteration took (all of them on the event loop
in the daemon: ``getmany`` iterates synchronously) are the case's figures. A baseline case (a 64 KiB
zstd batch) runs the same way in the same call; peaks are given above the baseline's peak and as a
multiple of the inflated size, times as a ratio to the baseline's.

    .venv/bin/python -m bench.kafka_decompression [--sizes 64,256,1024] [--codecs zstd,gzip,lz4]
        [--repeat 3] [--limit-mib 64] [--json FILE]

The wrapper bounds what a compressed batch may inflate to (``--limit-mib``, the daemon's default
64 MiB: ``max(max_buffered_bytes, 2 * max_message_bytes)``); a larger batch is one stand-in
(``undecodable`` counts it) and is never inflated past the limit, so its peak is about the limit for
lz4 and zstd (inflated into a bounded buffer) and small for gzip (a stream) and snappy (its blocks
state their length). A batch within the limit is inflated twice: the wrapper's check, then
aiokafka's own decoder, whose peak is about twice the inflated size.

Each batch is built once and measured in ``--repeat`` fresh processes: the peak given is the highest
(it hardly varies), the time the fastest (on a shared machine other load only adds to it).

Sizes above ``--max-mib`` (1024 by default) are refused: a 1 GiB case takes up to about 2 GiB
while its batch is built (and in the measured process, given a limit above it).

What it does not show: the network and the broker (the bytes come from a file, not a fetch
response; a real Kafka broker may recompress or refuse a batch when it is produced, depending on the
topic's ``compression.type``); the daemon's later copies of an accepted value (it is refused as
``too_large`` after this point when over ``max_message_bytes``, once inflated within the limit); several
such batches in one fetch (each partition's record set is iterated lazily, batch by batch, but the
messages handed out stay referenced in the source's buffer).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.lib import REPO
from bench.lib.results import write_result

MIB = 1024 * 1024
CODEC_IDS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
BASELINE = ("zstd", 1 / 16)
"""The baseline case: a 64 KiB zstd batch, measured as every other case."""


def _max_rss_mib() -> float:
    """This process's highest resident memory so far (Linux reports kilobytes)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# -- the child processes ---------------------------------------------------------------------------


def build(codec: str, mib: float, path: Path) -> None:
    """Write one record batch of one ``mib`` MiB record of zeros, compressed with ``codec``, to ``path``."""
    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    value = bytes(int(mib * MIB))
    # magic 2, no transaction, no producer id; the batch size only stops a second record
    builder = DefaultRecordBatchBuilder(2, CODEC_IDS[codec], 0, -1, -1, -1, 1 << 20)
    if builder.append(0, timestamp=None, key=b"bomb", value=value, headers=[]) is None:
        raise RuntimeError("the builder refused the record")
    del value
    path.write_bytes(bytes(builder.build()))


def measure(path: Path, limit_mib: float) -> dict[str, Any]:
    """Iterate the batch in ``path`` as the daemon's consumer does, batches bounded to ``limit_mib``
    once inflated; its figures."""
    from aiokafka import TopicPartition
    from aiokafka.consumer import fetcher

    from daemon.kafka.messages import message_bytes
    from daemon.kafka.undecodable import install, undecodable

    install(max_inflated_bytes=int(limit_mib * MIB))
    buffer = path.read_bytes()
    before = _max_rss_mib()
    began = time.perf_counter()
    records = fetcher.MemoryRecords(buffer)  # the daemon's _TolerantRecords, as the fetcher builds it
    partition_records = fetcher.PartitionRecords(
        TopicPartition("bomb", 0), records, None, 0, None, None, True, fetcher.READ_COMMITTED
    )
    messages = 0
    value_bytes = 0
    dead = 0
    for message in partition_records:
        messages += 1
        if undecodable(message) is not None:
            dead += 1
        else:
            value_bytes += message_bytes(message)
        del message  # the daemon would keep it in its buffer; one record here, so the peak is the same
    seconds = time.perf_counter() - began
    return {
        "compressed_bytes": len(buffer),
        "messages": messages,
        "undecodable": dead,
        "message_bytes": value_bytes,
        "rss_before_mib": round(before, 1),
        "peak_rss_mib": round(_max_rss_mib(), 1),
        "seconds": round(seconds, 6),
    }


# -- the driver -----------------------------------------------------------------------------------


def _child(*arguments: str) -> str:
    """Run this script with ``arguments`` in a fresh process; its last line of output."""
    command = [sys.executable, str(Path(__file__).resolve()), *arguments]
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(arguments)} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    lines = done.stdout.strip().splitlines()
    return lines[-1] if lines else ""


def run_case(codec: str, mib: float, work: Path, repeat: int, limit_mib: float) -> dict[str, Any]:
    """Build one batch in one process and measure it in ``repeat`` fresh others: the highest peak,
    the fastest time (the machine's other load only ever adds to it) and every time."""
    path = work / f"{codec}-{mib}.batch"
    began = time.perf_counter()
    _child("--build", codec, str(mib), str(path))
    build_seconds = time.perf_counter() - began
    runs = [json.loads(_child("--measure", str(path), "--limit-mib", str(limit_mib))) for _ in range(repeat)]
    path.unlink()
    inflated = int(mib * MIB)
    return {
        "codec": codec,
        "inflated_mib": mib,
        "ratio_inflated_to_compressed": round(inflated / runs[0]["compressed_bytes"], 1),
        **max(runs, key=lambda run: run["peak_rss_mib"]),
        "seconds": min(run["seconds"] for run in runs),
        "seconds_each": [run["seconds"] for run in runs],
        "build_seconds": round(build_seconds, 1),
    }


def _with_ratios(result: dict[str, Any], baseline: dict[str, Any]) -> dict[str, Any]:
    """``result`` with its peak above the baseline's and its time against the baseline's."""
    over = result["peak_rss_mib"] - baseline["peak_rss_mib"]
    return {
        **result,
        "peak_over_baseline_mib": round(over, 1),
        "peak_over_baseline_per_inflated": round(over / result["inflated_mib"], 2),
        "mib_per_second": round(result["inflated_mib"] / max(result["seconds"], 1e-6), 1),
        "seconds_vs_baseline": round(result["seconds"] / max(baseline["seconds"], 1e-6), 1),
    }


def _table(results: list[dict[str, Any]]) -> str:
    """The figures as a Markdown table."""
    lines = [
        "| codec | inflated MiB | compressed bytes | x | peak RSS MiB | over baseline MiB "
        "| over / inflated | seconds | MiB/s | vs baseline |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['codec']} | {r['inflated_mib']:g} | {r['compressed_bytes']:,} "
            f"| {r['ratio_inflated_to_compressed']:,.0f} | {r['peak_rss_mib']:,.1f} "
            f"| {r['peak_over_baseline_mib']:,.1f} | {r['peak_over_baseline_per_inflated']} "
            f"| {r['seconds']:.4f} | {r['mib_per_second']:,.0f} | {r['seconds_vs_baseline']:,} |"
        )
    return "\n".join(lines)


def _sizes(text: str) -> list[float]:
    return [float(part) for part in text.split(",") if part]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--sizes", type=_sizes, default=[64.0, 256.0, 1024.0], help="inflated MiB (64,256,1024)"
    )
    parser.add_argument("--codecs", default="zstd,gzip,lz4", help="comma-separated (default zstd,gzip,lz4)")
    parser.add_argument("--max-mib", type=float, default=1024.0, help="refuse larger sizes (default 1024)")
    parser.add_argument("--repeat", type=int, default=3, help="measured processes per case (default 3)")
    parser.add_argument(
        "--limit-mib",
        type=float,
        default=64.0,
        help="the daemon's bound on an inflated batch (default 64: its default, max_buffered_bytes)",
    )
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--build", nargs=3, metavar=("CODEC", "MIB", "PATH"), help=argparse.SUPPRESS)
    parser.add_argument("--measure", type=Path, metavar="PATH", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.build:
        build(args.build[0], float(args.build[1]), Path(args.build[2]))
        return 0
    if args.measure:
        print(json.dumps(measure(args.measure, args.limit_mib)))
        return 0
    codecs = [codec for codec in args.codecs.split(",") if codec]
    unknown = [codec for codec in codecs if codec not in CODEC_IDS]
    if unknown:
        parser.error(f"unknown codecs {unknown}; known: {sorted(CODEC_IDS)}")
    if any(size > args.max_mib for size in args.sizes):
        parser.error(f"a size above --max-mib {args.max_mib:g}: the measured process takes about twice it")
    with tempfile.TemporaryDirectory(prefix="docsumd-kafka-bomb-") as scratch:
        work = Path(scratch)
        baseline = run_case(*BASELINE, work, max(1, args.repeat), args.limit_mib)
        print(json.dumps(baseline), flush=True)
        results = [_with_ratios(baseline, baseline)]
        for codec in codecs:
            for size in args.sizes:
                result = _with_ratios(
                    run_case(codec, size, work, max(1, args.repeat), args.limit_mib), baseline
                )
                print(json.dumps(result), flush=True)
                results.append(result)
    print(_table(results))
    commit = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    import aiokafka
    import cramjam

    report = {
        "commit": commit,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "bench/kafka_decompression.py " + " ".join(sys.argv[1:]),
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
        },
        "versions": {"aiokafka": aiokafka.__version__, "cramjam": cramjam.__version__},
        "limit_mib": args.limit_mib,
        "method": "one record batch of one record of zeros, built by aiokafka's DefaultRecordBatchBuilder "
        "in a process of its own; a fresh process reads its bytes and iterates aiokafka's PartitionRecords "
        "(CRCs checked, read_committed) over the daemon's _TolerantRecords; peak = that process's "
        "ru_maxrss; seconds = the iteration (synchronous: on the event loop in the daemon), the fastest of "
        "--repeat fresh processes (peak: the highest); baseline = a 64 KiB zstd batch",
        "results": results,
    }
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        write_result(args.json, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
