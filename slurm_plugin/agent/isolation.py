"""Pure isolation decisions of the node agent (no I/O).

What a step was given comes from the variables slurmstepd itself sets *or clears* for that
step's type (:func:`grant_from_env`), never from one a user could have exported and Slurm left
alone; the agent turns that into a request (which GPU, whole or K shares) and the answer into the
step's environment.
"""
from __future__ import annotations

from dataclasses import dataclass

from collections.abc import Iterable

from mig.catalog import Catalog, Profile
from mig.share_ladder import LadderError, model_ladder
from mig.slice_rule import profile_for_share_count, profile_for_shards  # noqa: F401  (re-exported: the agent's callers)

ISOLATION_MODES = ("mig", "mps")


@dataclass(frozen=True)
class StepGrant:
    """What Slurm gave a step on this node: GPU indexes and the shard count (0 = whole GPUs)."""

    gpu_indexes: tuple[int, ...]
    shards: int

    @property
    def packed(self) -> bool:
        return self.shards > 0


def parse_indexes(text: str | None) -> tuple[int, ...] | None:
    """``"0,1"`` or ``"0-2"`` -> indexes; None when the text is absent or not a plain index list."""
    if text is None:
        return None
    text = text.strip()
    if not text or text.lower() in ("nodevfiles", "none", "nodev"):
        return None
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if "-" in part:
            lo, _, hi = part.partition("-")
            if not (lo.isdigit() and hi.isdigit()) or int(hi) < int(lo) or int(hi) - int(lo) > 64:
                return None
            out.extend(range(int(lo), int(hi) + 1))
        elif part.isdigit():
            out.append(int(part))
        else:
            return None  # e.g. a MIG-… UUID a previous answer already put there
    return tuple(dict.fromkeys(out))


#: the step ids whose environment slurmstepd builds with ``gres_g_job_set_env`` (the batch
#: script's step and salloc's interactive step; state.BATCH_STEP, state.INTERACTIVE_STEP)
JOB_LEVEL_STEPS = (0xFFFFFFFB, 0xFFFFFFFA)


def trusted_gpu_variable(step_id: int) -> str:
    """The one variable that names the GPUs of a step of ``step_id`` and that slurmstepd itself
    sets or clears for that step (Slurm 22.05-26.05, ``slurmstepd.c``: a batch or interactive
    step gets ``gres_g_job_set_env`` -> ``SLURM_JOB_GPUS``; an srun step ``gres_g_step_set_env``
    -> ``SLURM_STEP_GPUS``). The other one is whatever the submitter's environment carried:
    ``SLURM_STEP_GPUS`` exported at ``sbatch`` time reaches a batch step untouched, and
    ``SLURM_JOB_GPUS`` of the batch step reaches its ``srun`` steps, where a script may change
    it. ``CUDA_VISIBLE_DEVICES``/``GPU_DEVICE_ORDINAL`` are local indexes (and set only where
    gres.conf asks for them), so neither is read. One step slurmstepd builds with the job's
    variables has a numeric id: an external launcher's (24.11+, ``srun --external-launcher``),
    whose SLURM_STEP_GPUS is the user's; there the controller's record of the job's GPUs on the
    node (pushed by the helper, :func:`grant_outside_record`) decides once the job is listed."""
    return "SLURM_JOB_GPUS" if step_id in JOB_LEVEL_STEPS else "SLURM_STEP_GPUS"


def grant_from_env(env: dict[str, str], step_id: int) -> StepGrant:
    """The grant a step's environment describes (shards counted on this node), read only from
    what slurmstepd sets or clears for a step of ``step_id`` (:func:`trusted_gpu_variable`;
    ``SLURM_SHARDS_ON_NODE`` is set or cleared by the shard plugin for both kinds of step)."""
    shards_text = (env.get("SLURM_SHARDS_ON_NODE") or "").strip()
    shards = int(shards_text) if shards_text.isdigit() else 0
    idx = parse_indexes(env.get(trusted_gpu_variable(step_id)))
    return StepGrant(idx or (), shards)


