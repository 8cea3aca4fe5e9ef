"""A fixed list of files as a source, for ``docsumd summarize``: the same pipeline as the service.

Results and failure records go to one folder; the input files are left where they are.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from pathlib import Path

from daemon.folder.sink import FolderSink
from daemon.fs.safe_read import read_input_file
from daemon.ops.metrics import observe_source
from daemon.records import Record
from daemon.work import WorkItem

SOURCE_NAME = "files"


class FilesSource:
    """Yields one work item per file, then ends."""

    def __init__(
        self, paths: Sequence[Path], sink: FolderSink, *, max_input_bytes: int, profile: str | None = None
    ) -> None:
        """``profile``: the profile of every file (``summarize --profile``); None: ``summary.profile``."""
        self.paths = list(paths)
        self.sink = sink
        self.max_input_bytes = max_input_bytes
        self.profile = profile
        self._next = 0

    @property
    def backlog(self) -> int:
        """Files not yet handed out."""
        return len(self.paths) - self._next

    async def start(self) -> None:
        """Create the output folder."""
        await self.sink.start()
        observe_source(SOURCE_NAME)

    async def stop(self) -> None:
        """Nothing to release."""

    async def items(self) -> AsyncIterator[WorkItem]:
        """One item per file; ids are file names, made unique if two files share a name."""
        taken = {path.name for path in self.paths}
        issued: set[str] = set()
        while self._next < len(self.paths):
            path = self.paths[self._next]
            self._next += 1
            name, count = path.name, 1
            while name in issued or (count > 1 and name in taken):
                count += 1
                name = f"{path.name}~{count}"
            issued.add(name)
            yield WorkItem(
                id=name,
                source=SOURCE_NAME,
                load=lambda path=path: read_input_file(path, self.max_input_bytes),  # type: ignore[misc]
                on_complete=lambda record, name=name: self._complete(name, record),  # type: ignore[misc]
                on_fail=lambda record, name=name: self._fail(name, record),  # type: ignore[misc]
                metadata={"path": str(path)},
                profile=self.profile,
                format_hint=path.name,
            )

    async def _complete(self, name: str, record: Record) -> None:
        await self.sink.write_result(name, record)

    async def _fail(self, name: str, record: Record) -> None:
        await self.sink.write_failure(name, record)
