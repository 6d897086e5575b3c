"""What the regroup watch shows the pure planner: Slurm's nodes and jobs as `packer.regroup_model`.

- **GPUs**: each node's configured `gpu` GRES (`sinfo`/`scontrol show node`), `shares_per_gpu`
  shares each;
- **running jobs**: their GPUs from `gres_detail` (`gpu:h100:2(IDX:0-1)` whole,
  `shard:h100:2(IDX:0)` packed), one entry per node of their node list; their remaining time
  from the time limit (else `[monitor] regroup_remaining_s`);
- **who may be moved** (`Movability`): not pinned to its nodes (`-w`), Slurm may requeue it (`requeue`: `--requeue`, or the
  cluster's JobRequeue=1) and its batch script declares a checkpoint signal
  (`#SBATCH --signal=B:USR1@T`; no Slurm release prints `--signal` in its JSON) or it
  reports its checkpoints to the node agent (`checkpoint_reports.py`: the last one and its
  period), or its partition / QOS is listed in `[monitor] regroup_partitions` / `regroup_qos`;
- **the head**: the first pending job in priority order that asks for whole GPUs, is not held
  and has waited `regroup_head_wait_s`.
"""
from __future__ import annotations

import logging
from collections.abc import Callable

from packer.regroup_model import Cluster, GpuInfo, HeadJob, Holding, Movability, RunningJob, SignalSpec, \
    script_signal
from slurm_plugin.helper.watches.checkpoint_reports import CheckpointReport
from slurm_plugin.helper.monitor_settings import MonitorSettings
from slurm_plugin.slurm.errors import SlurmError
from slurm_plugin.slurm.gres import expand_hostlist
from slurm_plugin.slurm.model import Job, Node

log = logging.getLogger(__name__)


class CheckpointSignals:
    """A job's checkpoint signal, read once from its batch script (cached per job)."""

    def __init__(self, runner: Callable[[], object]):
        self._runner = runner
        self._cache: dict[int, SignalSpec | None] = {}

    def job_maps(self) -> list:
        return [self._cache]

    def __call__(self, job: Job) -> SignalSpec | None:
        if job.job_id not in self._cache:
            try:
                self._cache[job.job_id] = script_signal(self._runner().batch_script(job.job_id))
            except SlurmError as exc:
                log.info("job %d: no batch script (%s): no checkpoint signal known", job.job_id, exc)
                return None  # not cached: asked again next round
            except ValueError as exc:
                log.warning("job %d: %s; it is not moved", job.job_id, exc)
                self._cache[job.job_id] = None
        return self._cache[job.job_id]


def gpu_count(job: Job) -> int:
    """Whole GPUs a job asks for: per node × nodes (`--gres=gpu:N`), or per job (`--gpus=N`)."""
    total = 0
    for item in job.gres:
        if item.name != "gpu":
            continue
        total += item.count * (job.node_count or 1) if item.per == "node" else item.count
    return total


def head_of_queue(jobs: dict[int, Job], now: float, wait_s: float) -> Job | None:
    """The pending job Slurm would start first, when it wants whole GPUs and has waited."""
    pending = [j for j in jobs.values() if j.state == "PENDING" and not j.held and (j.priority or 0) > 0]
    if not pending:
        return None
    head = max(pending, key=lambda j: (j.priority or 0, -(j.submit_time.timestamp() if j.submit_time else 0),
                                        -j.job_id))
    if gpu_count(head) == 0 or any(item.name == "shard" for item in head.gres):
        return None
    submitted = head.submit_time.timestamp() if head.submit_time else now
    return head if now - submitted >= wait_s else None


def movability(job: Job, signal: SignalSpec | None, settings: MonitorSettings,
               report: CheckpointReport | None = None) -> Movability:
    """Whether `job` declared it can be moved, and how it checkpoints (its signal, its own
    reports). A job pinned to its nodes (`-w`) could only come back where it is, so it is
    never moved."""
    if job.required_nodes:
        return Movability()
    admin = (job.partition in settings.regroup_partitions) or (job.qos in settings.regroup_qos)
    return Movability(requeue=job.requeue is True, signal=signal, admin=bool(admin),
                      last_checkpoint_at=report.last_at if report else None,
                      checkpoint_every_s=report.every_s if report else None)


def _holdings(job: Job, shares: int) -> tuple[Holding, ...]:
    nodes = expand_hostlist(job.nodes)
    out = []
    for node, item in zip(nodes, job.gres_detail):
        for index in item.indexes or ():
            if item.name == "shard":
                out.append(Holding(node, index, shares=item.count))
            elif item.name == "gpu":
                out.append(Holding(node, index))
    return tuple(out)


def cluster_view(nodes: list[Node], jobs: dict[int, Job], now: float, settings: MonitorSettings,
                 signal_of: Callable[[Job], SignalSpec | None], shares_per_gpu: int,
                 max_packed_shares: int, head: Job | None = None,
                 report_of: Callable[[Job], CheckpointReport | None] | None = None) -> Cluster:
    """GPUs and running jobs as the planner reads them (`report_of`: a job's own checkpoint
    reports, none without it). The nodes `head` may not use (its
    ExcNodeList, e.g. from the 22.05 guard) are left out: nothing is freed there for it, and
    no job is moved onto them (a conservative view)."""
    skip = set(head.excluded_nodes) if head is not None else set()
    gpus = tuple(GpuInfo(n.name, i, shares=shares_per_gpu) for n in nodes if n.name not in skip
                 for i in range(n.gpus_total))
    known = {g.key for g in gpus}
    running = []
    for job in jobs.values():
        if job.state != "RUNNING":
            continue
        holdings = tuple(h for h in _holdings(job, shares_per_gpu) if h.gpu in known)
        if not holdings:
            continue
        started = job.start_time.timestamp() if job.start_time else now
        remaining = (max(0.0, started + job.time_limit_s - now) if job.time_limit_s
                     else settings.regroup_remaining_s)
        move = movability(job, signal_of(job) if job.requeue else None, settings,
                          report_of(job) if report_of is not None else None)
        running.append(RunningJob(job.job_id, holdings, started, remaining, move,
                                  restart_s=settings.restart_cost_s, priority=job.priority or 0))
    return Cluster(gpus, tuple(running), max_packed_shares=max_packed_shares)


def head_view(job: Job, now: float) -> HeadJob:
    submitted = job.submit_time.timestamp() if job.submit_time else now
    return HeadJob(job.job_id, gpus=gpu_count(job), max_nodes=job.node_count, submitted_at=submitted)
