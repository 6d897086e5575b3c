"""Activity per MIG GPU instance through DCGM's ``dcgmi`` (gpupack.toml ``[agent] dcgmi``).

NVML gives no utilisation per MIG instance; DCGM's profiling field
``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` (1001, the fraction of the time the graphics engine of
the instance was busy) does, per GPU-instance entity (``GPU-I``). The adapter runs:

- ``dcgmi discovery -c``: the MIG hierarchy, which maps DCGM's GPU-instance entity ids to
  NVML's (GPU index, GPU instance id); read again whenever NVML's instances of a GPU are not
  the ones DCGM listed (DCGM renumbers its entities when MIG is reconfigured);
- ``dcgmi dmon -e 1001 -i i:<id>,... -d <ms>``: one long-running monitor for every GPU
  instance of the node, whose rows a thread keeps (the latest per entity). It is started
  again when the hierarchy changes, and at once when it fails because an instance it
  watched is gone (a MIG layout changed on any GPU of the node); a monitor that fails on an
  unchanged hierarchy says why (no hostengine, profiling not supported on the GPU:
  DCGM_ST_PROFILING_NOT_SUPPORTED), and is not started again before :data:`RETRY_S`.

Each call hands out the values that came since the last one (a value is never counted
twice); a blank value (``N/A``) is no value. Every failure is a
:class:`mig.errors.CountersUnavailableError` with a reason code (``no-dcgm``,
``dcgm-hostengine``, ``dcgm-profiling``, ``dcgm-output``, ``dcgm-no-instance``) and what to do.
"""
from __future__ import annotations

import logging
import shlex
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gpus.dcgm.output import DcgmiOutputError, GiEntity, parse_dmon_line, parse_hierarchy
from mig.errors import CountersUnavailableError

log = logging.getLogger(__name__)

GR_ENGINE_ACTIVE = 1001  # DCGM_FI_PROF_GR_ENGINE_ACTIVE
PERIOD_MS = 1000  # dmon's period (its default)
RETRY_S = 60.0  # a monitor that failed is not started again sooner
REDISCOVER_S = 10.0  # NVML and DCGM disagree on a GPU's instances: ask DCGM again at most this often
TIMEOUT_S = 10.0
SETUP_HINT = ("DCGM's host engine (nv-hostengine, package datacenter-gpu-manager) must run on the node "
              "with its profiling module; or set gpupack.toml [agent] dcgmi")


@dataclass(frozen=True)
class GiValue:
    at: float  # when the adapter read the row
    gr_active: float  # 0.0-1.0


def reason_of(text: str) -> str:
    """The reason code of what dcgmi said when it failed."""
    low = text.lower()
    if "profiling" in low or "result: -36" in low:
        return "dcgm-profiling"
    if "host engine" in low or "hostengine" in low or "connection" in low:
        return "dcgm-hostengine"
    return "dcgm-output"