def grant_outside_record(grant: StepGrant, recorded: tuple[int, ...] | None) -> str | None:
    """Why the step's own variables disagree with the controller's record of the job's GPUs on this
    node (the helper's pushed list, from ``gres_detail``); None when they agree or the record is
    not known yet (a job newer than the last list): then the step type's variable alone decides."""
    if recorded is None or not grant.gpu_indexes or set(grant.gpu_indexes) <= set(recorded):
        return None
    return f"its step names GPU {list(grant.gpu_indexes)}, Slurm's record of the job here says {list(recorded)}"


def grant_within_record(grant: StepGrant, recorded_shards: int | None) -> tuple[StepGrant, str | None]:
    """The grant with the shard count Slurm's record backs, and why it was changed (None: kept).

    ``SLURM_SHARDS_ON_NODE`` is Slurm's only where the job holds shards on the node, or holds no GPU
    there: in a job that holds a GPU but no shard, Slurm's shard plugin leaves it as the submitter
    exported it (``gres_g_job_set_env``/``gres_g_step_set_env`` set GRES_INTERNAL_FLAG_PROTECT_ENV for
    the shared GRES when the sharing one is allocated; 22.05-26.05), so such a job could call its own
    whole GPU packed (a MIG slice or an MPS share made, the GPU's mode changed, on its word). Where the
    controller's record of the job here says whole GPUs (0 shards) the step is whole; where it is not
    known yet (a job newer than the last pushed list) the variable decides, which can reach only the
    job's own GPU (the GPU variable is the step type's, :func:`trusted_gpu_variable`)."""
    if recorded_shards is None or recorded_shards > 0 or not grant.packed:
        return grant, None
    return (StepGrant(grant.gpu_indexes, 0),
            f"its SLURM_SHARDS_ON_NODE says {grant.shards} shards, Slurm's record of the job here says whole GPUs "
            f"(the variable is the submitter's: Slurm leaves it in a job that holds a GPU but no shard); "
            f"isolated as a whole-GPU step")


def gpu_conflict(held: Iterable, job_id: int, uid: int | None, gpu: int, mode: str) -> str | None:
    """Why a packed job (``mode``: the node's packing, mig or mps) may not be isolated on ``gpu``
    beside the jobs the agent ``held`` there (Assignments); None when it may (pure).

    - a GPU another job holds whole is that job's alone: no packed job goes there, whatever kind;
    - an MPS share of a whole GPU turns the GPU to EXCLUSIVE_PROCESS, whose one MPS server serves
      one user: no other user's job of any kind may be on it;
    - a MIG slice does not go on a GPU that another user's whole-GPU MPS share holds (the GPU is
      out of MIG mode for it)."""
    for b in held:
        if b.job_id == job_id or b.gpu_index != gpu:
            continue
        if b.kind == "whole":
            return (f"GPU {gpu} is held whole by job {b.job_id} (uid {b.uid}); a packed job is never "
                    f"isolated there")
        if b.uid == uid:
            continue
        if mode == "mps":
            return (f"GPU {gpu} holds job {b.job_id} of uid {b.uid} ({b.kind}); an MPS share puts the GPU "
                    f"in EXCLUSIVE_PROCESS and MPS servers are per user, so uid {uid}'s packed job cannot "
                    f"share it now")
        if b.kind == "mps" and b.gi_id is None:
            return (f"GPU {gpu} serves MPS clients of uid {b.uid} (job {b.job_id}) on the whole GPU; "
                    f"uid {uid}'s packed job cannot take a MIG slice of it now")
    return None


def ladder_shares(catalog: Catalog, shares_per_gpu: int | None) -> int:
    """The shares per GPU a node's agent counts in (MPS percentages, memory limits): the
    given count, else the model's share ladder's."""
    if shares_per_gpu:
        return shares_per_gpu
    try:
        return model_ladder(catalog.model).shares_per_gpu
    except LadderError:
        return catalog.memory_slices


def full_gpu_profile(catalog: Catalog) -> Profile:
    """The profile that spans the whole GPU (7g.80gb on an H100)."""
    return max((p for p in catalog.profiles if not p.media_extensions),
               key=lambda p: (p.memory_slices, p.compute_slices))


