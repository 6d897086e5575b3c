"""Recurrence per identity level: which history a replayed job finds, and how good a guess it is.

Live (issue 34), a job's history is looked up by a workload identity with levels: the exact
normalised script (``exact``), the same script with argument values, numbers and paths
abstracted (``args``), the same user, job name and command (``name``). A job finds the
nearest level that has a history, or none (its first run: exclusive and profiled, or the
default size with ``pack_unknown``). The replay's trace has no identities (66 measured
workload profiles spread over Philly's jobs), so :class:`Recurrence` models them:

- a later job of a profile with a finished run matches a history with probability ``rate``
  (else it is a new identity: no history), at the ``exact``, ``args`` or ``name`` level in
  the proportions ``split``;
- an ``exact`` match knows the job's need (the replay's measured profile); a looser match
  knows a relative's: the job's true starting memory is the history's times
  ``exp(error[level] * z)``, ``z`` one of five equally likely normal quintile midpoints
  (:data:`QUINTILES`), so the estimate is that much off;
- the estimate from a looser level gets more headroom (``headroom[level]``, a fraction of the
  estimate on top of the packer's own headroom);
- a wrong guess (the job cannot get its starting memory in its share) fails at start-up and
  is contained by restart-oom (``packer.oom_restart``: requeued on a size that holds it); a
  level that guessed wrong ``max_wrong`` times for a workload is not used for it again
  (:class:`Guesses`).

Each job's draw is fixed by its trace id alone (the same in every run and policy). No
public trace with job identities could be fetched here (Alibaba PAI 2020's
``pai_group_tag_table`` and Helios' ``cluster_log`` are served outside GitHub), so ``rate``
is a stated parameter; docs/simulator.md reports the gain over a range of it.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass

from packer.decision import Estimate

log = logging.getLogger(__name__)

LEVELS = ("exact", "args", "name")
NO_MATCH = len(LEVELS)  # a new identity: no history at any level
#: midpoints of the five quintiles of a standard normal: the error draws, equally likely
QUINTILES = (-1.2816, -0.5244, 0.0, 0.5244, 1.2816)


def _unit(job_id: int, salt: int) -> float:
    """A fixed draw in [0, 1) from a job id (Knuth's multiplicative hash, salted)."""
    return (((job_id ^ salt) * 2654435761 + 0x9E3779B9) % (1 << 32)) / float(1 << 32)


@dataclass(frozen=True)
class Recurrence:
    """How later jobs of a workload find its history (see the module's docstring)."""

    rate: float = 0.6
    split: tuple[float, float, float] = (0.5, 0.3, 0.2)  # exact, args, name (of the matches)
    error: tuple[float, float, float] = (0.0, 0.2, 0.5)  # log-sd of need / history's, by level
    headroom: tuple[float, float, float] = (0.0, 0.15, 0.35)  # extra headroom, by level
    max_wrong: int = 2  # wrong guesses after which a level is not used for a workload

    def __post_init__(self) -> None:
        if not 0.0 <= self.rate <= 1.0:
            raise ValueError(f"recurrence rate {self.rate} must be in [0, 1]")
        for name in ("split", "error", "headroom"):
            vals = getattr(self, name)
            if len(vals) != len(LEVELS) or any(not math.isfinite(v) or v < 0 for v in vals):
                raise ValueError(f"recurrence {name} {vals}: give {len(LEVELS)} numbers >= 0")
        if abs(sum(self.split) - 1.0) > 1e-6:
            raise ValueError(f"recurrence split {self.split} must sum to 1")
        if self.max_wrong < 1:
            raise ValueError("recurrence max_wrong must be at least 1")

    def level_of(self, job_id: int) -> int:
        """The level at which a later job of a known workload finds a history (NO_MATCH: none)."""
        u = _unit(job_id, 0x5EED)
        if u >= self.rate:
            return NO_MATCH
        u /= self.rate  # uniform again within the matches
        acc = 0.0
        for level, share in enumerate(self.split):
            acc += share
            if u < acc:
                return level
        return len(LEVELS) - 1

    def error_of(self, job_id: int) -> int:
        """The job's error draw: an index into :data:`QUINTILES`."""
        return int(_unit(job_id, 0xE770) * len(QUINTILES)) % len(QUINTILES)

    def guess_bytes(self, true_bytes: int, level: int, error_index: int) -> int:
        """The estimate a ``level`` match gives for a job needing ``true_bytes`` at start,
        its level's headroom included."""
        if level == 0:
            return true_bytes
        history = true_bytes / math.exp(self.error[level] * QUINTILES[error_index])
        return int(history * (1.0 + self.headroom[level]))


class Guesses:
    """The replay's estimates by identity level, and the levels that stopped being used."""

    def __init__(self, rec: Recurrence):
        self.rec = rec
        self._wrong: dict[tuple[int, int], int] = {}  # (profile, level) -> wrong guesses
        self._off: set[tuple[int, int]] = set()  # levels not used for a workload any more
        self.version = 0  # changes when a level stops being used
        self.by_level = [0] * (len(LEVELS) + 1)  # packs decided at each level (+ unknown)
        self.wrong = [0] * len(LEVELS)  # wrong guesses per level

    def level(self, job) -> int:
        """The level whose history decides ``job`` now (NO_MATCH: none usable)."""
        level = job.guess[0]
        if level == NO_MATCH or (job.profile, level) in self._off:
            return NO_MATCH
        return level

    def key(self, job) -> tuple[int, int]:
        """What the job's estimate rests on (for the policy's memos)."""
        level = self.level(job)
        return (level, job.guess[1] if 0 < level < NO_MATCH else 0)

    def estimate(self, job, util_pct: float) -> Estimate | None:
        level = self.level(job)
        if level == NO_MATCH:
            return None
        peak = self.rec.guess_bytes(job.mem0, level, job.guess[1])
        return Estimate(peak, util_pct, 1, source=f"sim-{LEVELS[level]}")

    def packed(self, job) -> None:
        """``job`` starts packed: count the level it was sized by."""
        self.by_level[self.level(job) if job.remembered == 0 else NO_MATCH] += 1

    def out_of_memory(self, job) -> None:
        """``job`` could not get its starting memory in its share: the level that sized it
        guessed wrong (a job sized by a remembered restart, or growing later, is not a guess)."""
        level = self.level(job)
        if level == NO_MATCH or level == 0 or job.remembered or job.done > 0.0 or job.mem0 <= job.room:
            return
        self.wrong[level] += 1
        key = (job.profile, level)
        n = self._wrong[key] = self._wrong.get(key, 0) + 1
        if n >= self.rec.max_wrong and key not in self._off:
            self._off.add(key)
            self.version += 1
            log.debug("level %s stops being used for profile %d (%d wrong guesses)", LEVELS[level], job.profile, n)

    def summary(self) -> dict:
        return {"recurrence_rate": self.rec.rate,
                **{f"packs_by_{name}": self.by_level[i] for i, name in enumerate(LEVELS)},
                "packs_unknown_or_remembered": self.by_level[NO_MATCH],
                **{f"wrong_guesses_{name}": self.wrong[i] for i, name in enumerate(LEVELS) if i},
                "levels_dropped": len(self._off)}