class DmonStream:
    """One running ``dcgmi dmon``: its latest row per entity, read by a thread."""

    def __init__(self, argv: list[str], watch: frozenset[GiEntity], clock: Callable[[], float],
                 popen: Callable[..., subprocess.Popen] = subprocess.Popen):
        self.watch = watch  # the instances it watches, with the entity ids DCGM gave them then
        self.entities = frozenset(e.entity_id for e in watch)
        self.clock = clock
        self.latest: dict[int, GiValue | None] = {}
        self.tail: deque[str] = deque(maxlen=5)
        self.broken: str | None = None  # the first line that was not a row
        self.proc = popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                          text=True, bufsize=1)
        self._thread = threading.Thread(target=self._read, name="dcgmi-dmon", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.tail.append(line.rstrip())
            try:
                row = parse_dmon_line(line)
            except DcgmiOutputError as exc:
                self.broken = self.broken or str(exc)
                continue
            if row is not None and row.group == "GPU-I":
                self.latest[row.entity_id] = None if row.value is None else GiValue(self.clock(), row.value)

    def failure(self) -> str | None:
        """Why the monitor gives no rows (None while it runs and parses)."""
        if self.broken:  # what dcgmi printed that is not a row: its error, or a format not read here
            self.stop()
            return f"dcgmi dmon: {self.broken}"
        if self.proc.poll() is None:
            return None
        self._thread.join(1.0)
        said = " / ".join(line for line in self.tail if line.strip()) or "nothing"
        return f"dcgmi dmon exited with status {self.proc.returncode}: {said}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(2.0)
            except subprocess.TimeoutExpired:
                self.proc.kill()


class DcgmiActivity:
    """DCGM_FI_PROF_GR_ENGINE_ACTIVE per MIG GPU instance, through the ``dcgmi`` program."""

    def __init__(self, command: str | list[str] = "dcgmi", *, clock: Callable[[], float] = time.time,
                 run: Callable[..., subprocess.CompletedProcess] = subprocess.run,
                 popen: Callable[..., subprocess.Popen] = subprocess.Popen, period_ms: int = PERIOD_MS):
        self.argv = shlex.split(command) if isinstance(command, str) else list(command)
        if not self.argv:
            raise ValueError("[agent] dcgmi is empty: name DCGM's dcgmi program")
        self.clock, self._run, self._popen, self.period_ms = clock, run, popen, period_ms
        self.entities: dict[tuple[int, int], GiEntity] = {}
        self._discovered_at: float | None = None
        self._stream: DmonStream | None = None
        self._failed: tuple[float, CountersUnavailableError] | None = None
        self._handed: dict[int, float] = {}  # entity -> time of the last value handed out
        self._asked: dict[int, frozenset[int]] = {}  # GPU -> NVML's instances when DCGM was last asked
        self._lock = threading.Lock()

    def _call(self, args: list[str]) -> str:
        argv = self.argv + args
        try:
            done = self._run(argv, capture_output=True, text=True, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)
        except FileNotFoundError as exc:
            raise CountersUnavailableError(
                f"DCGM is not installed here: {argv[0]} not found ({exc.strerror}); {SETUP_HINT}",
                reason="no-dcgm") from exc
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise CountersUnavailableError(f"{shlex.join(argv)}: {exc}; {SETUP_HINT}", reason="dcgm-hostengine") from exc
        said = (done.stdout + done.stderr).strip()
        if done.returncode != 0:
            raise CountersUnavailableError(f"{shlex.join(argv)} failed ({done.returncode}): {said[:300]}; {SETUP_HINT}",
                                           reason=reason_of(said))
        return done.stdout

    def discover(self) -> dict[tuple[int, int], GiEntity]:
        """{(GPU index, GI id): its DCGM entity}, from ``dcgmi discovery -c``."""
        text = self._call(["discovery", "-c"])
        try:
            found = parse_hierarchy(text)
        except DcgmiOutputError as exc:
            raise CountersUnavailableError(f"dcgmi discovery -c: {exc}", reason="dcgm-output") from exc
        self._discovered_at = self.clock()
        self.entities = {(e.gpu_index, e.gi_id): e for e in found}
        return self.entities

    def activity(self, gpu_index: int, gi_ids: Iterable[int]) -> dict[int, GiValue]:
        """{GI id: its newest value not handed out before} for NVML's GPU instances ``gi_ids``
        of GPU ``gpu_index``; an instance without a new value is left out."""
        wanted = set(gi_ids)
        with self._lock:
            known = {gi for g, gi in self.entities if g == gpu_index}
            stale = self._discovered_at is None or self.clock() - self._discovered_at >= REDISCOVER_S
            # a new layout is asked about at once; DCGM lagging behind NVML, at most every REDISCOVER_S
            if wanted != known and (stale or self._asked.get(gpu_index) != wanted):
                self._asked[gpu_index] = frozenset(wanted)
                self.discover()
                known = {gi for g, gi in self.entities if g == gpu_index}
            if wanted and not wanted & known:
                raise CountersUnavailableError(
                    f"GPU {gpu_index}: DCGM lists none of its GPU instances {sorted(wanted)} (dcgmi discovery -c "
                    f"lists {sorted(known) or 'none'}): is the host engine watching this GPU?", reason="dcgm-no-instance")
            stream = self._running_stream()
            out = {}
            for gi in sorted(wanted & known):
                entity = self.entities[(gpu_index, gi)].entity_id
                value = stream.latest.get(entity)
                if value is not None and value.at > self._handed.get(entity, 0.0):
                    self._handed[entity] = value.at
                    out[gi] = value
            return out

    def _running_stream(self) -> DmonStream:
        """The monitor of every GPU instance DCGM listed, started (again) when needed."""
        # the instances with their ids: DCGM may give the same ids to other instances (a layout
        # changed on another GPU), and a monitor started before reads the instances it had
        wanted = frozenset(self.entities.values())
        if not wanted:
            raise CountersUnavailableError("DCGM lists no GPU instance on this node (dcgmi discovery -c)",
                                           reason="dcgm-no-instance")
        s = self._stream
        if s is not None and s.watch == wanted and (why := s.failure()) is not None:
            s.stop()
            self._stream = None
            # an instance it watched was destroyed (a MIG layout changed, on any GPU of the
            # node): DCGM's hierarchy then differs, and a monitor of the new one starts at once
            wanted = frozenset(self.discover().values())
            if wanted == s.watch:
                self._failed = (self.clock(), CountersUnavailableError(f"{why}; {SETUP_HINT}", reason=reason_of(why)))
                log.warning("DCGM per-instance activity stopped: %s", why)
            else:
                log.info("DCGM's GPU instances changed under its monitor (%s): watching %s", why,
                         sorted(e.entity_id for e in wanted))
            if not wanted:
                raise CountersUnavailableError("DCGM lists no GPU instance on this node (dcgmi discovery -c)",
                                               reason="dcgm-no-instance")
        if self._failed is not None:
            at, error = self._failed
            if self.clock() - at < RETRY_S:
                raise error
            self._failed = None
        if self._stream is not None and self._stream.watch != wanted:
            self._stream.stop()
            self._stream = None
        if self._stream is None:
            ids = ",".join(f"i:{e}" for e in sorted(e.entity_id for e in wanted))
            argv = self.argv + ["dmon", "-e", str(GR_ENGINE_ACTIVE), "-d", str(self.period_ms), "-i", ids]
            try:
                self._stream = DmonStream(argv, wanted, self.clock, self._popen)
            except OSError as exc:
                raise CountersUnavailableError(f"{shlex.join(argv)}: {exc}; {SETUP_HINT}", reason="no-dcgm") from exc
            self._handed = {e: t for e, t in self._handed.items() if e in self._stream.entities}
        return self._stream

    def close(self) -> None:
        with self._lock:
            if self._stream is not None:
                self._stream.stop()
                self._stream = None