def mps_percentage(shards: int, shares_per_gpu: int) -> int:
    """An MPS thread percentage for ``shards`` of ``shares_per_gpu``: at least 1, at most 100."""
    if shares_per_gpu <= 0:
        raise ValueError("shares_per_gpu must be > 0")
    return max(1, min(100, round(100 * shards / shares_per_gpu)))


def mps_memory_limit_bytes(shards: int, shares_per_gpu: int, gpu_memory_mib: int) -> int:
    """The device memory an MPS client with ``shards`` shares may pin."""
    return int(gpu_memory_mib * 1024 * 1024 * min(shards, shares_per_gpu) / shares_per_gpu)


def deny_line(major: int, ranges: tuple[tuple[int, int], ...] | list) -> str:
    """``DENY <major> <lo>-<hi>,...`` (``-`` for no range: the job may open every MIG node)."""
    text = ",".join(f"{int(lo)}-{int(hi)}" for lo, hi in ranges) or "-"
    return f"DENY {int(major)} {text}"


#: the last line of every plain-text answer: the SPANK plugin takes an answer without it (cut short,
#: or not the agent's) as a refusal (spank/gpupack_spank.c, framed())
END_LINE = "END"


#: variables the plugin puts a folder in front of (``PREPEND NAME=<folder>``), keeping the job's own value
PREPENDABLE = frozenset({"PYTHONPATH"})


def prepend_line(name: str, folder: str) -> str:
    """``PREPEND <name>=<folder>``: the plugin sets ``<folder>:<the job's value>`` (or ``<folder>``)."""
    if name not in PREPENDABLE:
        raise ValueError(f"{name!r} is not one the plugin prepends to ({sorted(PREPENDABLE)})")
    if not folder.startswith("/") or any(c in folder for c in ":\n\0"):
        raise ValueError(f"{folder!r} must be an absolute folder without ':' or newlines")
    return f"PREPEND {name}={folder}"


def answer_lines(isolation: str, env: dict[str, str], fence: dict | None = None,
                 prepend: dict[str, str] | None = None) -> str:
    """The SPANK plugin's text answer: ``OK <isolation>``, then ``FENCE <node>[,<node>] <folder>``
    for a job on a MIG device (the capability nodes it may open, :mod:`.fence`) and ``DENY <major>
    <ranges>`` (the others, for its device cgroup), then ``PREPEND NAME=<folder>`` (:func:`prepend_line`),
    then ``KEY=VALUE`` lines, then :data:`END_LINE`."""
    lines = [f"OK {isolation}"]
    if fence is not None:
        names = fence["allowed"]
        if not names or any(("," in n or " " in n or "/" in n or "\n" in n) for n in names) \
                or "\n" in fence["directory"]:
            raise ValueError(f"cannot write the fence {fence!r} as one line")
        lines.append(f"FENCE {','.join(names)} {fence['directory']}")
        if fence.get("caps_major") is not None:
            lines.append(deny_line(fence["caps_major"], fence.get("deny", [])))
    lines.extend(prepend_line(name, folder) for name, folder in (prepend or {}).items())
    for key, value in env.items():
        if "\n" in value or "\n" in key:
            raise ValueError(f"newline in {key!r}")
        if key == END_LINE:
            raise ValueError(f"{key!r} is the answer's end line")
        lines.append(f"{key}={value}")
    return "\n".join([*lines, END_LINE]) + "\n"


def error_line(reason: str, step_caused: bool = False) -> str:
    """``ERR <reason>``; ``ERR-STEP <reason>`` when the step's own variables caused the refusal (the
    plugin then leaves no record for the helper: no requeue, no lift)."""
    return ("ERR-STEP " if step_caused else "ERR ") + reason.replace("\n", " ")[:400] + "\n" + END_LINE + "\n"


def mps_daemon_limits(shares: list[tuple[int, int]]) -> tuple[int, int]:
    """(thread percentage, pinned MiB) an MPS control daemon sets for every client, from its
    device's MPS jobs' (percentage, memory limit in bytes): the largest of each, since the
    daemon's limits hold per server and a server serves all of one user's clients; each
    job's environment lowers it to its own share."""
    if not shares:
        raise ValueError("an MPS daemon's limits need at least one job")
    return max(p for p, _ in shares), max(b for _, b in shares) // (1024 * 1024)
