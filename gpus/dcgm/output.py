"""What ``dcgmi`` prints, read: the MIG hierarchy (``dcgmi discovery -c``) and the rows of
``dcgmi dmon``. Pure functions over text; the formats are those of NVIDIA DCGM's dcgmi
(``dcgmi/Query.cpp`` ``FormatMigHierarchy`` and ``dcgmi/DeviceMonitor.cpp``), a sample of each
in ``tests/unit/gpus/data/dcgmi_*.txt``.

``discovery -c`` draws one box per GPU::

    | GPU 0             | GPU GPU-f04cff15-... (EntityID: 0)          |
    | -> I 0/1          | GPU Instance (EntityID: 100)                |
    |    -> CI 0/1/0    | Compute Instance (EntityID: 100)            |

where ``GPU 0`` is NVML's GPU index, ``I 0/1`` NVML's (GPU index, GPU instance id) and the
EntityID DCGM's own number for the entity, which ``dmon -i i:<EntityID>`` takes. ``dmon``
prints a header (``#Entity`` and the fields' short names, ``GRACT`` for field 1001), a units
line (``ID``), then one row per entity and period: ``GPU-I 100  0.512``; a value DCGM has
not got (blank) is ``N/A``.

Anything else is not taken for a reading: :class:`DcgmiOutputError` names the line.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

HIERARCHY_HEADER = "Instance Hierarchy"
_GPU = re.compile(r"^\|\s*GPU\s+(\d+)\s*\|\s*GPU\s+(\S+)\s+\(EntityID:\s*(\d+)\)\s*\|$")
_GI = re.compile(r"^\|\s*->\s*I\s+(\d+)/(\d+)\s*\|\s*GPU Instance\s+\(EntityID:\s*(\d+)\)\s*\|$")
_CI = re.compile(r"^\|\s*->\s*CI\s+\d+/\d+/\d+\s*\|\s*Compute Instance\s+\(EntityID:\s*\d+\)\s*\|$")
_BORDER = re.compile(r"^\+[-=+]+\+$")
_ROW = re.compile(r"^(GPU-I|GPU-CI|GPU)\s+(\d+)\s+(\S+)\s*$")
NA = "N/A"


class DcgmiOutputError(ValueError):
    """dcgmi said something that is not the format read here (or an error of its own)."""


@dataclass(frozen=True)
class GiEntity:
    """One MIG GPU instance as DCGM names it, with NVML's names for it."""

    gpu_index: int  # NVML's GPU index
    gi_id: int  # NVML's GPU instance id
    entity_id: int  # DCGM's entity id (entity group GPU-I)
    gpu_uuid: str


@dataclass(frozen=True)
class DmonRow:
    group: str  # GPU | GPU-I | GPU-CI
    entity_id: int
    value: float | None  # None: DCGM has no value (N/A)


def _error_line(text: str) -> str | None:
    return next((ln.strip() for ln in text.splitlines() if ln.strip().lower().startswith("error")), None)


def parse_hierarchy(text: str) -> list[GiEntity]:
    """The GPU instances of ``dcgmi discovery -c`` (none when no GPU is in MIG mode)."""
    said = _error_line(text)
    if said:
        raise DcgmiOutputError(said)
    if HIERARCHY_HEADER not in text:
        raise DcgmiOutputError(f"no {HIERARCHY_HEADER!r} table in dcgmi discovery -c: {text.strip()[:200]!r}")
    out: list[GiEntity] = []
    gpu: tuple[int, str] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or _BORDER.match(line) or line.strip("| ") == HIERARCHY_HEADER or _CI.match(line):
            continue
        if m := _GPU.match(line):
            gpu = (int(m[1]), m[2])
        elif m := _GI.match(line):
            if gpu is None or int(m[1]) != gpu[0]:
                raise DcgmiOutputError(f"GPU instance outside its GPU's box in dcgmi discovery -c: {line!r}")
            out.append(GiEntity(gpu[0], int(m[2]), int(m[3]), gpu[1]))
        else:
            raise DcgmiOutputError(f"unexpected line in dcgmi discovery -c: {line!r}")
    return out


def parse_dmon_line(line: str) -> DmonRow | None:
    """One line of ``dcgmi dmon`` with one field: a row, or None for its header, units line
    and blank lines; DcgmiOutputError for an error or anything else."""
    text = line.strip()
    if not text or text.startswith("#Entity") or text == "ID":
        return None
    m = _ROW.match(text)
    if m is None:
        raise DcgmiOutputError(f"unexpected line from dcgmi dmon: {text[:200]!r}")
    raw = m[3]
    if raw == NA:
        value = None
    else:
        try:
            value = float(raw)
        except ValueError:
            raise DcgmiOutputError(f"not a number in dcgmi dmon's row {text!r}") from None
        if not 0.0 <= value <= 1.0:
            raise DcgmiOutputError(f"DCGM_FI_PROF_GR_ENGINE_ACTIVE out of 0..1 in dcgmi dmon's row {text!r}")
    return DmonRow(m[1], int(m[2]), value)
