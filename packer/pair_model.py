"""A pair model that carries over to workloads it was not fitted on, with its uncertainty. Pure (numpy).

It predicts a job's speed beside another from what the node measures of each job *alone*:

- ``busy``: the GPU's busy fraction while the job runs alone (NVML ``utilization.gpu``,
  ``nvmlDeviceGetUtilizationRates``; where DCGM is installed its profiling field
  ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` measures the same more finely);
- ``mem_busy``: the memory controller's busy fraction (NVML ``utilization.memory``; DCGM
  ``DCGM_FI_PROF_DRAM_ACTIVE``); None where it is not recorded (the history store keeps the
  GPU's busy fraction and memory: a model fitted without it drops its features);
- ``mem_gib``: the memory it holds (NVML per-process memory).

The features of "a beside b" (:func:`features`) are those of processor sharing on both
engines (``min(1, 1 / (busy_a + busy_b))`` and the same for the memory controller), the
two busy fractions, their product, and both memories. The fit is Bayesian linear regression
with a known prior precision (ridge) and the noise estimated from the residuals: the
prediction is a mean and a standard deviation (:meth:`PairModel.predict`), so the admission
can weigh a pair it is unsure of by its expected gain instead of refusing it
(:func:`expected_speeds`). Before ``MIN_PAIRS`` measured pairs it answers processor sharing
on the GPU's engine with a wide spread (``PRIOR_SD``).
"""
from __future__ import annotations

import math
from operator import mul
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

MIN_PAIRS = 20
RIDGE = 1.0  # prior precision of the weights (features are of order 1)
PRIOR_SD = 0.25  # the spread of a processor-sharing guess with nothing fitted
FLOOR = 0.0
MEMO_SIZE = 65536  # predictions kept per fitted model (the same counters recur across submissions)


@dataclass(frozen=True)
class AloneCounters:
    """One job alone, as the node measures it."""

    busy: float  # GPU busy fraction, 0..1 (NVML utilization.gpu / 100)
    mem_busy: float | None  # memory controller busy fraction, 0..1 (NVML utilization.memory / 100)
    mem_gib: float

    def __post_init__(self) -> None:
        mem_ok = self.mem_busy is None or 0.0 <= self.mem_busy <= 1.0
        if not (0.0 <= self.busy <= 1.0 and mem_ok) or not self.mem_gib >= 0:
            raise ValueError(f"busy fractions must be in [0, 1] and memory >= 0, got {self}")

    @classmethod
    def from_history(cls, util_pct: float, mem_bytes: float, mem_util_pct: float | None = None) -> "AloneCounters":
        """From what the history store keeps of a workload: mean utilisation (%) and peak memory."""
        return cls(util_pct / 100.0, None if mem_util_pct is None else mem_util_pct / 100.0, mem_bytes / 2**30)


def features(a: AloneCounters, b: AloneCounters, memory_engine: bool = True) -> list[float]:
    """The features of ``a`` running beside ``b``; ``memory_engine`` off: without the memory
    controller's (both jobs' ``mem_busy`` unused)."""
    ps = min(1.0, 1.0 / max(a.busy + b.busy, 1e-9))
    x = [1.0, ps, a.busy, b.busy, a.busy * b.busy, a.mem_gib / 80.0, b.mem_gib / 80.0]
    if memory_engine:
        if a.mem_busy is None or b.mem_busy is None:
            raise ValueError("the model uses the memory controller's busy fraction: both jobs need mem_busy")
        x += [min(1.0, 1.0 / max(a.mem_busy + b.mem_busy, 1e-9)), a.mem_busy * b.mem_busy]
    return x


@dataclass(frozen=True)
class Prediction:
    mean: float
    sd: float


