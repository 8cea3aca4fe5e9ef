"""N docsumd daemons in one Kafka consumer group: does it scale, and how evenly does the work spread?

One command, one local noida-db broker (started and stopped here, as ``bench/compare.py --kafka``
does), and one or more passes (``--run``), each on fresh topics and a fresh consumer group:

1. **Daemons**: N processes of ``python -m daemon run`` (what systemd starts), each with its own config:
   the base config (``--config``) with only a Kafka source, its own metrics port, and a distinct
   ``engine.served_model_name`` (``MODEL@dI``). Results carry that name in their ``model`` field, so
   every result names the daemon that wrote it and the record schema stays as it is.
2. **Pinning** (``--pin``): ``gpu`` gives daemon I its own ``CUDA_VISIBLE_DEVICES`` (``tp`` GPUs each,
   for a daemon with ``engine.tensor_parallel_size = tp``); ``cpu`` gives each daemon one core of its
   own (the CPU analogue of a GPU each: without it, daemons on one machine share every core, and an
   idle daemon's core goes to the busy one, which hides imbalance); ``none`` shares everything.
   ``auto`` is ``gpu`` when ``nvidia-smi`` lists GPUs, else ``none``.
3. **Warm and settled first**: every daemon is ready (``/readyz``) and the group has settled (each
   daemon's last logged assignment disjoint from the others', together every partition) before the
   first document is produced. The workload is bench/compare.py's (``corpus`` or ``mixed``), produced
   as JSON messages ``{"id", "text"}``; ``keying`` decides each message's key and so its partition,
   with Kafka's default partitioner (murmur2 of the key, as the Java client and aiokafka do):

   * ``id``: key = document id (hashing spreads documents evenly on average);
   * ``round-robin``: document I to partition I mod P (even counts; the CI test uses it, so that
     both daemons surely get documents);
   * ``hot``: the worst case of keying by customer: every long document (over
     ``SHORT_MAX_TOKENS``) has the same key, so all of them land on one partition, hence one daemon.

Throughput is documents per second from the first produce (all daemons warm) to the last document's
first result (the result record's ``created_at``). Each pass reports per daemon its share of the
documents and of the prompt tokens (every result it published counts, duplicates included: they are
work done), its partitions, when its last result came, and the CPU seconds its processes used from
the first produce to the last result (``cpu_bound_docs_per_s``: documents per CPU second of the busiest
daemon, the pass's rate had each daemon its cores to itself; on a CPU shared with other work, the
wall-clock rate follows that work's load, CPU time much less); per partition what was produced to it;
duplicates (ids with more than one result) and which of them a rebalance explains (the id's
partition was revoked from a daemon during the pass: the daemons' ``partitions revoked`` and
``partitions assigned`` log lines, counted from the first produce on); dead letters; and a set of
invariants (every id has a result, no unexplained duplicates, every daemon got partitions and
documents, shares sum to 1). With more than one pass, ``speedup`` divides each pass's docs/s by the
first's (one call: the machine's drift affects ratios less than absolute figures).

    .venv/bin/python -m bench.scale [--workload corpus|mixed] [--count N] [--docs DIR] [--config FILE]
        [--partitions P] [--pin auto|gpu|cpu|none] [--run LABEL:daemons=N[,tp=K][,keying=K][,partitions=P]]...
        [--json FILE]

Default passes: ``n1:daemons=1`` then ``n2:daemons=2``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.partitioner import murmur2

# The single-daemon benchmark's workload, percentiles and environment: one definition of each.
from bench.lib.report import environment, percentile
from bench.lib.results import write_result
from bench.lib.workloads import SHORT_MAX_TOKENS, add_workload_arguments, workload
from daemon.config import Config, load_config
from daemon.models.files import load_tokenizer
from tests.e2e.harness import DaemonProcess, Layout, free_port, wait_for
from tests.kafka_broker import KafkaBroker, committed_offsets, create_topics, end_offsets, read_all

KEYINGS = ("id", "round-robin", "hot")
HOT_KEY = "customer-0001"
"""The one key of every long document in the ``hot`` keying (a big customer's contracts)."""


@dataclass(frozen=True)
class PassSpec:
    """One pass: how many daemons, GPUs per daemon (tensor parallelism), keying, partitions."""

    label: str
    daemons: int = 1
    tp: int = 1
    keying: str = "id"
    partitions: int = 4


@dataclass
class Daemon:
    """One daemon of a pass: its process, its name in results, where it is pinned."""

    name: str
    process: DaemonProcess
    pin: str
    started: float
    ready_s: float = 0.0
    baseline_events: int = 0
    cpu_at_start: float = 0.0
    cpu_s: float | None = None


@dataclass
class Produced:
    """One produced document: its id, key, partition and length in tokens."""

    doc_id: str
    key: str
    partition: int
    tokens: int


@dataclass
class PassRun:
    """What a pass left behind, for the report."""

    spec: PassSpec
    daemons: list[Daemon] = field(default_factory=list)
    produced: list[Produced] = field(default_factory=list)
    start_wall: float = 0.0
    results: list[dict[str, Any]] = field(default_factory=list)
    dead_letters: list[dict[str, Any]] = field(default_factory=list)
    committed: bool = False


def main() -> int:
    args = _parse_args()
    if args.merge:
        return _write(_merge(args.merge), args.json)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)  # so that finally blocks stop the daemons
    config = load_config(args.config)
    tokenizer = load_tokenizer(config.engine)
    docs = workload(args, tokenizer)
    lengths = {name: len(tokenizer.encode(text, add_special_tokens=False)) for name, text in docs}
    print(f"workload {args.workload}: {len(docs)} documents, {sum(lengths.values())} tokens", file=sys.stderr)
    specs = [_parse_run(text, args.partitions) for text in (args.run or ["n1:daemons=1", "n2:daemons=2"])]
    if args.plan_only:
        return _write({"plans": [_plan_report(spec, docs, lengths) for spec in specs]}, args.json)
    work = Path(tempfile.mkdtemp(prefix="docsumd-scale-"))
    broker = KafkaBroker(port=free_port(), data_dir=work / "broker")
    broker.up()
    reports = []
    try:
        for spec in specs:
            run = _run_pass(args, config, broker, spec, docs, lengths, work / spec.label)
            reports.append(_pass_report(run, lengths))
            print(_summary_line(reports[-1]), file=sys.stderr)
    finally:
        broker.down()
    _write(_report(args, config, docs, lengths, reports), args.json)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if all(all(r["invariants"].values()) for r in reports) else 1


