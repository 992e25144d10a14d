# SPDX-License-Identifier: Apache-2.0
"""Synthetic stress traces: shapes the public traces do not hold, to test predictors on.

Each generator returns a `Trace` of one node (5-minute steps by default) from a seeded random
generator, so a test is reproducible and a benchmark can draw many. None of them is fitted to a
real trace; each stresses one thing a predictor can get wrong:

* ``level_shift``   a node whose load jumps to a new level (up or down) at random times;
* ``daily_cycle``   a diurnal pattern whose amplitude changes from one day to the next;
* ``rare_spikes``   quiet load with short bursts of a few times the level, rarely;
* ``jobs``          pods that come and go (jobs of a few hours), a node's slots refilled at
                    once: the young-pod, short-history case;
* ``mid_start``     pods that start one after another during the trace.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator

from tidal.predict.series import Trace

__all__ = ["GENERATORS", "trace_rows", "daily_cycle", "jobs", "level_shift", "mid_start", "rare_spikes"]

DAY = 86400


def _trace(name: str, step: int, usage: list[list[float]], request: list[list[float]]) -> Trace:
    absent = sum(1 for u, r in zip(usage, request) for a, b in zip(u, r) if a <= 0.0 and b <= 0.0)
    n = len(usage[0]) if usage else 0
    return Trace(step=step, start=0, series_ids=tuple(f"{name}-{j}" for j in range(len(usage))),
                 usage=usage, request=request, readings=n * len(usage) - absent, absent=absent,
                 source=f"synthetic:{name}")


def _noisy(rng: random.Random, level: float, cv: float, cap: float) -> float:
    return min(cap, max(0.0, rng.gauss(level, cv * level)))


def level_shift(seed: int, days: float = 6, pods: int = 8, step: int = 300) -> Trace:
    rng = random.Random(seed)
    n = int(days * DAY / step)
    usage, request = [], []
    for _ in range(pods):
        req = rng.choice((2.0, 4.0, 8.0))
        level = rng.uniform(0.1, 0.5) * req
        u = []
        for _i in range(n):
            if rng.random() < 1 / (1.5 * DAY / step):  # a shift every day and a half on average
                level = rng.uniform(0.05, 0.8) * req
            u.append(_noisy(rng, level, 0.15, req))
        usage.append(u)
        request.append([req] * n)
    return _trace("level-shift", step, usage, request)


def daily_cycle(seed: int, days: float = 8, pods: int = 10, step: int = 300) -> Trace:
    rng = random.Random(seed)
    n = int(days * DAY / step)
    per_day = DAY // step
    usage, request = [], []
    for _ in range(pods):
        req = rng.choice((1.0, 2.0, 4.0))
        base = rng.uniform(0.05, 0.2) * req
        phase = rng.uniform(0, 2 * math.pi)
        amps = [rng.uniform(0.1, 0.6) * req for _ in range(int(days) + 2)]
        u = []
        for i in range(n):
            amp = amps[i // per_day]
            cyc = 0.5 * (1 + math.sin(2 * math.pi * i / per_day + phase))
            u.append(_noisy(rng, base + amp * cyc, 0.1, req))
        usage.append(u)
        request.append([req] * n)
    return _trace("daily-cycle", step, usage, request)


def rare_spikes(seed: int, days: float = 6, pods: int = 10, step: int = 300) -> Trace:
    rng = random.Random(seed)
    n = int(days * DAY / step)
    usage, request = [], []
    for _ in range(pods):
        req = rng.choice((2.0, 4.0))
        level = rng.uniform(0.05, 0.25) * req
        u, spike = [], 0
        for _i in range(n):
            if spike == 0 and rng.random() < 1 / (2 * DAY / step):  # one burst per two days
                spike = rng.randint(1, 4)
            if spike:
                spike -= 1
                u.append(min(req, level * rng.uniform(2.5, 5.0)))
            else:
                u.append(_noisy(rng, level, 0.2, req))
        usage.append(u)
        request.append([req] * n)
    return _trace("rare-spikes", step, usage, request)


def jobs(seed: int, days: float = 1, slots: int = 16, step: int = 300) -> Trace:
    """Every slot runs one job after another; a job lasts 1-8 h, uses a steady share of its
    request with noise and occasional phases at a higher share."""
    rng = random.Random(seed)
    n = int(days * DAY / step)
    usage, request = [], []
    for _ in range(slots):
        # one series per job: absent (0, 0) outside its lifetime
        i = 0
        while i < n:
            life = rng.randint(int(3600 / step), int(8 * 3600 / step))
            req = rng.choice((1.0, 2.0, 4.0))
            share = rng.uniform(0.1, 0.6)
            u = [0.0] * n
            r = [0.0] * n
            phase = 0
            for t in range(i, min(n, i + life)):
                if phase == 0 and rng.random() < 0.02:
                    phase = rng.randint(2, 12)
                mult = 1.6 if phase else 1.0
                phase = max(0, phase - 1)
                u[t] = _noisy(rng, share * req * mult, 0.15, req)
                r[t] = req
            usage.append(u)
            request.append(r)
            i += life
    return _trace("jobs", step, usage, request)


def mid_start(seed: int, days: float = 4, pods: int = 10, step: int = 300) -> Trace:
    rng = random.Random(seed)
    n = int(days * DAY / step)
    usage, request = [], []
    for _ in range(pods):
        start = rng.randint(0, n // 2)
        req = rng.choice((1.0, 2.0, 4.0))
        level = rng.uniform(0.1, 0.5) * req
        usage.append([0.0] * start + [_noisy(rng, level, 0.2, req) for _ in range(n - start)])
        request.append([0.0] * start + [req] * (n - start))
    return _trace("mid-start", step, usage, request)


GENERATORS: dict[str, Callable[..., Trace]] = {
    "level-shift": level_shift,
    "daily-cycle": daily_cycle,
    "rare-spikes": rare_spikes,
    "jobs": jobs,
    "mid-start": mid_start,
}


def trace_rows(trace: Trace) -> Iterator[tuple[int, str, float, float]]:
    """``(timestamp, series_id, usage, request)`` rows of a trace for `write_long_csv`; a series
    has no row where it is absent (neither usage nor request), as in the converted traces."""
    for i in range(len(trace)):
        ts = trace.timestamp(i)
        for j, sid in enumerate(trace.series_ids):
            u, r = trace.usage[j][i], trace.request[j][i]
            if u > 0.0 or r > 0.0:
                yield ts, sid, u, r
