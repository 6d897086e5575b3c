"""GPU catalogues as data: MIG GPU-instance profiles and their placements.

A catalogue is loaded from ``mig/data/<model>.json`` (each file cites its source) or built
from NVML on a real GPU (see :mod:`gpus.nvml.backend`). Placement starts and sizes are in
**memory slices**.
"""
from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field, replace
from functools import lru_cache
from importlib import resources
from typing import Iterable

from mig.errors import UnknownGpuModelError, UnknownProfileError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Profile:
    """One GPU-instance profile, e.g. ``3g.40gb``."""

    name: str
    nvml_profile_index: int  # NVML_GPU_INSTANCE_PROFILE_* constant
    profile_id: int  # id returned by NVML profile info, used to create instances
    memory_mib: int
    sm_count: int
    compute_slices: int
    memory_slices: int  # placement size
    max_instances: int
    media_extensions: bool
    placement_starts: tuple[int, ...]

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "nvml_profile_index": self.nvml_profile_index,
            "profile_id": self.profile_id,
            "memory_mib": self.memory_mib,
            "sm_count": self.sm_count,
            "compute_slices": self.compute_slices,
            "memory_slices": self.memory_slices,
            "max_instances": self.max_instances,
            "media_extensions": self.media_extensions,
            "placements": [{"start": s, "size": self.memory_slices} for s in self.placement_starts],
        }


@dataclass(frozen=True)
class Catalog:
    """The MIG profiles of one GPU model."""

    model: str
    memory_slices: int
    compute_slices: int
    memory_mib: int
    sm_count: int
    profiles: tuple[Profile, ...]
    media_extension_instances: int = 1
    aliases: tuple[str, ...] = ()
    source: str = field(default="", compare=False)

    def profile(self, name: str) -> Profile:
        for p in self.profiles:
            if p.name == name:
                return p
        raise UnknownProfileError(
            f"profile {name!r} is not in the {self.model} catalogue; "
            f"choose one of {', '.join(self.profile_names)}"
        )

    @property
    def profile_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.profiles)

    def restrict(self, names: Iterable[str] | None) -> "Catalog":
        """The same catalogue keeping only ``names`` (in catalogue order); None keeps all."""
        if names is None:
            return self
        wanted = [n.strip() for n in names if n and n.strip()]
        for n in wanted:
            self.profile(n)  # raises with the list of valid names
        return replace(self, profiles=tuple(p for p in self.profiles if p.name in wanted))

    def smallest_fitting(self, memory_mib: float, include_media: bool = False) -> Profile | None:
        """The profile with the least memory (then fewest slices) holding ``memory_mib``."""
        fits = [
            p
            for p in self.profiles
            if p.memory_mib >= memory_mib and (include_media or not p.media_extensions)
        ]
        if not fits:
            return None
        return min(fits, key=lambda p: (p.memory_mib, p.memory_slices, p.compute_slices, p.name))

    def to_dict(self) -> dict:
        return {
            "model": self.model,
            "memory_slices": self.memory_slices,
            "compute_slices": self.compute_slices,
            "memory_mib": self.memory_mib,
            "sm_count": self.sm_count,
            "media_extension_instances": self.media_extension_instances,
            "source": self.source,
            "profiles": [p.to_dict() for p in self.profiles],
        }


def catalog_from_dict(doc: dict) -> Catalog:
    """Build a :class:`Catalog` from the JSON layout of ``mig/data/*.json``."""
    profiles = tuple(
        Profile(
            name=p["name"],
            nvml_profile_index=int(p["nvml_profile_index"]),
            profile_id=int(p["profile_id"]),
            memory_mib=int(p["memory_mib"]),
            sm_count=int(p["sm_count"]),
            compute_slices=int(p["compute_slices"]),
            memory_slices=int(p["memory_slices"]),
            max_instances=int(p["max_instances"]),
            media_extensions=bool(p.get("media_extensions", False)),
            placement_starts=tuple(int(s) for s in p["placement_starts"]),
        )
        for p in doc["profiles"]
    )
    cat = Catalog(
        model=doc["model"],
        memory_slices=int(doc["memory_slices"]),
        compute_slices=int(doc["compute_slices"]),
        memory_mib=int(doc["memory_mib"]),
        sm_count=int(doc["sm_count"]),
        profiles=profiles,
        media_extension_instances=int(doc.get("media_extension_instances", 1)),
        aliases=tuple(doc.get("aliases", ())),
        source=doc.get("source", ""),
    )
    for p in profiles:
        for s in p.placement_starts:
            if s < 0 or s + p.memory_slices > cat.memory_slices:
                raise ValueError(
                    f"{cat.model} catalogue: placement {s}:{p.memory_slices} of {p.name} "
                    f"lies outside the GPU's {cat.memory_slices} memory slices"
                )
    return cat


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


@lru_cache(maxsize=None)
def _all_docs() -> tuple[dict, ...]:
    docs = []
    for entry in sorted((resources.files("mig") / "data").iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".json"):
            docs.append(json.loads(entry.read_text(encoding="utf-8")))
    return tuple(docs)


def list_models() -> list[str]:
    """The GPU models with a static catalogue."""
    return [d["model"] for d in _all_docs()]


@lru_cache(maxsize=None)
def load_catalog(model: str) -> Catalog:
    """The static catalogue of ``model`` (its name, an alias or the NVML device name)."""
    key = _norm(model)
    for doc in _all_docs():
        names = [doc["model"], *doc.get("aliases", ())]
        if any(_norm(n) == key for n in names):
            return catalog_from_dict(doc)
    raise UnknownGpuModelError(
        f"no MIG catalogue for GPU model {model!r}; known models: {', '.join(list_models())}"
    )


def diff_catalogs(static: Catalog, observed: Catalog) -> list[str]:
    """Human-readable differences between a static table and what the driver reports."""
    out: list[str] = []
    if static.memory_slices != observed.memory_slices:
        out.append(f"memory slices {static.memory_slices} -> {observed.memory_slices}")
    s_by_id = {p.profile_id: p for p in static.profiles}
    o_by_id = {p.profile_id: p for p in observed.profiles}
    for pid in sorted(set(s_by_id) | set(o_by_id)):
        s, o = s_by_id.get(pid), o_by_id.get(pid)
        if s is None:
            out.append(f"profile id {pid} ({o.name}) reported by the driver, not in the table")
            continue
        if o is None:
            out.append(f"profile id {pid} ({s.name}) in the table, not reported by the driver")
            continue
        for attr in ("name", "memory_mib", "sm_count", "memory_slices", "max_instances",
                     "placement_starts"):
            if getattr(s, attr) != getattr(o, attr):
                out.append(f"{s.name}: {attr} {getattr(s, attr)!r} -> {getattr(o, attr)!r}")
    return out
