"""The one reader of Slurm's GRES text: requests, a node's GRES, and a job's allocation.

Requests, as in a job's `tres_per_node`/`tres_per_job`/`tres_per_task` (and what a user types):

    22.05:   gres:gpu:1   gres:gpu:h100:2   gres:shard:2
    23.11+:  gres/gpu:1   gres/gpu:h100:2   gres/shard:2    (and the TRES form gres/gpu=1)
    bare:    gpu:1        gpu:h100          (count 1)

A node's GRES, configured and in use, and a job's `gres_detail`:

    gpu:h100:2,shard:h100:16               gpu:h100:2(S:0-1)
    gpu:h100:1(IDX:1),shard:h100:1(IDX:0)  gpu:h100:0(IDX:N/A)
    shard:h100:2(2/8,0/8)                   (per-device used/total of a shared GRES)
    shard:h100:4(-/8,4/8)                   (26.05: `-` where the GPU is allocated whole)

:func:`parse_item` reads one item and raises :class:`GresParseError` with the reason;
:func:`parse_gres` reads a whole request string and raises on any bad item (the submit
path refuses to pack what it cannot read); the Slurm adapter's list reader
(`slurm_plugin.slurm.gres.parse_gres_list`) leaves a bad item out and logs it. Pure.
"""
from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

#: a GRES name or type, as gres.conf takes it
NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")
_MULTIPLIERS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
_COUNT_RE = re.compile(r"^([0-9]+)([kKmMgGtT]?)$")
_PER_DEVICE_RE = re.compile(r"^([0-9]+|-)/[0-9]+(,([0-9]+|-)/[0-9]+)*$")
#: TRES that are not GRES (licenses, burst buffers, cpu=, mem=, ...): not read as GRES.
OTHER_TRES_RE = re.compile(r"^(?!gres[/:])[a-z_]+/|^(cpu|mem|node|billing|energy|vmem|pages)=")
_DIALECTS = (("gres:", "22.05"), ("gres/", "23.11"))


class GresParseError(ValueError):
    """A gres/tres string that does not look like anything Slurm writes."""


@dataclass(frozen=True)
class GresItem:
    """One generic resource, requested or configured or in use.

    `per` says what the count is for: "node" (tres_per_node, --gres), "job" (--gpus),
    "task" (--gpus-per-task) or "socket". `indexes` are device indexes where Slurm
    prints them (`IDX:0-1`); `per_device` is (used, total) per device for shared GRES
    (shards) where Slurm prints `(2/8,0/8)`. `dialect` is how the text was written:
    "22.05" (`gres:`), "23.11" (`gres/`) or "bare" (not part of equality).
    """

    name: str
    type: str | None = None
    count: int = 1
    per: str = "node"
    indexes: tuple[int, ...] | None = None
    per_device: tuple[tuple[int, int], ...] | None = None
    dialect: str = field(default="bare", compare=False)

    def __str__(self) -> str:
        head = self.name if self.type is None else f"{self.name}:{self.type}"
        return f"{head}:{self.count}"


def _count(text: str) -> int | None:
    """`2` -> 2, `1k` -> 1024 (Slurm's suffixes); None when not a count (ASCII digits only:
    str.isdigit() also accepts '¹' or '٣')."""
    match = _COUNT_RE.match(text) if text.isascii() else None
    if not match:
        return None
    return int(match.group(1)) * _MULTIPLIERS[match.group(2).lower()]


def split_top_level(text: str, sep: str = ",") -> list[str]:
    """Split on `sep` outside parentheses: `gpu:2(IDX:0,2),shard:0` -> 2 parts (empty parts kept)."""
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
    return [p.strip() for p in parts]


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


