"""Unit tests for daemon.config (load_config, validation, env overrides, relative paths, renamed keys)
and ``docsumd check-config``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from structlog.typing import EventDict

from daemon.cli import log_renamed_keys, main
from daemon.config import Config, load_config
from daemon.document.types import ExtractLimits
from daemon.errors import ConfigError
from daemon.kafka.client import client_options
from daemon.service import extract_limits
from daemon.summary.budget import part_summary_tokens
from tests.config_files import config_error, config_file

EXAMPLE_CONFIG = Path(__file__).resolve().parents[2] / "docsumd.toml"

MINIMAL = """
[engine]
model = "some-org/some-model"
"""


@pytest.fixture
def example_config(tmp_path: Path) -> Path:
    """The shipped example config, copied into its own folder."""
    folder = tmp_path / "etc"
    folder.mkdir()
    return Path(shutil.copy(EXAMPLE_CONFIG, folder / "docsumd.toml"))


# -- the example file ------------------------------------------------------------------------------


def test_example_config_loads_with_its_values(example_config: Path) -> None:
    config = load_config(example_config)
    assert config.engine.max_model_len == 4096
    assert config.engine.max_num_seqs == 64
    assert config.engine.kv_cache_memory_bytes == 1073741824
    assert config.engine.enforce_eager is True
    assert config.summary.max_summary_tokens == 256
    assert config.metrics.port == 9400
    assert config.inflight_documents == 128  # 2 x max_num_seqs when not set


def test_relative_folders_resolve_against_the_config_files_folder(
    example_config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # a working directory other than the config's folder
    folder = load_config(example_config).sources.folder
    assert folder is not None
    base = example_config.parent.resolve()
    assert folder.inbox == base / "var" / "inbox"
    assert folder.outbox == base / "var" / "outbox"
    assert folder.done == base / "var" / "done"
    assert folder.failed == base / "var" / "failed"


def test_relative_model_path_starting_with_dot_is_made_absolute(tmp_path: Path) -> None:
    config = load_config(config_file(tmp_path, '[engine]\nmodel = "./models/tiny"\n'))
    assert config.engine.model == str(tmp_path.resolve() / "models" / "tiny")


def test_model_id_is_kept_as_it_is(tmp_path: Path) -> None:
    config = load_config(config_file(tmp_path, '[engine]\nmodel = "Qwen/Qwen2.5-7B-Instruct"\n'))
    assert config.engine.model == "Qwen/Qwen2.5-7B-Instruct"
    assert config.engine.model_name == "Qwen2.5-7B-Instruct"


def test_absolute_folders_are_kept(tmp_path: Path) -> None:
    inbox, outbox, done, failed = (str(tmp_path / name) for name in ("in", "out", "done", "failed"))
    folder = load_config(
        config_file(tmp_path, MINIMAL + _folders(inbox, outbox, done, failed))
    ).sources.folder
    assert folder is not None
    assert (str(folder.inbox), str(folder.outbox)) == (inbox, outbox)


def test_every_path_key_resolves_against_the_config_files_folder(tmp_path: Path) -> None:
    (tmp_path / "memo.txt").write_text("Write a memo.")
    text = (
        MINIMAL
        + '[profiles.memo]\ninstruction_file = "memo.txt"\n'
        + KAFKA
        + 'ssl_cafile = "tls/ca.pem"\nssl_certfile = "/etc/docsumd/cert.pem"\n'
        + _folders("in", "out")
        + 'work = "work"\n'
    )
    config = load_config(config_file(tmp_path, text))
    base = tmp_path.resolve()
    kafka, folder = config.sources.kafka, config.sources.folder
    assert kafka is not None
    assert folder is not None
    assert kafka.ssl_cafile == base / "tls" / "ca.pem"
    assert kafka.ssl_certfile == Path("/etc/docsumd/cert.pem")  # absolute: kept
    assert kafka.ssl_keyfile is None
    assert folder.work == base / "work"
    assert config.profiles["memo"].instruction_file == base / "memo.txt"


def test_path_keys_are_found_from_the_types_of_the_sections(tmp_path: Path) -> None:
    # A Path key added to a section is resolved without being listed anywhere.
    from pydantic import BaseModel

    from daemon.config import _resolve_typed_paths

    class Inner(BaseModel):
        cert: Path | None = None
        name: str = ""

    class Outer(BaseModel):
        key: Path
        inner: Inner | None = None
        tables: dict[str, Inner] = {}

    raw = {
        "key": "k.pem",
        "inner": {"cert": "c.pem", "name": "n.pem"},
        "tables": {"a": {"cert": "/abs.pem"}, "b": "not a table"},
    }
    _resolve_typed_paths(Outer, raw, tmp_path)
    assert raw == {
        "key": str(tmp_path / "k.pem"),
        "inner": {"cert": str(tmp_path / "c.pem"), "name": "n.pem"},
        "tables": {"a": {"cert": "/abs.pem"}, "b": "not a table"},
    }


# -- environment overrides -------------------------------------------------------------------------


def test_environment_override_wins_over_the_file(
    example_config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCSUMD_ENGINE__MAX_MODEL_LEN", "8192")
    config = load_config(example_config)
    assert config.engine.max_model_len == 8192
    assert config.engine.max_num_seqs == 64  # the rest of the file's [engine] section is kept


def test_invalid_environment_override_is_a_config_error(
    example_config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCSUMD_ENGINE__MAX_MODEL_LEN", "lots")
    message = config_error(example_config)
    assert "engine.max_model_len" in message
    assert "DOCSUMD_" in message  # the message tells how overrides are spelled


# -- renamed keys ----------------------------------------------------------------------------------

RENAMED = {"admission.window_seconds": "admission.aging_seconds"}


def test_a_renamed_key_is_accepted_under_its_old_name_from_the_file(tmp_path: Path) -> None:
    config = load_config(config_file(tmp_path, MINIMAL + "[admission]\nwindow_seconds = 5\n"))
    assert config.admission.aging_seconds == 5
    assert config.renamed_keys == RENAMED
    assert "window_seconds" not in config.model_dump()["admission"]
    assert load_config(config_file(tmp_path, MINIMAL)).renamed_keys == {}


def test_a_renamed_key_is_accepted_under_its_old_name_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCSUMD_ADMISSION__WINDOW_SECONDS", "7")
    config = load_config(config_file(tmp_path, MINIMAL))
    assert config.admission.aging_seconds == 7
    assert config.renamed_keys == RENAMED


def test_a_renamed_key_set_under_both_names_is_a_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    both = MINIMAL + "[admission]\nwindow_seconds = 5\naging_seconds = 6\n"
    message = config_error(config_file(tmp_path, both))
    assert "admission.window_seconds and admission.aging_seconds are both set" in message
    monkeypatch.setenv("DOCSUMD_ADMISSION__WINDOW_SECONDS", "7")
    new_in_file = config_file(tmp_path, MINIMAL + "[admission]\naging_seconds = 6\n")
    assert "are both set" in config_error(new_in_file)


def test_a_renamed_key_is_warned_of_once_at_start(tmp_path: Path, logs: list[EventDict]) -> None:
    config = load_config(config_file(tmp_path, MINIMAL + "[admission]\nwindow_seconds = 5\n"))
    log_renamed_keys(config)
    assert [(log["log_level"], log["key"], log["new_key"]) for log in logs] == [
        ("warning", "admission.window_seconds", "admission.aging_seconds")
    ]
    # Copies of the config (as summarize makes) keep what it was given.
    assert config.model_copy(update={"metrics": config.metrics}).renamed_keys == RENAMED


def test_check_config_warns_of_a_renamed_key_on_stderr(
    tmp_path: Path, tiny_model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = f'[engine]\nmodel = "{tiny_model}"\n[admission]\nwindow_seconds = 5\n'
    path = config_file(tmp_path, text)
    assert main(["check-config", str(path)]) == 0
    captured = capsys.readouterr()
    assert (
        "docsumd: warning: admission.window_seconds is deprecated: it is now admission.aging_seconds\n"
        in captured.err
    )
    assert json.loads(captured.out)["admission"]["aging_seconds"] == 5


def test_a_second_rename_is_one_entry_of_the_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import daemon.config

    table = {**daemon.config.RENAMED_KEYS, "service.drain_timeout": "service.drain_seconds"}
    monkeypatch.setattr(daemon.config, "RENAMED_KEYS", table)
    text = MINIMAL + "[admission]\nwindow_seconds = 5\n[service]\ndrain_timeout = 9\n"
    config = load_config(config_file(tmp_path, text))
    assert (config.admission.aging_seconds, config.service.drain_seconds) == (5, 9)
    assert config.renamed_keys == {**RENAMED, "service.drain_timeout": "service.drain_seconds"}


# -- invalid files ---------------------------------------------------------------------------------


def test_unknown_key_is_named_in_the_error(tmp_path: Path) -> None:
    message = config_error(config_file(tmp_path, MINIMAL + "max_modle_len = 8192\n"))
    assert "engine.max_modle_len" in message
    assert "Extra inputs are not permitted" in message


def test_unknown_section_is_named_in_the_error(tmp_path: Path) -> None:
    message = config_error(config_file(tmp_path, MINIMAL + "[sumary]\nmax_summary_tokens = 10\n"))
    assert "sumary" in message


def test_wrong_type_is_a_config_error(tmp_path: Path) -> None:
    message = config_error(config_file(tmp_path, MINIMAL + 'max_model_len = "big"\n'))
    assert "engine.max_model_len" in message
    assert "integer" in message


def test_out_of_range_value_is_a_config_error(tmp_path: Path) -> None:
    message = config_error(config_file(tmp_path, MINIMAL + "max_model_len = 16\n"))
    assert "engine.max_model_len" in message


@pytest.mark.parametrize(
    ("line", "key"),
    [
        ("max_expansion_ratio = 0.5", "extract.max_expansion_ratio"),
        ("expansion_floor_bytes = -1", "extract.expansion_floor_bytes"),
    ],
)
def test_an_expansion_limit_out_of_range_is_a_config_error(tmp_path: Path, line: str, key: str) -> None:
    assert key in config_error(config_file(tmp_path, MINIMAL + f"[extract]\n{line}\n"))


def test_the_extraction_limits_of_a_config_are_its_extract_and_input_limits(tmp_path: Path) -> None:
    # One set of defaults: the config's are the extractors'.
    defaults = load_config(config_file(tmp_path, MINIMAL))
    assert extract_limits(defaults.limits, defaults.extract) == ExtractLimits()
    extract = "[extract]\nmax_expansion_ratio = 7.5\nexpansion_floor_bytes = 0\n"
    text = MINIMAL + extract + "[limits]\nmax_input_bytes = 1000\n"
    config = load_config(config_file(tmp_path, text))
    limits = extract_limits(config.limits, config.extract)
    assert (limits.max_expansion_ratio, limits.expansion_floor_bytes, limits.max_text_bytes) == (7.5, 0, 1000)


def test_sources_of_wrong_type_is_a_config_error(tmp_path: Path) -> None:
    path = config_file(tmp_path, 'sources = "x"\n' + MINIMAL)
    message = config_error(path)
    assert "sources" in message


def test_missing_engine_section_is_a_config_error(tmp_path: Path) -> None:
    message = config_error(config_file(tmp_path, "[summary]\nmax_summary_tokens = 10\n"))
    assert "engine" in message
    assert "Field required" in message


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "nope.toml"
    assert config_error(path) == f"{path}: no such config file"


def test_invalid_toml_is_a_config_error(tmp_path: Path) -> None:
    path = config_file(tmp_path, "[engine\nmodel = 'x'\n")
    message = config_error(path)
    assert message.startswith(f"{path}: not valid TOML")


def test_non_utf8_file_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "latin1.toml"
    path.write_bytes(b'[engine]\nmodel = "caf\xe9"\n')
    assert config_error(path).startswith(f"{path}: cannot read")


def test_summary_tokens_too_large_for_the_context(tmp_path: Path) -> None:
    text = MINIMAL + "max_model_len = 1024\n[summary]\nmax_summary_tokens = 513\n"
    message = config_error(config_file(tmp_path, text))
    assert "max_summary_tokens (513)" in message
    assert "max_model_len (1024)" in message


def test_summary_tokens_at_half_of_the_context_is_allowed(tmp_path: Path) -> None:
    text = MINIMAL + "max_model_len = 1024\n[summary]\nmax_summary_tokens = 512\n"
    config = load_config(config_file(tmp_path, text))
    assert config.summary.max_summary_tokens == 512
    assert part_summary_tokens(config.summary, 1024) == 170  # parts default to a sixth of the context here


def test_part_summary_tokens_must_leave_room_for_several_parts(tmp_path: Path) -> None:
    text = MINIMAL + "max_model_len = 1024\n[summary]\npart_summary_tokens = 171\n"
    message = config_error(config_file(tmp_path, text))
    assert "part_summary_tokens (171)" in message


def test_admission_section_is_optional_and_typed(tmp_path: Path) -> None:
    config = load_config(config_file(tmp_path, MINIMAL))
    assert config.admission.enabled is True
    assert config.admission.max_inflight_tokens is None
    text = MINIMAL + "[admission]\nenabled = false\naging_seconds = 5\n"
    assert load_config(config_file(tmp_path, text)).admission.aging_seconds == 5
    message = config_error(config_file(tmp_path, MINIMAL + "[admission]\nmax_inflight_tokens = 10\n"))
    assert "admission.max_inflight_tokens" in message


def test_batched_tokens_must_cover_context_without_chunked_prefill(tmp_path: Path) -> None:
    text = MINIMAL + "max_model_len = 8192\nmax_num_batched_tokens = 4096\nenable_chunked_prefill = false\n"
    assert "max_num_batched_tokens must be >= max_model_len" in config_error(config_file(tmp_path, text))


def _folders(inbox: str, outbox: str, done: str = "done", failed: str = "failed") -> str:
    return f'[sources.folder]\ninbox = "{inbox}"\noutbox = "{outbox}"\ndone = "{done}"\nfailed = "{failed}"\n'


def test_inbox_equal_to_outbox_is_a_config_error(tmp_path: Path) -> None:
    message = config_error(config_file(tmp_path, MINIMAL + _folders("box", "box")))
    assert "four different folders" in message


def test_same_folder_spelled_differently_is_a_config_error(tmp_path: Path) -> None:
    message = config_error(config_file(tmp_path, MINIMAL + _folders("box", "./other/../box")))
    assert "four different folders" in message


def test_outbox_inside_inbox_is_a_config_error(tmp_path: Path) -> None:
    message = config_error(config_file(tmp_path, MINIMAL + _folders("in", "in/out")))
    assert "must not lie inside the inbox" in message


def test_require_source_without_folder_section_raises(tmp_path: Path) -> None:
    config = load_config(config_file(tmp_path, MINIMAL))
    assert config.sources.folder is None
    with pytest.raises(ConfigError, match=r"\[sources\.folder\]"):
        config.require_source()


def test_require_source_with_folder_section_passes(example_config: Path) -> None:
    config: Config = load_config(example_config)
    config.require_source()
    assert config.sources.folder is not None


# -- docsumd check-config --------------------------------------------------------------------------


def test_check_config_prints_effective_config_as_json(
    example_config: Path,
    tiny_model: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("DOCSUMD_ENGINE__MAX_MODEL_LEN", "8192")
    monkeypatch.setenv("DOCSUMD_ENGINE__MODEL", str(tiny_model))  # check-config loads its tokenizer
    assert main(["check-config", str(example_config)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["engine"]["max_model_len"] == 8192
    assert printed["summary"]["max_summary_tokens"] == 256
    assert printed["sources"]["folder"]["inbox"] == str(example_config.parent.resolve() / "var" / "inbox")


def test_check_config_on_invalid_file_exits_2_with_message_on_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = config_file(tmp_path, MINIMAL + "max_modle_len = 1\n")
    assert main(["check-config", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"docsumd: {path}: invalid configuration")
    assert "engine.max_modle_len" in captured.err


def test_check_config_on_missing_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "missing.toml"
    assert main(["check-config", str(path)]) == 2
    assert capsys.readouterr().err == f"docsumd: {path}: no such config file\n"


BAD_BUDGET = """
[engine]
model = "{model}"
max_model_len = 256
kv_cache_memory_bytes = 67108864

