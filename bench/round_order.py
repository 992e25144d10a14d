# SPDX-License-Identifier: Apache-2.0
"""In which order a benchmark's treatments run in each round.

A treatment leaves the machine changed for the next one: after a BE job took every idle cycle,
the node's daemons work off their backlog; after an agent stops, the API server writes what it
sent last. What a treatment leaves behind lands on the treatment that *follows* it. So the order
must not always give a treatment the same predecessor:

* ``fixed``: as listed, every round — each treatment always follows the same one;
* ``rotate``: the list turned by one place each round. Each treatment runs once in every
  position over as many rounds as treatments, **but a cyclic turn keeps each treatment's
  predecessor** (in round 2 of ``a b c``, ``b c a``, ``c`` still follows ``b``): within a round
  the carry-over lands on the same treatment every time (bench-isolation's default from
  2026-11-29 to 2026-12-03; there ``solo``, every ratio's reference, always followed the last
  treatment listed);
* ``balanced`` (the default): a Williams design — the rows of a Latin square in which every
  treatment follows every other one equally often (once over n rounds for an even number n of
  treatments, twice over 2 n rounds for an odd one) and runs once in every position. With fewer
  rounds than rows the balance is partial; the rows are used in turn.
"""
from __future__ import annotations

ORDERS = ("balanced", "rotate", "fixed")


def williams_rows(n: int) -> list[list[int]]:
    """The rows of a Williams design for ``n`` treatments (indices): ``n`` rows for an even ``n``,
    ``2 n`` (each row and its reverse) for an odd one; ``[[0]]`` for one treatment."""
    if n < 1:
        raise ValueError(f"a design needs at least one treatment, not {n}")
    first, low, high = [0], 1, n - 1
    while len(first) < n:  # 0, 1, n-1, 2, n-2, ...
        first.append(low)
        low += 1
        if len(first) < n:
            first.append(high)
            high -= 1
    rows = [[(t + shift) % n for t in first] for shift in range(n)]
    if n % 2:
        rows += [row[::-1] for row in rows]
    return rows


def round_order(treatments: tuple[str, ...], round_: int, order: str) -> tuple[str, ...]:
    """The treatments of round ``round_`` (from 0) in the order they run."""
    if order == "fixed":
        return treatments
    if order == "rotate":
        k = round_ % len(treatments)
        return treatments[k:] + treatments[:k]
    if order == "balanced":
        rows = williams_rows(len(treatments))
        return tuple(treatments[i] for i in rows[round_ % len(rows)])
    raise ValueError(f"unknown order {order!r}; allowed: {', '.join(ORDERS)}")
