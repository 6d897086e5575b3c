"""Contention seen in the GPU's own counters, for jobs that never report their progress.

A job slowed by a newcomer keeps the engines busy for a smaller share of the time: its
utilisation (NVML's per-process ``smUtil`` on a whole GPU or MPS, DCGM's graphics-engine
activity of its MIG instance) falls roughly in proportion to its speed. The detector
compares a senior job's utilisation before the newcomer started with its utilisation
after (from ``settle_s`` on), per agent round:

- the **upper quartile** of each side (the job's level when it is working), not a mean or
  even a median: the counters have stall samples (a data loader, a host sync) and pauses of
  a few seconds (a checkpoint, an evaluation pass) far below the usual level, which only
  ever pull values down; a slowdown lowers every value, the upper quartile included;
- the **relative drop** of that level must exceed ``threshold`` (the same fraction as a
  throughput loss: a 10 % slower job is about 10 % less busy);
- the after side is the **first** ``window`` rounds from ``settle_s`` on: a newcomer's
  harm shows when it starts; a drop much later is more likely the senior's own phase
  change (an evaluation pass, a checkpoint), so the judgement is over once the window is
  full and no false alarm can come from a long watch;
- and it must stand out of the **noise**: the drop must exceed ``z`` standard errors of
  the difference of the two levels, the spread being measured on the job's own samples
  before the newcomer came (MAD, scaled to a standard deviation; at least one point of
  percentage, the counters' quantisation). A drop inside the noise is no drop.

``z``, the window and the minimum samples were chosen with ``gpupack simgpu counters-bench``
(detection delay and false-positive rate under the simulated counters' noise).
Pure: no I/O.
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from statistics import median

LEVEL_Q = 0.75  # the quantile taken as a side's level
MAD_TO_SD = 1.4826  # a normal distribution's standard deviation per median absolute deviation
LEVEL_SE = 1.3617  # standard error of the 0.75 quantile, in standard errors of a mean (normal samples)
QUANTUM_PCT = 1.0  # the counters are integer percentages


@dataclass(frozen=True)
class CounterRule:
    """How a utilisation drop is judged (see the module docstring)."""

    threshold: float = 0.10
    z: float = 4.0
    window: int = 20  # samples (agent rounds) per side, at most
    min_before: int = 5
    min_after: int = 5
    settle_s: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.threshold < 1:
            raise ValueError(f"threshold must be a fraction in (0, 1), got {self.threshold}")
        if self.z <= 0 or self.min_before < 2 or self.min_after < 1 or self.window < max(self.min_before, self.min_after):
            raise ValueError("need z > 0, min_before >= 2, min_after >= 1 and window >= both minimums")


@dataclass(frozen=True)
class UtilDrop:
    """A senior's utilisation before and after a newcomer started (percent)."""

    before: float  # level (upper quartile) before
    after: float  # level after
    noise: float  # standard deviation of one sample, measured before
    n_before: int
    n_after: int
    loss: float  # relative drop, 0.3 = 30 % less busy (0 when it rose)
    significant: bool  # the drop stands out of the noise (z standard errors)

    def hurt(self, threshold: float) -> bool:
        return self.significant and self.loss > threshold


def utilisation_drop(samples: Iterable[tuple[float, float]], since: float,
                     rule: CounterRule = CounterRule()) -> UtilDrop | None:
    """The drop of a job's utilisation after ``since``; None until both sides have enough
    samples or when it was idle before."""
    ordered = sorted((at, v) for at, v in samples if v is not None and math.isfinite(v))
    before = [v for at, v in ordered if at < since][-rule.window:]
    after = [v for at, v in ordered if at >= since + rule.settle_s][:rule.window]
    if len(before) < rule.min_before or len(after) < rule.min_after:
        return None
    m_before, m_after = quantile(before, LEVEL_Q), quantile(after, LEVEL_Q)
    if m_before <= 0:
        return None
    centre = median(before)
    spread = median(abs(v - centre) for v in before) * MAD_TO_SD
    sd = max(spread, QUANTUM_PCT)
    se = LEVEL_SE * sd * math.sqrt(1 / len(before) + 1 / len(after))
    loss = max(0.0, 1.0 - m_after / m_before)
    return UtilDrop(m_before, m_after, sd, len(before), len(after), loss,
                    significant=(m_before - m_after) > rule.z * se)


def quantile(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (linear between order statistics)."""
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)
