"""Which level of a workload's identity sizes a job: the nearest with history. Pure.

The store gives, for each level of a submission's identity (``packer.workload_identity``),
the estimate of the runs recorded at that level's key and how often that level's guesses
went right and wrong for it (``LevelRecord``). The rules:

- the nearest level with a measured estimate sizes the job, up to ``[packer]
  loosest_history_level``; its estimate carries its level, so the packer adds that level's
  headroom (``PackerConfig.headroom_for``) and the AdminComment says ``lvl=...``;
- a lower bound of the exact script (a run of it failed, was requeued or cut short) raises a
  looser level's estimate: the job is never sized below what this very script reached;
- a looser level is *demoted* for a key (passed over) once it guessed wrong
  ``level_wrong_guesses`` times and more often than right (:func:`demoted`): a wrong guess is
  a job it sized that restart-oom or a memory-forecast restart had to move (counted by the
  helper's watches), a right one a run it sized that completed as a measurement. The exact
  level is never demoted: a wrong size there is remembered (``Store.remember_size``).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from packer.config import PackerConfig
from packer.decision import Estimate
from packer.workload_identity import EXACT, LEVELS


@dataclass(frozen=True)
class LevelRecord:
    """What the store holds for one level of a submission's identity."""

    level: str
    key: str
    estimate: Estimate | None
    wrong: int = 0
    right: int = 0


@dataclass(frozen=True)
class LevelChoice:
    """The estimate that sizes the job (its ``level`` set; None: no level has history), and
    the levels passed over, (level, why) each."""

    estimate: Estimate | None
    passed_over: tuple[tuple[str, str], ...] = ()

    @property
    def level(self) -> str | None:
        return None if self.estimate is None or not self.estimate.measured else self.estimate.level


def demoted(wrong: int, right: int, limit: int) -> bool:
    """A looser level guessed wrong ``limit`` times or more, and more often than right."""
    return wrong >= limit and wrong > right


def levels_in_use(config: PackerConfig) -> tuple[str, ...]:
    """The levels looked at, nearest first, down to ``loosest_history_level``."""
    return LEVELS[: LEVELS.index(config.loosest_history_level) + 1]


def nearest_level(records: Sequence[LevelRecord], config: PackerConfig) -> LevelChoice:
    """The estimate of the nearest level with a measured history (the rules above); with
    none, the exact level's lower bounds as they are (no history: the packer profiles it)."""
    by_level = {r.level: r for r in records}
    exact = by_level.get(EXACT)
    exact_est = exact.estimate if exact is not None else None
    if exact_est is not None and exact_est.measured:
        return LevelChoice(replace(exact_est, level=EXACT))
    bound = exact_est.peak_mem_bytes if exact_est is not None else 0
    passed: list[tuple[str, str]] = []
    for level in levels_in_use(config)[1:]:
        r = by_level.get(level)
        if r is None or r.estimate is None or not r.estimate.measured:
            continue
        if demoted(r.wrong, r.right, config.level_wrong_guesses):
            passed.append((level, f"demoted: {r.wrong} wrong, {r.right} right"))
            continue
        est = replace(r.estimate, level=level)
        if bound > est.peak_mem_bytes:
            est = replace(est, peak_mem_bytes=bound, lower_bound_bytes=max(est.lower_bound_bytes, bound))
        return LevelChoice(est, tuple(passed))
    return LevelChoice(exact_est, tuple(passed))
