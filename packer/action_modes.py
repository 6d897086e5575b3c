"""Per-action modes of the run-time actions: `off | shadow | enforce`.

`shadow` decides as `enforce` would, records the decision with its measured reason (an event
and a row of the action ledger) and leaves the job alone; its outcome is measured later, so
an administrator switches an action to `enforce` from evidence (`gpupack actions report`).
An action with no mode of its own follows the helper's `mode`: `enforce` in enforce mode,
`shadow` in observe and advise mode.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from packer.config import ConfigError

#: the run-time actions that take a mode
ACTION_KINDS = ("requeue-contention", "restart-memory", "grow-preempt", "regroup", "restart-oom", "restore-whole",
                "pack-at-dispatch")
ACTION_MODES = ("off", "shadow", "enforce")


@dataclass(frozen=True)
class ActionMode:
    mode: str  # off | shadow | enforce
    label: str  # what the events say: the action's own mode, or the helper mode it follows

    @property
    def acts(self) -> bool:
        return self.mode == "enforce"


def check_action_modes(table: Mapping[str, object]) -> None:
    """Raise ConfigError naming the key and the fix when `[monitor.actions]` is wrong."""
    for kind, mode in table.items():
        if kind not in ACTION_KINDS:
            raise ConfigError(f"[monitor.actions] {kind!r} is not an action; known: {', '.join(ACTION_KINDS)}")
        if mode not in ACTION_MODES:
            raise ConfigError(f"[monitor.actions] {kind} = {mode!r}: use one of {', '.join(ACTION_MODES)}")


def action_mode(configured: Mapping[str, str], kind: str, helper_mode: str) -> ActionMode:
    """The mode of `kind`: its own when configured, else the helper's (enforce, else shadow)."""
    own = configured.get(kind)
    if own:
        return ActionMode(own, own)
    return ActionMode("enforce" if helper_mode == "enforce" else "shadow", helper_mode)
