"""Checks of the Slurm files the suite relies on for its safety (pure: text in, problems out).

- ``plugstack.conf``: the gpupack SPANK plugin's line must be ``required``. With ``optional`` a
  .so that fails to load (an upgrade to another release series, a missing file) lets every step,
  packed ones included, run unisolated beside other jobs; with ``required`` slurmstepd refuses to
  start steps on that node (they fail, the node's slurmd log says why), which is what a packed
  node must do.
- ``slurm.conf``: no ``RequeueExit``/``RequeueExitHold`` naming 117, the code the plugin ends an
  unisolated packed step with: a job can exit 117 by itself, and the helper requeues such a step
  on root's record on the node only (issue 33).
"""
from __future__ import annotations

import glob
import re
from collections.abc import Callable
from pathlib import Path

UNISOLATED_EXIT = 117  # spank/gpupack_spank.c GPUPACK_UNISOLATED_EXIT
PLUGIN_RE = re.compile(r"gpupack_spank[^/\s]*\.so")


def plugstack_problems(text: str, where: str, include: Callable[[str], list[tuple[str, str]]] | None = None) -> list[str]:
    """Every problem of a plugstack.conf's ``text`` for the gpupack plugin; ``include`` gives the
    (path, text) of the files an ``include GLOB`` line names (None: includes are not followed)."""
    problems: list[str] = []
    found = 0

    def scan(body: str, name: str, depth: int) -> None:
        nonlocal found
        for number, raw in enumerate(body.splitlines(), 1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            words = line.split()
            if words[0] == "include" and len(words) > 1 and include is not None and depth < 4:
                for sub_name, sub_text in include(words[1]):
                    scan(sub_text, sub_name, depth + 1)
                continue
            if not any(PLUGIN_RE.search(w) for w in words[1:2]):
                continue
            found += 1
            if words[0] != "required":
                problems.append(
                    f"{name}:{number}: the gpupack SPANK plugin is loaded '{words[0]}': if its .so fails to load "
                    f"(an upgrade, a missing file) every step, packed ones included, runs unisolated; write "
                    f"'required' (slurmstepd then refuses steps on that node until the plugin loads)")

    scan(text, where, 0)
    if not found:
        problems.append(f"{where}: no line loads the gpupack SPANK plugin (gpupack_spank-<series>.so): packed "
                        f"steps on this node would run unisolated; add the line of etc/plugstack.conf, 'required'")
    return problems


def slurm_conf_problems(text: str, where: str) -> list[str]:
    """Every problem of a slurm.conf's ``text`` for the suite's safety."""
    problems: list[str] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        for key, value in re.findall(r"\b(RequeueExit(?:Hold)?)\s*=\s*(\S+)", line, flags=re.IGNORECASE):
            if UNISOLATED_EXIT in _codes(value):
                problems.append(
                    f"{where}:{number}: {key}={value} requeues every job that exits {UNISOLATED_EXIT} by itself "
                    f"(any job can); remove {UNISOLATED_EXIT}: the helper requeues a packed step the node could not "
                    f"isolate on root's record on the node only")
    return problems


def _codes(value: str) -> set[int]:
    out: set[int] = set()
    for part in value.split(","):
        lo, _, hi = part.partition("-")
        if lo.isdigit() and (not hi or hi.isdigit()):
            out.update(range(int(lo), int(hi or lo) + 1))
    return out


def check_plugstack_file(path: Path) -> list[str]:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        return [f"{path}: {exc}"]

    def include(pattern: str) -> list[tuple[str, str]]:
        base = Path(path).parent
        full = pattern if pattern.startswith("/") else str(base / pattern)
        out = []
        for name in sorted(glob.glob(full)):
            try:
                out.append((name, Path(name).read_text()))
            except OSError:
                continue
        return out

    return plugstack_problems(text, str(path), include)


def check_slurm_conf_file(path: Path) -> list[str]:
    try:
        return slurm_conf_problems(Path(path).read_text(), str(path))
    except OSError as exc:
        return [f"{path}: {exc}"]
