"""``[engine] mode = "remote"`` and ``[engine.remote]`` (daemon/config.py): what is refused with exit 2
before anything starts, where the API key comes from, and what check-config says of a remote config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import SecretStr

from daemon.cli import load_checked_config, main
from daemon.config import EngineConfig, RemoteEngineConfig
from daemon.engine.remote.engine import RemoteEngine
from daemon.errors import ConfigError
from tests.config_files import config_error, config_file

REMOTE = """
[engine]
mode = "remote"
model = "org/some-model"
{engine}
[engine.remote]
endpoints = {endpoints}
{remote}
"""


def _remote(
    tmp_path: Path,
    endpoints: str = '["http://gpu-1:8000", "https://gpu-2/v"]',
    engine: str = "",
    remote: str = "",
    model: Path | None = None,
) -> Path:
    """A remote-mode config; ``model``: a local model folder (check-config loads its tokenizer)."""
    text = REMOTE.format(engine=engine, endpoints=endpoints, remote=remote)
    if model is not None:
        text = text.replace('"org/some-model"', json.dumps(str(model)))
    return config_file(tmp_path, text)


def test_a_remote_config_loads_with_its_defaults(tmp_path: Path) -> None:
    config = load_checked_config(_remote(tmp_path))
    remote = config.engine.remote
    assert remote is not None
    assert remote.endpoints == ["http://gpu-1:8000", "https://gpu-2/v"]
    assert (remote.verify_tls, remote.max_lost_tries, remote.load_factor) == (True, 3, 1.25)
    assert config.engine.schedules_by_priority is False


@pytest.mark.parametrize(
    ("endpoints", "named"),
    [
        ('["ftp://host"]', "not an http:// or https:// URL"),
        ('["http://user:secret@host:8000"]', "credentials do not belong in the URL"),
        ('["http://host:8000/?x=1"]', "no query or fragment"),
        ('["http://host:8000", "http://HOST:8000/"]', "is listed twice"),
        ('["http://host:99999"]', "out of range"),
        ("[]", "at least 1 item"),
    ],
)
def test_a_bad_endpoint_is_refused_naming_it(tmp_path: Path, endpoints: str, named: str) -> None:
    assert named in config_error(_remote(tmp_path, endpoints=endpoints))


def test_the_mode_and_the_table_go_together(tmp_path: Path) -> None:
    without = config_file(tmp_path, '[engine]\nmode = "remote"\nmodel = "m"\n')
    assert 'engine.mode = "remote" needs an [engine.remote] table' in config_error(without)
    local = config_file(tmp_path, '[engine]\nmodel = "m"\n[engine.remote]\nendpoints = ["http://h:1"]\n')
    assert 'engine.mode is "local"' in config_error(local)


def test_the_api_key_comes_from_the_environment_or_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCSUMD_ENGINE__REMOTE__API_KEY", "from-env")
    config = load_checked_config(_remote(tmp_path))
    assert config.engine.remote is not None
    assert config.engine.remote.api_key is not None
    assert RemoteEngine(config.engine)._auth_headers() == {"Authorization": "Bearer from-env"}
    monkeypatch.delenv("DOCSUMD_ENGINE__REMOTE__API_KEY")
    (tmp_path / "vllm.key").write_text("from-file\n")
    config = load_checked_config(_remote(tmp_path, remote='api_key_file = "vllm.key"'))
    assert config.engine.remote is not None
    assert config.engine.remote.api_key_file == tmp_path / "vllm.key"  # relative to the config file
    assert RemoteEngine(config.engine)._auth_headers() == {"Authorization": "Bearer from-file"}
    both = _remote(tmp_path, remote='api_key = "x"\napi_key_file = "vllm.key"')
    assert "set api_key or api_key_file, not both" in config_error(both)


def test_an_unreadable_or_unprintable_key_is_a_config_error(tmp_path: Path) -> None:
    missing = EngineConfig(
        mode="remote",
        model="m",
        remote=RemoteEngineConfig(endpoints=["http://h:1"], api_key_file=tmp_path / "nope"),
    )
    with pytest.raises(ConfigError, match="cannot read the API key"):
        RemoteEngine(missing)._auth_headers()
    newline = EngineConfig(
        mode="remote",
        model="m",
        remote=RemoteEngineConfig(endpoints=["http://h:1"], api_key=SecretStr("a\nb")),
    )
    with pytest.raises(ConfigError, match="not printable ASCII"):
        RemoteEngine(newline)._auth_headers()


def test_a_client_certificate_needs_its_key(tmp_path: Path) -> None:
    assert "client_cert_file and client_key_file go together" in config_error(
        _remote(tmp_path, remote='client_cert_file = "c.pem"')
    )


def test_check_config_describes_the_remote_engine_and_its_unused_keys(
    tmp_path: Path, tiny_model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Local-engine keys (and an [engine.extra] argument no vLLM has) are not checked against vLLM in
    # remote mode: the servers have their own settings. They are noted.
    path = _remote(
        tmp_path,
        engine="kv_cache_memory_bytes = 1073741824\n[engine.extra]\nno_such_arg = 1\n",
        model=tiny_model,
    )
    assert main(["check-config", str(path)]) == 0
    err = capsys.readouterr()
    assert "remote engine: http://gpu-1:8000, https://gpu-2/v (checked when the daemon starts)" in err.err
    assert "note: engine.kv_cache_memory_bytes is for the local engine" in err.err
    assert "note: engine.extra is for the local engine" in err.err
    assert json.loads(err.out)["engine"]["remote"]["endpoints"] == ["http://gpu-1:8000", "https://gpu-2/v"]


def test_the_api_key_is_not_shown_by_check_config(
    tmp_path: Path, tiny_model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check-config", str(_remote(tmp_path, remote='api_key = "s3cret"', model=tiny_model))]) == 0
    out = capsys.readouterr().out
    assert "s3cret" not in out
    assert json.loads(out)["engine"]["remote"]["api_key"] == "**********"


def test_priority_is_sent_only_to_servers_said_to_schedule_by_it(tmp_path: Path) -> None:
    config = load_checked_config(_remote(tmp_path, remote="schedules_by_priority = true"))
    assert config.engine.schedules_by_priority is True
