"""The load-aware admission rule: pack a job beside others when running them together beats
running them one after the other, given what waits in the queue. Pure.

A newcomer B (``newcomer_s`` seconds of work alone) may join a GPU whose jobs A_i have
``remaining_s`` seconds of work left alone. Beside each other B runs at speed ``s_B`` and
each A_i at ``s_i`` (relative to alone). Overlap lasts ``T = min(newcomer_s / s_B,
min_i remaining_i / s_i)`` (until the first of them ends). The alternative is that B waits
``wait_s`` for a whole GPU and runs alone. Summed over the jobs' completion times, packing
saves::

    gain = wait_s                          B starts now, not after the wait
         - T * (1 - s_B)                   B runs slower while it overlaps
         - T * sum_i (1 - s_i)             each A_i ends later by what it lost
         + q * T * (s_B + sum_i s_i - k)   the GPU-time the pack frees, for the queue

where ``k`` is the number of jobs already there and ``q = waiting / gpus`` the queue's
length per GPU: the GPU-seconds the pack saves (``T * (combined throughput - k)``: with one
job there, ``s_A + s_B - 1``) move every job queued after B forward by that much on about
``q`` of them. A long queue values throughput (``q`` large: pack when ``s_A + s_B > 1``);
a draining one values each job's own time (``q = 0``: pack only when B would wait longer
than the pair loses). Derivation and figures: docs/packing-policy.md.

Fairness stays an admin's setting, apart from the rule that decides throughput: no job is
packed where it, or a job there, is predicted below ``min_speed`` of its speed alone
(default 0.5: no one gets less than an equal share of the GPU). A pair at speed 0 (cannot
run together: learned from a failure) is never packed.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from packer.pair_model import Prediction


@dataclass(frozen=True)
class QueueView:
    """What waits, as the scheduler sees it when the newcomer is placed."""

    waiting: int  # jobs queued besides the newcomer
    gpus: int  # GPUs of the partition the queue drains into
    wait_s: float  # until the newcomer would have a whole GPU (math.inf: no release known)

    def __post_init__(self) -> None:
        if self.waiting < 0 or self.gpus < 1:
            raise ValueError(f"a queue needs waiting >= 0 and gpus >= 1, got {self.waiting}, {self.gpus}")
        if math.isnan(self.wait_s) or self.wait_s < 0:
            raise ValueError(f"wait_s must be >= 0 seconds, got {self.wait_s}")

    @property
    def per_gpu(self) -> float:
        return self.waiting / self.gpus


@dataclass(frozen=True)
class ResidentWork:
    """A job already on the GPU: its work left (seconds alone) and its speed with the newcomer."""

    remaining_s: float
    speed: float


@dataclass(frozen=True)
class PackCase:
    """One pack as the rule judges it."""

    newcomer_s: float  # the newcomer's work, seconds alone
    newcomer_speed: float  # its speed beside the residents
    residents: tuple[ResidentWork, ...]

    def __post_init__(self) -> None:
        speeds = (self.newcomer_speed, *(r.speed for r in self.residents))
        if not self.residents:
            raise ValueError("a pack needs at least one job already on the GPU")
        if any(not 0.0 <= s <= 1.0 for s in speeds):
            raise ValueError(f"speeds must be in [0, 1], got {speeds}")
        if self.newcomer_s < 0 or any(r.remaining_s < 0 for r in self.residents):
            raise ValueError("work left must be >= 0 seconds")

    @property
    def min_speed(self) -> float:
        return min(self.newcomer_speed, *(r.speed for r in self.residents))


def pack_gain(case: PackCase, queue: QueueView) -> float:
    """Seconds of completion time the pack saves, summed over the jobs (negative: it costs).
    ``-inf`` when a job there would make no progress."""
    return gain_of(case.newcomer_s, case.newcomer_speed,
                   [(r.remaining_s, r.speed) for r in case.residents], queue.waiting, queue.gpus, queue.wait_s)


def gain_of(newcomer_s: float, newcomer_speed: float, residents: Sequence[tuple[float, float]],
            waiting: int, gpus: int, wait_s: float) -> float:
    """:func:`pack_gain` on plain numbers (``residents``: (work left, speed) each), for a
    caller that judges many packs (the replay) and builds no :class:`PackCase`; the same
    arithmetic in the same order (the one implementation), unchecked."""
    if len(residents) == 1:  # one job there (the common pack): the same operations, unrolled
        (rem, s), = residents
        if min(newcomer_speed, s) <= 0.0:
            return -math.inf
        if math.isinf(wait_s):
            return math.inf
        t = min(newcomer_s / newcomer_speed, rem / s)
        return wait_s - (t * (1.0 - newcomer_speed) + t * (1.0 - s)) + (waiting / gpus) * (t * (newcomer_speed + s - 1))
    if min(newcomer_speed, *(s for _, s in residents)) <= 0.0:
        return -math.inf
    if math.isinf(wait_s):
        return math.inf
    t = min([newcomer_s / newcomer_speed, *(rem / s for rem, s in residents)])
    k = len(residents)
    lost = t * (1.0 - newcomer_speed) + t * sum(1.0 - s for _, s in residents)
    freed = t * (newcomer_speed + sum(s for _, s in residents) - k)
    return wait_s - lost + (waiting / gpus) * freed


@dataclass(frozen=True)
class AdmissionRule:
    """Pack when the gain is positive and every job keeps at least ``min_speed``."""

    min_speed: float = 0.5

    def __post_init__(self) -> None:
        if not 0.0 < self.min_speed <= 1.0:
            raise ValueError(f"min_speed must be a fraction in (0, 1], e.g. 0.5, got {self.min_speed}")

    def fair(self, case: PackCase) -> bool:
        return case.min_speed >= self.min_speed

    def pays(self, case: PackCase, queue: QueueView) -> bool:
        return self.fair(case) and pack_gain(case, queue) > 0.0

    def pays_values(self, newcomer_s: float, newcomer_speed: float, residents: Sequence[tuple[float, float]],
                    waiting: int, gpus: int, wait_s: float) -> bool:
        """:meth:`pays` on plain numbers (:func:`gain_of`'s)."""
        return (min(newcomer_speed, *(s for _, s in residents)) >= self.min_speed
                and gain_of(newcomer_s, newcomer_speed, residents, waiting, gpus, wait_s) > 0.0)


@dataclass(frozen=True)
class PackJudgement:
    """What the rule says of packing one newcomer now, over the GPUs it could join.

    ``verdict``: ``pays`` (some GPU qualifies and the pack there pays: ``gpu_id``, ``gain``),
    ``refused`` (GPUs have room for it, none where the pack pays or keeps every job at the
    fairness floor: ``reason`` says which), or ``no-room`` (no busy GPU has room under the
    cap and the jobs-per-GPU limit now, or only GPUs with a partner it must avoid, reason
    ``avoided-pair``: the rule has nothing to weigh, the job waits for room as before and is
    kept off its partners' nodes)."""

    verdict: str
    reason: str
    gpu_id: str | None = None
    gain: float | None = None

    @property
    def refused(self) -> bool:
        return self.verdict == "refused"


def release_wait(releases_s: "list[float] | tuple[float, ...]", ahead: int) -> float:
    """When a whole GPU frees for a job with ``ahead`` jobs before it: the ``ahead + 1``-th
    release (seconds from now), the last one known when fewer are known (a lower bound), or
    ``math.inf`` when none is (no busy GPU has an end in sight)."""
    rel = sorted(r for r in releases_s if r >= 0)
    if not rel:
        return math.inf
    return rel[min(max(ahead, 0), len(rel) - 1)]


def expected_gain(newcomer_s: float, newcomer: "Prediction", residents: "Sequence[tuple[float, Prediction]]",
                  queue: QueueView) -> float:
    """:func:`pack_gain` averaged over the pair model's spread (``packer.pair_model``): each
    speed at the three points of ``expected_speeds`` (kept above 1 % so a pessimistic point
    costs a long overlap, not an infinite one), every combination weighted. A pair the model
    is unsure of is packed when this is positive, not refused for its spread."""
    from itertools import product

    from packer.pair_model import expected_speeds

    grids = [expected_speeds(newcomer), *(expected_speeds(p) for _, p in residents)]
    total = 0.0
    for combo in product(*grids):
        weight = math.prod(w for _, w in combo)
        speeds = [max(0.01, s) for s, _ in combo]
        case = PackCase(newcomer_s, speeds[0], tuple(ResidentWork(left, s) for (left, _), s in zip(residents, speeds[1:])))
        total += weight * pack_gain(case, queue)
    return total


# what a refusal's bound keeps clear of zero: float rounding of the gain, its inputs (the
# clock, the work left) and the bound's own arithmetic stay far below it
_HOLD_MARGIN_S = 1e-3
_HOLD_MARGIN_REL = 1e-9


@dataclass(frozen=True)
class RefusalHold:
    """How far a refused pack surely stays refused (:func:`refusal_holds`): for ``seconds``
    of clock, with ``fewest`` to ``most`` jobs waiting behind the newcomer and the wait for a
    whole GPU ending up to ``later_s`` later than it did."""

    seconds: float
    fewest: int
    most: int
    later_s: float


def refusal_holds(newcomer_s: float, newcomer_speed: float, residents: Sequence[tuple[float, float, float]],
                  waiting: int, gpus: int, wait_s: float, min_speed: float) -> RefusalHold:
    """How long, for which queues and how much later a whole GPU, a pack the load-aware rule
    refuses (:meth:`AdmissionRule.pays_values` False on these numbers) surely stays refused
    while the clock moves (the speeds and the newcomer's work as they are). The gain rises
    one for one with the wait, and moves one way with the queue (a pack that frees GPU-time
    gains with a longer queue; on the other side any longer queue holds): a third of the
    gain's distance from zero is spent on a later release, a third on more queue, and the
    seconds are those of the worst case allowed (:func:`refusal_holds_s`)."""
    speeds = [newcomer_speed, *(s for _, s, _ in residents)]
    if min(speeds) < min_speed:
        return RefusalHold(math.inf, 0, _ANY, math.inf)  # the fairness floor reads neither
    if math.isinf(wait_s):
        return RefusalHold(0.0, waiting, waiting, 0.0)  # it pays (no release known): nothing to hold
    pairs = [(rem, s) for rem, s, _ in residents]
    gain = gain_of(newcomer_s, newcomer_speed, pairs, waiting, gpus, wait_s)
    if not gain < 0.0:
        return RefusalHold(0.0, waiting, waiting, 0.0)
    share = -gain / 3.0
    freed = sum(speeds) - len(residents)
    fewest, most = waiting, _ANY
    if freed > 0.0:
        overlap = min([newcomer_s / newcomer_speed, *(rem / s for rem, s in pairs)])
        more = int(min(share / (overlap * freed) * gpus, _ANY - waiting)) if overlap > 0.0 else _ANY - waiting
        fewest, most = 0, waiting + more
    worst = most if freed > 0.0 else waiting
    return RefusalHold(refusal_holds_s(newcomer_s, newcomer_speed, residents, worst, gpus, wait_s + share, min_speed),
                       fewest, most, share)


_ANY = 1 << 40  # no bound on the queue


def refusal_holds_s(newcomer_s: float, newcomer_speed: float, residents: Sequence[tuple[float, float, float]],
                    waiting: int, gpus: int, wait_s: float, min_speed: float) -> float:
    """Seconds of clock for which a pack the load-aware rule refuses (:meth:`AdmissionRule.pays_values`
    False on these numbers) surely stays refused while only the clock moves: the wait for a
    whole GPU falls one second a second (down to 0), each resident's work left falls at its
    drain rate now (``residents``: (work left, speed beside the newcomer, work done per second
    of clock)); the speeds, the newcomer's work and the queue stay. 0: too close to call (judge
    it again); ``math.inf``: refused for good (below the fairness floor, or a gain that only
    falls as time passes).

    The gain is ``wait + T * slope`` (:func:`gain_of`, ``slope = q * (s_B + sum s_i - k) -
    (1 - s_B) - sum (1 - s_i)``) with ``wait`` and the overlap ``T`` never rising: with ``slope
    >= 0`` it never rises; else it rises at most ``-slope`` per second the overlap shrinks, and
    ``T`` shrinks at most ``max rate_i / s_i`` a second. A margin keeps the bound clear of
    the arithmetic's rounding."""
    speeds = [newcomer_speed, *(s for _, s, _ in residents)]
    if min(speeds) < min_speed:
        return math.inf  # the fairness floor reads no clock
    if math.isinf(wait_s):
        return 0.0  # it pays (no release known): nothing to hold
    pairs = [(rem, s) for rem, s, _ in residents]
    gain = gain_of(newcomer_s, newcomer_speed, pairs, waiting, gpus, wait_s)
    q = waiting / gpus
    overlap = min([newcomer_s / newcomer_speed, *(rem / s for rem, s in pairs)])
    cost = sum(1.0 - s for s in speeds)
    freed = sum(speeds) - len(residents)
    slope = q * freed - cost
    margin = _HOLD_MARGIN_S * (1.0 + q) + _HOLD_MARGIN_REL * (
        wait_s + newcomer_s + sum(rem for rem, _ in pairs) + overlap * (cost + q * abs(freed)))
    if not gain < -margin:
        return 0.0
    if slope >= 0.0:
        return math.inf
    fall = max(rate / s for _, s, rate in residents)
    if fall <= 0.0:
        return math.inf
    return (-gain - margin) / (-slope * fall)
