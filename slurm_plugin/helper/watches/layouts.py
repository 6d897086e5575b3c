"""Queue layouts: idle MIG slices are laid out ahead of the pending queue."""
from __future__ import annotations

import logging

from slurm_plugin.agent.client import AgentRefused, AgentUnavailable, send_layout
from slurm_plugin.helper.watches.round import RoundContext
from slurm_plugin.helper.watches.tracks import job_shards
from slurm_plugin.slurm.gres import expand_hostlist

log = logging.getLogger(__name__)

LAYOUT_REFRESH_S = 5.0  # the queue's needs are re-sent this often even when unchanged


class QueueLayoutWatch:
    name = "queue-layouts"

    def __init__(self) -> None:
        self._layout_pushed: dict[str, tuple[tuple, float]] = {}  # node -> (what, when) last sent

    def round(self, ctx: RoundContext) -> None:
        self._follow_queue(ctx)

    def _follow_queue(self, ctx: RoundContext) -> None:
        """Tell every node agent what the queue's packed jobs need, head first, so its idle
        MIG slices are laid out ahead of them (`[monitor] mig_layout`); log the changes."""
        policy = ctx.settings.mig_layout
        if policy == "off" or not ctx.enforcing:
            return
        pending = sorted(
            (j for j in ctx.jobs.values() if j.state == "PENDING" and not j.held and job_shards(j)),
            key=lambda j: (-(j.priority or 0), j.submit_time.timestamp() if j.submit_time else 0.0, j.job_id),
        )
        pending = pending[:32]
        shards, ids = [job_shards(j) for j in pending], [j.job_id for j in pending]
        what = (policy, tuple(shards), tuple(ids))  # what a node was last sent
        if ctx.agents is None:
            return
        now = ctx.now
        for node in self._nodes(ctx):
            pushed = self._layout_pushed.get(node)
            if pushed is not None and pushed[0] == what and now - pushed[1] < LAYOUT_REFRESH_S:
                continue
            if node in ctx.stale_nodes:
                continue  # its agent is down or behind: the layout waits until it answers
            try:
                # the jobs named: one that started on the node since this queue was read gets no slice
                changes = send_layout(ctx.agents, node, policy, shards, int(now * 1000), ids)
            except AgentUnavailable as exc:
                log.debug("layout not sent to %s: %s", node, exc)
                continue
            except AgentRefused as exc:
                self._layout_pushed[node] = (what, now)
                log.info("agent of %s refused the layout: %s", node, exc)
                continue
            self._layout_pushed[node] = (what, now)
            if changes:
                text = ", ".join(f"GPU {c['gpu']} {c['op']} {c['profile']}@{c['start']}" for c in changes)
                ctx.actions.log_event("mig-reconfigure", f"{node} ({policy}, {len(shards)} pending packed): {text}",
                                      None, node=node, policy=policy, changes=changes)

    @staticmethod
    def _nodes(ctx: RoundContext) -> list[str]:
        """Every node with an agent: those the link knows (gpupack.toml's [agents], Slurm's
        NodeAddr), else those running jobs."""
        known = getattr(getattr(ctx.agents, "directory", None), "nodes", None)
        if known is not None:
            return list(known())
        return sorted({n for j in ctx.jobs.values() if j.nodes for n in expand_hostlist(j.nodes)})
