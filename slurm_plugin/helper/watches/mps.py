"""MPS: percentages for jobs sharing a GPU through MPS (`packer.mps`), from measured
utilisation, written as one plan file per node for its agent."""
from __future__ import annotations

import json
import logging
from pathlib import Path

from packer.mps import mps_percentages
from slurm_plugin.helper.watches.round import RoundContext

log = logging.getLogger(__name__)


class MpsWatch:
    name = "mps"

    def __init__(self) -> None:
        self.mps_plan: dict[tuple[str, int], dict[int, int]] = {}

    def round(self, ctx: RoundContext) -> None:
        self._plan_mps(ctx)

    def _plan_mps(self, ctx: RoundContext) -> None:
        by_gpu: dict[tuple[str, int], dict[int, float | None]] = {}
        for t in ctx.tracks.values():
            if not t.isolation.startswith("mps") or not t.samples:
                continue
            utils = [s.util_pct for s in t.samples if s.util_pct is not None][-30:]
            by_gpu.setdefault((t.node, t.gpu_index), {})[t.job_id] = sum(utils) / len(utils) if utils else None
        s = ctx.settings
        plan = {
            key: mps_percentages(utils, headroom=s.mps_headroom, floor_pct=s.mps_floor_pct)
            for key, utils in by_gpu.items()
        }
        if plan != self.mps_plan:
            self.mps_plan = plan
            self._write_mps_plan(ctx.agent_state_dir / "run")

    def _write_mps_plan(self, run: Path) -> None:
        """One JSON file per node for its agent: {gpu_index: {job_id: percent}}."""
        from slurm_plugin.metrics import write_file

        nodes: dict[str, dict[str, dict[str, int]]] = {}
        for (node, gpu), pcts in self.mps_plan.items():
            nodes.setdefault(node, {})[str(gpu)] = {str(j): p for j, p in pcts.items()}
        for node, doc in nodes.items():
            try:
                write_file(run / f"mps-plan-{node}.json", json.dumps(doc, sort_keys=True))
            except OSError as exc:
                log.info("cannot write the MPS plan of %s: %s", node, exc)
