"""MPS: percentages for jobs sharing a GPU (or a MIG instance) through MPS (`packer.mps`),
from measured utilisation, sent to each node's agent over the link with a generation number
(the agent refuses an older plan than the one it has). The jobs of one MPS-shared MIG
instance are planned together, their percentages counted within the instance."""
from __future__ import annotations

import logging

from packer.mps import device_key_of, mps_percentages, settled_plan
from slurm_plugin.helper.watches.round import RoundContext

log = logging.getLogger(__name__)


class MpsWatch:
    name = "mps"

    def __init__(self) -> None:
        # (node, device: packer.mps.device_key) -> {job: percent}
        self.mps_plan: dict[tuple[str, str], dict[int, int]] = {}
        self._sent: dict[tuple[str, str], dict[int, int]] = {}  # the plan last sent
        self._unsent: set[str] = set()  # nodes whose agent has not taken the newest plan yet
        self._generation = 0

    def round(self, ctx: RoundContext) -> None:
        self._plan_mps(ctx)

    def _plan_mps(self, ctx: RoundContext) -> None:
        by_device: dict[tuple[str, str], dict[int, float | None]] = {}
        for t in ctx.tracks.values():
            if not t.isolation.startswith("mps") or not t.samples:
                continue
            utils = [s.util_pct for s in t.samples if s.util_pct is not None][-30:]
            key = (t.node, device_key_of(t.gpu_index, t.isolation))
            by_device.setdefault(key, {})[t.job_id] = sum(utils) / len(utils) if utils else None
        s = ctx.settings
        plan = {
            key: dict(settled_plan(self.mps_plan.get(key),
                                   mps_percentages(utils, headroom=s.mps_headroom, floor_pct=s.mps_floor_pct),
                                   s.mps_replan_points))
            for key, utils in by_device.items()
        }
        if plan != self.mps_plan:
            self.mps_plan = plan
            self._unsent = set(self._by_node(plan)) | set(self._by_node(self._sent))
            self._generation = max(self._generation + 1, int(ctx.now * 1000))
        if self._unsent and ctx.agents is not None:
            self._send(ctx)

    @staticmethod
    def _by_node(plan: dict[tuple[str, str], dict[int, int]]) -> dict[str, dict[str, dict[str, int]]]:
        """{node: {device: {job: percent}}}, as each agent takes it."""
        nodes: dict[str, dict[str, dict[str, int]]] = {}
        for (node, device), pcts in plan.items():
            nodes.setdefault(node, {})[device] = {str(j): p for j, p in pcts.items()}
        return nodes

    def _send(self, ctx: RoundContext) -> None:
        """Each changed node's plan to its agent over the link (a node whose agent does not
        answer gets it on a later round; a plan an agent has newer of is not sent again)."""
        from slurm_plugin.agent.client import AgentRefused, AgentUnavailable, send_mps_plan

        by_node = self._by_node(self.mps_plan)
        for node in sorted(self._unsent):
            try:
                send_mps_plan(ctx.agents, node, by_node.get(node, {}), self._generation)
            except AgentUnavailable as exc:
                log.info("MPS plan of %s not sent yet: %s", node, exc)
                continue
            except AgentRefused as exc:
                log.warning("the agent of %s refused the MPS plan: %s", node, exc)
            self._unsent.discard(node)
        self._sent = dict(self.mps_plan)