def _suffix(raw: str, suffix: str) -> tuple[tuple[int, ...] | None, tuple[tuple[int, int], ...] | None]:
    """(indexes, per_device) of an item's `(...)` part; other suffixes (`S:0-1`) say neither."""
    if suffix.startswith("IDX:"):
        indexes = parse_index_list(suffix[4:])
        if indexes is None:  # the item's count still holds: kept, without its devices
            log.warning("unreadable device indexes in %r", raw)
        return indexes, None
    if _PER_DEVICE_RE.match(suffix):
        # 26.05 prints `-` for a device taken whole by a gpu job (24.11 prints 0/8 there)
        per_device = tuple((0 if used == "-" else int(used), int(total))
                           for used, total in (pair.split("/") for pair in suffix.split(",")))
        # 23.11+ prints a shard job's allocation this way (`shard:h100:2(0/8,2/8)`, no IDX):
        # the GPUs it is on are the devices with shares in use, as 22.05's IDX list said
        return tuple(i for i, (used, _total) in enumerate(per_device) if used > 0), per_device
    return None, None


def parse_item(text: str, per: str = "node") -> GresItem:
    """One item: `gpu`, `gpu:2`, `gpu:h100:2`, `gres/gpu:h100=2`, `gpu:h100:1(IDX:0-1)`.
    Raises GresParseError saying what is wrong."""
    raw = text.strip()
    body, _, suffix = raw.partition("(")
    suffix = suffix[:-1] if suffix.endswith(")") else suffix
    dialect = "bare"
    for prefix, name in _DIALECTS:
        if body.startswith(prefix):
            body, dialect = body[len(prefix):], name
            break
    count: int | None = 1
    tres = "=" in body  # the TRES form, e.g. 24.11's tres_per_task "gres/gpu=1" (--gpus-per-task)
    if tres:
        body, _, count_text = body.rpartition("=")
        count = _count(count_text)
        if count is None:
            raise GresParseError(f"count {count_text!r} of gres item {raw!r} is not a whole number")
    parts = body.split(":")
    if not parts[0] or len(parts) > 3 or (tres and len(parts) > 2):
        raise GresParseError(f"cannot read gres item {raw!r}")
    name, rest = parts[0], parts[1:]
    if rest and not tres:
        last = _count(rest[-1])
        if last is not None:  # gpu:2, gpu:h100:2
            count, rest = last, rest[:-1]
        elif len(rest) == 2:
            raise GresParseError(f"count {rest[-1]!r} of gres item {raw!r} is not a whole number")
    gres_type = rest[0] if rest else None
    if not NAME_RE.match(name) or (gres_type is not None and not NAME_RE.match(gres_type)):
        raise GresParseError(f"gres item {raw!r} has a name or type gres.conf would not take")
    indexes, per_device = _suffix(raw, suffix)
    return GresItem(name=name, type=gres_type, count=count, per=per, indexes=indexes,
                    per_device=per_device, dialect=dialect)


def is_other_tres(part: str) -> bool:
    """A TRES that is not a GRES (`license/x:1`, `cpu=4`): not read as one."""
    return bool(OTHER_TRES_RE.match(part.lower()))


def parse_gres(text: str, per: str = "node") -> list[GresItem]:
    """Every GRES item of one tres_per_* string; raise GresParseError on any bad or empty item
    (TRES that are not GRES, such as `cpu=4`, are passed over)."""
    items: list[GresItem] = []
    for part in split_top_level(text):
        if not part:
            raise GresParseError(f"empty item in {text!r}")
        if not is_other_tres(part):
            items.append(parse_item(part, per))
    return items


def count_of(items: Iterable[GresItem], name: str) -> int | None:
    """The count of the first item called `name` (`shard:2` -> 2); None when there is none."""
    return next((item.count for item in items if item.name == name), None)


def type_of(items: Iterable[GresItem], names: tuple[str, ...] = ("shard", "gpu")) -> str | None:
    """The type of the first typed item among `names` (`shard:h100:2` -> h100); None: untyped."""
    return next((item.type for item in items if item.name in names and item.type), None)


def gres_text(name: str, count: int, gpu_type: str | None = None) -> str:
    """`shard:h100:2` (`shard:2` without a type), as `--gres` and `scontrol update Gres=` take it."""
    if gpu_type is not None and not NAME_RE.match(gpu_type):
        raise ValueError(f"GPU type {gpu_type!r} is not a GRES type name")
    return f"{name}:{gpu_type}:{count}" if gpu_type else f"{name}:{count}"
