"""The ``[cache]`` section and each profile's ``reuse_cached`` (daemon.config)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from daemon.config import CacheConfig, Config, EngineConfig, ProfileConfig, default_cache_path, load_config
from daemon.summary.profiles import effective_profiles
from tests.config_files import config_error, config_file

MINIMAL = '[engine]\nmodel = "m"\n'


def test_the_cache_is_on_with_the_embedded_store_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CACHE_DIRECTORY", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    cache = load_config(config_file(tmp_path, MINIMAL)).cache
    assert cache.enabled
    assert cache.backend == "sqlite"
    assert cache.path == tmp_path / "xdg" / "docsumd" / "summaries.sqlite3"
    assert cache.max_bytes == 1 << 30
    assert cache.redis is None


def test_the_default_path_follows_systemd_then_xdg_then_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CACHE_DIRECTORY", "/var/cache/docsumd:/var/cache/other")
    assert default_cache_path() == Path("/var/cache/docsumd/summaries.sqlite3")
    monkeypatch.delenv("CACHE_DIRECTORY")
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")  # the XDG spec: absolute paths only
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_cache_path() == tmp_path / ".cache" / "docsumd" / "summaries.sqlite3"


def test_a_relative_path_is_relative_to_the_config_file(tmp_path: Path) -> None:
    text = MINIMAL + '[cache]\npath = "var/cache.sqlite3"\nmax_bytes = 10485760\n'
    cache = load_config(config_file(tmp_path, text)).cache
    assert cache.path == tmp_path.resolve() / "var" / "cache.sqlite3"
    assert cache.max_bytes == 10 << 20


def test_the_redis_backend_needs_its_section(tmp_path: Path) -> None:
    message = config_error(config_file(tmp_path, MINIMAL + '[cache]\nbackend = "redis"\n'))
    assert "[cache.redis]" in message


def test_the_redis_url_is_a_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = MINIMAL + '[cache]\nbackend = "redis"\n[cache.redis]\nurl = "redis://:hunter2@cache:6379/0"\n'
    config = load_config(config_file(tmp_path, text))
    assert config.cache.redis is not None
    assert config.cache.redis.url.get_secret_value() == "redis://:hunter2@cache:6379/0"
    assert config.cache.redis.timeout_seconds == 0.25
    assert "hunter2" not in json.dumps(config.model_dump(mode="json"))
    monkeypatch.setenv("DOCSUMD_CACHE__REDIS__TIMEOUT_SECONDS", "0.1")
    monkeypatch.setenv("DOCSUMD_CACHE__ENABLED", "false")
    overridden = load_config(config_file(tmp_path, text))
    assert overridden.cache.redis is not None
    assert overridden.cache.redis.timeout_seconds == 0.1
    assert not overridden.cache.enabled


@pytest.mark.parametrize(
    ("section", "named"),
    [
        ("max_bytes = 1000", "cache.max_bytes"),
        ("timeout_seconds = 0", "cache.timeout_seconds"),
        ('backend = "memcached"', "cache.backend"),
        ("surprise = 1", "cache.surprise"),
    ],
)
def test_bad_cache_settings_are_config_errors(tmp_path: Path, section: str, named: str) -> None:
    assert named in config_error(config_file(tmp_path, MINIMAL + f"[cache]\n{section}\n"))


def test_profiles_reuse_cached_summaries_unless_they_say_not_to(tmp_path: Path) -> None:
    assert ProfileConfig().reuses_cached
    assert ProfileConfig().reuse_cached is None  # unset: not shown among a profile's own keys
    text = (
        MINIMAL
        + "[profiles.fresh]\nreuse_cached = false\n[profiles.brief]\n[profiles.kept]\nreuse_cached = true\n"
    )
    config = load_config(config_file(tmp_path, text))
    profiles = effective_profiles(config)
    assert not profiles["fresh"].reuses_cached
    assert profiles["kept"].reuses_cached
    assert profiles["brief"].reuses_cached
    assert profiles["default"].reuses_cached


def test_a_cache_section_is_its_own(tmp_path: Path) -> None:
    config = Config(engine=EngineConfig(model="m"), cache=CacheConfig(path=tmp_path / "c", enabled=False))
    assert not config.cache.enabled


@pytest.mark.parametrize("url", ["http://cache:6379", "cache:6379", ""])
def test_a_redis_url_of_another_scheme_is_a_config_error(tmp_path: Path, url: str) -> None:
    text = MINIMAL + f'[cache]\nbackend = "redis"\n[cache.redis]\nurl = "{url}"\n'
    message = config_error(config_file(tmp_path, text))
    assert "redis://" in message
    assert url not in message or not url, "the url (it may hold a password) is not echoed"


@pytest.mark.parametrize(
    ("url", "secret"),
    [("redis://:pa/ss@cache:6379/0", "pa"), ("redis://user:secret@cache:xsecretx/0", "xsecretx")],
)
def test_a_redis_url_that_cannot_be_parsed_is_a_config_error_without_its_text(
    tmp_path: Path, url: str, secret: str
) -> None:
    text = MINIMAL + f'[cache]\nbackend = "redis"\n[cache.redis]\nurl = "{url}"\n'
    message = config_error(config_file(tmp_path, text))
    assert "not a valid URL" in message
    assert secret not in message.replace("a password", "").replace("a port", "")
