"""What a policy knows of pair speeds: the truth (``oracle``), what the replay has run
(``observed``), or per-job features alone (``model``).

On a real cluster nobody hands the packer a table of every pair's slowdown. It learns a
pair's speeds after it has run that pair (the node agent measures each job's throughput
against its history), and it has to guess the others from what it knows of each job alone
(utilisation, memory, Lucid's sharing label). The simulator's replay slows jobs by the
measured pair table (:class:`~simulator.workload.PairTable`, or the table
``--truth`` gives: :mod:`simulator.truth`); a policy that predicted from that
same table would be exact by construction. So:

- ``oracle``: the truth table: an upper bound, not what a site gets;
- ``observed`` (default): a pair the replay has run (and watched for ``monitor_s``) is
  known exactly; any other pair is predicted by the feature model;
- ``model``: every pair predicted by the feature model;
- ``counters``: as ``observed``, but the other pairs are predicted with their spread by the
  rules' pair model (``SuiteRules.pair_predictor``, ``packer.pair_predictor``: what the live
  submit path predicts with) from each profile's utilisation and memory alone, refitted on
  the pairs observed as the feature model is; an unobserved pair is judged at its upper
  bound (``PairPredictor.trial_speed``: tried unless the model is sure it is too slow).

The feature model (:mod:`packer.pair_knowledge`, the one the live helper's steering uses) is a ridge regression of a job's speed beside another on features of the
two jobs alone (both utilisations, their product and square, the processor-sharing share
``min(1, 100 / (u_a + u_b))``, both memories, both "jumbo" labels), refitted on the pairs
observed so far whenever their number has grown by a quarter (a site's model learns from
its own pairs). Before ``MIN_FIT`` pairs are observed it is processor sharing alone.

Every prediction used for a pack (each job's speed on that GPU) is scored against the
speed the replay gives it when the pack is watched; ``error`` gives the mean absolute error and the bias (predicted minus true).
"""
from __future__ import annotations

from dataclasses import dataclass

from typing import TYPE_CHECKING

import numpy as np

from packer.pair_knowledge import MIN_FIT, N_FEATURES, ObservedPairs, pair_features, prior_speed, ridge_fit, \
    ridge_predict
from packer.pair_model import AloneCounters, features
from simulator.workload import PairTable, WorkloadProfile

if TYPE_CHECKING:
    from packer.rules import SuiteRules

MODES = ("observed", "model", "oracle", "counters")
__all__ = ["MIN_FIT", "MODES", "PairKnowledge", "PredictionError"]


@dataclass
class PredictionError:
    """Pack-time predictions against the truth (each job of each watched pack)."""

    n: int = 0
    abs_sum: float = 0.0
    signed_sum: float = 0.0
    n_unseen: int = 0  # predictions for a pair not yet observed
    abs_unseen: float = 0.0

    def add(self, predicted: float, truth: float, seen: bool) -> None:
        d = predicted - truth
        self.n += 1
        self.abs_sum += abs(d)
        self.signed_sum += d
        if not seen:
            self.n_unseen += 1
            self.abs_unseen += abs(d)

    def as_dict(self) -> dict:
        return {
            "pred_n": self.n,
            "pred_mae": round(self.abs_sum / self.n, 4) if self.n else 0.0,
            "pred_bias": round(self.signed_sum / self.n, 4) if self.n else 0.0,
            "pred_unseen_n": self.n_unseen,
            "pred_unseen_mae": round(self.abs_unseen / self.n_unseen, 4) if self.n_unseen else 0.0,
        }