def _write(result: dict[str, Any], path: Path | None) -> int:
    """Print ``result`` as JSON, and write it to ``path`` when given."""
    text = json.dumps(result, indent=2)
    print(text)
    if path is not None:
        write_result(path, result)
    return 0


def _parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_workload_arguments(parser, default_workload="mixed")
    parser.add_argument("--partitions", type=int, default=4, help="partitions of the input topic (default)")
    parser.add_argument(
        "--run",
        action="append",
        default=[],
        metavar="LABEL:daemons=N[,tp=K][,keying=id|round-robin|hot][,partitions=P]",
        help="a pass (repeatable, in order); default n1:daemons=1 then n2:daemons=2",
    )
    parser.add_argument("--pin", choices=("auto", "gpu", "cpu", "none"), default="auto")
    parser.add_argument(
        "--gpus", default=None, help="GPU indexes to hand out, e.g. 0,1 (default: all nvidia-smi lists)"
    )
    parser.add_argument("--ready-timeout", type=float, default=900.0, help="seconds for every daemon to warm")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds for every document's result")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (daemon logs, configs)")
    parser.add_argument(
        "--pgid-file",
        type=Path,
        default=None,
        help="append each daemon's process group id here (a runner's backstop: kill them if this is killed)",
    )
    parser.add_argument(
        "--plan-only",
        action="store_true",
        help="start nothing: print where each pass's keying puts the workload (per partition, and per "
        "daemon under the consumer's round-robin assignor)",
    )
    parser.add_argument(
        "--merge",
        type=Path,
        nargs="+",
        default=None,
        help="combine reports of separate calls (one pass each) into one; speedups against the first",
    )
    return parser.parse_args()


