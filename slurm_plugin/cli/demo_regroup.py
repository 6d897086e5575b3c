"""`gpupack demo --scenario regroup`: a 2-GPU job waits while the room exists in pieces; one move frees it.

One packed job (shard:2) on a GPU of each of the three nodes: no node has two whole GPUs
free, so a job asking for `--gres=gpu:2` waits (Slurm: Resources). The first one declared it
can be moved (`#SBATCH --requeue`, `#SBATCH --signal=B:USR1@10`) and is submitted without a
node list (a job pinned with `-w` could only come back where it was); the two others did
not and are placed on the other nodes. The controller helper's regroup watch plans one move:
it signals the movable job to checkpoint (`regroup-signal`), requeues it after the grace time
with its node excluded (`regroup-requeue`), and the 2-GPU job starts on the freed node
(`regroup-head-start`). What happened is
read back from Slurm and from the event log.

`checkpointing_script` is the movable job as a simulated GPU workload that reports its
checkpoints to the node agent (`simgpu run --checkpoint-every N`; on the signal it
checkpoints at once and reports it): the watch then requeues it at that report, long before
its grace time (`tests/integration/test_regroup_live.py` runs both).
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from slurm_plugin.cli.demo_steps import excluded_by, sbatch, scenario_events, wait_until, write_script

REGROUP_KINDS = ("regroup-plan", "regroup-skip", "regroup-signal", "regroup-signal-failed", "regroup-wait",
                 "regroup-requeue", "regroup-requeue-failed", "regroup-head-start")
GRACE_S = 10

MOVABLE_SCRIPT = f"""#!/bin/sh
# gpupack demo: a packed job that can be moved: requeueable, checkpoints on USR1
#SBATCH --requeue
#SBATCH --signal=B:USR1@{GRACE_S}
#SBATCH --open-mode=append
echo "start (restart ${{SLURM_RESTART_COUNT:-0}}) on $SLURMD_NODENAME"
trap 'echo "checkpoint at $(date +%s)"' USR1
i=0
while [ $i -lt 300 ]; do sleep 1; i=$((i+1)); done
"""


def checkpointing_script(python: str, grace_s: int = 60, checkpoint_every: int = 100) -> str:
    """The movable job as a simulated GPU workload (0.1 s iterations, about 5 minutes alone)
    that checkpoints every `checkpoint_every` iterations and at once on USR1, and reports
    each checkpoint to the node agent; `exec`, so the batch shell that gets the signal is it."""
    return f"""#!/bin/sh
# gpupack demo: a packed job that can be moved and reports its checkpoints
#SBATCH --requeue
#SBATCH --signal=B:USR1@{grace_s}
#SBATCH --open-mode=append
echo "start (restart ${{SLURM_RESTART_COUNT:-0}}) on $SLURMD_NODENAME"
exec {python} -m slurm_plugin simgpu run --iters 3000 --iter-ms 100 --checkpoint-every {checkpoint_every} \
  --workload ResNet18
"""


PLAIN_SCRIPT = "#!/bin/sh\n# gpupack demo: a packed job that did not say it can be moved\nsleep 300\n"
HEAD_SCRIPT = "#!/bin/sh\n# gpupack demo: a 2-GPU job\nsleep 60\n"


@dataclass
class RegroupOutcome:
    """What the regroup scenario saw."""

    head: int
    movable: int
    others: list[int]
    events: list[dict] = field(default_factory=list)  # regroup-… events, oldest first
    head_state: str = ""
    freed_node: str = ""  # where the movable job ran first
    head_node: str = ""
    head_start: float = 0.0
    movable_state: str = ""
    movable_node: str = ""
    movable_restarts: int = 0
    movable_excluded: list[str] = field(default_factory=list)
    others_restarts: list[int] = field(default_factory=list)
    movable_output: str = ""  # its output, both runs (the checkpoint line shows the signal arrived)
    ok: bool = False

    def to_dict(self) -> dict:
        return asdict(self)


def run_regroup(env: dict[str, str], workdir: Path, database: Path, timeout: float = 240,
                movable_script: str = MOVABLE_SCRIPT) -> RegroupOutcome:
    """Run the scenario on the cluster whose Slurm environment is `env` and whose helper
    writes its events to `database`; the job scripts and outputs go to `workdir`.
    `movable_script`: the movable job's batch script (e.g. `checkpointing_script(...)`)."""
    from slurm_plugin.slurm.runner import SlurmRunner

    runner = SlurmRunner(env=env)
    scripts = {name: write_script(workdir / f"regroup-{name}.sh", text)
               for name, text in (("movable", movable_script), ("plain", PLAIN_SCRIPT), ("head", HEAD_SCRIPT))}

    def submit(script: str, name: str, *args: str) -> int:
        return sbatch(env, workdir, scripts[script], name, *args)

    def events() -> list[dict]:
        return scenario_events(database, (head, movable), REGROUP_KINDS)

    movable = submit("movable", "regroup-movable", "--gres=shard:2")
    deadline = time.time() + 60
    wait_until(lambda: runner.job(movable).base_state == "RUNNING", deadline)
    freed = runner.job(movable).nodes or ""
    nodes = [n.name for n in runner.nodes()]
    others = [submit("plain", f"regroup-fixed-{n}", "-w", n, "--gres=shard:2") for n in nodes if n != freed]
    wait_until(lambda: all(runner.job(j).base_state == "RUNNING" for j in others), deadline)
    head = submit("head", "regroup-2gpu", "--gres=gpu:2")
    out = RegroupOutcome(head, movable, others, freed_node=freed)
    wait_until(lambda: any(e["kind"] == "regroup-head-start" for e in events()) or runner.job(head).is_finished,
               time.time() + timeout, interval=1)
    # the moved job starts again elsewhere, and its new run's first line is written
    log_path = workdir / f"regroup-movable-{movable}.out"

    def started_again() -> bool:
        if runner.job(movable).base_state != "RUNNING":
            return False
        try:
            return "start (restart 1)" in log_path.read_text(errors="replace")
        except OSError:
            return False

    wait_until(started_again, time.time() + 30)
    h, m = runner.job(head), runner.job(movable)
    out.events = events()
    out.head_state, out.head_node = h.base_state or "", h.nodes or ""
    out.head_start = h.start_time.timestamp() if h.start_time else 0.0
    out.movable_state, out.movable_node = m.base_state or "", m.nodes or ""
    out.movable_restarts = m.restart_cnt or 0
    out.movable_excluded = excluded_by(out.events, "regroup-requeue")
    out.others_restarts = [runner.job(j).restart_cnt or 0 for j in others]
    out.movable_output = log_path.read_text(errors="replace")[-2000:] if log_path.exists() else ""
    kinds = [e["kind"] for e in out.events]
    order = ["regroup-plan", "regroup-signal", "regroup-requeue", "regroup-head-start"]
    out.ok = (all(k in kinds for k in order) and [kinds.index(k) for k in order] == sorted(kinds.index(k) for k in order)
              and out.head_state == "RUNNING" and out.head_node == freed and out.movable_restarts == 1
              and out.movable_excluded == [freed] and not any(out.others_restarts))
    return out
