"""Admission control: which engine request goes to vLLM next, and when.

vLLM serves the requests it holds first come, first served, and every engine step carries the
decoding of every running request plus up to ``max_num_batched_tokens`` of prompt (prefill). A step
with a full prefill chunk takes tens of times longer than a step that only decodes, and a summary
needs hundreds of decoding steps (``bench/RESULTS.md``, "the mechanism, and why"). So a short
document whose decoding shares its steps with the prefill of long documents takes as long as the
long ones; one whose decoding runs in light steps is done in seconds. :class:`Admission` sits in
front of the engine and decides what vLLM holds, in five rules:

1. **Bounds.** At most ``max_requests`` requests and ``max_tokens`` tokens (prompt plus output
   budget) are in the engine; a lone request always runs.
2. **Light before heavy.** A request is *light* when its prompt is at most ``light_prompt_tokens``
   (by default an eighth of an engine step's token budget: its own prefill is a small part of one
   step, so its latency is its decoding steps); otherwise *heavy*. Waiting light requests go first;
   within each class, combine steps of documents in progress (``urgent``) first, then arrival order,
   where a request that its document follows with another (a part before its combine step,
   ``follow_up``) counts as having arrived ``stage_lead_seconds`` earlier: the last requests of a
   backlog are then ones that end their documents, not parts whose combine steps would decode
   alone after everything else, and a document in stages starts about one request's time sooner
   than its neighbours, which it needs to end with them (``bench/RESULTS.md``, "batched claims and
   the stage lead").
3. **A short prefill queue.** A request is admitted only while the prompt tokens the engine holds
   but has not prefilled yet stay within ``prefill_tokens`` (by default six engine steps),
   counting the new one; the engine reports when a request's prefill is done
   (:meth:`SlotHandle.prefill_done`). The engine always has full steps of prefill to do, but never
   a backlog of it that a light request arriving later would have to wait behind, and the order is
   decided at the last moment, when the most requests are known. While light requests in the
   engine are still prefilling, a heavy request may join a queue of only ``heavy_beside_light_tokens``
   (by default one engine step): light requests come in streams (a backlog's short documents, read
   one after another), and vLLM prefills in the order it received, so each heavy request admitted
   between two light ones delays every later light request by its prefill. At the start of a
   backlog the first light requests otherwise found the queue filled with three or four steps of
   long documents (the first ones read) before the rest of the short ones arrived
   (``bench/RESULTS.md``, "the short queue beside light requests"). Where vLLM schedules by priority
   (``[engine.extra] scheduling_policy = "priority"``, ``light_overtakes``), a heavy request that
   is not aged goes in with a lower priority (:attr:`SlotHandle.priority`), so light requests
   admitted after it still go first among what waits there, and a light request's prefill queue
   counts only light prompts: at the start of a backlog the first long documents otherwise take the
   idle engine's first steps, and fill its prefill queue, while the short ones are still being read.
4. **Light waves.** When at least ``wave_min_requests`` light requests that are not combine steps
   are in the engine, heavy requests wait until fewer are: those light requests decode in light
   steps instead of crawling beside long prefills. A wave costs throughput (its decode-only steps do
   little work next to a prefill step), which is worth paying for requests that are a whole
   document, whose latency is their decoding; a combine step ends a document that has already waited
   for the prefill of all its parts, so a wave would save it a small part of its latency at the same
   cost. Combine steps therefore join waves (and go first) but do not make one: on a CPU engine,
   where only combine steps were light, their waves cost throughput for no gain
   (``bench/RESULTS.md``, "issue 13's admission on the CPU"). Light requests join a wave while it is
   forming (one of its requests still prefilling); once all of them decode, later light requests
   wait for the next wave while heavy requests wait too (their prefill would slow every decoding
   step, and the wave that ends sooner lets the heavy work resume sooner; with no heavy request
   waiting they join whenever there is room, as in plain continuous batching). When more light
   requests wait than one wave can hold (``max_requests``), they are split into the fewest waves,
   the first ones a little fuller than an even split (``wave_max_requests`` caps a wave's size
   instead). Fewer light requests than ``wave_min_requests`` are not worth a light phase (its cost
   is the steps' fixed overhead, the same for 1 request or 200): they run beside heavy work.
5. **Aging.** A heavy request that waited ``aging_seconds`` is admitted ahead of light requests
   that arrived after it, wave or not (within the bounds and the prefill queue), so heavy documents
   never starve under a steady stream of light ones.

With ``admission.enabled = false`` it is :class:`FifoAdmission` instead: requests go straight to the
engine in arrival order (plain FIFO), which is the baseline the benchmark compares against; the
counters still work. Both are an :class:`AdmissionControl` (what the summarizer holds), and
:func:`admission_for` is the one place that picks one.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import math
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import ClassVar, Final

from daemon.config import AdmissionConfig, EngineConfig
from daemon.ops.logging import get_logger
from daemon.ops.metrics import (
    ADMISSION_WAIT,
    ADMISSION_WAITING,
    ADMISSION_WAVE_SECONDS,
    ADMISSION_WAVES,
    ENGINE_INFLIGHT_REQUESTS,
    ENGINE_INFLIGHT_TOKENS,
)

log = get_logger(__name__)

UNBOUNDED: Final = 1 << 62
"""A limit that never binds."""
_PREFILL_QUEUE_STEPS: Final = 6
"""The default prefill queue, in engine steps. A request admitted on a prefill-done event runs about
three steps after the step that freed its room (vLLM plans a step while the one before runs, and the
event reaches the daemon after its step), and a queue counts a request's whole prompt until its
prefill is done. Six steps left the engine fewer steps short of prompt tokens than four, at the
same latency and throughput (``bench/RESULTS.md``, "a six-step prefill queue")."""
_FIRST_WAVES_SHARE: Final = 1.25
"""When light requests need several waves, the earlier waves are this much larger than an even split."""


@dataclass(frozen=True, slots=True)
class AdmissionLimits:
    """The numbers :class:`Admission` works with (see the module's doc for what each one does).

    Only the bounds are required: by default no request is light and the prefill queue is unbounded,
    which leaves the bounds and arrival order (urgent first).
    """

    max_requests: int
    max_tokens: int
    light_prompt_tokens: int = 0
    prefill_tokens: int = UNBOUNDED
    heavy_beside_light_tokens: int = UNBOUNDED
    """The prefill queue a heavy request may join while light requests are still prefilling."""
    wave_min_requests: int = UNBOUNDED
    wave_max_requests: int | None = None
    aging_seconds: float = 30.0
    stage_lead_seconds: float = 0.0
    light_overtakes: bool = False
    """The engine schedules by priority, so light requests go before heavy prefill it holds."""

    def __post_init__(self) -> None:
        """Reject limits that would block everything."""
        counts = (
            self.max_requests,
            self.max_tokens,
            self.prefill_tokens,
            self.heavy_beside_light_tokens,
            self.wave_min_requests,
        )
        wave_max = 1 if self.wave_max_requests is None else self.wave_max_requests
        if min(*counts, wave_max) < 1 or min(self.light_prompt_tokens, self.stage_lead_seconds) < 0:
            raise ValueError("admission limits must be positive")


@dataclass(order=True, slots=True)
class _Waiter:
    """A request in the engine or waiting for it; ordered by its queue key."""

    key: tuple[int, float, int]
    cost: int = field(compare=False)
    prompt_tokens: int = field(compare=False)
    light: bool = field(compare=False)
    arrived_at: float = field(compare=False)
    granted: asyncio.Future[None] | None = field(default=None, compare=False)
    wave_member: bool = field(default=False, compare=False)  # light and not urgent: counts toward a wave
    gone: bool = field(default=False, compare=False)  # left the queue: granted or cancelled
    admitted: bool = field(default=False, compare=False)
    prefilled: bool = field(default=False, compare=False)
    priority: int = field(default=0, compare=False)  # inside the engine, set when admitted


class SlotHandle:
    """What :meth:`AdmissionControl.slot` yields: lets the engine say when the request's prefill is done."""

    __slots__ = ("_admission", "_waiter")

    def __init__(self, admission: AdmissionControl, waiter: _Waiter) -> None:
        self._admission = admission
        self._waiter = waiter

    def prefill_done(self) -> None:
        """The engine has prefilled the prompt (its first output came). Idempotent."""
        self._admission._prefill_done(self._waiter)

    @property
    def priority(self) -> int:
        """The request's priority inside the engine, where it schedules by priority (lower first):
        0 for a light request or an aged heavy one, 1 for another heavy one (:class:`Admission`);
        always 0 with admission off."""
        return self._waiter.priority


class AdmissionControl(ABC):
    """What stands between the summarizer and the engine: :meth:`slot` for every request, and the
    counters of what the engine holds (and their metrics). :class:`Admission` orders and bounds the
    requests; :class:`FifoAdmission` lets them through. Safe to use from many tasks of one event loop.
    """

    enabled: ClassVar[bool]
    """Whether this one orders and bounds requests (``admission.enabled``; logged at start)."""

    def __init__(self, limits: AdmissionLimits, *, clock: Callable[[], float] = time.monotonic) -> None:
        """``clock`` gives the time that ``arrived_at`` values are in (``time.monotonic`` seconds)."""
        self.limits = limits
        self._clock = clock
        self.inflight_requests = 0
        self.inflight_tokens = 0
        self.unprefilled_tokens = 0
        """Prompt tokens of admitted requests whose prefill is not done yet."""
        self.light_unprefilled_tokens = 0
        """The part of :attr:`unprefilled_tokens` that light requests hold."""
        self.light_inflight = 0
        self.light_prefilling = 0
        self.wave_members = 0
        """Light requests in the engine that are not combine steps: what makes a wave."""
        self._sequence = itertools.count()

    def resize(self, limits: AdmissionLimits) -> None:
        """Work under ``limits`` from now on (a fleet of servers grew or shrank): requests already
        admitted stay; waiting ones are admitted under the new limits."""
        self.limits = limits
        self._room_freed()

    @property
    def max_requests(self) -> int:
        """Requests in the engine at most."""
        return self.limits.max_requests

    @property
    def max_tokens(self) -> int:
        """Tokens (prompt plus output budget) in the engine at most."""
        return self.limits.max_tokens

    @property
    @abstractmethod
    def waiting(self) -> int:
        """Requests waiting for admission."""

    def is_light(self, prompt_tokens: int) -> bool:
        """Whether a prompt of this length makes a light request."""
        return prompt_tokens <= self.limits.light_prompt_tokens

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
        """Wait for admission of a request of ``cost`` tokens; hold it for the ``async with`` body.

        ``prompt_tokens`` (default: ``cost``) is the part of ``cost`` the engine prefills; tell it
        when that is done through the yielded handle. ``arrived_at`` (``time.monotonic()`` seconds)
        is when the request's document arrived; ``urgent`` marks a combine step of a document in
        progress; ``follow_up`` a request whose output the document sends to the engine again (a
        part, an intermediate combine step). Cancellation while waiting leaves the queue clean.
        """
        waited_from = self._clock()
        prompt = cost if prompt_tokens is None else min(prompt_tokens, cost)
        waiter = self._new_waiter(
            cost,
            prompt,
            urgent=urgent,
            arrived_at=waited_from if arrived_at is None else arrived_at,
            follow_up=follow_up,
        )
        await self._admit(waiter)
        ADMISSION_WAIT.observe(self._clock() - waited_from)
        try:
            yield SlotHandle(self, waiter)
        finally:
            self._release(waiter)

    def _new_waiter(
        self, cost: int, prompt: int, *, urgent: bool, arrived_at: float, follow_up: bool
    ) -> _Waiter:
        light = self.is_light(prompt)
        lead = self.limits.stage_lead_seconds if follow_up else 0.0
        return _Waiter(
            key=(0 if urgent else 1, arrived_at - lead, next(self._sequence)),
            cost=cost,
            prompt_tokens=prompt,
            light=light,
            arrived_at=arrived_at,
            wave_member=light and not urgent,
        )

    @abstractmethod
    async def _admit(self, waiter: _Waiter) -> None:
        """Return once ``waiter`` is admitted (taken in with :meth:`_take`)."""

    @abstractmethod
    def _room_freed(self) -> None:
        """A request left the engine or finished its prefill: admit what may go now."""

    @abstractmethod
    def _count_wave(self) -> None:
        """A request that counts toward a light wave (:attr:`wave_members`) came or went."""

    # -- bookkeeping -------------------------------------------------------------------------------

    def _take(self, waiter: _Waiter) -> None:
        waiter.admitted = True
        self.inflight_requests += 1
        self.inflight_tokens += waiter.cost
        self.unprefilled_tokens += waiter.prompt_tokens
        if waiter.light:
            self.light_inflight += 1
            self.light_prefilling += 1
            self.light_unprefilled_tokens += waiter.prompt_tokens
        if waiter.wave_member:
            self.wave_members += 1
            self._count_wave()
        ENGINE_INFLIGHT_REQUESTS.set(self.inflight_requests)
        ENGINE_INFLIGHT_TOKENS.set(self.inflight_tokens)

    def _prefill_done(self, waiter: _Waiter) -> None:
        if not waiter.admitted or waiter.prefilled:
            return
        self._count_prefilled(waiter)
        self._room_freed()

    def _count_prefilled(self, waiter: _Waiter) -> None:
        waiter.prefilled = True
        self.unprefilled_tokens -= waiter.prompt_tokens
        if waiter.light:
            self.light_prefilling -= 1
            self.light_unprefilled_tokens -= waiter.prompt_tokens

    def _release(self, waiter: _Waiter) -> None:
        if not waiter.prefilled:
            self._count_prefilled(waiter)
        waiter.admitted = False
        self.inflight_requests -= 1
        self.inflight_tokens -= waiter.cost
        if waiter.light:
            self.light_inflight -= 1
        if waiter.wave_member:
            self.wave_members -= 1
            self._count_wave()
        ENGINE_INFLIGHT_REQUESTS.set(self.inflight_requests)
        ENGINE_INFLIGHT_TOKENS.set(self.inflight_tokens)
        self._room_freed()


class FifoAdmission(AdmissionControl):
    """Admission off: every request goes to the engine at once, in arrival order (plain FIFO: the
    order is vLLM's). The counters and their metrics still work; no request waits, so there are no
    waves."""

    enabled = False

    @property
    def waiting(self) -> int:
        """None: every request goes in at once."""
        return 0

    async def _admit(self, waiter: _Waiter) -> None:
        self._take(waiter)

    def _room_freed(self) -> None:
        pass  # nothing waits

    def _count_wave(self) -> None:
        pass  # nothing waits for a wave, so there are none to count


class Admission(AdmissionControl):
    """Bounds and orders the requests in the engine, by the rules of the module's doc."""

    enabled = True

    def __init__(self, limits: AdmissionLimits, *, clock: Callable[[], float] = time.monotonic) -> None:
        """``clock`` gives the time that ``arrived_at`` values are in (``time.monotonic`` seconds)."""
        super().__init__(limits, clock=clock)
        self._wave_since: float | None = None
        self._light: list[_Waiter] = []
        self._heavy: list[_Waiter] = []
        self._waiting_light = 0
        self._waiting_heavy = 0
        self._aging_timer: asyncio.TimerHandle | None = None

    @property
    def waiting(self) -> int:
        """Requests waiting for admission."""
        return self._waiting_light + self._waiting_heavy

    @property
    def protecting(self) -> bool:
        """Whether a light wave is in the engine: heavy requests wait unless aged."""
        return self.wave_members >= self.limits.wave_min_requests

    async def _admit(self, waiter: _Waiter) -> None:
        """Queue ``waiter`` and wait until the rules admit it."""
        waiter.granted = asyncio.get_running_loop().create_future()
        heapq.heappush(self._light if waiter.light else self._heavy, waiter)
        self._count_waiting(waiter, +1)
        self._dispatch()
        try:
            await waiter.granted
        except asyncio.CancelledError:
            if waiter.granted.done() and not waiter.granted.cancelled():
                self._release(waiter)  # granted just as we were cancelled: give the room back
            else:
                self._forget(waiter)
                self._dispatch()  # the head may have changed
            raise

    def _count_waiting(self, waiter: _Waiter, change: int) -> None:
        if waiter.light:
            self._waiting_light += change
        else:
            self._waiting_heavy += change
        ADMISSION_WAITING.set(self.waiting)

    # -- the rules ---------------------------------------------------------------------------------

    def _fits(self, waiter: _Waiter) -> bool:
        """Rule 1: the bounds (a request larger than the token budget still runs, alone)."""
        if self.inflight_requests == 0:
            return True
        return (
            self.inflight_requests < self.limits.max_requests
            and self.inflight_tokens + waiter.cost <= self.limits.max_tokens
        )

    def _prefill_room(self, waiter: _Waiter) -> bool:
        """Rule 3: the engine's prefill queue stays short (an empty one takes any request); a light
        request that the engine prefills before heavy ones (``light_overtakes``) queues behind light
        prompts only."""
        queued = (
            self.light_unprefilled_tokens
            if waiter.light and self.limits.light_overtakes
            else self.unprefilled_tokens
        )
        limit = self.limits.prefill_tokens
        if not waiter.light and self.light_prefilling > 0:
            limit = min(limit, self.limits.heavy_beside_light_tokens)
        return queued == 0 or queued + waiter.prompt_tokens <= limit

    def wave_target(self) -> int:
        """Rule 4: how many light requests the current wave may hold."""
        if self.limits.wave_max_requests is not None:
            return self.limits.wave_max_requests
        wanted = self.light_inflight + self._waiting_light
        cap = self.limits.max_requests
        if wanted <= cap:
            return wanted
        # The fewest waves, the earlier ones a little fuller than an even split: with equal waves the
        # median light request would finish between the first wave and the second.
        waves = math.ceil(wanted / cap)
        return min(cap, math.ceil(wanted * _FIRST_WAVES_SHARE / waves))

    def _light_may_join(self) -> bool:
        """Rule 4: a light request joins the wave while it forms, up to the wave's size; with no heavy
        request waiting there is no wave to finish first, and it joins whenever there is room."""
        forming = not self.protecting or self.light_prefilling > 0 or self._waiting_heavy == 0
        return forming and self.light_inflight < self.wave_target()

    def _aged(self, waiter: _Waiter) -> bool:
        return self._clock() - waiter.arrived_at >= self.limits.aging_seconds

    def _next(self) -> _Waiter | None:
        """The request to admit now, if any (the heads of the two queues are already clean)."""
        light = self._light[0] if self._light else None
        heavy = self._heavy[0] if self._heavy else None
        if heavy is not None and self._aged(heavy) and (light is None or heavy.key < light.key):
            # Rule 5, an aged heavy request ahead of the light ones: it waits for room, never overtaken.
            return heavy if self._fits(heavy) and self._prefill_room(heavy) else None
        if light is not None:
            # Rule 2: a light request that cannot go now holds the heavy ones back too (a wave is
            # decoding, or the bounds are full and a heavy request would not fit either).
            return (
                light if self._fits(light) and self._prefill_room(light) and self._light_may_join() else None
            )
        if heavy is None or self.protecting:
            return None  # rule 4: heavy prefill waits for the light wave to finish decoding
        return heavy if self._fits(heavy) and self._prefill_room(heavy) else None

    def _forget(self, waiter: _Waiter) -> None:
        """Stop counting ``waiter`` as waiting (it stays in its heap, marked gone, until it surfaces)."""
        if not waiter.gone:
            waiter.gone = True
            self._count_waiting(waiter, -1)

    def _dispatch(self) -> None:
        while True:
            for queue in (self._light, self._heavy):
                # A waiter whose task was cancelled has a cancelled future at once, but runs its own
                # clean-up only when its task next gets the loop. A release in between (another task's
                # slot ending, e.g. while a drain cancels documents) must skip it, not grant it:
                # setting a result on a cancelled future raises InvalidStateError in the releasing task.
                while queue and (queue[0].gone or (queue[0].granted is not None and queue[0].granted.done())):
                    self._forget(heapq.heappop(queue))
            chosen = self._next()
            if chosen is None:
                self._arm_aging_timer()
                return
            heapq.heappop(self._light if chosen.light else self._heavy)
            self._forget(chosen)
            # Inside a vLLM that schedules by priority, light requests admitted later still go
            # before heavy prefill already queued there (which admission let in while no light
            # request waited); an aged heavy request keeps its place.
            chosen.priority = 0 if chosen.light or self._aged(chosen) else 1
            self._take(chosen)
            assert chosen.granted is not None
            chosen.granted.set_result(None)

    def _arm_aging_timer(self) -> None:
        """Wake the queue when the oldest waiting heavy request ages, should nothing else happen."""
        if self._aging_timer is not None:
            self._aging_timer.cancel()
            self._aging_timer = None
        if not self._heavy:
            return
        delay = self._heavy[0].arrived_at + self.limits.aging_seconds - self._clock()
        if delay > 0:
            loop = asyncio.get_running_loop()
            self._aging_timer = loop.call_later(delay, self._dispatch)

    def _room_freed(self) -> None:
        self._dispatch()

    def _count_wave(self) -> None:
        """Count waves and their seconds (they cost throughput: operators and the benchmark see both)."""
        if self.protecting and self._wave_since is None:
            self._wave_since = self._clock()
            ADMISSION_WAVES.inc()
        elif not self.protecting and self._wave_since is not None:
            ADMISSION_WAVE_SECONDS.inc(max(0.0, self._clock() - self._wave_since))
            self._wave_since = None


def admission_for(
    settings: AdmissionConfig, limits: AdmissionLimits, *, clock: Callable[[], float] = time.monotonic
) -> AdmissionControl:
    """The admission ``settings`` ask for, under ``limits``: the one place that reads ``enabled``
    (off: :class:`FifoAdmission`, the benchmark's baseline)."""
    if settings.enabled:
        return Admission(limits, clock=clock)
    return FifoAdmission(limits, clock=clock)


def admission_limits(
    settings: AdmissionConfig, engine: EngineConfig, *, kv_cache_tokens: int | None, engines: int = 1
) -> AdmissionLimits:
    """The configured limits, with every unset one derived from the engine's own settings.

    ``engines``: how many engines of these settings serve the requests (the servers of the remote
    mode): the per-engine defaults below (requests, prefill queues, waves) are that many times larger;
    ``kv_cache_tokens`` is then theirs together.

    * tokens: what the KV cache holds (``kv_cache_tokens``, known once the engine runs; beyond that
      requests would only queue inside vLLM, in its order instead of ours), at least
      ``max_model_len``;
    * requests: vLLM's batch size (``max_num_seqs``), so a light wave can fill it;
    * light prompts: an eighth of an engine step (``max_num_batched_tokens``);
    * prefill queue: :data:`_PREFILL_QUEUE_STEPS` engine steps, so vLLM always has a full step of
      prefill ready; one step for a heavy request while light ones are prefilling;
    * waves: a quarter of ``max_num_seqs`` light requests at least;
    * light requests overtake heavy prefill where the engine schedules by priority.
    """
    step = engine.max_num_batched_tokens
    engines = max(1, engines)
    max_tokens = settings.max_inflight_tokens or max(
        kv_cache_tokens or 32 * step * engines, engine.max_model_len
    )
    return AdmissionLimits(
        max_requests=settings.max_inflight_requests or engine.max_num_seqs * engines,
        max_tokens=max_tokens,
        light_prompt_tokens=settings.light_prompt_tokens
        if settings.light_prompt_tokens is not None
        else step // 8,
        prefill_tokens=settings.prefill_queue_tokens or _PREFILL_QUEUE_STEPS * step * engines,
        heavy_beside_light_tokens=step * engines
        if settings.heavy_queue_beside_light_tokens is None
        else settings.heavy_queue_beside_light_tokens or UNBOUNDED,
        wave_min_requests=settings.wave_min_requests or max(1, engine.max_num_seqs * engines // 4),
        wave_max_requests=settings.wave_max_requests,
        aging_seconds=settings.aging_seconds,
        stage_lead_seconds=settings.stage_lead_seconds,
        light_overtakes=engine.schedules_by_priority,
    )


def admission_for_engine(
    settings: AdmissionConfig, engine: EngineConfig, *, kv_cache_tokens: int | None, engines: int = 1
) -> AdmissionControl:
    """Admission with the configured limits, or limits derived from the running engine (or
    ``engines`` of them: :func:`admission_limits`)."""
    limits = admission_limits(settings, engine, kv_cache_tokens=kv_cache_tokens, engines=engines)
    admission = admission_for(settings, limits)
    log.info(
        "admission",
        enabled=admission.enabled,
        max_inflight_requests=limits.max_requests,
        max_inflight_tokens=limits.max_tokens,
        kv_cache_tokens=kv_cache_tokens,
        light_prompt_tokens=limits.light_prompt_tokens,
        prefill_queue_tokens=limits.prefill_tokens,
        heavy_queue_beside_light_tokens=min(limits.heavy_beside_light_tokens, limits.prefill_tokens),
        wave_min_requests=limits.wave_min_requests,
        wave_max_requests=limits.wave_max_requests,
        aging_s=limits.aging_seconds,
        stage_lead_s=limits.stage_lead_seconds,
        light_overtakes=limits.light_overtakes,
        engines=engines,
    )
    return admission
