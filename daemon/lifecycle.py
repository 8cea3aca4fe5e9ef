"""The lifecycle every long-lived component shares: idempotent ``start()``/``stop()``, and
``async with`` that calls them."""

from __future__ import annotations

from types import TracebackType
from typing import Self


class Lifecycle:
    """Base of long-lived components: subclasses implement ``start()`` and ``stop()``, idempotently."""

    async def start(self) -> None:
        """Acquire resources and start background work. Calling it again does nothing."""
        raise NotImplementedError

    async def stop(self) -> None:
        """Release resources and stop background work. Calling it again does nothing."""
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()
