"""The dataclasses that flow out of the Slurm adapter.

They are the same whichever Slurm release produced them: the parsers in `parse` and
`gres` normalise the 22.05 (openapi v0.0.38) and 23.11+ (data_parser v0.0.40 and later)
JSON into these shapes.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from packer.gres import GresItem  # one GRES item for the whole suite, defined in packer.gres

#: Base job states (Slurm's `enum job_states`).
BASE_JOB_STATES = frozenset(
    {
        "PENDING",
        "RUNNING",
        "SUSPENDED",
        "COMPLETED",
        "CANCELLED",
        "FAILED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "OUT_OF_MEMORY",
    }
)
#: Job states after which a job does not run again (unless requeued by someone).
FINISHED_JOB_STATES = frozenset(BASE_JOB_STATES - {"PENDING", "RUNNING", "SUSPENDED"})


#: (first release series, the data_parser version its commands print by default)
_DATA_PARSERS = (
    ((22, 5), "v0.0.38"), ((23, 2), "v0.0.39"), ((23, 11), "v0.0.40"), ((24, 5), "v0.0.41"),
    ((24, 11), "v0.0.42"), ((25, 5), "v0.0.43"), ((25, 11), "v0.0.44"), ((26, 5), "v0.0.45"),
)


@dataclass(frozen=True)
class SlurmVersion:
    """A Slurm release, e.g. 22.05.8."""

    major: int
    minor: int
    micro: int = 0

    def __str__(self) -> str:
        return f"{self.major}.{self.minor:02d}.{self.micro}"

    @property
    def tuple(self) -> tuple[int, int, int]:
        return (self.major, self.minor, self.micro)

    @property
    def data_parser(self) -> str:
        """The JSON dialect this release's commands print by default (`meta.plugin.data_parser`).

        Seen: 22.05 openapi v0.0.38, 24.11 v0.0.42, 26.05 v0.0.45; the releases between
        from Slurm's release notes (each new release series adds one)."""
        series = (self.major, self.minor)
        for first, parser in reversed(_DATA_PARSERS):
            if series >= first:
                return parser
        return "v0.0.38"

    @property
    def filters_json(self) -> bool:
        """`squeue --json` honours its filters (states, job ids) from 23.11 on (24.11 and 26.05
        checked); 22.05 and 23.02 list every job whatever is asked."""
        return (self.major, self.minor) >= (23, 11)

    @property
    def has_job_state_query(self) -> bool:
        """`squeue --only-job-state` (RPC REQUEST_JOB_STATE) exists from 23.11 on (src/squeue and
        src/slurmctld/proc_req.c of slurm-23.11; not in 23.02)."""
        return (self.major, self.minor) >= (23, 11)

    @property
    def double_books_shared_gpus(self) -> bool:
        """22.05 gives a whole GPU to one job while another holds shards of it (fixed in
        23.11.5, per its NEWS; 24.11 keeps such a job pending with Reason=Resources, seen)."""
        return self.tuple < (23, 11, 5)

    @property
    def replaces_gres_on_update(self) -> bool:
        """`scontrol update JobId=N Gres=gpu:1` replaces a pending job's GRES request from 23.02
        on (24.11 seen). 22.05 validates the new GRES against a copy of the job's request
        (job_mgr.c `_update_job`), so a job that asked for shards keeps its shard record and
        the update is refused ("Invalid generic resource (gres) specification", seen on
        22.05.8; clearing with `Gres=` first does not help): there a shard job cannot become
        a whole-GPU job, only change its share count."""
        return (self.major, self.minor) >= (23, 2)

    @property
    def has_scontrol_json(self) -> bool:
        """`scontrol --json show ...` exists from 23.02 on (22.05 rejects the option)."""
        return (self.major, self.minor) >= (23, 2)


@dataclass(frozen=True)
class Dialect:
    """Which JSON dialect a document is in, as its `meta` says (or its shape shows)."""

    parser: str  # "v0.0.38", "v0.0.40", ... or "unknown"
    version: SlurmVersion | None = None

    @property
    def structured_numbers(self) -> bool:
        """v0.0.40+: numbers as {"set","infinite","number"}, states as lists."""
        return self.parser not in ("v0.0.37", "v0.0.38", "v0.0.39", "unknown")


