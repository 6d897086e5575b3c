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

Nothing here raises on bad text: a malformed item is logged and left out.
"""
from __future__ import annotations

import itertools
import logging
import re
from collections.abc import Iterable, Mapping

from slurm_plugin.slurm.model import GresItem, Job

log = logging.getLogger(__name__)

_MULTIPLIERS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
_COUNT_RE = re.compile(r"^(\d+)([kKmMgGtT]?)$")
_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")
_PER_DEVICE_RE = re.compile(r"^(\d+|-)/\d+(,(\d+|-)/\d+)*$")
#: TRES that are not GRES (licenses, burst buffers, cpu=, mem=, ...): ignored in requests.
_OTHER_TRES_RE = re.compile(r"^(?!gres[/:])[a-z_]+/|^(cpu|mem|node|billing|energy|vmem|pages)=")


def _count(text: str) -> int | None:
    match = _COUNT_RE.match(text)
    if not match:
        return None
    return int(match.group(1)) * _MULTIPLIERS[match.group(2).lower()]


def split_top_level(text: str, sep: str = ",") -> list[str]:
    """Split on `sep` outside parentheses: `gpu:2(IDX:0,2),shard:0` -> 2 parts."""
    parts, depth, current = [], 0, []
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth = max(depth - 1, 0)
        if char == sep and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]


def parse_index_list(text: str) -> tuple[int, ...] | None:
    """`0-1,3` -> (0, 1, 3); `N/A` or empty -> (); garbage -> None."""
    text = text.strip()
    if text in ("", "N/A", "n/a"):
        return ()
    found: list[int] = []
    for part in text.split(","):
        first, sep, last = part.strip().partition("-")
        if not (first.isascii() and first.isdigit()) or (sep and not (last.isascii() and last.isdigit())):
            return None
        if sep:
            if int(last) < int(first):
                return None
            found.extend(range(int(first), int(last) + 1))
        else:
            found.append(int(first))
    return tuple(found)


def parse_gres_item(text: str, per: str = "node") -> GresItem | None:
    """One item: `gpu`, `gpu:2`, `gpu:h100:2`, `gpu:h100=2`, `gpu:h100:1(IDX:0-1)`.

    Returns None (and logs) when the text is not a GRES item.
    """
    raw = text.strip()
    body, _, suffix = raw.partition("(")
    suffix = suffix[:-1] if suffix.endswith(")") else suffix
    for prefix in ("gres:", "gres/"):
        if body.startswith(prefix):
            body = body[len(prefix):]
            break
    count: int | None = 1
    if "=" in body:
        body, _, count_text = body.partition("=")
        count = _count(count_text)
    parts = body.split(":")
    if len(parts) > 3 or not parts[0]:
        log.warning("ignoring malformed GRES item %r", raw)
        return None
    name, gres_type = parts[0], None
    rest = parts[1:]
    if rest and "=" not in raw:
        last_count = _count(rest[-1])
        if last_count is not None:
            count = last_count
            rest = rest[:-1]
        elif len(rest) == 2:
            count = None
    if len(rest) > 1 or count is None:
        log.warning("ignoring malformed GRES item %r", raw)
        return None
    if rest:
        gres_type = rest[0]
    if not _NAME_RE.match(name) or (gres_type is not None and not _NAME_RE.match(gres_type)):
        log.warning("ignoring GRES item with odd characters %r", raw)
        return None
    indexes: tuple[int, ...] | None = None
    per_device: tuple[tuple[int, int], ...] | None = None
    if suffix.startswith("IDX:"):
        indexes = parse_index_list(suffix[4:])
        if indexes is None:
            log.warning("ignoring unreadable device indexes in %r", raw)
    elif _PER_DEVICE_RE.match(suffix):
        # 26.05 prints `-` for a device taken whole by a gpu job (24.11 prints 0/8 there):
        # no shard of it is in use.
        per_device = tuple(
            (0 if used == "-" else int(used), int(total))
            for used, total in (pair.split("/") for pair in suffix.split(","))
        )
        # 23.11+ prints a shard job's allocation this way (`shard:h100:2(0/8,2/8)`, no IDX):
        # the GPUs it is on are the devices with shares in use, as 22.05's IDX list said
        indexes = tuple(i for i, (used, _total) in enumerate(per_device) if used > 0)
    return GresItem(
        name=name, type=gres_type, count=count, per=per, indexes=indexes, per_device=per_device
    )


def parse_gres_list(text: str | None, per: str = "node") -> tuple[GresItem, ...]:
    """A comma-separated GRES string; `N/A`, `(null)` and empty give ()."""
    if not text or text.strip() in ("N/A", "(null)", "none"):
        return ()
    items: list[GresItem] = []
    for part in split_top_level(text):
        if _OTHER_TRES_RE.match(part.lower()):
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