[summary]
max_summary_tokens = 128
part_summary_tokens = 32

[metrics]
enabled = false

[sources.folder]
inbox = "in"
outbox = "out"
done = "done"
failed = "failed"
"""


def test_check_config_refuses_a_budget_that_cannot_work(
    tmp_path: Path, tiny_model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = config_file(tmp_path, BAD_BUDGET.format(model=tiny_model))
    assert main(["check-config", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "summary.part_summary_tokens" in captured.err
    assert "engine.max_model_len" in captured.err


def test_run_refuses_a_budget_that_cannot_work_before_the_engine_starts(
    tmp_path: Path, tiny_model: Path
) -> None:
    # A subprocess: `run` configures the process's logging and environment, as a real start does.
    path = config_file(tmp_path, BAD_BUDGET.format(model=tiny_model))
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "daemon", "run", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        check=False,
    )
    elapsed = time.monotonic() - started
    assert proc.returncode == 2, proc.stderr
    assert "summary.part_summary_tokens" in proc.stderr
    assert "engine starting" not in proc.stderr  # refused before the engine was built
    assert elapsed < 60, elapsed  # imports and the tokenizer, never an engine start


def test_check_config_reports_the_budget_with_the_tokenizer(
    tmp_path: Path, tiny_model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = config_file(
        tmp_path,
        BAD_BUDGET.format(model=tiny_model).replace("max_model_len = 256", "max_model_len = 2048"),
    )
    assert main(["check-config", str(path)]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["engine"]["max_model_len"] == 2048
    assert "context budget: context_tokens 2048" in captured.err


# -- [sources.kafka] -------------------------------------------------------------------------------

KAFKA = """
[sources.kafka]
bootstrap_servers = "127.0.0.1:9092"
input_topics = ["docs"]
group_id = "docsumd"
output_topic = "summaries"
dead_letter_topic = "docs-dlq"
"""


def test_kafka_section_alone_is_a_source(tmp_path: Path) -> None:
    config = load_config(config_file(tmp_path, MINIMAL + KAFKA))
    config.require_source()
    kafka = config.sources.kafka
    assert kafka is not None
    assert config.sources.folder is None
    assert (kafka.input_topics, kafka.group_id, kafka.max_buffered_messages) == (["docs"], "docsumd", 32)
    assert client_options(kafka)["bootstrap_servers"] == "127.0.0.1:9092"


def test_kafka_and_folder_together(tmp_path: Path) -> None:
    config = load_config(config_file(tmp_path, MINIMAL + KAFKA + _folders("in", "out", "done", "failed")))
    assert config.sources.kafka is not None
    assert config.sources.folder is not None


def test_kafka_output_topic_may_not_be_an_input(tmp_path: Path) -> None:
    text = MINIMAL + KAFKA.replace('output_topic = "summaries"', 'output_topic = "docs"')
    assert "loop" in config_error(config_file(tmp_path, text))


def test_kafka_compression_type_is_one_of_kafkas_codecs(tmp_path: Path) -> None:
    kafka = load_config(config_file(tmp_path, MINIMAL + KAFKA + 'compression_type = "zstd"\n')).sources.kafka
    assert kafka is not None
    assert kafka.compression_type == "zstd"
    assert "compression_type" in config_error(
        config_file(tmp_path, MINIMAL + KAFKA + 'compression_type = "br"\n')
    )


def test_kafka_sasl_password_is_not_shown(tmp_path: Path) -> None:
    text = (
        MINIMAL
        + KAFKA
        + (
            'security_protocol = "SASL_PLAINTEXT"\nsasl_mechanism = "PLAIN"\n'
            'sasl_plain_username = "u"\nsasl_plain_password = "hunter2"\n'
        )
    )
    config = load_config(config_file(tmp_path, text))
    assert "hunter2" not in config.model_dump_json()
    kafka = config.sources.kafka
    assert kafka is not None
    assert client_options(kafka)["sasl_plain_password"] == "hunter2"


def test_kafka_ssl_gives_aiokafka_a_tls_context(tmp_path: Path) -> None:
    import ssl

    ssl_config = load_config(config_file(tmp_path, MINIMAL + KAFKA + 'security_protocol = "SSL"\n'))
    plain_config = load_config(config_file(tmp_path, MINIMAL + KAFKA))
    assert ssl_config.sources.kafka is not None
    assert plain_config.sources.kafka is not None
    assert isinstance(client_options(ssl_config.sources.kafka)["ssl_context"], ssl.SSLContext)
    assert "ssl_context" not in client_options(plain_config.sources.kafka)


def test_kafka_sasl_without_mechanism_is_a_config_error(tmp_path: Path) -> None:
    text = MINIMAL + KAFKA + 'security_protocol = "SASL_SSL"\n'
    assert "sasl_mechanism" in config_error(config_file(tmp_path, text))


# -- files that are not plain files, huge files, deep nesting, non-finite numbers -------------------

REPO = Path(__file__).resolve().parents[2]


def _check_config(path: Path) -> subprocess.CompletedProcess[str]:
    """``docsumd check-config path`` in a child with 4 GiB of address space, killed after 60 s: a
    config that blocks the start or is read without bound fails the test instead of hanging it."""

    def limit() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))

    env = {k: v for k, v in os.environ.items() if not k.startswith("DOCSUMD_")}
    return subprocess.run(
        [sys.executable, "-m", "daemon", "check-config", str(path)],
        check=False,
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=limit,
    )


def test_a_config_file_that_is_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "docsumd.toml"
    os.mkfifo(fifo)
    result = _check_config(fifo)
    assert result.returncode == 2, result.stderr
    assert f"{fifo}: cannot read the config file: a FIFO (named pipe), not a regular file" in result.stderr


def test_a_config_link_to_a_device_is_refused_without_reading_it(tmp_path: Path) -> None:
    link = tmp_path / "docsumd.toml"
    link.symlink_to("/dev/zero")
    result = _check_config(link)
    assert result.returncode == 2, result.stderr
    assert "a character device, not a regular file" in result.stderr


def test_a_config_file_over_the_size_limit_is_refused(tmp_path: Path) -> None:
    from daemon.config import MAX_CONFIG_BYTES

    path = config_file(tmp_path, MINIMAL + "#" * MAX_CONFIG_BYTES + "\n")
    assert "larger than the limit of 1048576" in config_error(path)


def test_a_config_link_to_a_regular_file_is_read(tmp_path: Path) -> None:
    target = config_file(tmp_path, MINIMAL)
    link = tmp_path / "link.toml"
    link.symlink_to(target)
    assert load_config(link).engine.model == "some-org/some-model"


@pytest.mark.parametrize("kind", ["fifo", "device", "huge", "folder"])
def test_an_instruction_file_that_is_not_a_small_regular_file_is_refused(tmp_path: Path, kind: str) -> None:
    from daemon.summary.profiles import MAX_INSTRUCTION_FILE_BYTES

    target = tmp_path / "memo.txt"
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "device":
        target.symlink_to("/dev/zero")
    elif kind == "folder":
        target.mkdir()
    else:
        target.write_text("x" * (MAX_INSTRUCTION_FILE_BYTES + 1), encoding="utf-8")
    path = config_file(tmp_path, MINIMAL + '[profiles.memo]\ninstruction_file = "memo.txt"\n')
    result = _check_config(path)
    assert result.returncode == 2, result.stderr
    assert "profiles.memo.instruction_file" in result.stderr
    assert "cannot read instruction file" in result.stderr


def test_deep_toml_nesting_is_a_config_error_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    depth = 100_000
    path = config_file(tmp_path, MINIMAL + "a = " + "[" * depth + "]" * depth + "\n")
    assert main(["check-config", str(path)]) == 2
    assert "nested too deeply" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("section", "line", "key"),
    [
        ("[sources.folder]", "settle_seconds = inf", "sources.folder.settle_seconds"),
        ("[sources.folder]", "io_timeout_seconds = inf", "sources.folder.io_timeout_seconds"),
        ("[sources.folder]", "rescan_seconds = nan", "sources.folder.rescan_seconds"),
        ("[service]", "drain_seconds = inf", "service.drain_seconds"),
        ("[service]", "stall_seconds = nan", "service.stall_seconds"),
        ("[service]", "status_interval_seconds = inf", "service.status_interval_seconds"),
        ("[admission]", "aging_seconds = inf", "admission.aging_seconds"),
        ("[summary]", "temperature = inf", "summary.temperature"),
        ("[summary]", "repetition_penalty = nan", "summary.repetition_penalty"),
        ("[engine]", "gpu_memory_utilization = nan", "engine.gpu_memory_utilization"),
    ],
)
def test_non_finite_and_endless_numbers_are_config_errors(
    tmp_path: Path, section: str, line: str, key: str
) -> None:
    if section == "[sources.folder]":  # the last section of _folders
        text = MINIMAL + _folders("in", "out") + line + "\n"
    elif section == "[engine]":  # the section of MINIMAL
        text = MINIMAL + line + "\n"
    else:
        text = MINIMAL + _folders("in", "out") + f"{section}\n{line}\n"
    assert key in config_error(config_file(tmp_path, text))


@pytest.mark.parametrize("value", ["inf", "nan", "-inf", "Infinity"])
def test_non_finite_environment_overrides_are_config_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("DOCSUMD_SOURCES__FOLDER__SETTLE_SECONDS", value)
    monkeypatch.setenv("DOCSUMD_SERVICE__DRAIN_SECONDS", value)
    message = config_error(config_file(tmp_path, MINIMAL + _folders("in", "out")))
    assert "sources.folder.settle_seconds" in message
    assert "service.drain_seconds" in message


def test_finite_durations_still_load(tmp_path: Path) -> None:
    text = MINIMAL + _folders("in", "out") + "settle_seconds = 0.0\nio_timeout_seconds = 86400\n"
    folder = load_config(config_file(tmp_path, text)).sources.folder
    assert folder is not None
    assert folder.settle_seconds == 0.0
    assert folder.io_timeout_seconds == 86400