def _exit_on_sigterm(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def _parse_run(text: str, partitions: int) -> PassSpec:
    """``LABEL:daemons=N,tp=K,keying=MODE,partitions=P`` as a :class:`PassSpec`."""
    label, _, settings = text.partition(":")
    values: dict[str, Any] = {"label": label, "partitions": partitions}
    for pair in filter(None, settings.split(",")):
        key, _, value = pair.partition("=")
        if key not in ("daemons", "tp", "keying", "partitions"):
            raise SystemExit(f"--run {text}: unknown setting {key!r}")
        values[key] = value if key == "keying" else int(value)
    spec = PassSpec(**values)
    if spec.keying not in KEYINGS:
        raise SystemExit(f"--run {text}: keying must be one of {', '.join(KEYINGS)}")
    return spec


# -- one pass -------------------------------------------------------------------------------------


def _run_pass(  # noqa: PLR0917 - one call site, every argument a different kind of input
    args: argparse.Namespace,
    config: Config,
    broker: KafkaBroker,
    spec: PassSpec,
    docs: list[tuple[str, str]],
    lengths: dict[str, int],
    folder: Path,
) -> PassRun:
    """Start the daemons, wait for them and the group, produce the workload, wait for every result,
    stop the daemons (SIGTERM: they commit and stop; as static members they do not leave the group, which
    is fresh for each pass), read every result back."""
    run = PassRun(spec)
    topics = _topics(spec.label)
    asyncio.run(create_topics(broker.bootstrap, [topics["input"]], partitions=spec.partitions))
    asyncio.run(create_topics(broker.bootstrap, [topics["output"], topics["dead"]]))
    try:
        run.daemons = _start_daemons(args, config, broker, spec, topics, folder)
        _wait_warm_and_settled(run.daemons, topics["input"], spec.partitions, args.ready_timeout)
        for daemon in run.daemons:
            daemon.baseline_events = len(daemon.process.log_events())
            daemon.cpu_at_start = _group_cpu_seconds(daemon.process.pgid)
        run.produced = _plan(docs, lengths, spec.keying, spec.partitions)
        run.start_wall = time.time()
        asyncio.run(_produce(broker.bootstrap, topics["input"], run.produced, dict(docs)))
        ids = {doc.doc_id for doc in run.produced}
        asyncio.run(_wait_results(broker.bootstrap, topics, ids, run.daemons, args.timeout))
        for daemon in run.daemons:
            daemon.cpu_s = round(_group_cpu_seconds(daemon.process.pgid) - daemon.cpu_at_start, 1)
        run.committed = _wait_committed(broker.bootstrap, topics)
        _stop(run.daemons)
    finally:
        for daemon in run.daemons:
            if daemon.process.proc is not None and daemon.process.proc.poll() is None:
                daemon.process.kill_group()
    run.results = [json.loads(r.value) for r in asyncio.run(read_all(broker.bootstrap, topics["output"], 60))]
    run.dead_letters = [
        json.loads(r.value) for r in asyncio.run(read_all(broker.bootstrap, topics["dead"], 60))
    ]
    return run


def _topics(label: str) -> dict[str, str]:
    """Fresh topic names and group id for one pass."""
    tag = f"{label}-{uuid.uuid4().hex[:6]}"
    return {
        "input": f"scale-docs-{tag}",
        "output": f"scale-summaries-{tag}",
        "dead": f"scale-dead-{tag}",
        "group": f"docsumd-scale-{tag}",
    }


def _start_daemons(  # noqa: PLR0917 - one call site
    args: argparse.Namespace,
    config: Config,
    broker: KafkaBroker,
    spec: PassSpec,
    topics: dict[str, str],
    folder: Path,
) -> list[Daemon]:
    """Write each daemon's config and start it, pinned; all start at once (they warm in parallel)."""
    pins = _pins(args, spec)
    daemons = []
    for index, (env, cpus, pin) in enumerate(pins):
        root = folder / f"d{index}"
        root.mkdir(parents=True)
        name = f"{config.engine.model_name}@d{index}"
        layout = Layout(root=root, model=Path(config.engine.model), metrics_port=free_port())
        _write_config(layout, config, broker, topics, name=name, tp=spec.tp)
        started = time.monotonic()
        with _affinity(cpus):
            process = DaemonProcess(layout, root / "daemon.log").start(env)
        if args.pgid_file is not None:
            with args.pgid_file.open("a", encoding="utf-8") as pgids:
                pgids.write(f"{process.pgid}\n")
        daemons.append(Daemon(name=name, process=process, pin=pin, started=started))
    return daemons


@contextlib.contextmanager
def _affinity(cpus: set[int] | None) -> Iterator[None]:
    """This thread on ``cpus`` for the duration (a process started meanwhile inherits them, and so do
    its engine process and threads), then back where it was."""
    if cpus is None:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def _pins(args: argparse.Namespace, spec: PassSpec) -> list[tuple[dict[str, str], set[int] | None, str]]:
    """Per daemon: extra environment, CPU affinity (or None), and a description of the pinning."""
    mode = args.pin
    gpus = args.gpus.split(",") if args.gpus else _gpu_indexes()
    if mode == "auto":
        mode = "gpu" if gpus else "none"
    pins: list[tuple[dict[str, str], set[int] | None, str]] = []
    cores = sorted(os.sched_getaffinity(0))
    for index in range(spec.daemons):
        if mode == "gpu":
            mine = gpus[index * spec.tp : (index + 1) * spec.tp]
            if len(mine) < spec.tp:
                raise SystemExit(
                    f"pass {spec.label}: {spec.daemons} x {spec.tp} GPUs wanted, {len(gpus)} given"
                )
            pins.append(
                ({"CUDA_VISIBLE_DEVICES": ",".join(mine)}, None, f"CUDA_VISIBLE_DEVICES={','.join(mine)}")
            )
        elif mode == "cpu":
            core = cores[index % len(cores)]
            # vLLM's CPU backend reserves one of its allowed cores for other processes by default;
            # a daemon pinned to one core must compute on it (vLLM warns and does so anyway).
            pins.append(({"VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}, {core}, f"cpu {core}"))
        else:
            pins.append(({}, None, "shared"))
    return pins


def _gpu_indexes() -> list[str]:
    """The GPUs ``nvidia-smi -L`` lists, as indexes (none on a machine without it)."""
    if shutil.which("nvidia-smi") is None:
        return []
    listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=False).stdout
    return [str(index) for index, line in enumerate(listing.splitlines()) if line.startswith("GPU ")]


def _write_config(
    layout: Layout, config: Config, broker: KafkaBroker, topics: dict[str, str], *, name: str, tp: int
) -> None:
    """The base config with only a Kafka source on the pass's topics, this daemon's metrics port and
    name, JSON logs (the bench reads their rebalance lines), and ``tp`` GPUs of tensor parallelism."""
    data = config.model_dump(mode="json", exclude_none=True)
    data["engine"].update(served_model_name=name, tensor_parallel_size=tp)
    data["sources"] = {
        "kafka": {
            "bootstrap_servers": broker.bootstrap,
            "input_topics": [topics["input"]],
            "group_id": topics["group"],
            "output_topic": topics["output"],
            "dead_letter_topic": topics["dead"],
            "client_id": name,
            "commit_interval_seconds": 0.5,
            "lag_interval_seconds": 2.0,
        }
    }
    data["metrics"] = {"enabled": True, "host": "127.0.0.1", "port": layout.metrics_port}
    data["logging"] = {"level": "info", "format": "json"}
    layout.config.write_text("\n".join(_toml(data)) + "\n", encoding="utf-8")
    load_config(layout.config)  # fails here, not in the daemon, if the config is wrong


def _toml(data: dict[str, Any], prefix: str = "") -> list[str]:
    """``data`` (a config dump: tables of strings, numbers, booleans, lists) as TOML lines. A JSON
    string, number or boolean is also a TOML one."""
    lines = []
    scalars = {key: value for key, value in data.items() if not isinstance(value, dict)}
    if scalars:
        lines += [f"[{prefix}]"] if prefix else []
        lines += [f"{key} = {json.dumps(value)}" for key, value in scalars.items()]
        lines.append("")
    for key, value in data.items():
        if isinstance(value, dict):
            lines += _toml(value, f"{prefix}.{key}" if prefix else key)
    return lines


def _wait_warm_and_settled(daemons: list[Daemon], topic: str, partitions: int, timeout: float) -> None:
    """Every daemon ready, and the group settled: last assignments disjoint and covering the topic."""
    for daemon in daemons:
        daemon.process.wait_ready(timeout=timeout)
        daemon.ready_s = round(time.monotonic() - daemon.started, 2)
    everything = {f"{topic}-{p}" for p in range(partitions)}

    def settled() -> bool:
        last = [_assignments(daemon.process)[-1:] for daemon in daemons]
        if not all(last):
            return False
        owned = [assignment[0] for assignment in last]
        if sum(len(mine) for mine in owned) != len(everything) or set().union(*owned) != everything:
            return False
        return partitions < len(daemons) or all(owned)

    wait_for(settled, 120, "the consumer group to settle", interval=0.5)


def _group_cpu_seconds(pgid: int) -> float:
    """CPU seconds (user + system, with reaped children's) used so far by the processes of a daemon's
    process group: the daemon, its engine process, their threads."""
    ticks = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid:
            ticks += sum(int(value) for value in fields[11:15])  # utime, stime, cutime, cstime
    return ticks / os.sysconf("SC_CLK_TCK")


def _assignments(process: DaemonProcess, since: int = 0) -> list[set[str]]:
    """Every assignment the daemon logged (from event ``since`` on), in order."""
    events = process.log_events()[since:]
    return [set(e["partitions"]) for e in events if e.get("event") == "partitions assigned"]


def _revocations(process: DaemonProcess, since: int = 0) -> list[set[str]]:
    """Every revocation the daemon logged (from event ``since`` on): the partitions taken away."""
    events = process.log_events()[since:]
    return [set(e["partitions"]) for e in events if e.get("event") == "partitions revoked"]


def _plan(
    docs: list[tuple[str, str]], lengths: dict[str, int], keying: str, partitions: int
) -> list[Produced]:
    """Each document's key and partition under ``keying`` (see the module docstring)."""
    plan = []
    for index, (name, _) in enumerate(docs):
        key = HOT_KEY if keying == "hot" and lengths[name] > SHORT_MAX_TOKENS else name
        partition = index % partitions if keying == "round-robin" else _default_partition(key, partitions)
        plan.append(Produced(name, key, partition, lengths[name]))
    return plan


def _plan_report(spec: PassSpec, docs: list[tuple[str, str]], lengths: dict[str, int]) -> dict[str, Any]:
    """Where ``spec``'s keying puts the workload, without running it: per partition, and per daemon if
    partition P goes to member P mod N (aiokafka's default RoundRobinPartitionAssignor, one topic)."""
    produced = _plan(docs, lengths, spec.keying, spec.partitions)
    tokens = [0] * spec.daemons
    for doc in produced:
        tokens[doc.partition % spec.daemons] += doc.tokens
    total = sum(tokens) or 1
    return {
        "label": spec.label,
        "daemons": spec.daemons,
        "partitions": spec.partitions,
        "keying": spec.keying,
        "per_partition": _partition_loads(produced),
        "daemon_token_shares": [round(count / total, 4) for count in tokens],
    }


def _default_partition(key: str, partitions: int) -> int:
    """Kafka's default partitioner for a keyed message: murmur2 of the key, positive, mod partitions."""
    hashed: int = murmur2(key.encode())
    return (hashed & 0x7FFFFFFF) % partitions


async def _produce(bootstrap: str, topic: str, plan: list[Produced], texts: dict[str, str]) -> None:
    """Produce every document as ``{"id", "text"}`` to its planned partition, in workload order."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", max_request_size=32 << 20)
    await producer.start()
    try:
        sent = [
            await producer.send(
                topic,
                key=doc.key.encode(),
                value=json.dumps({"id": doc.doc_id, "text": texts[doc.doc_id]}).encode(),
                partition=doc.partition,
            )
            for doc in plan
        ]
        await asyncio.gather(*sent)
    finally:
        await producer.stop()


async def _wait_results(
    bootstrap: str,
    topics: dict[str, str],
    ids: set[str],
    daemons: list[Daemon],
    timeout: float,  # noqa: ASYNC109
) -> None:
    """Read the output and dead-letter topics as they grow until every id has a result or a dead
    letter; fail early if a daemon exits."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, fetch_max_bytes=64 << 20
    )
    await consumer.start()
    try:
        partitions = [
            TopicPartition(topic, p)
            for topic in (topics["output"], topics["dead"])
            for p in sorted(consumer.partitions_for_topic(topic) or ())
        ]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        seen: set[str] = set()
        deadline = time.monotonic() + timeout
        while not ids <= seen:
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out: {len(ids - seen)} of {len(ids)} documents have no result")
            for daemon in daemons:
                proc = daemon.process.proc
                if proc is not None and proc.poll() is not None:
                    raise AssertionError(
                        f"{daemon.name} exited with {proc.returncode}:\n{daemon.process.log_tail()}"
                    )
            batches = await consumer.getmany(timeout_ms=500)
            seen |= {record.key.decode() for batch in batches.values() for record in batch}
    finally:
        await consumer.stop()


def _wait_committed(bootstrap: str, topics: dict[str, str]) -> bool:
    """Whether the group committed every input partition to its end within a minute."""

    def committed() -> bool:
        ends = asyncio.run(end_offsets(bootstrap, topics["input"]))
        offsets = asyncio.run(committed_offsets(bootstrap, topics["group"], topics["input"]))
        return all(offsets.get(partition) == end for partition, end in ends.items())

    try:
        wait_for(committed, 60, "the group to commit every offset", interval=0.5)
    except AssertionError:
        return False
    return True


def _stop(daemons: list[Daemon]) -> None:
    """SIGTERM every daemon (each drains and commits) and wait for each to exit."""
    for daemon in daemons:
        daemon.process.signal(signal.SIGTERM)
    for daemon in daemons:
        code = daemon.process.wait_exit(timeout=180)
        if code != 0:
            print(f"{daemon.name} exited with {code}:\n{daemon.process.log_tail()}", file=sys.stderr)


# -- the report -----------------------------------------------------------------------------------


def _pass_report(run: PassRun, lengths: dict[str, int]) -> dict[str, Any]:
    """Throughput, latency, per-daemon and per-partition shares, duplicates, rebalances, invariants."""
    spec = run.spec
    first = _first_results(run.results)
    finished = {doc_id: _seconds(record["created_at"]) - run.start_wall for doc_id, record in first.items()}
    elapsed = max(finished.values(), default=0.0)
    ids = {doc.doc_id for doc in run.produced}
    rebalances = _rebalances(run)
    duplicates = _duplicates(run.results, rebalances["revoked_partitions"])
    daemons = _daemon_shares(run)
    prompt_tokens = sum(record["prompt_tokens"] for record in first.values())
    short = [t for doc_id, t in finished.items() if lengths[doc_id] <= SHORT_MAX_TOKENS]
    long = [t for doc_id, t in finished.items() if lengths[doc_id] > SHORT_MAX_TOKENS]
    report: dict[str, Any] = {
        "label": spec.label,
        "daemons": spec.daemons,
        "tensor_parallel_size": spec.tp,
        "partitions": spec.partitions,
        "keying": spec.keying,
        "docs": len(ids),
        "results": len(run.results),
        "dead_letters": len(run.dead_letters),
        "missing": sorted(ids - set(first) - {d["id"] for d in run.dead_letters}),
        "seconds": round(elapsed, 3),
        "docs_per_s": round(len(first) / elapsed, 3) if elapsed > 0 else None,
        "prompt_tok_per_s": round(prompt_tokens / elapsed, 1) if elapsed > 0 else None,
        "p50_latency_s": percentile(list(finished.values()), 0.50),
        "p95_latency_s": percentile(list(finished.values()), 0.95),
        "short": {
            "docs": len(short),
            "p50_latency_s": percentile(short, 0.5),
            "p95_latency_s": percentile(short, 0.95),
        },
        "long": {
            "docs": len(long),
            "p50_latency_s": percentile(long, 0.5),
            "p95_latency_s": percentile(long, 0.95),
        },
        "cpu_bound_docs_per_s": _cpu_bound_rate(len(first), daemons),
        "per_daemon": daemons,
        "per_partition": _partition_loads(run.produced),
        "imbalance": _imbalance(daemons, spec.daemons),
        "duplicates": duplicates,
        "rebalances": {key: value for key, value in rebalances.items() if key != "revoked_partitions"},
        "committed_to_end": run.committed,
    }
    report["invariants"] = _invariants(report)
    return report


def _first_results(results: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each id's earliest result (by ``created_at``)."""
    first: dict[str, dict[str, Any]] = {}
    for record in results:
        known = first.get(record["id"])
        if known is None or record["created_at"] < known["created_at"]:
            first[record["id"]] = record
    return first


def _seconds(iso: str) -> float:
    """A record's ``created_at`` (ISO 8601, ``Z``) as a Unix time."""
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def _rebalances(run: PassRun) -> dict[str, Any]:
    """Revocations and assignments the daemons logged from the first produce on."""
    revoked: set[str] = set()
    revocations = assignments = 0
    for daemon in run.daemons:
        taken = _revocations(daemon.process, daemon.baseline_events)
        revocations += len(taken)
        assignments += len(_assignments(daemon.process, daemon.baseline_events))
        revoked |= set().union(*taken) if taken else set()
    return {"revocations": revocations, "assignments": assignments, "revoked_partitions": revoked}


def _duplicates(results: list[dict[str, Any]], revoked: set[str]) -> dict[str, Any]:
    """Ids with more than one result; a duplicate is a rebalance re-publication when its partition
    was revoked from a daemon during the pass (its new owner redid what was in flight)."""
    by_id: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in results:
        by_id[record["id"]].append(record)
    extra = {doc_id: len(records) - 1 for doc_id, records in by_id.items() if len(records) > 1}
    explained = {
        doc_id
        for doc_id in extra
        if f"{by_id[doc_id][0]['metadata']['topic']}-{by_id[doc_id][0]['metadata']['partition']}" in revoked
    }
    return {
        "extra_results": sum(extra.values()),
        "ids": sorted(extra),
        "rebalance_republications": sum(extra[doc_id] for doc_id in explained),
        "unexplained": sum(count for doc_id, count in extra.items() if doc_id not in explained),
    }


def _daemon_shares(run: PassRun) -> list[dict[str, Any]]:
    """Per daemon: its pinning, partitions, documents and tokens (and their shares), last result."""
    by_daemon: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in run.results:
        by_daemon[record["model"]].append(record)
    total_docs = len(run.results) or 1
    total_prompt = sum(record["prompt_tokens"] for record in run.results) or 1
    total_document = sum(record["document_tokens"] for record in run.results) or 1
    shares = []
    for daemon in run.daemons:
        mine = by_daemon.get(daemon.name, [])
        last = max((_seconds(record["created_at"]) for record in mine), default=None)
        assigned = _assignments(daemon.process)
        prompt = sum(record["prompt_tokens"] for record in mine)
        document = sum(record["document_tokens"] for record in mine)
        shares.append(
            {
                "name": daemon.name,
                "pin": daemon.pin,
                "ready_s": daemon.ready_s,
                "partitions": sorted(assigned[-1]) if assigned else [],
                "docs": len(mine),
                "doc_share": round(len(mine) / total_docs, 4),
                "prompt_tokens": prompt,
                "token_share": round(prompt / total_prompt, 4),
                "document_tokens": document,
                "document_token_share": round(document / total_document, 4),
                "last_result_s": None if last is None else round(last - run.start_wall, 3),
                "cpu_s": daemon.cpu_s,
            }
        )
    return shares


def _cpu_bound_rate(docs: int, daemons: list[dict[str, Any]]) -> float | None:
    """Documents per second of CPU time of the busiest daemon: the pass's rate if each daemon had its
    cores to itself. On a CPU shared with other work, wall-clock rates follow that work's load; CPU time
    does much less. (Meaningless on a GPU host, where the GPU does the work.)"""
    busiest = max((d["cpu_s"] or 0.0 for d in daemons), default=0.0)
    return round(docs / busiest, 4) if busiest > 0 else None


def _partition_loads(produced: list[Produced]) -> dict[str, dict[str, int]]:
    """What was produced to each partition: documents, long documents, tokens."""
    loads: dict[str, dict[str, int]] = {}
    for doc in sorted(produced, key=lambda d: d.partition):
        load = loads.setdefault(str(doc.partition), {"docs": 0, "long_docs": 0, "tokens": 0})
        load["docs"] += 1
        load["long_docs"] += doc.tokens > SHORT_MAX_TOKENS
        load["tokens"] += doc.tokens
    return loads


def _imbalance(daemons: list[dict[str, Any]], count: int) -> dict[str, Any]:
    """The busiest daemon's token share against an even split (1.0 = even), and how far apart the
    daemons' last results came (earliest / latest: 1.0 = together; low = one idled while one worked)."""
    finishes = [d["last_result_s"] for d in daemons if d["last_result_s"] is not None]
    busiest = max((d["token_share"] for d in daemons), default=0.0)
    return {
        "max_token_share": busiest,
        "max_token_share_vs_even": round(busiest * count, 3),
        "finish_spread": round(min(finishes) / max(finishes), 3) if finishes and max(finishes) > 0 else None,
    }


def _invariants(report: dict[str, Any]) -> dict[str, bool]:
    """What must hold for any pass (the CI test asserts these too, from the raw fields)."""
    daemons = report["per_daemon"]
    return {
        "every_id_has_a_result": not report["missing"] and report["dead_letters"] == 0,
        "no_duplicates_outside_rebalances": report["duplicates"]["unexplained"] == 0,
        "every_daemon_got_partitions": report["partitions"] < len(daemons)
        or all(d["partitions"] for d in daemons),
        "every_daemon_got_documents": all(d["docs"] > 0 for d in daemons),
        "shares_sum_to_1": abs(sum(d["doc_share"] for d in daemons) - 1) < 0.01
        and abs(sum(d["token_share"] for d in daemons) - 1) < 0.01,
        "committed_to_end": report["committed_to_end"],
    }


def _summary_line(report: dict[str, Any]) -> str:
    shares = ", ".join(
        f"{d['name']} {d['doc_share']:.2f}/{d['token_share']:.2f}" for d in report["per_daemon"]
    )
    failed = [name for name, ok in report["invariants"].items() if not ok]
    verdict = "ok" if not failed else "FAILED: " + ", ".join(failed)
    return (
        f"pass {report['label']}: {report['docs_per_s']} docs/s in {report['seconds']} s "
        f"({report['cpu_bound_docs_per_s']} docs per CPU second of the busiest daemon); "
        f"docs/tokens shares: {shares}; duplicates {report['duplicates']['extra_results']} "
        f"({report['duplicates']['unexplained']} unexplained); revocations "
        f"{report['rebalances']['revocations']}; invariants {verdict}"
    )


def _speedups(reports: list[dict[str, Any]], key: str) -> dict[str, float | None]:
    """Each pass's ``key`` rate divided by the first pass's."""
    base = reports[0].get(key) if reports else None
    return {r["label"]: round(r[key] / base, 3) if base and r.get(key) else None for r in reports}


def _merge(paths: list[Path]) -> dict[str, Any]:
    """Reports of separate calls as one: the first's fields, every pass, speedups against the first pass."""
    reports = [json.loads(path.read_text(encoding="utf-8")) for path in paths]
    merged = {**reports[0], "passes": [p for report in reports for p in report["passes"]]}
    merged["speedup"] = _speedups(merged["passes"], "docs_per_s")
    merged["speedup_cpu_bound"] = _speedups(merged["passes"], "cpu_bound_docs_per_s")
    merged["merged_from"] = [str(path) for path in paths]
    return merged


def _report(
    args: argparse.Namespace,
    config: Config,
    docs: list[tuple[str, str]],
    lengths: dict[str, int],
    reports: list[dict[str, Any]],
) -> dict[str, Any]:
    return {
        "benchmark": "bench/scale.py",
        "workload": args.workload,
        "docs_dir": str(args.docs),
        "config": str(args.config),
        "docs": len(docs),
        "document_tokens": sum(lengths.values()),
        "long_docs": sum(1 for n in lengths.values() if n > SHORT_MAX_TOKENS),
        "long_token_share": round(
            sum(n for n in lengths.values() if n > SHORT_MAX_TOKENS) / max(1, sum(lengths.values())), 4
        ),
        "pin": args.pin,
        "passes": reports,
        "speedup": _speedups(reports, "docs_per_s"),
        "speedup_cpu_bound": _speedups(reports, "cpu_bound_docs_per_s"),
        "engine": {
            "model": config.engine.model_name,
            "max_model_len": config.engine.max_model_len,
            "max_num_seqs": config.engine.max_num_seqs,
            "max_num_batched_tokens": config.engine.max_num_batched_tokens,
        },
        "environment": environment(),
    }


if __name__ == "__main__":
    raise SystemExit(main())