class PairKnowledge:
    """A policy's view of pair speeds, by profile index; ``version`` changes when it does."""

    def __init__(self, mode: str, profiles: list[WorkloadProfile], truth: PairTable,
                 rules: "SuiteRules | None" = None):
        if mode not in MODES:
            raise ValueError(f"unknown pair knowledge {mode!r}; choose one of {', '.join(MODES)}")
        if mode == "counters" and rules is None:
            raise ValueError("the counters pair knowledge predicts with the run's rules: pass rules")
        self.rules = rules
        self.mode = mode
        self.profiles = profiles
        self.truth = truth
        n = len(profiles)
        self._x = np.array([[pair_features(profiles[a], profiles[b]) for b in range(n)]
                            for a in range(n)], dtype=float) if n else np.zeros((0, 0, N_FEATURES))
        self.pairs: ObservedPairs[int] = ObservedPairs()
        self._weights: np.ndarray | None = None
        self._solo = {p.index: AloneCounters.from_history(p.util_pct, p.mem_bytes) for p in profiles}
        self._cfeat: dict[bool, list[list[list[float]]]] = {}  # counters mode: pair features
        self._model = self._prior() if mode != "counters" else self._counters()
        self.version = 0  # any prediction changed
        self.model_version = 0  # the feature model was refitted
        self.profile_version = [0] * n  # a pair of this profile became known
        self.learned: list[tuple[int, int]] = []  # the pairs that became known, in order (each bumped version)
        self.error = PredictionError()

    # ---------------------------------------------------------------- prediction
    @property
    def seen(self) -> dict[tuple[int, int], float]:
        """The pairs observed so far: (a, b) -> speed of a beside b."""
        return self.pairs.seen

    def _prior(self) -> np.ndarray:
        return prior_speed(self._x) if self._x.size else self._x

    def _counters(self) -> np.ndarray:
        """The rules' pair model fitted on the pairs observed: every pair's trial speed (the
        model's, a pair observed included: :meth:`speed` answers those from ``seen``)."""
        assert self.rules is not None
        pred = self.rules.pair_predictor(self._solo, self.seen)
        model, trial = pred.model, pred.trial
        x = self._counter_features(model.uses_memory_engine)
        n = len(self.profiles)
        return np.array([[trial(model.predict_features(x[a][b])) for b in range(n)] for a in range(n)])

    def _counter_features(self, memory_engine: bool) -> list[list[list[float]]]:
        """Every pair's features for the rules' pair model (they depend on the two profiles'
        counters alone, not on the fit): computed once per run, not at each refit."""
        hit = self._cfeat.get(memory_engine)
        if hit is None:
            solo, n = self._solo, len(self.profiles)
            hit = self._cfeat[memory_engine] = [[features(solo[a], solo[b], memory_engine) for b in range(n)]
                                                for a in range(n)]
        return hit

    def speed(self, a: int, b: int) -> float:
        """Predicted speed of profile ``a`` beside profile ``b`` (1 = as fast as alone)."""
        if self.mode == "oracle":
            return self.truth.speed(a, b)
        if self.mode in ("observed", "counters"):
            hit = self.seen.get((a, b))
            if hit is not None:
                return hit
        return float(self._model[a, b])

    def stamp(self, a: int) -> tuple[int, int]:
        """Changes whenever a prediction of a pair of ``a`` may have changed."""
        return self.model_version, self.profile_version[a]

    def known(self, a: int, b: int) -> bool:
        return self.mode == "oracle" or (self.mode in ("observed", "counters") and (a, b) in self.seen)

    # ---------------------------------------------------------------- learning
    def observe(self, a: int, b: int) -> None:
        """The replay ran ``a`` beside ``b`` alone on a GPU and measured its speed: learn the
        pair (and maybe refit the model)."""
        if not self.pairs.add(a, b, self.truth.speed(a, b)):
            return
        if self.mode == "oracle":
            return
        if self.mode in ("observed", "counters"):
            self.version += 1
            self.profile_version[a] += 1
            self.profile_version[b] += 1
            self.learned.append((a, b))  # only speed(a, b) changed (what the memos read)
        if self.pairs.refit_due():
            self._fit()

    def _fit(self) -> None:
        if self.mode == "counters":
            self._model = self._counters()
            self.pairs.fitted()
            self.version += 1
            self.model_version += 1
            return
        keys = list(self.seen)
        x = np.array([self._x[a, b] for a, b in keys])
        y = np.array([self.seen[k] for k in keys])
        self._weights = ridge_fit(x, y)
        self._model = ridge_predict(self._x, self._weights)
        self.pairs.fitted()
        self.version += 1
        self.model_version += 1

    def model_error(self) -> dict:
        """The feature model's error over every pair of the truth table that was measured
        (what it would get wrong on pairs it has not met), and how many pairs it saw."""
        if self.mode == "oracle" or not self.truth.measured:
            return {"pairs_observed": len(self.seen)}
        keys = list(self.truth.measured)
        pred = np.array([self._model[a, b] for a, b in keys])
        true = np.array([self.truth.measured[k] for k in keys])
        return {"pairs_observed": len(self.seen),
                "model_mae_all_measured": round(float(np.abs(pred - true).mean()), 4)}
