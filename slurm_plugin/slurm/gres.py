"""Pure parsing of GRES strings and Slurm hostlists.

Requests, as in a job's `tres_per_node`/`tres_per_job`/`tres_per_task`:

    22.05:   gres:gpu:1   gres:gpu:h100:2   gres:shard:2
    23.11+:  gres/gpu:1   gres/gpu:h100:2   gres/shard:2    (and TRES form gres/gpu=1)

A node's GRES, configured and in use (22.05 recorded; later releases add `(S:..)`):

    gpu:h100:2,shard:h100:16               gpu:h100:2(S:0-1)
    gpu:h100:1(IDX:1),shard:h100:1(IDX:0)  gpu:h100:0(IDX:N/A)
    shard:h100:2(2/8,0/8)                   (per-device used/total of a shared GRES)
    shard:h100:4(-/8,4/8)                   (26.05: `-` where the GPU is allocated whole)

A job's allocation (`gres_detail`, one entry per node): `shard:2(IDX:0)`,
`gpu:h100:1(IDX:1)`.

The items are read by the one GRES reader, `packer.gres`; nothing here raises on bad text:
a malformed item is logged and left out.
"""
from __future__ import annotations

import itertools
import logging
import re
from collections.abc import Iterable, Mapping

from packer.gres import GresItem, GresParseError, is_other_tres, parse_index_list, parse_item, split_top_level
from slurm_plugin.slurm.model import Job

log = logging.getLogger(__name__)

__all__ = ["parse_index_list", "split_top_level", "parse_gres_item", "parse_gres_list",
           "parse_gres_request", "format_gres", "expand_hostlist", "shard_usage", "REQUEST_FIELDS",
           "allocated_gpus", "allocated_shards"]


def parse_gres_item(text: str, per: str = "node") -> GresItem | None:
    """One item (`packer.gres.parse_item`); None (and logged) when the text is not a GRES item."""
    try:
        return parse_item(text, per)
    except GresParseError as exc:
        log.warning("ignoring malformed GRES item: %s", exc)
        return None


def parse_gres_list(text: str | None, per: str = "node") -> tuple[GresItem, ...]:
    """A comma-separated GRES string; `N/A`, `(null)` and empty give ()."""
    if not text or text.strip() in ("N/A", "(null)", "none"):
        return ()
    items: list[GresItem] = []
    for part in split_top_level(text):
        if not part or is_other_tres(part):
            continue
        item = parse_gres_item(part, per=per)
        if item is not None:
            items.append(item)
    return tuple(items)


#: Job fields that carry a GRES request, and what their counts are for.
REQUEST_FIELDS: Mapping[str, str] = {
    "tres_per_node": "node",
    "tres_per_job": "job",
    "tres_per_task": "task",
    "tres_per_socket": "socket",
}


def parse_gres_request(fields: Mapping[str, object]) -> tuple[GresItem, ...]:
    """All GRES a job asks for, from every `tres_per_*` field present in `fields`."""
    items: list[GresItem] = []
    for key, per in REQUEST_FIELDS.items():
        value = fields.get(key)
        if isinstance(value, str):
            items.extend(parse_gres_list(value, per=per))
        elif value is not None:
            log.warning("ignoring %s of unexpected type %s", key, type(value).__name__)
    return tuple(items)


def format_gres(items: Iterable[GresItem]) -> str:
    """`gpu:h100:2,shard:2`, with a `/task`, `/job` or `/socket` suffix where not per node."""
    parts = []
    for item in items:
        text = str(item)
        if item.per != "node":
            text += f"/{item.per}"
        parts.append(text)
    return ",".join(parts)


_BRACKET_RE = re.compile(r"\[([^\]]*)\]")


def expand_hostlist(text: str | None) -> tuple[str, ...]:
    """`node[1-2],gpu[01-02]` -> ('node1', 'node2', 'gpu01', 'gpu02'), keeping padding."""
    if not text or text.strip() in ("(null)", "N/A", "None"):
        return ()
    names: list[str] = []
    for part in _split_brackets(text):
        if part.strip():
            names.extend(_expand_one(part.strip()))
    return tuple(names)


