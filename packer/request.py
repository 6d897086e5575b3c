"""What a submitted job asks for, and whether it is a packing candidate.

Pure. The `tres_per_*` strings are read by the suite's one GRES reader, `packer.gres`
(both dialects, the TRES form, a bare ``gpu:1``).

Which request forms are packed, and why the others are not: docs/request-forms.md.
"""
from __future__ import annotations

from dataclasses import dataclass

from packer.gres import GresItem, GresParseError, gres_text, parse_gres

__all__ = ["GresParseError", "JobFacts", "Candidate", "NotCandidate", "classify", "parse_gres",
           "shard_request", "gres_text", "NO_VAL", "NO_VAL16", "TRES_FIELDS", "SHARED_GRES"]

NO_VAL = 0xFFFFFFFE  # Slurm's "not set" for 32-bit fields
NO_VAL16 = 0xFFFE
TRES_FIELDS = ("tres_per_node", "tres_per_job", "tres_per_task", "tres_per_socket")
SHARED_GRES = ("shard", "mps")
# job_desc.shared: 0 = --exclusive, 2 = --exclusive=user, 3 = --exclusive=mcs, 1 = --oversubscribe
_EXCLUSIVE_SHARED = {0, 2, 3}


@dataclass(frozen=True)
class JobFacts:
    """The fields of a job submission that packing looks at (from job_submit.lua)."""

    user: str = ""
    name: str = ""
    script: bytes = b""
    tres_per_node: str | None = None
    tres_per_job: str | None = None
    tres_per_task: str | None = None
    min_nodes: int | None = None
    max_nodes: int | None = None
    num_tasks: int | None = None
    shared: int | None = None
    partition: str | None = None
    tres_per_socket: str | None = None  # --gpus-per-socket
    mem_per_tres: str | None = None  # --mem-per-gpu, e.g. gres:gpu:2048 (MB)
    cpus_per_tres: str | None = None  # --cpus-per-gpu, e.g. gres/gpu:4
    tres_freq: str | None = None  # --gpu-freq, e.g. gpu:high
    tres_bind: str | None = None  # --gpu-bind (24.11+ also sets it for --gpus-per-task)
    ntasks_per_node: int | None = None
    requeue: int | None = None  # 0: --no-requeue; unset: the cluster's JobRequeue
    het_job_offset: int | None = None  # set (0, 1, ...) for a component of a heterogeneous job
    batch: bool = True  # False: salloc or srun (no script; Slurm never requeues those)
    min_mem_per_node: int | None = None  # --mem (MB)
    min_mem_per_cpu: int | None = None  # --mem-per-cpu (MB)
    cpus_per_task: int | None = None
    min_cpus: int | None = None
    unreadable: tuple[str, ...] = ()  # number fields that were not whole numbers (never from Slurm)


@dataclass(frozen=True)
class Candidate:
    """A job asking for exactly one whole GPU on one node."""

    field: str  # which tres_per_* field held the request
    gpu_type: str | None
    dialect: str
    mem_per_gpu_mb: int | None = None  # --mem-per-gpu: becomes the job's memory when packed
    cpus_per_gpu: int | None = None  # --cpus-per-gpu: becomes the job's CPUs (per task) when packed
    tasks: int = 1
    gpu_bind: bool = False  # a GPU binding: moot for a job with one GPU, cleared when packed


@dataclass(frozen=True)
class NotCandidate:
    reason: str  # short token for the AdminComment, e.g. multi-gpu


def _unset(value: int | None, no_val: int = NO_VAL) -> bool:
    return value is None or value in (no_val, NO_VAL, NO_VAL16, 0)


def _per_gpu(text: str | None) -> int | None | NotCandidate:
    """The count of a --mem-per-gpu / --cpus-per-gpu field (`gres:gpu:2048`); None when unset,
    NotCandidate("unclear") for anything but one untyped gpu item."""
    if text is None or text == "":
        return None
    try:
        items = parse_gres(text)
    except GresParseError:
        return NotCandidate("unclear")
    if len(items) != 1 or items[0].name != "gpu" or items[0].count < 1:
        return NotCandidate("unclear")
    return items[0].count


