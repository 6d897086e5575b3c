"""Packed steps the SPANK plugin did not let start: the node's own record, kept for the helper.

When a packed step cannot be isolated (the agent is down, refuses, answers garbage, or the
fence cannot be made), the SPANK plugin, as root in the task slurmstepd just forked, writes one
record into this node's spool (``<state>/agent/<node>/unisolated``, root's, mode 0700) and ends
the task with exit 117 before the program starts. The record is the only evidence the helper
believes for requeueing the job and lifting it to the head of the queue: a job that exits 117
by itself leaves none (it cannot write there), and Slurm's ``RequeueExit`` no longer requeues on
a code a job can choose.

The agent lists the records with its samples (:func:`pending`, the link's ``samples`` answer)
and deletes one only when the helper acknowledges it (``ack_unisolated``), so a record written
while the agent was down reaches the helper once the agent is back. A file is believed only when
it is a regular file owned by this agent's uid (root), not writable by group or others, in a
folder that is the same; a file that is not is logged and left alone. Records older than
:data:`KEEP_S` are dropped (slurmctld has forgotten the job by then).

File name: ``<job>.<step>.<pid>.json``; content (one JSON object):
``{"job_id", "step_id", "uid", "node", "at" (epoch seconds), "shards", "reason"}``.
"""
from __future__ import annotations

import json
import logging
import os
import re
import stat
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

log = logging.getLogger(__name__)

NAME_RE = re.compile(r"^(\d{1,10})\.(\d{1,10})\.(\d{1,10})\.json$")
MAX_RECORD_BYTES = 4096
MAX_LISTED = 100  # records one samples answer carries (the oldest first)
KEEP_S = 3600.0
REASON_MAX = 400


@dataclass(frozen=True)
class UnisolatedRecord:
    """One packed step that did not start, as root wrote it on the node."""

    key: str  # the file name: what the helper acknowledges
    job_id: int
    step_id: int
    uid: int | None
    node: str
    at: float
    shards: int
    reason: str

    def to_dict(self) -> dict:
        return asdict(self)


def parse_record(name: str, text: str, node: str) -> UnisolatedRecord:
    """The record in file ``name`` (pure); ValueError says what is wrong with it."""
    m = NAME_RE.match(name)
    if m is None:
        raise ValueError(f"not a record's name: {name!r}")
    doc = json.loads(text)
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")

    def whole(key: str) -> int:
        v = doc.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"{key} must be a non-negative integer, got {v!r}")
        return v

    job_id, step_id = whole("job_id"), whole("step_id")
    if (job_id, step_id) != (int(m.group(1)), int(m.group(2))):
        raise ValueError(f"job {job_id} step {step_id} inside, {name} outside")
    if doc.get("node") != node:
        raise ValueError(f"written for node {doc.get('node')!r}, this is {node}")
    at = doc.get("at")
    if isinstance(at, bool) or not isinstance(at, (int, float)) or at <= 0:
        raise ValueError(f"at must be a time, got {at!r}")
    shards = whole("shards")
    if shards == 0:
        raise ValueError("a record of a step with no shards (only packed steps are stopped)")
    uid = doc.get("uid")
    return UnisolatedRecord(name, job_id, step_id, uid if isinstance(uid, int) and not isinstance(uid, bool) else None,
                            node, float(at), shards, str(doc.get("reason") or "")[:REASON_MAX])


def _trusted(st: os.stat_result, owner: int, kind: Callable[[int], bool]) -> str | None:
    """Why a file or folder of the spool is not believed (None: it is)."""
    if not kind(st.st_mode):
        return "not a regular file or folder"
    if st.st_uid != owner:
        return f"owned by uid {st.st_uid}, not {owner}"
    if st.st_mode & 0o022:
        return f"writable by group or others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


class UnisolatedSpool:
    """The node's spool of unisolated-step records (see the module's doc)."""

    def __init__(self, directory: Path, node: str, clock: Callable[[], float], owner_uid: int | None = None):
        self.directory = Path(directory)
        self.node = node
        self.clock = clock
        self.owner = os.geteuid() if owner_uid is None else owner_uid
        self._said: set[str] = set()  # files already logged as not believed

    def ensure(self) -> None:
        """The folder, root's and 0700 (the SPANK plugin makes it too, when the agent never ran)."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            os.chmod(self.directory, 0o700)
        except OSError as exc:
            log.error("cannot make the unisolated-step spool %s: %s; packed steps that cannot be isolated "
                      "will not be requeued by the helper", self.directory, exc)

    def _say_once(self, key: str, text: str) -> None:
        if key not in self._said:
            self._said.add(key)
            log.warning("%s", text)

    def pending(self) -> list[dict]:
        """The records the helper has not acknowledged, oldest first (at most MAX_LISTED)."""
        try:
            why = _trusted(os.lstat(self.directory), self.owner, stat.S_ISDIR)
        except FileNotFoundError:
            return []
        except OSError as exc:
            self._say_once(str(self.directory), f"unisolated-step spool {self.directory}: {exc}")
            return []
        if why is not None:
            self._say_once(str(self.directory), f"unisolated-step spool {self.directory} is not believed: {why}; "
                                                f"no record in it is sent to the helper")
            return []
        now = self.clock()
        out: list[UnisolatedRecord] = []
        for name in sorted(os.listdir(self.directory)):
            if not NAME_RE.match(name):
                continue
            path = self.directory / name
            try:
                rec = self._read(path)
            except (OSError, ValueError) as exc:
                self._say_once(name, f"unisolated-step record {path} not believed: {exc}")
                continue
            if now - rec.at > KEEP_S:
                log.info("unisolated-step record of job %d step %d is %.0f s old: dropped", rec.job_id,
                         rec.step_id, now - rec.at)
                self._remove(name)
                continue
            out.append(rec)
        out.sort(key=lambda r: r.at)
        return [r.to_dict() for r in out[:MAX_LISTED]]

    def _read(self, path: Path) -> UnisolatedRecord:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            st = os.fstat(fd)
            why = _trusted(st, self.owner, stat.S_ISREG)
            if why is None and st.st_nlink != 1:
                why = f"{st.st_nlink} links"
            if why is not None:
                raise ValueError(why)
            data = os.read(fd, MAX_RECORD_BYTES + 1)
        finally:
            os.close(fd)
        if len(data) > MAX_RECORD_BYTES:
            raise ValueError(f"longer than {MAX_RECORD_BYTES} bytes")
        return parse_record(path.name, data.decode(), self.node)

    def _remove(self, name: str) -> bool:
        try:
            os.unlink(self.directory / name)
            return True
        except FileNotFoundError:
            return False

    def ack(self, keys: Iterable[str]) -> int:
        """The helper has read these records: they are deleted. Idempotent; returns how many were."""
        done = 0
        for key in keys:
            if not isinstance(key, str) or not NAME_RE.match(key):
                raise ValueError(f"not a record's key: {key!r}")
            done += self._remove(key)
        return done
