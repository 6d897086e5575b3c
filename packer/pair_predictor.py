"""Pair speeds with their uncertainty, as one rules object gives them live and in the replay. Pure.

:class:`PairPredictor` answers "how fast does workload ``a`` run beside ``b``" from what is
known of each workload *alone* (``packer.pair_model.AloneCounters``: the GPU's busy fraction
and the memory it holds, as the node agent records them; the memory controller's busy
fraction where it is recorded) and the pairs measured so far:

- a measured pair: its measured speed, with no spread (``MEASURED_SD``);
- any other pair of two workloads with counters: the pair model fitted on the measured pairs
  (``packer.pair_model.PairModel``: Bayesian linear regression, a mean and a standard
  deviation; before ``MIN_PAIRS`` measured pairs, processor sharing with a wide spread);
- a workload without counters: no prediction (None).

A pack is judged at :meth:`PairPredictor.trial_speed`: a measured pair's speed, an unmeasured
pair's upper bound ``min(1, mean + trial_z * sd)`` (optimism in the face of uncertainty:
with ``trial_z = 1.96`` a pair is tried unless the model is 95 % sure it is too slow). A pair
is learnt only by running it, so judging an unmeasured pair on its mean refuses every pair
the model guesses low and never learns it is wrong (on the harsh stress table 49 pairs are
ever measured that way, against 3,449 when tried); a pair tried wrongly costs one watch
period (the contention watch requeues it on its measured speed, which is then known).

Built through ``SuiteRules.pair_predictor`` by the live submit path (the history store's
per-workload estimates and measured pair speeds) and by the replay's ``counters`` pair
knowledge (the profiles' utilisation and memory, the pairs the replay has run).
"""
from __future__ import annotations

from collections import ChainMap
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, replace
from typing import Generic, TypeVar

from packer.pair_model import AloneCounters, PairModel, Prediction

K = TypeVar("K", bound=Hashable)
MEASURED_SD = 0.0  # a measured pair's speed is taken as known
TRIAL_Z = 1.96  # an unmeasured pair is tried at its 95 % upper bound


@dataclass(frozen=True)
class PairPredictor(Generic[K]):
    """Speeds of "a beside b" by workload key: measured, else the fitted pair model."""

    solo: Mapping[K, AloneCounters]
    measured: Mapping[tuple[K, K], float]
    model: PairModel
    trial_z: float = TRIAL_Z

    def __post_init__(self) -> None:
        if not self.trial_z >= 0:
            raise ValueError(f"trial_z is a number of standard deviations >= 0 (0: the mean), got {self.trial_z}")

    @classmethod
    def build(cls, solo: Mapping[K, AloneCounters], measured: Mapping[tuple[K, K], float],
              trial_z: float = TRIAL_Z) -> "PairPredictor[K]":
        """Fit the pair model on the measured pairs whose two workloads have counters. The
        memory controller's busy fraction is used only when every workload has it (a model
        must see the same features for every pair it predicts)."""
        for key, s in measured.items():
            if not 0.0 <= s <= 1.0:
                raise ValueError(f"measured speed of {key} must be in [0, 1] (1: as fast as alone), got {s}")
        engine = bool(solo) and all(c.mem_busy is not None for c in solo.values())
        rows = [(solo[a], solo[b], s) for (a, b), s in measured.items() if a in solo and b in solo]
        return cls(solo, measured, PairModel.fit(rows, memory_engine=engine), trial_z)

    def including(self, key: K, counters: AloneCounters | None,
                  measured: Mapping[tuple[K, K], float] | None = None) -> "PairPredictor[K]":
        """The same model with one more workload (a newcomer: its counters, its measured
        pairs); the fit is not redone (the live path adds each submission to a view's model).
        A newcomer without the memory controller's counter where the model uses it: no counters."""
        solo: Mapping[K, AloneCounters] = self.solo
        if counters is not None and not (self.model.memory_engine and counters.mem_busy is None):
            solo = ChainMap({key: counters}, self.solo)
        pairs = ChainMap(dict(measured), self.measured) if measured else self.measured
        return replace(self, solo=solo, measured=pairs)

    def predict(self, a: K, b: K) -> Prediction | None:
        """``a``'s speed beside ``b`` (mean, sd); None when either has no counters and the
        pair was not measured."""
        hit = self.measured.get((a, b))
        if hit is not None:
            return Prediction(hit, MEASURED_SD)
        ca, cb = self.solo.get(a), self.solo.get(b)
        if ca is None or cb is None:
            return None
        return self.model.predict(ca, cb)

    def speed(self, a: K, b: K) -> float | None:
        """The predicted mean."""
        p = self.predict(a, b)
        return None if p is None else p.mean

    def trial_speed(self, a: K, b: K) -> float | None:
        """The speed a pack is judged at (``packer.corunner.PairSpeed``): measured, else
        ``min(1, mean + trial_z * sd)``; None: no prediction."""
        p = self.predict(a, b)
        return None if p is None else self.trial(p)

    def trial(self, p: Prediction) -> float:
        """The upper bound a prediction is judged at."""
        return min(1.0, p.mean + self.trial_z * p.sd)

    def sd(self, a: K, b: K) -> float | None:
        """The prediction's standard deviation (0 for a measured pair)."""
        p = self.predict(a, b)
        return None if p is None else p.sd
