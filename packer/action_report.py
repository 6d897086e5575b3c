"""Per action: how often it was decided, in which mode, and how often it was right.

- precision = right / (right + wrong): of the decisions whose outcome is known, the share
  that was right (a wrong requeue or restart throws away a user's work);
- recall = right / (right + missed): of the runs that needed the action (a run that ran out
  of memory; a newcomer whose departure let its neighbour's speed recover), the share it
  caught. A miss is such a run with no prior decision of the action.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass

from packer.action_modes import ACTION_KINDS
from packer.action_outcomes import MISSED, RIGHT, UNKNOWN, WRONG


@dataclass
class ActionSummary:
    action: str
    shadow: int = 0
    enforce: int = 0
    right: int = 0
    wrong: int = 0
    unknown: int = 0
    pending: int = 0  # decided, outcome not known yet
    missed: int = 0

    @property
    def precision(self) -> float | None:
        judged = self.right + self.wrong
        return self.right / judged if judged else None

    @property
    def recall(self) -> float | None:
        needed = self.right + self.missed
        return self.right / needed if needed else None

    def as_dict(self) -> dict:
        return {**asdict(self), "precision": self.precision, "recall": self.recall}


def summarise(rows: Iterable[tuple[str, str, str | None]]) -> list[ActionSummary]:
    """`rows`: (action, mode, outcome) of each ledger row; every known action is listed."""
    out = {kind: ActionSummary(kind) for kind in ACTION_KINDS}
    for action, mode, outcome in rows:
        s = out.setdefault(action, ActionSummary(action))
        if outcome == MISSED:
            s.missed += 1
            continue
        if mode == "shadow":
            s.shadow += 1
        elif mode == "enforce":
            s.enforce += 1
        if outcome == RIGHT:
            s.right += 1
        elif outcome == WRONG:
            s.wrong += 1
        elif outcome == UNKNOWN:
            s.unknown += 1
        else:
            s.pending += 1
    return list(out.values())