@dataclass(frozen=True, slots=True)
class Job:
    """One Slurm job, as squeue/scontrol/sacct describe it."""

    job_id: int
    name: str | None = None
    user: str | None = None
    state: str | None = None  # one string, like squeue prints it: "RUNNING", "REQUEUED"
    state_flags: tuple[str, ...] = ()  # the other entries of a 23.11+ state list
    state_reason: str | None = None
    partition: str | None = None
    nodes: str | None = None  # Slurm hostlist, e.g. "node[1-2]"
    gres: tuple[GresItem, ...] = ()  # what the job asks for (tres_per_node/job/task/socket)
    gres_detail: tuple[GresItem, ...] = ()  # what it was given, one entry per node
    admin_comment: str | None = None
    comment: str | None = None
    priority: int | None = None
    submit_time: datetime | None = None
    start_time: datetime | None = None
    end_time: datetime | None = None
    exit_code: int | None = None  # the batch script's return code
    exit_signal: int | None = None
    excluded_nodes: tuple[str, ...] = ()
    required_nodes: tuple[str, ...] = ()  # -w/--nodelist: it may run only there
    restart_cnt: int | None = None
    batch_host: str | None = None
    exclusive: bool | None = None  # --exclusive (22.05 `shared: "none"`, 23.11+ `exclusive`)
    node_count: int | None = None
    tasks: int | None = None
    held: bool | None = None
    requeue: bool | None = None  # Slurm may requeue it (--requeue, or the cluster's JobRequeue=1 default)
    qos: str | None = None
    time_limit_s: int | None = None  # None: unlimited or not reported
    features: str | None = None  # --constraint, e.g. "a100&ib"
    reservation: str | None = None  # --reservation
    licenses: str | None = None  # -L, e.g. "matlab:2"
    # where Slurm writes the job's output (as squeue reports them: patterns such as %j may be left
    # unexpanded before 24.05, `slurm_plugin.slurm.stdio` expands them), and whose it is
    std_out: str | None = None
    std_err: str | None = None
    work_dir: str | None = None
    user_id: int | None = None
    array_job_id: int | None = None
    array_task_id: int | None = None

    @property
    def base_state(self) -> str | None:
        """The base state even when `state` shows a flag (REQUEUED, COMPLETING...)."""
        if self.state in BASE_JOB_STATES:
            return self.state
        return next((f for f in self.state_flags if f in BASE_JOB_STATES), None)

    @property
    def is_finished(self) -> bool:
        return self.base_state in FINISHED_JOB_STATES and self.state != "COMPLETING"


@dataclass(frozen=True)
class Node:
    """One Slurm node with its GRES, configured and in use."""

    name: str
    state: tuple[str, ...] = ()  # e.g. ("MIXED",), ("IDLE", "DRAIN")
    gres: tuple[GresItem, ...] = ()
    gres_used: tuple[GresItem, ...] = ()
    partitions: tuple[str, ...] = ()
    features: tuple[str, ...] = ()  # active features
    reason: str | None = None
    cpus: int | None = None
    alloc_cpus: int | None = None
    real_memory: int | None = None
    alloc_memory: int | None = None
    address: str | None = None  # NodeAddr: where its slurmd (and the gpupack agent) listen

    def _count(self, items: tuple[GresItem, ...], name: str) -> int:
        return sum(item.count for item in items if item.name == name)

    @property
    def gpus_total(self) -> int:
        return self._count(self.gres, "gpu")

    @property
    def gpus_used(self) -> int:
        return self._count(self.gres_used, "gpu")

    @property
    def shards_total(self) -> int:
        return self._count(self.gres, "shard")

    @property
    def shards_used(self) -> int | None:
        """Shards in use, when Slurm prints them per device (`shard:h100:2(2/8,0/8)`).

        None otherwise: Slurm 22.05 prints `shard:h100:1(IDX:0)`, where the count is the
        number of GPUs with any shard in use, not the number of shards. Count from the
        jobs instead (`gres.shard_usage`).
        """
        items = [i for i in self.gres_used if i.name == "shard"]
        if not items:
            return 0 if self.shards_total == 0 else None
        if all(i.per_device is not None for i in items):
            return sum(used for i in items for used, _ in i.per_device or ())
        return None

    @property
    def gpu_indexes_used(self) -> tuple[int, ...]:
        found: set[int] = set()
        for item in self.gres_used:
            if item.name == "gpu" and item.indexes:
                found.update(item.indexes)
        return tuple(sorted(found))


@dataclass(frozen=True)
class JobsDocument:
    """A parsed squeue/scontrol/sacct JSON document."""

    dialect: Dialect
    jobs: tuple[Job, ...] = ()
    errors: tuple[str, ...] = ()  # what Slurm put in the document's `errors`
    warnings: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()  # records left out, each with the reason


@dataclass(frozen=True)
class NodesDocument:
    """A parsed `scontrol --json show node` / `sinfo --json` document."""

    dialect: Dialect
    nodes: tuple[Node, ...] = ()
    errors: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()