def _split_brackets(text: str) -> list[str]:
    """Commas inside [] are not separators."""
    out, depth, current = [], 0, []
    for char in text:
        depth += char == "["
        depth -= char == "]"
        if char == "," and depth == 0:
            out.append("".join(current))
            current = []
        else:
            current.append(char)
    out.append("".join(current))
    return out


def _expand_one(pattern: str) -> list[str]:
    pieces = _BRACKET_RE.split(pattern)
    # pieces alternate: literal, range-spec, literal, range-spec, ...
    options: list[list[str]] = []
    for position, piece in enumerate(pieces):
        if position % 2 == 0:
            options.append([piece])
            continue
        values: list[str] = []
        for chunk in piece.split(","):
            first, sep, last = chunk.partition("-")
            if sep and (first.isascii() and first.isdigit()) and (last.isascii() and last.isdigit()) and int(last) >= int(first):
                width = len(first)
                values.extend(str(n).zfill(width) for n in range(int(first), int(last) + 1))
            elif chunk:
                values.append(chunk)
        options.append(values or [""])
    return ["".join(combo) for combo in itertools.product(*options)]


def shard_usage(jobs: Iterable[Job]) -> dict[str, dict[int, int]]:
    """Shards in use per node and GPU index, counted from the running jobs' allocations.

    This is exact on every release (22.05's node `GresUsed` is not, see `Node.shards_used`).
    A job whose shards span several GPUs without a per-GPU split is spread evenly.
    """
    usage: dict[str, dict[int, int]] = {}
    for job in jobs:
        if job.state not in ("RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING", "STOPPED"):
            continue
        hosts = expand_hostlist(job.nodes)
        for host, item in zip(hosts, job.gres_detail):
            if item.name != "shard":
                continue
            per_gpu = usage.setdefault(host, {})
            if item.per_device:
                for index, (used, _total) in enumerate(item.per_device):
                    per_gpu[index] = per_gpu.get(index, 0) + used
            elif item.indexes:
                share, extra = divmod(item.count, len(item.indexes))
                for position, index in enumerate(item.indexes):
                    per_gpu[index] = per_gpu.get(index, 0) + share + (position < extra)
    return usage


def allocated_gpus(job: Job) -> dict[str, tuple[int, ...]]:
    """The GPU indexes Slurm gave ``job`` on each of its nodes (whole GPUs and the GPUs its shards
    are on), from its allocation (``gres_detail``): the controller's record the node agents check
    a step's own variables against. A node whose entry names no index is left out (unknown)."""
    out: dict[str, tuple[int, ...]] = {}
    hosts = expand_hostlist(job.nodes)
    if len(hosts) != len(job.gres_detail):  # an entry that did not parse: which node is whose is unknown
        return out
    for host, item in zip(hosts, job.gres_detail):
        if item.name not in ("gpu", "shard"):
            continue
        found: set[int] = set()
        if item.per_device:
            found.update(i for i, (used, _total) in enumerate(item.per_device) if used > 0)
        elif item.indexes:
            found.update(item.indexes)
        if found:
            out[host] = tuple(sorted(set(out.get(host, ())) | found))
    return out


def allocated_shards(job: Job) -> dict[str, int]:
    """The shards Slurm gave ``job`` on each of its nodes where its allocation (``gres_detail``) names
    GPUs: 0 where it holds whole GPUs. The controller's record the node agents check a step's
    ``SLURM_SHARDS_ON_NODE`` against (Slurm leaves that variable as the submitter exported it in a job
    that holds a GPU but no shard: the shard plugin's PROTECT_ENV). Nodes without a GPU entry are left
    out (unknown)."""
    hosts = expand_hostlist(job.nodes)
    if len(hosts) != len(job.gres_detail):  # as allocated_gpus: which node is whose is unknown
        return {}
    return {host: (item.count if item.name == "shard" else 0)
            for host, item in zip(hosts, job.gres_detail) if item.name in ("gpu", "shard")}
