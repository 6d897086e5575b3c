"""One watch's round on its own: the `RoundContext` a monitor over the fake Slurm makes for the
jobs listed now, handed to one watch (not `Monitor.tick`, which runs them all).

(Imported as `tests.unit.helper.watches.watch_support`; not a test module.)
"""
from __future__ import annotations

from slurm_plugin.helper.watches.round import RoundContext
from slurm_plugin.slurm.fake import FAKE_EPOCH


def context(monitor, now: float = float(FAKE_EPOCH), samples=()) -> RoundContext:
    """The round at ``now``: every job the fake Slurm lists, and ``samples`` as the agents' newest."""
    listing = monitor.runner.jobs_in_play(also=monitor.state.tracks.keys())
    return monitor._context(now, listing, list(samples))


def events(helper, kind: str | None = None) -> list:
    return [e for e in helper.store.events() if kind is None or e.kind == kind]
