"""`gpupack demo --scenario grow`: a packed job that must grow evicts its younger neighbour.

Two packed jobs on node1's first GPU (shard:2 and shard:4 of its 8 shares): the older one's memory grows
(`simgpu run --mem-growth`), the controller helper's grow watch requeues the younger one
(held, then at the head of the queue) and restarts the older one at once on a larger share,
pinned to its node. What happened is read back from Slurm and from the event log.
"""
from __future__ import annotations

import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from packer.store import Store

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


def events_of(database, job_ids: set[int]) -> list[dict]:
    store = Store(database)
    try:
        rows = [e for e in store.events(limit=500) if e.job_id in job_ids and e.kind in GROW_KINDS]
    finally:
        store.close()
    return [{"kind": e.kind, "job": e.job_id, "detail": e.detail, "data": e.data} for e in reversed(rows)]


def run_grow(env: dict[str, str], workdir: Path, database: Path, python: str, timeout: float = 300) -> GrowOutcome:
    """Run the scenario on the cluster whose Slurm environment is `env` and whose helper
    writes its events to `database`; the job scripts and outputs go to `workdir`."""
    from slurm_plugin.slurm.runner import SlurmRunner

    runner = SlurmRunner(env=env)
    script = workdir / "grow.sh"
    script.write_text(grow_script(python))
    script.chmod(0o755)
    sleeper = workdir / "neighbour.sh"
    sleeper.write_text("#!/bin/sh\n# gpupack demo: a younger packed neighbour\nsleep 120\n")
    sleeper.chmod(0o755)

    def sbatch(path: Path, name: str, shards: int) -> int:
        result = subprocess.run(["sbatch", "--parsable", "-J", name, "-w", "node1", f"--gres=shard:{shards}", "-t", "10",
                                 "-o", f"{workdir}/%x-%j.out", str(path)],
                                env=env, cwd=workdir, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"sbatch {name}: {result.stderr.strip()}")
        return int(result.stdout.strip().split(";")[0])

    grower = sbatch(script, "grow-older", 2)
    deadline = time.time() + 60
    while runner.job(grower).base_state != "RUNNING" and time.time() < deadline:
        time.sleep(0.5)
    time.sleep(2)
    neighbour = sbatch(sleeper, "grow-younger", 4)  # 2 + 4 of the GPU's 8 shares: 2 free
    out = GrowOutcome(grower, neighbour)
    deadline = time.time() + timeout
    while time.time() < deadline:
        kinds = {e["kind"] for e in events_of(database, {grower, neighbour})}
        job = runner.job(grower)
        if ("grow-release" in kinds and job.base_state == "RUNNING") or "restart-memory" in kinds or job.is_finished:
            break
        time.sleep(1)
    settle = time.time() + 20  # the released neighbour starts again, after the grower
    while runner.job(neighbour).base_state != "RUNNING" and time.time() < settle:
        time.sleep(0.5)
    job, other = runner.job(grower), runner.job(neighbour)
    out.events = events_of(database, {grower, neighbour})
    out.grower_restarts = job.restart_cnt or 0
    out.grower_gres = ",".join(f"{g.name}:{g.count}" for g in job.gres)
    restart = next((e for e in out.events if e["kind"] == "grow-restart"), None)
    out.grower_excluded = list(restart["data"].get("excluded", [])) if restart else []
    out.grower_start = job.start_time.timestamp() if job.start_time else 0.0
    out.neighbour_start = other.start_time.timestamp() if other.start_time and other.base_state == "RUNNING" else 0.0
    out.neighbour_restarts = other.restart_cnt or 0
    out.grower_node = job.nodes or ""
    out.neighbour_state = other.base_state or ""
    kinds = [e["kind"] for e in out.events]
    out.ok = ("grow-evict" in kinds and "grow-restart" in kinds and kinds.index("grow-evict") < kinds.index("grow-restart")
              and out.grower_restarts >= 1 and out.grower_node == "node1")
    return out
