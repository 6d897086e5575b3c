"""Queue layouts (thesis 4.3): idle MIG slices are laid out ahead of the pending queue."""
from __future__ import annotations

import logging

from slurm_plugin.helper.watches.round import RoundContext
from slurm_plugin.helper.watches.tracks import job_shards

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
        MIG slices are laid out ahead of them (the thesis' layout policies); log the changes."""
        policy = ctx.settings.mig_layout
        if policy == "off" or not ctx.enforcing:
            return
        pending = sorted(
            (j for j in ctx.jobs.values() if j.state == "PENDING" and not j.held and job_shards(j)),
            key=lambda j: (-(j.priority or 0), j.submit_time.timestamp() if j.submit_time else 0.0, j.job_id),
        )
        shards = [job_shards(j) for j in pending][:32]
        try:
            from slurm_plugin.agent.client import AgentUnavailable, ask as agent_ask
        except ImportError:  # no node agent installed on this host
            return
        now = ctx.now
        run = ctx.agent_state_dir / "run"
        for sock in sorted(run.glob("agent-*.sock")):
            node = sock.name[len("agent-"):-len(".sock")]
            pushed = self._layout_pushed.get(node)
            if pushed is not None and pushed[0] == (policy, tuple(shards)) and now - pushed[1] < LAYOUT_REFRESH_S:
                continue
            try:
                answer = agent_ask(sock, {"op": "layout", "policy": policy, "pending_shards": shards}, timeout=2.0)
            except AgentUnavailable as exc:
                log.debug("layout not sent to %s: %s", node, exc)
                continue
            self._layout_pushed[node] = ((policy, tuple(shards)), now)
            changes = answer.get("changes") or []
            if answer.get("status") != "ok":
                log.info("agent of %s refused the layout: %s", node, answer.get("reason"))
            elif changes:
                text = ", ".join(f"GPU {c['gpu']} {c['op']} {c['profile']}@{c['start']}" for c in changes)
                ctx.actions.log_event("mig-reconfigure", f"{node} ({policy}, {len(shards)} pending packed): {text}",
                                      None, node=node, policy=policy, changes=changes)
