"""What the suite knows of pair speeds: measured pairs, and a feature model for the others.

A packer learns a pair's speeds once it has run that pair (the node agent measures each job's
throughput before and after the other joined) and has to guess every other pair from what it
knows of each job alone: its utilisation, its memory, and its sharing label (Lucid's tiny /
medium / jumbo, from utilisation). Shared by the simulator's ``observed``/``model`` knowledge
(:mod:`simulator.knowledge`, keyed by workload profile) and the live helper's
steering (keyed by history fingerprint, observed speeds from the store's ``pair_speeds``).

- :func:`pair_features`: the features of "a beside b" (both utilisations, their product and
  square, the processor-sharing share ``min(1, 100 / (u_a + u_b))``, both memories, both
  "jumbo" labels);
- :func:`ridge_fit` / :func:`ridge_predict`: the regression of a job's speed beside another on
  those features, clipped to ``[FLOOR, 1]``; before ``MIN_FIT`` pairs are observed the
  prediction is processor sharing alone (:func:`prior_speed`);
- :class:`ObservedPairs`: the observed speeds and when to refit (the number of pairs grew by
  a quarter);
- :class:`PairKnowledge`: ``speed(a, b)`` = observed, else predicted from the two jobs' traits
  (None when either job is unknown).
"""
from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

import numpy as np

MIN_FIT = 20  # observed pairs (ordered) before the regression replaces processor sharing
RIDGE = 1e-2
FLOOR = 0.05  # no prediction below this speed
N_FEATURES = 10
PS_FEATURE = 5  # the processor-sharing share's column

K = TypeVar("K", bound=Hashable)


class Traits(Protocol):
    """What the suite knows of one job alone (a simulator profile, or :class:`JobTraits`)."""

    util_pct: float
    mem_bytes: float
    label: int


@dataclass(frozen=True)
class JobTraits:
    """One job as its history gives it: mean utilisation (%), peak memory, sharing label."""

    util_pct: float
    mem_bytes: float
    label: int

    @classmethod
    def from_history(cls, util_pct: float, mem_bytes: float) -> "JobTraits":
        return cls(util_pct, mem_bytes, sharing_label(util_pct))


def sharing_label(util_pct: float) -> int:
    """Lucid's sharing label from utilisation alone: 0 tiny, 1 medium, 2 jumbo."""
    return 0 if util_pct < 40 else 1 if util_pct < 80 else 2


def pair_features(a: Traits, b: Traits) -> list[float]:
    """The features of ``a`` running beside ``b`` (see the module's docstring)."""
    ua, ub = a.util_pct / 100.0, b.util_pct / 100.0
    ps = min(1.0, 1.0 / max(ua + ub, 1e-9))
    return [1.0, ua, ub, ua * ub, ub * ub, ps, a.mem_bytes / 2**30, b.mem_bytes / 2**30,
            float(a.label >= 2), float(b.label >= 2)]


def prior_speed(x: np.ndarray) -> np.ndarray:
    """Processor sharing alone, from features (any leading shape): before a fit."""
    return np.clip(x[..., PS_FEATURE], FLOOR, 1.0)


def ridge_fit(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Ridge weights of speed ``y`` on features ``x`` (one row per observed ordered pair; the
    intercept is not shrunk)."""
    reg = RIDGE * len(y) * np.eye(x.shape[1])
    reg[0, 0] = 0.0
    return np.linalg.solve(x.T @ x + reg, x.T @ y)


def ridge_predict(x: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Predicted speeds from features (any leading shape), clipped to ``[FLOOR, 1]``."""
    return np.clip(x @ weights, FLOOR, 1.0)


class ObservedPairs(Generic[K]):
    """Measured speeds of "a beside b" (ordered), and when the model is due a refit."""

    def __init__(self) -> None:
        self.seen: dict[tuple[K, K], float] = {}
        self.fitted_on = 0

    def __len__(self) -> int:
        return len(self.seen)

    def add(self, a: K, b: K, speed: float) -> bool:
        """Record a pair's speed the first time it is measured; False if it was known."""
        if (a, b) in self.seen:
            return False
        self.seen[(a, b)] = speed
        return True

    def refit_due(self) -> bool:
        """At least ``MIN_FIT`` pairs, and a quarter more than the last fit saw."""
        n = len(self.seen)
        return n >= MIN_FIT and n >= self.fitted_on * 1.25

    def fitted(self) -> None:
        self.fitted_on = len(self.seen)


class PairKnowledge(Generic[K]):
    """Pair speeds as a packer knows them: observed, else predicted from traits.

    ``traits``: what is known of each job alone (a job missing: its pairs are not predicted);
    ``observed``: measured speeds of "a beside b". The model is fitted once, on the observed
    pairs whose both jobs have traits, when there are at least ``MIN_FIT`` of them."""

    def __init__(self, traits: Mapping[K, Traits], observed: Mapping[tuple[K, K], float] | None = None):
        self.traits = traits
        self.observed: ObservedPairs[K] = ObservedPairs()
        for (a, b), s in (observed or {}).items():
            self.observed.add(a, b, s)
        self.weights: np.ndarray | None = None
        rows = [(pair_features(traits[a], traits[b]), s) for (a, b), s in self.observed.seen.items()
                if a in traits and b in traits]
        if len(rows) >= MIN_FIT:
            self.weights = ridge_fit(np.array([r[0] for r in rows]), np.array([r[1] for r in rows]))
            self.observed.fitted()

    def known(self, a: K, b: K) -> bool:
        return (a, b) in self.observed.seen

    def predicted(self, a: K, b: K) -> float | None:
        """The feature model's speed of ``a`` beside ``b`` (None: a job without traits)."""
        ta, tb = self.traits.get(a), self.traits.get(b)
        if ta is None or tb is None:
            return None
        x = np.array(pair_features(ta, tb))
        s = prior_speed(x) if self.weights is None else ridge_predict(x, self.weights)
        return float(s)

    def speed(self, a: K, b: K) -> float | None:
        """Speed of ``a`` beside ``b`` relative to alone: observed, else predicted."""
        hit = self.observed.seen.get((a, b))
        return hit if hit is not None else self.predicted(a, b)
