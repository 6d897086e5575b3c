"""The monitor's watches: one module per duty, run in the order of `Monitor.watches`.

Each watch has one method, `round(ctx)`, reads a `RoundContext` and acts only through
`ctx.actions` (see `round.py` and `actions.py`).
"""
from __future__ import annotations

from slurm_plugin.helper.watches.actions import Actions
from slurm_plugin.helper.watches.round import RoundContext, Watch
from slurm_plugin.helper.watches.state import WatchState
from slurm_plugin.helper.watches.tracks import ACTIVE, Track

__all__ = ["ACTIVE", "Actions", "RoundContext", "Track", "Watch", "WatchState"]
