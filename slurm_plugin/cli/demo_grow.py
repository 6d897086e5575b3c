"""`gpupack demo --scenario grow`: a packed job that must grow evicts its younger neighbour.

Two packed jobs on node1's first GPU (shard:2 and shard:2 of its 5 shares): the older one's memory grows
(`simgpu run --mem-growth`), the controller helper's grow watch requeues the younger one
(held, then at the head of the queue) and restarts the older one at once on a larger share,
pinned to its node. What happened is read back from Slurm and from the event log.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from slurm_plugin.cli.demo_steps import excluded_by, sbatch, scenario_events, wait_until, write_script

GROW_KINDS = ("grow-evict", "grow-restart", "grow-release", "grow-skip", "restart-memory")


@dataclass
class GrowOutcome:
    """What the grow scenario saw."""

    grower: int
    neighbour: int
    events: list[dict] = field(default_factory=list)  # grow-… and restart-memory events, oldest first
    grower_start: float = 0.0  # when its last run started (Slurm's StartTime)
    neighbour_start: float = 0.0
    neighbour_restarts: int = 0
    grower_restarts: int = 0
    grower_gres: str = ""
    grower_excluded: list[str] = field(default_factory=list)
    grower_node: str = ""
    neighbour_state: str = ""
    ok: bool = False

    def to_dict(self) -> dict:
        return asdict(self)


def grow_script(python: str) -> str:
    """10 GiB + 4 MiB every 50 ms: past shard:2 (~20 GiB) after ~2 min; the forecast warns before.
    (It starts high so that the ramp never doubles its memory: the predictor does not
    extrapolate a regime within which memory more than doubled, a load.)
    A fresh script each run (its fingerprint has no remembered size), so the forecast decides."""
    return (f"#!/bin/sh\n# gpupack demo: a training job whose memory grows (run {time.time_ns()})\n"
            f"exec {python} -m slurm_plugin simgpu run --mem-start 10GiB --mem-growth 4MiB "
            "--iters 5000 --iter-ms 50 --workload ResNet18\n")


def run_grow(env: dict[str, str], workdir: Path, database: Path, python: str, timeout: float = 300) -> GrowOutcome:
    """Run the scenario on the cluster whose Slurm environment is `env` and whose helper
    writes its events to `database`; the job scripts and outputs go to `workdir`."""
    from slurm_plugin.slurm.runner import SlurmRunner

    runner = SlurmRunner(env=env)
    script = write_script(workdir / "grow.sh", grow_script(python))
    sleeper = write_script(workdir / "neighbour.sh",
                           "#!/bin/sh\n# gpupack demo: a younger packed neighbour\nsleep 120\n")

    def submit(path: Path, name: str, shards: int, minutes: int = 10) -> int:
        return sbatch(env, workdir, path, name, "-w", "node1", f"--gres=shard:{shards}", "-t", str(minutes))

    def events() -> list[dict]:
        return scenario_events(database, (grower, neighbour), GROW_KINDS)

    def settled() -> bool:
        kinds = {e["kind"] for e in events()}
        job = runner.job(grower)
        return ("grow-release" in kinds and job.base_state == "RUNNING") or "restart-memory" in kinds or job.is_finished

    # 5 minutes: the forecast to its end (~10 + 5 x 4.7 GiB) fits the H100 ladder's 4-share
    # rung (3g.40gb), so it grows in place rather than needing a whole GPU
    grower = submit(script, "grow-older", 2, minutes=5)
    wait_until(lambda: runner.job(grower).base_state == "RUNNING", time.time() + 60)
    time.sleep(2)
    neighbour = submit(sleeper, "grow-younger", 2)  # 2 + 2 of the GPU's 5 shares: 1 free, the next rung is 4
    out = GrowOutcome(grower, neighbour)
    wait_until(settled, time.time() + timeout, interval=1)
    # the released neighbour starts again, after the grower
    wait_until(lambda: runner.job(neighbour).base_state == "RUNNING", time.time() + 20)
    job, other = runner.job(grower), runner.job(neighbour)
    out.events = events()
    out.grower_restarts = job.restart_cnt or 0
    out.grower_gres = ",".join(f"{g.name}:{g.count}" for g in job.gres)
    out.grower_excluded = excluded_by(out.events, "grow-restart")
    out.grower_start = job.start_time.timestamp() if job.start_time else 0.0
    out.neighbour_start = other.start_time.timestamp() if other.start_time and other.base_state == "RUNNING" else 0.0
    out.neighbour_restarts = other.restart_cnt or 0
    out.grower_node = job.nodes or ""
    out.neighbour_state = other.base_state or ""
    kinds = [e["kind"] for e in out.events]
    out.ok = ("grow-evict" in kinds and "grow-restart" in kinds and kinds.index("grow-evict") < kinds.index("grow-restart")
              and out.grower_restarts >= 1 and out.grower_node == "node1")
    return out
