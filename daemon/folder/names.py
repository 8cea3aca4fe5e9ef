"""Which names in the inbox are documents, and which are their options sidecars.

A name is a document unless it is

* hidden (``.NAME``): the recommended way to write an input is ``.NAME`` then a rename to ``NAME``;
  it also covers vim's swap files (``.x.swp``, ``.x.swo``), emacs' lock links (``.#x``) and
  LibreOffice's lock files (``.~lock.x#``);
* a partial or temporary file: ``*.tmp``, ``*.part``, ``*.partial``, ``*.crdownload``;
* an editor's lock, swap or backup file: ``~$x`` (Microsoft Office owner files), ``x~`` (emacs, vim,
  gedit backups), ``#x#`` (emacs auto-save), ``*.swp``, ``*.swo``, ``*.swn``, ``*.swx`` (vim),
  ``*.kate-swp`` (Kate), ``*.bak`` (backups);
* an options sidecar: ``*.options.json``.

The list is :data:`IGNORED_PREFIXES` and :data:`IGNORED_SUFFIXES` (plus ``#x#``), and docs/guides/folder.md's
"The watched folder" repeats it.
"""

from __future__ import annotations

from typing import Final

from daemon.fs.names import MAX_NAME_BYTES, byte_length

IGNORED_PREFIXES: Final = (".", "~$")
IGNORED_SUFFIXES: Final = (
    ".tmp",
    ".part",
    ".partial",
    ".crdownload",
    ".swp",
    ".swo",
    ".swn",
    ".swx",
    ".kate-swp",
    ".bak",
    "~",
)
OPTIONS_SUFFIX: Final = ".options.json"


def is_candidate_name(name: str) -> bool:
    """Whether a file name in the inbox is a document (not hidden, temporary, an editor's file or a
    sidecar)."""
    if name.startswith(IGNORED_PREFIXES) or name.endswith((*IGNORED_SUFFIXES, OPTIONS_SUFFIX)):
        return False
    return not (len(name) > 1 and name.startswith("#") and name.endswith("#"))


def is_sidecar_name(name: str) -> bool:
    """Whether ``name`` is an options sidecar's."""
    return name.endswith(OPTIONS_SUFFIX)


def sidecar_names(name: str) -> list[str]:
    """Names an options sidecar of document ``name`` may have, in order of precedence (only those
    short enough to exist: a sidecar of a 250-byte name cannot)."""
    names = [name + OPTIONS_SUFFIX]
    stem, dot, _ = name.rpartition(".")
    if dot and stem:
        names.append(stem + OPTIONS_SUFFIX)
    return [sidecar for sidecar in names if byte_length(sidecar) <= MAX_NAME_BYTES]
