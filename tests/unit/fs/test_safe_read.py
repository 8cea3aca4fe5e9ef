"""Unit tests for daemon.fs.safe_read and the name-safe durable operations of daemon.fs.durable.

Reading: regular files only, no link followed, no FIFO waited on (every FIFO test runs under a short
timeout, so a regression fails instead of hanging). Writing: temporary names within 255 bytes, the
umask honoured, renames that never replace.
"""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from daemon.errors import DocumentError
from daemon.fs.durable import rename_noreplace, write_atomic
from daemon.fs.safe_read import NotRegularFileError, read_bounded, read_regular_file

NO_HANG = 5.0


def test_reads_a_regular_file(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_bytes(b"text\n")
    assert read_regular_file(tmp_path / "a.txt", 100) == b"text\n"


def test_reads_at_most_one_byte_past_the_limit(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_bytes(b"x" * 1000)
    assert read_bounded(tmp_path / "a.txt", 10) == b"x" * 11


def test_refuses_a_symlink_without_reading_its_target(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"outside the inbox\n")
    (tmp_path / "link.txt").symlink_to(secret)
    with pytest.raises(DocumentError) as caught:
        read_regular_file(tmp_path / "link.txt", 100)
    assert caught.value.reason == "not_regular"
    assert "symbolic link" in caught.value.message
    assert "outside" not in caught.value.message


async def test_refuses_a_fifo_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe.txt")
    with pytest.raises(DocumentError) as caught:
        await asyncio.wait_for(asyncio.to_thread(read_regular_file, tmp_path / "pipe.txt", 100), NO_HANG)
    assert caught.value.reason == "not_regular"
    assert "FIFO" in caught.value.message


def test_refuses_a_folder(tmp_path: Path) -> None:
    (tmp_path / "dir.txt").mkdir()
    with pytest.raises(NotRegularFileError, match="a folder"):
        read_bounded(tmp_path / "dir.txt", 100)


def test_an_entry_swapped_for_a_link_after_the_check_is_refused_by_the_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"outside\n")
    path = tmp_path / "doc.txt"
    path.write_bytes(b"inside\n")
    real_stat = os.stat

    def lstat_then_swap(target: os.PathLike[str] | str, **options: Any) -> os.stat_result:
        result = real_stat(target, **options)
        if Path(target) == path:  # the swap lands right after the check
            path.unlink()
            path.symlink_to(secret)
        return result

    monkeypatch.setattr(os, "stat", lstat_then_swap)
    with pytest.raises(NotRegularFileError, match="symbolic link"):
        read_bounded(path, 100)


def test_a_too_large_file_is_refused_from_its_size(tmp_path: Path) -> None:
    (tmp_path / "big.txt").write_bytes(b"x" * 101)
    with pytest.raises(DocumentError) as caught:
        read_regular_file(tmp_path / "big.txt", 100)
    assert caught.value.reason == "too_large"


def test_an_unreadable_file_is_unreadable(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root reads files whatever their mode")
    path = tmp_path / "locked.txt"
    path.write_bytes(b"x")
    path.chmod(0)
    with pytest.raises(DocumentError) as caught:
        read_regular_file(path, 100)
    assert caught.value.reason == "unreadable"


# -- durable writes and renames --------------------------------------------------------------------


def test_write_atomic_to_a_255_byte_name(tmp_path: Path) -> None:
    path = tmp_path / ("é" * 127 + "x")  # 255 bytes: the temporary name must still fit
    write_atomic(path, b"{}\n")
    assert path.read_bytes() == b"{}\n"
    assert os.listdir(tmp_path) == [path.name]


def test_write_atomic_honours_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o027)
    try:
        write_atomic(tmp_path / "r.json", b"{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "r.json").stat().st_mode) == 0o640


def test_rename_noreplace_never_replaces(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"a")
    (tmp_path / "b").write_bytes(b"b")
    with pytest.raises(FileExistsError):
        rename_noreplace(tmp_path / "a", tmp_path / "b")
    assert (tmp_path / "a").read_bytes() == b"a"
    assert (tmp_path / "b").read_bytes() == b"b"
    rename_noreplace(tmp_path / "a", tmp_path / "c")
    assert sorted(os.listdir(tmp_path)) == ["b", "c"]


def test_rename_noreplace_without_renameat2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from daemon.fs import durable

    monkeypatch.setattr(durable, "_renameat2", None)
    (tmp_path / "a").write_bytes(b"a")
    (tmp_path / "b").symlink_to(tmp_path / "nowhere")  # a dangling link still takes the name
    with pytest.raises(FileExistsError):
        rename_noreplace(tmp_path / "a", tmp_path / "b")
    rename_noreplace(tmp_path / "a", tmp_path / "c")
    assert (tmp_path / "c").read_bytes() == b"a"


def test_rename_noreplace_reports_a_missing_source(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        rename_noreplace(tmp_path / "gone", tmp_path / "x")