class PairModel:
    """Speeds of "a beside b" from both jobs' counters alone, with uncertainty."""

    def __init__(self, weights: np.ndarray | None = None, cov: np.ndarray | None = None, noise_sd: float = PRIOR_SD,
                 memory_engine: bool = False):
        self.weights, self.cov, self.noise_sd = weights, cov, noise_sd
        self.memory_engine = memory_engine
        # plain floats for predict: a handful of features, called per pair on the submit path
        self._w = None if weights is None else [float(v) for v in weights]
        self._cov = None if cov is None else [[float(v) for v in row] for row in cov]
        self._memo: dict[tuple[AloneCounters, AloneCounters], Prediction] = {}

    @classmethod
    def fit(cls, pairs: Sequence[tuple[AloneCounters, AloneCounters, float]],
            memory_engine: bool | None = None) -> "PairModel":
        """Fit on measured pairs (a, b, a's speed beside b); fewer than ``MIN_PAIRS``: the prior.
        ``memory_engine`` None: used when every job of ``pairs`` has ``mem_busy``."""
        if memory_engine is None:
            memory_engine = bool(pairs) and all(c.mem_busy is not None for a, b, _ in pairs for c in (a, b))
        if len(pairs) < MIN_PAIRS:
            return cls(memory_engine=memory_engine)
        x = np.array([features(a, b, memory_engine) for a, b, _ in pairs])
        y = np.array([s for _, _, s in pairs])
        reg = RIDGE * np.eye(x.shape[1])
        reg[0, 0] = 0.0
        precision = x.T @ x + reg
        w = np.linalg.solve(precision, x.T @ y)
        resid = y - x @ w
        dof = max(1, len(y) - x.shape[1])
        noise = float(np.sqrt(resid @ resid / dof))
        return cls(w, np.linalg.inv(precision) * noise**2, noise, memory_engine)

    def predict(self, a: AloneCounters, b: AloneCounters) -> Prediction:
        hit = self._memo.get((a, b))
        if hit is None:
            if len(self._memo) >= MEMO_SIZE:
                self._memo.clear()
            hit = self._memo[(a, b)] = self._predict(a, b)
        return hit

    @property
    def uses_memory_engine(self) -> bool:
        """Whether :meth:`predict` reads the memory controller's busy fraction (a fitted
        model that was fitted with it): the features :meth:`predict_features` takes."""
        return self.memory_engine and self._w is not None

    def _predict(self, a: AloneCounters, b: AloneCounters) -> Prediction:
        return self.predict_features(features(a, b, self.uses_memory_engine))

    def predict_features(self, x: Sequence[float]) -> Prediction:
        """The prediction for a pair whose :func:`features` (with :attr:`uses_memory_engine`)
        are ``x``: a caller predicting the same pairs under several fits computes them once.
        The sums run in the features' order, as they always have (the same floats)."""
        if self._w is None or self._cov is None:
            return Prediction(min(1.0, max(FLOOR, x[1])), PRIOR_SD)
        mean = min(1.0, max(FLOOR, sum(map(mul, x, self._w))))
        spread = sum(map(mul, x, [sum(map(mul, row, x)) for row in self._cov]))
        return Prediction(mean, math.sqrt(self.noise_sd**2 + max(0.0, spread)))


# three-point Gauss-Hermite rule for E[f(X)], X ~ N(mean, sd^2): nodes mean + {-1, 0, 1} * sqrt(3) sd
_NODES = (-np.sqrt(3.0), 0.0, np.sqrt(3.0))
_WEIGHTS = (1.0 / 6.0, 2.0 / 3.0, 1.0 / 6.0)


def expected_speeds(pred: Prediction) -> list[tuple[float, float]]:
    """(speed, weight) points whose weighted sum of ``f(speed)`` is E[f] under the prediction
    (speeds clipped to [0, 1]): the admission sums the pack's gain over them, so an
    uncertain pair is tried when its expected gain is positive, not refused for its spread."""
    return [(float(np.clip(pred.mean + n * pred.sd, 0.0, 1.0)), w) for n, w in zip(_NODES, _WEIGHTS)]
