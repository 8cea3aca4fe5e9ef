"""daemon.engine.admission.Admission: bounds, order, prefill queue, light waves, aging, cancellation.

No engine: requests are plain tasks holding ``Admission.slot`` until the test releases them
(:class:`tests.doubles.admission.Request`), and the test says when a request's prefill is done.
Everything is driven by events and ``asyncio.sleep(0)`` steps, never by wall-clock timing; arrival
times are passed explicitly and the clock is the test's own (:class:`tests.doubles.clock.FakeClock`),
so the order does not depend on how fast the machine is.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from prometheus_client import REGISTRY

from daemon.config import AdmissionConfig, EngineConfig
from daemon.engine.admission import (
    Admission,
    AdmissionControl,
    AdmissionLimits,
    FifoAdmission,
    admission_for,
    admission_for_engine,
    admission_limits,
)
from tests.doubles.admission import WAIT, Request
from tests.doubles.clock import FakeClock

LIGHT = 100  # prompt tokens of a light request (light_prompt_tokens below)
HEAVY = 1000
AGING = 10.0


def make_limits(*, max_requests: int = 100, max_tokens: int = 1_000_000, **limits: Any) -> AdmissionLimits:
    """Light prompts up to LIGHT tokens; no prefill queue bound and no waves unless a test sets them."""
    settings: dict[str, Any] = {"light_prompt_tokens": LIGHT, "aging_seconds": AGING} | limits
    return AdmissionLimits(max_requests=max_requests, max_tokens=max_tokens, **settings)


def make_admission(*, clock: FakeClock | None = None, **limits: Any) -> Admission:
    """Admission on, with :func:`make_limits`."""
    return Admission(make_limits(**limits), clock=clock or FakeClock())


def make_fifo(**limits: Any) -> FifoAdmission:
    """Admission off (the FIFO pass-through), with :func:`make_limits`."""
    return FifoAdmission(make_limits(**limits), clock=FakeClock())


async def settle(steps: int = 20) -> None:
    """Let every runnable task run until it blocks (a few event-loop turns)."""
    for _ in range(steps):
        await asyncio.sleep(0)


def light(admission: AdmissionControl, name: str, log: list[str], **kwargs: Any) -> Request:
    return Request(admission, name, LIGHT + 50, log, prompt_tokens=LIGHT, **kwargs)


def heavy(admission: AdmissionControl, name: str, log: list[str], **kwargs: Any) -> Request:
    return Request(admission, name, HEAVY + 50, log, prompt_tokens=HEAVY, **kwargs)


async def run_in_order(admission: Admission, requests: list[tuple[str, int, dict[str, Any]]]) -> list[str]:
    """Queue ``requests`` behind a blocker (one request at a time), then free the engine; admission order."""
    assert admission.max_requests == 1
    log: list[str] = []
    blocker = Request(admission, "blocker", 1, log)
    await settle()
    waiting = [Request(admission, name, cost, log, hold=False, **kwargs) for name, cost, kwargs in requests]
    await settle()
    assert admission.waiting == len(requests)
    assert log == ["blocker"]
    await blocker.release()
    await asyncio.wait_for(asyncio.gather(*(request.task for request in waiting)), WAIT)
    assert_empty(admission)
    return log[1:]


def assert_empty(admission: AdmissionControl) -> None:
    counters = (
        admission.waiting,
        admission.inflight_requests,
        admission.inflight_tokens,
        admission.unprefilled_tokens,
        admission.light_inflight,
        admission.light_prefilling,
        admission.wave_members,
        admission.light_unprefilled_tokens,
    )
    assert counters == (0, 0, 0, 0, 0, 0, 0, 0)


# -- bounds ----------------------------------------------------------------------------------------


async def test_request_count_is_bounded() -> None:
    admission = make_admission(max_requests=2)
    log: list[str] = []
    first, second, third = (Request(admission, name, 10, log) for name in ("a", "b", "c"))
    await settle()
    assert log == ["a", "b"]
    assert (admission.inflight_requests, admission.inflight_tokens, admission.waiting) == (2, 20, 1)
    await first.release()
    await asyncio.wait_for(third.admitted.wait(), WAIT)
    assert log == ["a", "b", "c"]
    assert (admission.inflight_requests, admission.waiting) == (2, 0)
    await second.release()
    await third.release()
    assert_empty(admission)


async def test_tokens_are_bounded_and_the_budget_can_be_filled_exactly() -> None:
    admission = make_admission(max_tokens=1000)
    log: list[str] = []
    first = Request(admission, "a", 600, log)
    second = Request(admission, "b", 400, log)  # 600 + 400 == 1000: fits exactly
    third = Request(admission, "c", 1, log)
    await settle()
    assert log == ["a", "b"]
    assert (admission.inflight_requests, admission.inflight_tokens, admission.waiting) == (2, 1000, 1)
    await second.release()
    await asyncio.wait_for(third.admitted.wait(), WAIT)
    assert admission.inflight_tokens == 601
    await first.release()
    await third.release()
    assert_empty(admission)


async def test_request_larger_than_the_token_budget_runs_alone() -> None:
    admission = make_admission(max_tokens=1000)
    log: list[str] = []
    huge = Request(admission, "huge", 5000, log)
    await settle()
    assert log == ["huge"]  # nothing else in flight: admitted although over max_tokens
    assert admission.inflight_tokens == 5000
    small = Request(admission, "small", 1, log)
    await settle()
    assert log == ["huge"]  # but nothing joins it while it runs
    assert admission.waiting == 1
    await huge.release()
    await asyncio.wait_for(small.admitted.wait(), WAIT)
    await small.release()
    assert_empty(admission)


async def test_a_fleet_that_grows_admits_the_waiting_requests() -> None:
    """The remote mode resizes admission as servers come and go (one server's bounds per server)."""
    admission = make_admission(max_requests=1)
    log: list[str] = []
    first, second = Request(admission, "a", 10, log), Request(admission, "b", 10, log)
    await settle()
    assert log == ["a"]
    admission.resize(make_limits(max_requests=2))  # a second server came up
    await asyncio.wait_for(second.admitted.wait(), WAIT)
    admission.resize(make_limits(max_requests=1))  # it went down: what runs stays admitted
    assert (admission.inflight_requests, log) == (2, ["a", "b"])
    third = Request(admission, "c", 10, log)
    await first.release()
    await settle()
    assert log == ["a", "b"]  # one server's bound again: c waits for b
    await second.release()
    await asyncio.wait_for(third.admitted.wait(), WAIT)
    await third.release()
    assert_empty(admission)


def test_a_fleets_limits_are_one_servers_times_its_servers() -> None:
    engine = EngineConfig(model="m", max_model_len=4096, max_num_seqs=16, max_num_batched_tokens=4096)
    one = admission_limits(AdmissionConfig(), engine, kv_cache_tokens=1_000_000)
    two = admission_limits(AdmissionConfig(), engine, kv_cache_tokens=2_000_000, engines=2)
    assert two.max_requests == 2 * one.max_requests
    assert two.prefill_tokens == 2 * one.prefill_tokens
    assert two.heavy_beside_light_tokens == 2 * one.heavy_beside_light_tokens
    assert two.wave_min_requests == 2 * one.wave_min_requests
    assert two.light_prompt_tokens == one.light_prompt_tokens  # what makes a request light is per request
    assert two.max_tokens == 2_000_000


def test_limits_must_be_positive() -> None:
    for kwargs in (
        {"max_requests": 0},
        {"max_tokens": 0},
        {"prefill_tokens": 0},
        {"heavy_beside_light_tokens": 0},
        {"wave_min_requests": 0},
        {"wave_max_requests": 0},
        {"light_prompt_tokens": -1},
    ):
        settings: dict[str, Any] = {"max_requests": 1, "max_tokens": 1} | kwargs
        with pytest.raises(ValueError, match="positive"):
            AdmissionLimits(**settings)


def test_limits_are_derived_from_the_engine() -> None:
    engine = EngineConfig(model="m", max_model_len=16384, max_num_seqs=256, max_num_batched_tokens=16384)
    limits = admission_limits(AdmissionConfig(), engine, kv_cache_tokens=1_900_000)
    assert limits == AdmissionLimits(
        max_requests=256,
        max_tokens=1_900_000,
        light_prompt_tokens=2048,
        prefill_tokens=98304,
        heavy_beside_light_tokens=16384,
        wave_min_requests=64,
        wave_max_requests=None,
        aging_seconds=30.0,
        stage_lead_seconds=10.0,
        light_overtakes=False,
    )
    configured = AdmissionConfig(
        max_inflight_requests=8,
        max_inflight_tokens=4096,
        light_prompt_tokens=0,
        prefill_queue_tokens=1000,
        heavy_queue_beside_light_tokens=500,
        wave_min_requests=3,
        wave_max_requests=5,
        aging_seconds=2.0,
        stage_lead_seconds=0.0,
    )
    by_priority = engine.model_copy(update={"extra": {"scheduling_policy": "priority"}})
    assert admission_limits(configured, by_priority, kv_cache_tokens=None) == AdmissionLimits(
        max_requests=8,
        max_tokens=4096,
        light_prompt_tokens=0,
        prefill_tokens=1000,
        heavy_beside_light_tokens=500,
        wave_min_requests=3,
        wave_max_requests=5,
        aging_seconds=2.0,
        stage_lead_seconds=0.0,
        light_overtakes=True,
    )
    unknown_cache = admission_limits(AdmissionConfig(), engine, kv_cache_tokens=None)
    assert unknown_cache.max_tokens == 32 * 16384
    no_short_queue = AdmissionConfig(heavy_queue_beside_light_tokens=0)
    assert admission_limits(no_short_queue, engine, kv_cache_tokens=None).heavy_beside_light_tokens > 98304


def test_the_config_picks_ordered_admission_or_fifo_once() -> None:
    on = admission_for(AdmissionConfig(), make_limits())
    off = admission_for(AdmissionConfig(enabled=False), make_limits())
    assert isinstance(on, Admission)
    assert on.enabled
    assert isinstance(off, FifoAdmission)
    assert not off.enabled
    engine = EngineConfig(model="m", max_model_len=4096, max_num_seqs=8, max_num_batched_tokens=4096)
    built = admission_for_engine(AdmissionConfig(enabled=False), engine, kv_cache_tokens=None)
    assert isinstance(built, FifoAdmission)


# -- order -----------------------------------------------------------------------------------------


async def test_light_requests_overtake_heavy_ones_that_arrived_earlier() -> None:
    order = await run_in_order(
        make_admission(max_requests=1),
        [
            ("heavy", HEAVY, {"arrived_at": 100.0}),
            ("light-late", LIGHT, {"arrived_at": 105.0}),
            ("light", LIGHT, {"arrived_at": 101.0}),
        ],
    )
    assert order == ["light", "light-late", "heavy"]


async def test_heavy_requests_go_in_arrival_order_whatever_their_size() -> None:
    order = await run_in_order(
        make_admission(max_requests=1),
        [
            ("huge", 20 * HEAVY, {"arrived_at": 1.0}),
            ("medium", 2 * LIGHT, {"arrived_at": 2.0}),
            ("big", 5 * HEAVY, {"arrived_at": 3.0}),
        ],
    )
    assert order == ["huge", "medium", "big"]


async def test_urgent_requests_go_first_within_their_class() -> None:
    order = await run_in_order(
        make_admission(max_requests=1),
        [
            ("early-heavy", HEAVY, {"arrived_at": 0.0}),
            ("late-heavy-urgent", HEAVY, {"arrived_at": 500.0, "urgent": True}),
            ("early-light", LIGHT, {"arrived_at": 0.0}),
            ("late-light-urgent", LIGHT, {"arrived_at": 400.0, "urgent": True}),
        ],
    )
    assert order == ["late-light-urgent", "early-light", "late-heavy-urgent", "early-heavy"]


async def test_a_part_followed_by_a_combine_step_leads_by_the_stage_lead() -> None:
    # A part counts as having arrived stage_lead_seconds earlier: it overtakes a heavy request that
    # ends its document and arrived less than that before it, not one that arrived longer before.
    requests: list[tuple[str, int, dict[str, Any]]] = [
        ("single-early", HEAVY, {"arrived_at": 10.0}),
        ("single", HEAVY, {"arrived_at": 16.0}),
        ("part", HEAVY, {"arrived_at": 20.0, "follow_up": True}),
        ("light", LIGHT, {"arrived_at": 30.0}),
    ]
    led = await run_in_order(make_admission(max_requests=1, stage_lead_seconds=5.0), requests)
    assert led == ["light", "single-early", "part", "single"]
    plain = await run_in_order(make_admission(max_requests=1), requests)
    assert plain == ["light", "single-early", "single", "part"]


def test_the_stage_lead_cannot_be_negative() -> None:
    with pytest.raises(ValueError, match="positive"):
        AdmissionLimits(max_requests=1, max_tokens=1, stage_lead_seconds=-1.0)


async def test_equal_keys_are_served_in_submission_order() -> None:
    names = [f"r{number}" for number in range(6)]
    order = await run_in_order(
        make_admission(max_requests=1), [(name, 200, {"arrived_at": 50.0}) for name in names]
    )
    assert order == names


async def test_heavy_request_that_aged_goes_before_later_light_ones() -> None:
    clock = FakeClock()
    admission = make_admission(max_requests=1, clock=clock)
    log: list[str] = []
    blocker = Request(admission, "blocker", 1, log)
    await settle()
    old = heavy(admission, "old-heavy", log, arrived_at=0.0, hold=False)
    early = light(admission, "early-light", log, arrived_at=-1.0, hold=False)  # arrived before it
    late = light(admission, "late-light", log, arrived_at=5.0, hold=False)
    await settle()
    clock.now = AGING  # the heavy request has waited its AGING seconds
    await blocker.release()
    await asyncio.wait_for(asyncio.gather(old.task, early.task, late.task), WAIT)
    assert log == ["blocker", "early-light", "old-heavy", "late-light"]
    assert_empty(admission)


async def test_head_of_line_waits_for_room_and_is_not_overtaken_by_a_smaller_request() -> None:
    admission = make_admission(max_tokens=1000, light_prompt_tokens=0)
    log: list[str] = []
    running = Request(admission, "running", 600, log)
    await settle()
    big = Request(admission, "big", 600, log, arrived_at=0.0)  # head of the queue; 600 + 600 > 1000
    await settle()
    small = Request(admission, "small", 100, log, arrived_at=50.0)  # would fit (700), but is behind big
    await settle()
    assert log == ["running"]
    assert (admission.waiting, admission.inflight_requests, admission.inflight_tokens) == (2, 1, 600)
    await running.release()
    await asyncio.wait_for(small.admitted.wait(), WAIT)
    assert log == ["running", "big", "small"]
    assert admission.inflight_tokens == 700
    await big.release()
    await small.release()
    assert_empty(admission)


# -- the prefill queue -----------------------------------------------------------------------------


async def test_heavy_requests_wait_for_the_engine_to_prefill_what_it_holds() -> None:
    admission = make_admission(prefill_tokens=2 * HEAVY)
    log: list[str] = []
    first, second, third = (heavy(admission, name, log, arrived_at=float(n)) for n, name in enumerate("abc"))
    await settle()
    assert log == ["a", "b"]  # two prompts fill the prefill queue; the third waits
    assert (admission.unprefilled_tokens, admission.waiting) == (2 * HEAVY, 1)
    first.prefilled()
    await asyncio.wait_for(third.admitted.wait(), WAIT)
    assert log == ["a", "b", "c"]
    assert admission.inflight_requests == 3  # a still decodes: only its prefill left the queue
    first.prefilled()  # idempotent
    assert admission.unprefilled_tokens == 2 * HEAVY
    for request in (first, second, third):
        await request.release()  # released without a prefill report: its tokens leave the queue too
    assert_empty(admission)


async def test_a_prompt_larger_than_the_prefill_queue_runs_when_the_queue_is_empty() -> None:
    admission = make_admission(prefill_tokens=HEAVY // 2)
    log: list[str] = []
    first = heavy(admission, "a", log, arrived_at=0.0)
    second = heavy(admission, "b", log, arrived_at=1.0)
    await settle()
    assert log == ["a"]
    first.prefilled()
    await asyncio.wait_for(second.admitted.wait(), WAIT)
    await first.release()
    await second.release()
    assert_empty(admission)


# -- light waves -----------------------------------------------------------------------------------


async def test_heavy_work_waits_while_a_light_wave_decodes_and_resumes_when_it_is_done() -> None:
    admission = make_admission(wave_min_requests=2)
    log: list[str] = []
    wave = [light(admission, f"light{n}", log, arrived_at=float(n)) for n in range(3)]
    await settle()
    queued_heavy = heavy(admission, "heavy", log, arrived_at=0.5)
    await settle()
    assert log == ["light0", "light1", "light2"]
    assert admission.protecting
    for request in wave:
        request.prefilled()
    await settle()
    assert log == ["light0", "light1", "light2"]  # the wave decodes: no heavy prefill beside it
    await wave[0].release()
    await wave[1].release()
    await asyncio.wait_for(queued_heavy.admitted.wait(), WAIT)  # one light left: below wave_min
    assert admission.light_inflight == 1
    await wave[2].release()
    await queued_heavy.release()
    assert_empty(admission)


async def test_light_requests_join_a_forming_wave_but_wait_for_the_next_once_it_decodes() -> None:
    admission = make_admission(wave_min_requests=2)
    log: list[str] = []
    first, second = light(admission, "a", log, arrived_at=0.0), light(admission, "b", log, arrived_at=1.0)
    await settle()
    queued_heavy = heavy(admission, "heavy", log, arrived_at=0.5)  # heavy work waits for the wave
    first.prefilled()  # b still prefills: the wave is forming
    joiner = light(admission, "joins", log, arrived_at=2.0)
    await asyncio.wait_for(joiner.admitted.wait(), WAIT)
    second.prefilled()
    joiner.prefilled()  # now every light request in the engine decodes
    late = light(admission, "late", log, arrived_at=3.0)
    await settle()
    assert log == ["a", "b", "joins"]
    await first.release()
    await settle()
    assert log == ["a", "b", "joins"]  # two light requests still decode: still a wave
    await second.release()  # one left, below wave_min: the wave is over, the next one starts
    await asyncio.wait_for(late.admitted.wait(), WAIT)
    assert log == ["a", "b", "joins", "late"]  # light first: the heavy request waits for late's wave
    await joiner.release()
    late.prefilled()
    await late.release()
    await asyncio.wait_for(queued_heavy.admitted.wait(), WAIT)
    await queued_heavy.release()
    assert_empty(admission)


async def test_with_no_heavy_work_waiting_light_requests_join_a_decoding_wave() -> None:
    admission = make_admission(wave_min_requests=2)
    log: list[str] = []
    wave = [light(admission, f"l{n}", log, arrived_at=float(n)) for n in range(2)]
    await settle()
    for request in wave:
        request.prefilled()
    late = light(admission, "late", log, arrived_at=5.0)
    await asyncio.wait_for(late.admitted.wait(), WAIT)  # plain continuous batching
    for request in (*wave, late):
        await request.release()
    assert_empty(admission)


async def test_combine_steps_join_a_wave_but_do_not_make_one() -> None:
    admission = make_admission(wave_min_requests=2)
    log: list[str] = []
    combines = [light(admission, f"combine{n}", log, urgent=True, arrived_at=float(n)) for n in range(3)]
    await settle()
    queued_heavy = heavy(admission, "heavy", log, arrived_at=0.5)
    await asyncio.wait_for(queued_heavy.admitted.wait(), WAIT)  # three light combine steps: no wave
    assert admission.light_inflight == 3
    assert admission.wave_members == 0
    # Two short documents make a wave; a combine step joins it while it forms.
    shorts = [light(admission, f"short{n}", log, arrived_at=10.0 + n) for n in range(2)]
    await settle()
    assert admission.protecting
    joiner = light(admission, "combine-joins", log, urgent=True, arrived_at=12.0)
    await asyncio.wait_for(joiner.admitted.wait(), WAIT)
    later_heavy = heavy(admission, "later-heavy", log, arrived_at=13.0)
    await settle()
    assert "later-heavy" not in log  # the wave holds heavy prefill back
    for request in shorts:
        request.prefilled()
        await request.release()
    await asyncio.wait_for(later_heavy.admitted.wait(), WAIT)
    for request in (*combines, joiner, queued_heavy, later_heavy):
        await request.release()
    assert_empty(admission)


async def test_waves_are_counted_with_their_seconds() -> None:
    clock = FakeClock()
    admission = make_admission(wave_min_requests=2, clock=clock)
    waves = REGISTRY.get_sample_value("docsumd_admission_light_waves_total") or 0.0
    seconds = REGISTRY.get_sample_value("docsumd_admission_light_wave_seconds_total") or 0.0
    log: list[str] = []
    wave = [light(admission, f"l{n}", log, arrived_at=0.0) for n in range(3)]
    await settle()
    assert REGISTRY.get_sample_value("docsumd_admission_light_waves_total") == waves + 1
    clock.now = 7.5
    await wave[0].release()
    await wave[1].release()  # one left, below wave_min: the wave is over
    assert REGISTRY.get_sample_value("docsumd_admission_light_wave_seconds_total") == seconds + 7.5
    await wave[2].release()
    assert REGISTRY.get_sample_value("docsumd_admission_light_waves_total") == waves + 1
    assert_empty(admission)
    off = make_fifo(wave_min_requests=2)  # FIFO: nothing waits for a wave
    fifo = [light(off, f"f{n}", log, arrived_at=0.0) for n in range(3)]
    await settle()
    for request in fifo:
        await request.release()
    assert REGISTRY.get_sample_value("docsumd_admission_light_waves_total") == waves + 1


async def test_few_light_requests_run_beside_heavy_work() -> None:
    admission = make_admission(wave_min_requests=3)
    log: list[str] = []
    lights = [light(admission, f"light{n}", log, arrived_at=float(n)) for n in range(2)]
    heavy_request = heavy(admission, "heavy", log, arrived_at=0.5)
    await settle()
    assert log == ["light0", "light1", "heavy"]  # two light requests are no wave
    for request in (*lights, heavy_request):
        await request.release()
    assert_empty(admission)


async def test_waves_are_split_evenly_with_the_first_a_little_fuller() -> None:
    admission = make_admission(max_requests=10, wave_min_requests=2)
    log: list[str] = []
    blocker = heavy(admission, "blocker", log)
    await settle()
    lights = [light(admission, f"l{n}", log, arrived_at=float(n)) for n in range(14)]
    await settle()
    assert admission.wave_target() == 9  # 14 light requests, 10 at a time: 2 waves, ceil(14 * 1.25 / 2)
    await blocker.release()
    await settle()
    assert log[1:] == [f"l{n}" for n in range(9)]
    first_wave, second_wave = lights[:9], lights[9:]
    waiting_heavy = heavy(admission, "heavy", log, arrived_at=0.5)
    for request in first_wave:
        request.prefilled()
    await settle()
    assert len(log) == 10  # the wave decodes; with heavy work waiting, the rest wait for the next
    for request in first_wave:
        await request.release()
    await asyncio.wait_for(asyncio.gather(*(request.admitted.wait() for request in second_wave)), WAIT)
    assert admission.wave_target() == 5
    for request in second_wave:
        await request.release()
    await asyncio.wait_for(waiting_heavy.admitted.wait(), WAIT)
    await waiting_heavy.release()
    assert_empty(admission)


async def test_wave_max_requests_caps_a_wave() -> None:
    admission = make_admission(wave_min_requests=2, wave_max_requests=3)
    log: list[str] = []
    lights = [light(admission, f"l{n}", log, arrived_at=float(n)) for n in range(5)]
    await settle()
    assert log == ["l0", "l1", "l2"]
    for request in lights[:3]:
        request.prefilled()
        await request.release()
    await asyncio.wait_for(asyncio.gather(lights[3].admitted.wait(), lights[4].admitted.wait()), WAIT)
    for request in lights[3:]:
        await request.release()
    assert_empty(admission)


async def test_a_wave_stays_within_the_bounds() -> None:
    admission = make_admission(max_requests=3, max_tokens=1_000_000, wave_min_requests=2)
    log: list[str] = []
    lights = [light(admission, f"l{n}", log, arrived_at=float(n)) for n in range(5)]
    await settle()
    assert log == ["l0", "l1", "l2"]
    assert admission.inflight_requests == 3
    for request in lights[:3]:
        await request.release()
    for request in lights[3:]:
        await asyncio.wait_for(request.admitted.wait(), WAIT)
        await request.release()
    assert_empty(admission)


async def test_an_aged_heavy_request_enters_beside_a_decoding_wave_without_any_other_event() -> None:
    clock = FakeClock()
    admission = make_admission(wave_min_requests=2, aging_seconds=0.05, clock=clock)
    log: list[str] = []
    wave = [light(admission, f"light{n}", log, arrived_at=0.0) for n in range(2)]
    await settle()
    for request in wave:
        request.prefilled()
    starving = heavy(admission, "heavy", log, arrived_at=0.0)
    await settle()
    assert log == ["light0", "light1"]
    clock.now = 1.0  # time passes; nothing else happens: the aging timer wakes the queue
    await asyncio.wait_for(starving.admitted.wait(), WAIT)
    for request in (*wave, starving):
        await request.release()
    assert_empty(admission)


async def test_heavy_requests_join_only_a_short_queue_while_light_requests_prefill() -> None:
    # The queue holds four heavy prompts, but beside a light prompt still to prefill, only one more.
    admission = make_admission(prefill_tokens=4 * HEAVY, heavy_beside_light_tokens=HEAVY + LIGHT)
    log: list[str] = []
    first_light = light(admission, "l0", log, arrived_at=0.0)
    await settle()
    heavies = [heavy(admission, f"h{n}", log, arrived_at=1.0 + n) for n in range(3)]
    await settle()
    assert log == ["l0", "h0"]
    assert (admission.unprefilled_tokens, admission.waiting) == (HEAVY + LIGHT, 2)
    second_light = light(admission, "l1", log, arrived_at=5.0)  # a light one still fits the full queue
    await settle()
    assert log == ["l0", "h0", "l1"]
    first_light.prefilled()
    await settle()
    assert log == ["l0", "h0", "l1"]  # l1 still prefills: the heavy ones keep waiting
    second_light.prefilled()
    await asyncio.wait_for(heavies[2].admitted.wait(), WAIT)
    assert log == ["l0", "h0", "l1", "h1", "h2"]  # no light prompt to prefill: the whole queue
    assert admission.unprefilled_tokens == 3 * HEAVY
    for request in (first_light, second_light, *heavies):
        await request.release()
    assert_empty(admission)


async def test_light_requests_also_respect_the_prefill_queue() -> None:
    admission = make_admission(prefill_tokens=2 * LIGHT)
    log: list[str] = []
    lights = [light(admission, f"l{n}", log, arrived_at=float(n)) for n in range(3)]
    await settle()
    assert log == ["l0", "l1"]
    lights[0].prefilled()
    await asyncio.wait_for(lights[2].admitted.wait(), WAIT)
    for request in lights:
        await request.release()
    assert_empty(admission)


async def test_light_requests_queue_behind_light_prefill_only_where_the_engine_schedules_by_priority() -> (
    None
):
    # Heavy prefill fills the queue. A light request then waits for it, unless the engine puts light
    # requests first (light_overtakes), where only light prompts count against the light one's queue;
    # a heavy request counts every prompt either way.
    for overtakes, first in ((False, ["h0", "h1"]), (True, ["h0", "h1", "l0", "l1"])):
        admission = make_admission(prefill_tokens=2 * HEAVY, light_overtakes=overtakes)
        log: list[str] = []
        heavies = [heavy(admission, f"h{n}", log, arrived_at=float(n)) for n in range(3)]
        await settle()
        lights = [light(admission, f"l{n}", log, arrived_at=10.0 + n) for n in range(2)]
        await settle()
        assert log == first, overtakes
        heavies[0].prefilled()
        await settle()
        assert log[:4] == ["h0", "h1", "l0", "l1"]
        assert "h2" not in log  # h1 (1,000) and the light prompts (200) leave no room for it
        for request in lights:
            request.prefilled()
        await asyncio.wait_for(heavies[2].admitted.wait(), WAIT)
        for request in heavies + lights:
            await request.release()
        assert_empty(admission)


# -- cancellation ----------------------------------------------------------------------------------


async def test_cancelled_waiter_leaves_the_queue_clean() -> None:
    admission = make_admission(max_requests=1)
    log: list[str] = []
    blocker = Request(admission, "blocker", 10, log)
    await settle()
    doomed = Request(admission, "doomed", 10, log, arrived_at=0.0)  # would be next
    other = Request(admission, "other", 10, log, arrived_at=1.0)
    await settle()
    assert admission.waiting == 2
    doomed.task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(doomed.task, WAIT)
    assert (admission.waiting, admission.inflight_requests, admission.inflight_tokens) == (1, 1, 10)
    await blocker.release()
    await asyncio.wait_for(other.admitted.wait(), WAIT)
    await other.release()
    assert log == ["blocker", "other"]
    assert_empty(admission)
    # The queue still works afterwards.
    last = Request(admission, "last", 10, log, hold=False)
    await asyncio.wait_for(last.task, WAIT)
    assert_empty(admission)


async def test_cancelling_the_blocked_head_lets_the_next_waiter_in() -> None:
    admission = make_admission(max_tokens=1000, light_prompt_tokens=0)
    log: list[str] = []
    running = Request(admission, "running", 600, log)
    await settle()
    head = Request(admission, "head", 600, log, arrived_at=0.0)  # does not fit beside running
    small = Request(admission, "small", 100, log, arrived_at=50.0)  # fits, but is behind the head
    await settle()
    assert log == ["running"]
    head.task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(head.task, WAIT)
    await asyncio.wait_for(small.admitted.wait(), WAIT)  # admitted without waiting for running
    assert (admission.waiting, admission.inflight_requests, admission.inflight_tokens) == (0, 2, 700)
    await running.release()
    await small.release()
    assert log == ["running", "small"]
    assert_empty(admission)


async def test_cancellation_right_after_the_grant_gives_the_slot_back() -> None:
    admission = make_admission(max_requests=1)
    log: list[str] = []
    blocker = admission.slot(10)
    await blocker.__aenter__()
    granted_then_cancelled = Request(admission, "cancelled", 20, log, arrived_at=0.0)
    next_in_line = Request(admission, "next", 30, log, arrived_at=1.0)
    await settle()
    assert admission.waiting == 2
    # Releasing the blocker grants the head at once (no await in between), before its task resumes;
    # the task is cancelled while the grant is on its way.
    await blocker.__aexit__(None, None, None)
    assert (admission.inflight_requests, admission.inflight_tokens, admission.waiting) == (1, 20, 1)
    granted_then_cancelled.task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(granted_then_cancelled.task, WAIT)
    # Its 20 tokens are back, and the next waiter already holds the slot instead.
    assert (admission.inflight_requests, admission.inflight_tokens, admission.waiting) == (1, 30, 0)
    await asyncio.wait_for(next_in_line.admitted.wait(), WAIT)
    assert log == ["next"]
    assert (admission.inflight_requests, admission.inflight_tokens, admission.waiting) == (1, 30, 0)
    await next_in_line.release()
    assert_empty(admission)


async def test_release_while_the_head_is_being_cancelled_skips_it() -> None:
    """A drain cancels many documents at once: a cancelled waiter's future is cancelled at once, but
    its task cleans up only when it next runs. A slot released in between must skip that waiter and
    grant the next one, not fail with InvalidStateError in the releasing task (seen as internal_error
    records during a shutdown)."""
    admission = make_admission(max_requests=1)
    log: list[str] = []
    blocker = admission.slot(10)
    await blocker.__aenter__()
    doomed = Request(admission, "doomed", 20, log, arrived_at=0.0)  # the head
    next_in_line = Request(admission, "next", 30, log, arrived_at=1.0)
    await settle()
    assert admission.waiting == 2
    doomed.task.cancel()  # its future is cancelled now; the task has not run its except block yet
    await blocker.__aexit__(None, None, None)  # raised InvalidStateError before the fix
    assert (admission.inflight_requests, admission.inflight_tokens, admission.waiting) == (1, 30, 0)
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(doomed.task, WAIT)
    await asyncio.wait_for(next_in_line.admitted.wait(), WAIT)
    assert (admission.inflight_requests, admission.inflight_tokens, admission.waiting) == (1, 30, 0)
    await next_in_line.release()
    assert log == ["next"]
    assert (admission.inflight_requests, admission.inflight_tokens, admission.waiting) == (0, 0, 0)


async def test_many_cancelled_at_once_while_slots_are_released() -> None:
    """The drain's pattern at scale: every waiter and holder cancelled in one go; the books balance."""
    admission = make_admission(max_requests=3)
    log: list[str] = []
    holders = [Request(admission, f"h{i}", 10, log) for i in range(3)]
    await settle()
    waiters = [Request(admission, f"w{i}", 10, log, arrived_at=float(i)) for i in range(20)]
    await settle()
    assert admission.waiting == 20
    for request in waiters[::2]:
        request.task.cancel()
    for holder in holders:  # each release dispatches past the cancelled heads
        await holder.release()
    for request in waiters:
        request.task.cancel()
    results = await asyncio.wait_for(
        asyncio.gather(*(request.task for request in waiters), return_exceptions=True), WAIT
    )
    assert all(isinstance(result, asyncio.CancelledError) for result in results)
    assert (admission.inflight_requests, admission.inflight_tokens, admission.waiting) == (0, 0, 0)
    assert not any(name.startswith("w") and int(name[1:]) % 2 == 0 for name in log)


async def test_exception_in_the_body_releases_the_slot() -> None:
    admission = make_admission(max_requests=1)
    seen: list[tuple[int, int]] = []

    async def failing_request() -> None:
        async with admission.slot(50):
            seen.append((admission.inflight_requests, admission.inflight_tokens))
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        await failing_request()
    assert seen == [(1, 50)]
    assert_empty(admission)


# -- disabled --------------------------------------------------------------------------------------


async def test_disabled_admits_everything_at_once_and_still_counts() -> None:
    admission = make_fifo(max_requests=1, max_tokens=10, wave_min_requests=1)
    log: list[str] = []
    requests = [Request(admission, f"r{number}", 100, log, arrived_at=float(-number)) for number in range(5)]
    await settle()
    assert log == [f"r{number}" for number in range(5)]  # no bound, no reordering
    assert (admission.inflight_requests, admission.inflight_tokens, admission.waiting) == (5, 500, 0)
    for request in requests:
        request.prefilled()
        await request.release()
    assert_empty(admission)


async def test_engine_priorities_put_light_and_aged_requests_before_other_heavy_ones() -> None:
    # Where vLLM schedules by priority, a heavy request admitted while no light one waited must not
    # keep light requests admitted after it waiting inside vLLM; an aged heavy request keeps its place.
    clock = FakeClock()
    admission = make_admission(clock=clock)
    log: list[str] = []
    fresh = heavy(admission, "fresh-heavy", log, arrived_at=0.0)
    short = light(admission, "light", log, arrived_at=1.0)
    urgent = light(admission, "combine", log, arrived_at=0.5, urgent=True)
    await settle()
    assert set(log) == {"fresh-heavy", "light", "combine"}  # no bounds bind: all are in at once
    assert [request.handle.priority for request in (fresh, short, urgent) if request.handle] == [1, 0, 0]
    blocked = make_admission(clock=clock, max_requests=1)
    blocker = Request(blocked, "blocker", 1, log)
    await settle()
    old = heavy(blocked, "old-heavy", log, arrived_at=0.0)
    await settle()
    clock.now = AGING  # it waited its AGING seconds before it went in
    await blocker.release()
    await asyncio.wait_for(old.admitted.wait(), WAIT)
    assert old.handle is not None
    assert old.handle.priority == 0
    for request in (fresh, short, urgent, old):
        await request.release()
    assert_empty(admission)
    assert_empty(blocked)


async def test_with_admission_off_every_request_has_the_same_engine_priority() -> None:
    fifo = make_fifo()
    log: list[str] = []
    requests = [heavy(fifo, "heavy", log), light(fifo, "light", log)]
    await settle()
    assert [request.handle.priority for request in requests if request.handle] == [0, 0]
    for request in requests:
        await request.release()