def _may_span_nodes(job: JobFacts) -> bool:
    """Whether Slurm may give the job more than one node: -N above 1, or several tasks that
    nothing keeps on one node (-N1, or --ntasks-per-node covering them all)."""
    if (not _unset(job.min_nodes) and job.min_nodes > 1) or (not _unset(job.max_nodes) and job.max_nodes > 1):
        return True
    if _unset(job.num_tasks) or job.num_tasks <= 1 or job.max_nodes == 1:
        return False
    return _unset(job.ntasks_per_node, NO_VAL16) or job.ntasks_per_node < job.num_tasks


def classify(job: JobFacts, requeue_by_default: bool = True) -> Candidate | NotCandidate:
    """Decide whether the job is a packing candidate; never raises. The order of the checks
    is the reason a job gets when several apply (docs/request-forms.md).

    `requeue_by_default`: the cluster's JobRequeue (slurm.conf), what a job that names
    neither --requeue nor --no-requeue gets: on a cluster that does not requeue by default
    such a job cannot be requeued, and every safety net of the suite needs a requeue."""
    found: list[tuple[str, GresItem]] = []
    shared_seen = False
    for field_name in TRES_FIELDS:
        text = getattr(job, field_name)
        if text is None or text == "":
            continue
        try:
            items = parse_gres(text)
        except GresParseError:
            return NotCandidate("unparsable-gres")
        for item in items:
            if item.name == "gpu":
                found.append((field_name, item))
            elif item.name in SHARED_GRES:
                shared_seen = True
    if shared_seen:
        return NotCandidate("already-shared")
    if not found:
        return NotCandidate("no-gpu")
    if job.unreadable:
        return NotCandidate("unclear")
    if job.het_job_offset is not None and job.het_job_offset != NO_VAL:  # 0 is the first component
        return NotCandidate("heterogeneous")
    if not job.batch:
        return NotCandidate("interactive")
    if job.requeue == 0 or (not requeue_by_default and job.requeue in (None, NO_VAL16, NO_VAL)):
        return NotCandidate("no-requeue")
    if job.tres_freq and "gpu" in job.tres_freq:
        return NotCandidate("gpu-freq")
    field_name, item = found[0]
    if len(found) > 1 or item.count != 1:
        return NotCandidate("multi-gpu")
    if field_name == "tres_per_task" and not _unset(job.num_tasks) and job.num_tasks != 1:
        return NotCandidate("multi-gpu")
    if field_name == "tres_per_socket":
        return NotCandidate("per-socket")
    if _may_span_nodes(job):
        return NotCandidate("multi-node")
    if job.shared is not None and job.shared in _EXCLUSIVE_SHARED:
        return NotCandidate("exclusive")
    mem, cpus = _per_gpu(job.mem_per_tres), _per_gpu(job.cpus_per_tres)
    if isinstance(mem, NotCandidate) or isinstance(cpus, NotCandidate):
        return NotCandidate("unclear")
    if mem is not None and not (_unset(job.min_mem_per_node) and _unset(job.min_mem_per_cpu)):
        return NotCandidate("unclear")  # two memory requests: Slurm refuses one of them itself
    if cpus is not None:
        # the job's CPUs become CPUs per task (Slurm refused min_cpus above tasks x cpus_per_task
        # when -n was given): they must split evenly, and agree with a -c sbatch may have set
        tasks = 1 if _unset(job.num_tasks) else job.num_tasks
        if cpus % tasks or not (_unset(job.cpus_per_task, NO_VAL16) or job.cpus_per_task == cpus // tasks):
            return NotCandidate("unclear")
    return Candidate(field=field_name, gpu_type=item.type, dialect=item.dialect,
                     mem_per_gpu_mb=mem, cpus_per_gpu=cpus, tasks=1 if _unset(job.num_tasks) else job.num_tasks,
                     gpu_bind=bool(job.tres_bind and "gpu" in job.tres_bind))


def shard_request(k: int, dialect: str, gpu_type: str | None = None) -> str:
    """The tres_per_node string for K shards of a `gpu_type` GPU (any GPU: None), in the
    dialect the job came in."""
    if k < 1:
        raise ValueError(f"a packed job needs at least one shard, got {k}")
    typed = gres_text("shard", k, gpu_type)
    return f"gres/{typed}" if dialect == "23.11" else f"gres:{typed}"
