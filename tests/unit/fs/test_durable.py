"""Unit tests for daemon.fs.durable: result files take the process umask, like any other new file."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from daemon.fs.durable import write_atomic


@pytest.fixture
def umask() -> Iterator[None]:
    """Restore the test process's umask whatever a test sets."""
    old = os.umask(0o022)
    os.umask(old)
    try:
        yield
    finally:
        os.umask(old)


@pytest.mark.parametrize(
    ("mask", "mode"),
    [
        (0o027, 0o640),  # the systemd unit's UMask: owner and the reader group
        (0o022, 0o644),  # a common shell default
        (0o077, 0o600),  # owner only
        (0o007, 0o660),
    ],
)
@pytest.mark.usefixtures("umask")
def test_write_atomic_honours_the_umask(tmp_path: Path, mask: int, mode: int) -> None:
    os.umask(mask)
    path = tmp_path / "doc.txt.summary.json"
    write_atomic(path, b"{}\n")
    assert stat.S_IMODE(path.stat().st_mode) == mode
    write_atomic(path, b"{}\n")  # a replaced result too
    assert stat.S_IMODE(path.stat().st_mode) == mode
    assert os.listdir(tmp_path) == [path.name]


def test_write_atomic_never_follows_a_planted_temp_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The temporary file is created exclusively: a name already taken (even a link) is skipped."""
    names = iter(["aaaaaaaaaaaa", "bbbbbbbbbbbb"])
    monkeypatch.setattr("daemon.fs.durable.secrets.token_hex", lambda _n: next(names))
    target = tmp_path / "elsewhere"
    (tmp_path / ".r.json.aaaaaaaaaaaa.tmp").symlink_to(target)
    write_atomic(tmp_path / "r.json", b"data")
    assert (tmp_path / "r.json").read_bytes() == b"data"
    assert not target.exists()
