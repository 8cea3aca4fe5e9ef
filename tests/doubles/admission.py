"""Admission's doubles: :class:`Request`, a client that holds a slot until the test lets it go, and
:class:`RecordingAdmission`, the real admission remembering what it was asked for."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from daemon.engine.admission import Admission, AdmissionControl, AdmissionLimits, SlotHandle

WAIT = 5.0  # bound on anything that should happen at once: a broken admission fails instead of hanging


class Request:
    """A task that waits for a slot, records its admission, and holds the slot until released.

    ``log`` is shared by the test's requests: each appends its ``name`` when admitted, so the list is
    the admission order. ``slot_kwargs`` go to :meth:`AdmissionControl.slot` (``prompt_tokens``,
    ``urgent``, ``arrived_at``); ``hold=False`` gives the slot back as soon as it is had.
    """

    def __init__(
        self,
        admission: AdmissionControl,
        name: str,
        cost: int,
        log: list[str],
        *,
        hold: bool = True,
        **slot_kwargs: Any,
    ) -> None:
        self.name = name
        self.admitted = asyncio.Event()
        self.handle: SlotHandle | None = None
        self._release = asyncio.Event()
        if not hold:
            self._release.set()
        self._log = log
        self.task = asyncio.create_task(self._run(admission, cost, slot_kwargs), name=name)

    async def _run(self, admission: AdmissionControl, cost: int, slot_kwargs: dict[str, Any]) -> None:
        async with admission.slot(cost, **slot_kwargs) as handle:
            self.handle = handle
            self._log.append(self.name)
            self.admitted.set()
            await self._release.wait()

    def prefilled(self) -> None:
        """The engine has prefilled this request's prompt."""
        assert self.handle is not None, f"{self.name} was not admitted"
        self.handle.prefill_done()

    async def release(self) -> None:
        """Let the request finish and wait until it has given its slot back."""
        self._release.set()
        await asyncio.wait_for(self.task, WAIT)


class RecordingAdmission(Admission):
    """The real admission, remembering the cost and urgency of every slot asked for, in ``asked``,
    and whether the document follows it with another request, in ``follow_ups``."""

    def __init__(self, limits: AdmissionLimits) -> None:
        super().__init__(limits)
        self.asked: list[tuple[int, bool]] = []
        self.follow_ups: list[bool] = []

    @contextlib.asynccontextmanager
    async def slot(
        self,
        cost: int,
        *,
        urgent: bool = False,
        arrived_at: float | None = None,
        prompt_tokens: int | None = None,
        follow_up: bool = False,
    ) -> AsyncIterator[SlotHandle]:
        """Record ``(cost, urgent)`` and ``follow_up``, then the real slot."""
        self.asked.append((cost, urgent))
        self.follow_ups.append(follow_up)
        async with super().slot(
            cost, urgent=urgent, arrived_at=arrived_at, prompt_tokens=prompt_tokens, follow_up=follow_up
        ) as handle:
            yield handle
