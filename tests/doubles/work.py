"""Work items' double: :class:`Acks`, a source's side of :class:`~daemon.work.WorkItem` (what it loads,
and the acknowledgements it is given)."""

from __future__ import annotations

from typing import Any, Literal

from daemon.records import Record
from daemon.work import WorkItem

Action = Literal["complete", "fail"]


class Acks:
    """Makes work items (source ``"test"``) and records their acknowledgements, in order, in ``calls``
    as ``(action, doc_id, record)``; :attr:`completed` and :attr:`failed` are the same by document.

    An item loads ``data`` (raises it, when an exception), the default given here or its own. With
    ``origin``, its metadata is ``{"origin": doc_id}`` (what a real source's would name), so that a
    record can be seen carrying it through; without, it has the work item's default (none).
    """

    def __init__(self, data: bytes = b"data", *, origin: bool = False) -> None:
        self.data = data
        self.origin = origin
        self.calls: list[tuple[Action, str, Record]] = []

    @property
    def completed(self) -> dict[str, Record]:
        """The result record of each completed document."""
        return {doc_id: record for action, doc_id, record in self.calls if action == "complete"}

    @property
    def failed(self) -> dict[str, Record]:
        """The failure record of each failed document."""
        return {doc_id: record for action, doc_id, record in self.calls if action == "fail"}

    def item(
        self,
        doc_id: str = "doc-1",
        data: bytes | BaseException | None = None,
        options: Any = None,
        profile: str | None = None,
    ) -> WorkItem:
        """A work item that loads ``data`` (or the default), whose own summary options are ``options``
        (raised, when an exception), chosen ``profile``, and acknowledgements recorded here."""
        loaded = self.data if data is None else data

        async def load() -> bytes:
            if isinstance(loaded, BaseException):
                raise loaded
            return loaded

        async def load_options() -> Any:
            if isinstance(options, BaseException):
                raise options
            return options

        async def complete(record: Record) -> None:
            self.calls.append(("complete", doc_id, record))

        async def fail(record: Record) -> None:
            self.calls.append(("fail", doc_id, record))

        item = WorkItem(
            id=doc_id,
            source="test",
            load=load,
            on_complete=complete,
            on_fail=fail,
            load_options=load_options,
            profile=profile,
        )
        if self.origin:
            item.metadata = {"origin": doc_id}
        return item
