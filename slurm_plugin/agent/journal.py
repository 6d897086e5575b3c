"""The node agent's journal of MIG slices: which job (and which run of it) holds which slice.

NVML keeps no owner on a MIG instance, and a job between two steps has no process on its
slice: after an agent restart, or with ``state.json`` lost or corrupt, nothing on the GPU
says the slice is taken. The journal does. It is an append-only JSON-lines file
(``<agent home>/slices.jsonl``, mode 0600), each line written and ``fsync``-ed before the
agent answers:

- ``assign``: a job's run (``job``, ``run`` = the assignment's creation time) took the slice
  ``uuid``; the line carries the whole assignment, so a lost ``state.json`` is rebuilt;
- ``release``: that run let it go (``kept``: left idle for the queue, else destroyed);
- ``idle``: the agent made the slice for no job (a layout for the queue).

A torn last line (a crash mid-write) is skipped and counted; the file is rewritten, with only
what still holds, when it grows long. :meth:`SliceJournal.replay` gives what the journal
says now; the agent checks it against NVML and Slurm's job list (:mod:`.reconcile`).

The helper mirrors what holds into the controller's store (:mod:`slurm_plugin.helper.journal_mirror`), and
gives an agent that lost both this file and ``state.json`` its slices back from that copy
(:mod:`.restore`), each confirmed with NVML and the job list first.
"""
from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from slurm_plugin.agent.state import Assignment

log = logging.getLogger(__name__)

COMPACT_AFTER = 2000  # lines


@dataclass
class JournalView:
    """What the journal says holds now."""

    held: dict[str, Assignment] = field(default_factory=dict)  # slice uuid -> its job's run
    idle: set[str] = field(default_factory=set)  # slices the agent made or kept for no job
    skipped: int = 0  # unreadable lines
    lines: int = 0


class SliceJournal:
    """Append-only, fsync-ed record of slice assignments (see the module docstring)."""

    def __init__(self, directory: Path):
        self.path = Path(directory) / "slices.jsonl"

    def _append(self, record: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, (json.dumps(record, sort_keys=True) + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)

    def assign(self, a: Assignment) -> None:
        if a.device_uuid and a.gi_id is not None:
            self._append({"op": "assign", "job": a.job_id, "run": a.created_at, "uuid": a.device_uuid,
                          "assignment": a.to_dict()})

    def release(self, a: Assignment, kept: bool) -> None:
        if a.device_uuid and a.gi_id is not None:
            self._append({"op": "release", "job": a.job_id, "run": a.created_at, "uuid": a.device_uuid,
                          "kept": kept})

    def idle(self, uuid: str | None) -> None:
        if uuid:
            self._append({"op": "idle", "uuid": uuid})

    def mark(self) -> str:
        """Changes whenever a line is written or the file rewritten (size and modification
        time): the helper collects the journal again when its mark moves."""
        try:
            st = os.stat(self.path)
        except OSError:
            return "-"
        return f"{st.st_size}:{st.st_mtime_ns}:{st.st_ino}"

    def held_records(self) -> list[dict]:
        """What holds now, one entry per slice: ``uuid``, ``job``, ``run`` and ``assignment``
        (the agent's record), as the helper mirrors it on the controller."""
        return [{"uuid": uuid, "job": a.job_id, "run": a.created_at, "assignment": a.to_dict()}
                for uuid, a in sorted(self.replay().held.items())]

    def replay(self) -> JournalView:
        view = JournalView()
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return view
        for line in text.splitlines():
            view.lines += 1
            try:
                rec = json.loads(line)
                self._apply(view, rec)
            except (ValueError, KeyError, TypeError) as exc:
                view.skipped += 1
                log.warning("%s: line %d unreadable (%s); skipped", self.path, view.lines, exc)
        return view

    @staticmethod
    def _apply(view: JournalView, rec: dict) -> None:
        uuid = rec["uuid"]
        if rec["op"] == "assign":
            view.held[uuid] = Assignment.from_dict(rec["assignment"])
            view.idle.discard(uuid)
        elif rec["op"] == "release":
            held = view.held.get(uuid)
            if held is not None and (held.job_id, held.created_at) == (rec["job"], rec["run"]):
                del view.held[uuid]
            if rec.get("kept"):
                view.idle.add(uuid)
        elif rec["op"] == "idle":
            view.idle.add(uuid)
        else:
            raise ValueError(f"unknown op {rec['op']!r}")

    def forget_gone(self, live: set[str]) -> None:
        """Rewrite the journal with what still holds on the GPU (``live`` uuids), when long."""
        view = self.replay()
        if view.lines < COMPACT_AFTER and not view.skipped:
            return
        tmp = self.path.with_suffix(".tmp")
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as fh:
            for uuid, a in sorted(view.held.items()):
                if uuid in live:
                    fh.write(json.dumps({"op": "assign", "job": a.job_id, "run": a.created_at, "uuid": uuid,
                                         "assignment": a.to_dict()}, sort_keys=True) + "\n")
            for uuid in sorted(view.idle & live):
                fh.write(json.dumps({"op": "idle", "uuid": uuid}) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        tmp.replace(self.path)
