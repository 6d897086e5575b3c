"""Pure isolation decisions of the node agent (no I/O).

What a step was given comes from the variables Slurm put in its environment; the agent
turns that into a request (which GPU, whole or K shares) and the answer into the step's
environment.
"""
from __future__ import annotations

from dataclasses import dataclass

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


def grant_from_env(env: dict[str, str]) -> StepGrant:
    """The grant a step's environment describes (shards counted on this node)."""
    shards_text = (env.get("SLURM_SHARDS_ON_NODE") or "").strip()
    shards = int(shards_text) if shards_text.isdigit() else 0
    for key in ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL"):
        idx = parse_indexes(env.get(key))
        if idx:
            return StepGrant(idx, shards)
    return StepGrant((), shards)


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


def answer_lines(isolation: str, env: dict[str, str], fence: dict | None = None) -> str:
    """The SPANK plugin's text answer: ``OK <isolation>``, then ``FENCE <node>[,<node>] <folder>``
    for a job on a MIG device (the capability nodes it may open, :mod:`.fence`) and ``DENY <major>
    <ranges>`` (the others, for its device cgroup), then ``KEY=VALUE`` lines."""
    lines = [f"OK {isolation}"]
    if fence is not None:
        names = fence["allowed"]
        if not names or any(("," in n or " " in n or "/" in n or "\n" in n) for n in names) \
                or "\n" in fence["directory"]:
            raise ValueError(f"cannot write the fence {fence!r} as one line")
        lines.append(f"FENCE {','.join(names)} {fence['directory']}")
        if fence.get("caps_major") is not None:
            lines.append(deny_line(fence["caps_major"], fence.get("deny", [])))
    for key, value in env.items():
        if "\n" in value or "\n" in key:
            raise ValueError(f"newline in {key!r}")
        lines.append(f"{key}={value}")
    return "\n".join(lines) + "\n"


def error_line(reason: str) -> str:
    return "ERR " + reason.replace("\n", " ")[:400] + "\n"


def mps_daemon_limits(shares: list[tuple[int, int]]) -> tuple[int, int]:
    """(thread percentage, pinned MiB) an MPS control daemon sets for every client, from its
    device's MPS jobs' (percentage, memory limit in bytes): the largest of each, since the
    daemon's limits hold per server and a server serves all of one user's clients; each
    job's environment lowers it to its own share."""
    if not shares:
        raise ValueError("an MPS daemon's limits need at least one job")
    return max(p for p, _ in shares), max(b for _, b in shares) // (1024 * 1024)
