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


def tracked(monitor, now: float, samples) -> None:
    """The tracks a round at ``now`` makes of ``samples`` (`TrackWatch`, the round's first
    watch): the input of a watch that judges runs by their samples."""
    from slurm_plugin.helper.watches.track_watch import TrackWatch

    TrackWatch().round(context(monitor, now, samples))


class RecordingLink:
    """The agents as a watch reaches them (`AgentLink.call`): each call recorded; ``down``: every
    agent refuses the connection; ``answer``: what an agent answers."""

    def __init__(self, nodes=("node1", "node2"), answer=None):
        self.calls: list[tuple[str, str, dict]] = []
        self.down = False
        self.answer = answer or {"status": "ok", "changes": []}
        self.directory = type("Directory", (), {"nodes": staticmethod(lambda: list(nodes))})()

    def call(self, node, op, request=None, timeout=None):
        from slurm_plugin.agent.client import AgentUnavailable

        if self.down:
            raise AgentUnavailable("connection refused")
        self.calls.append((node, op, request or {}))
        return self.answer


def round_of(watch, monitor, now: float = float(FAKE_EPOCH)) -> RoundContext:
    """``watch``'s round at ``now`` on its own; the context it ran on (what it `acted` on)."""
    ctx = context(monitor, now)
    watch.round(ctx)
    return ctx
