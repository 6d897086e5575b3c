"""What a submitted job asks for, and whether it is a packing candidate.

Pure parsing of Slurm's `tres_per_*` strings in both dialects:
22.05 writes ``gres:gpu:1`` / ``gres:gpu:h100:1``; 23.11+ writes ``gres/gpu:1``, and 24.11 writes
--gpus-per-task in the TRES form ``gres/gpu=1``.
A bare ``gpu:1`` (what a user types) is accepted too.

Which request forms are packed, and why the others are not: docs/request-forms.md.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

NO_VAL = 0xFFFFFFFE  # Slurm's "not set" for 32-bit fields
NO_VAL16 = 0xFFFE
TRES_FIELDS = ("tres_per_node", "tres_per_job", "tres_per_task", "tres_per_socket")
SHARED_GRES = ("shard", "mps")
# job_desc.shared: 0 = --exclusive, 2 = --exclusive=user, 3 = --exclusive=mcs, 1 = --oversubscribe
_EXCLUSIVE_SHARED = {0, 2, 3}
_TYPE_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")  # a GRES type name, as gres.conf takes it


class GresParseError(ValueError):
    """A gres/tres string that does not look like anything Slurm writes."""


@dataclass(frozen=True)
class GresItem:
    name: str
    type: str | None
    count: int
    dialect: str  # "22.05" (gres:), "23.11" (gres/), or "bare"


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


def parse_gres(text: str) -> list[GresItem]:
    """Parse one tres_per_* string into items; raise GresParseError on nonsense."""
    items: list[GresItem] = []
    for raw in text.split(","):
        part = raw.strip()
        if not part:
            raise GresParseError(f"empty item in {text!r}")
        if part.startswith("gres:"):
            dialect, body = "22.05", part[len("gres:"):]
        elif part.startswith("gres/"):
            dialect, body = "23.11", part[len("gres/"):]
        else:
            dialect, body = "bare", part
        tres_count = None
        if "=" in body:  # the TRES form, e.g. 24.11's tres_per_task "gres/gpu=1" (--gpus-per-task)
            body, tres_count = body.rsplit("=", 1)
        fields = body.split(":")
        if not fields[0] or len(fields) > 3 or (tres_count is not None and len(fields) > 2):
            raise GresParseError(f"cannot read gres item {part!r}")
        name = fields[0]
        count_text = "1"
        gres_type = None
        if tres_count is not None:
            count_text = tres_count
            gres_type = fields[1] if len(fields) == 2 else None
        elif len(fields) == 2:
            # gpu:2 or gpu:h100 (count 1)
            if _digits(fields[1]):
                count_text = fields[1]
            else:
                gres_type = fields[1]
        elif len(fields) == 3:
            gres_type, count_text = fields[1], fields[2]
        if gres_type == "":
            raise GresParseError(f"empty type in gres item {part!r}")
        if not _digits(count_text):
            raise GresParseError(f"count {count_text!r} of gres item {part!r} is not a whole number")
        items.append(GresItem(name=name, type=gres_type, count=int(count_text), dialect=dialect))
    return items


def _digits(text: str) -> bool:
    """ASCII digits only: str.isdigit() also accepts '¹' or '٣', which int() refuses or reads
    as a number Slurm would not."""
    return text.isascii() and text.isdigit()


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


def classify(job: JobFacts) -> Candidate | NotCandidate:
    """Decide whether the job is a packing candidate; never raises. The order of the checks
    is the reason a job gets when several apply (docs/request-forms.md)."""
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
    if job.requeue == 0:
        return NotCandidate("no-requeue")
    if job.tres_freq and "gpu" in job.tres_freq:
        return NotCandidate("gpu-freq")
    field_name, item = found[0]
    if any(i.type is not None and not _TYPE_RE.match(i.type) for _f, i in found):
        return NotCandidate("unparsable-gres")
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


def gres_text(name: str, count: int, gpu_type: str | None = None) -> str:
    """`shard:h100:2` (`shard:2` without a type), as `--gres` and `scontrol update Gres=` take it."""
    if gpu_type is not None and not _TYPE_RE.match(gpu_type):
        raise ValueError(f"GPU type {gpu_type!r} is not a GRES type name")
    return f"{name}:{gpu_type}:{count}" if gpu_type else f"{name}:{count}"
