"""The agents' final summaries, brought to the controller's history by its one writer.

A node agent keeps each finished job's summary until the helper acknowledges it
(`FinalsSource`). Two controller-side paths collect them, both through `HistoryRecorder`,
so a run seen by several is still one row and one event:

- the sweep (a `FinalsCollector` thread of the watcher process, every `SWEEP_S`, outside the
  monitor's rounds): every GPU node's summaries not yet acknowledged: the runs nobody
  recorded (the helper was down at their end, the controller's epilog was lost, the agent
  was down and is back);
- the controller's epilog (`gpupack ctld-epilog`) tells the submit side which job ended on
  which nodes; it hands the job to the watcher (`EndedSpool`), whose `FinalsCollector`
  collects those nodes' summaries within a second.

The same sweep mirrors each node's slice journal into the store (`journal_mirror`).

The monitor hands each run it tracked, from its own samples, to the same thread
(`helper.run_inbox.RunInbox`); the summaries merge into its row.

A summary is acknowledged once its run is settled (recorded, merged, or with no memory to
record); a run whose job Slurm still shows finishing is left for a later pass, and one whose
job Slurm forgot is acknowledged with a warning (nothing can attribute it to a workload).
"""
from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Protocol

from store.db import Store
from slurm_plugin.helper.run_inbox import RunInbox
from slurm_plugin.history_recorder import NOT_FINISHED, UNATTRIBUTED, HistoryRecorder, RunFigures
from slurm_plugin.slurm.errors import SlurmError
from slurm_plugin.slurm.gres import expand_hostlist

log = logging.getLogger(__name__)

SWEEP_S = 30.0  # the watcher's sweep of every node's unacknowledged summaries
KEEP_S = 86400.0  # the local source looks at summaries written in the last day
EPILOG_WAIT_S = 15.0  # the collector looks this long for a summary the epilog announced
SPOOL_MAX_BYTES = 1 << 20  # the ended-jobs file: ~50,000 jobs between two takes (one a second)


class FinalsSource(Protocol):
    """Where the helper reads the agents' final summaries (`agent.finals.job_summary` + `gaps`)."""

    def collect(self, node: str) -> list[dict]: ...

    def ack(self, node: str, job_ids: Iterable[int]) -> None: ...


class LocalFinals:
    """`FinalsSource` over the agents' final files (`agent_dir/agent/<node>/final/<job>.json`),
    where the controller sees them (one host). Acknowledging one leaves a marker beside it
    (`<job>.acked`), so a restarted watcher does not read them all again; a summary the agent
    writes anew (the job's next run) is newer than its marker and is collected again."""

    def __init__(self, state_dir: Path, keep_s: float = KEEP_S):
        self.state_dir, self.keep_s = Path(state_dir), keep_s

    def collect(self, node: str) -> list[dict]:
        from slurm_plugin.agent.paths import AgentPaths

        out, horizon = [], time.time() - self.keep_s
        for path in sorted(AgentPaths(self.state_dir, node).finals.glob("*.json")):
            try:
                mtime = path.stat().st_mtime
                if mtime < horizon or _mtime(path.with_suffix(".acked")) >= mtime:
                    continue
                out.append(json.loads(path.read_text()))
            except (OSError, ValueError) as exc:
                log.info("final summary %s unreadable: %s", path, exc)
        return out

    def ack(self, node: str, job_ids: Iterable[int]) -> None:
        from slurm_plugin.agent.paths import final_path

        for job_id in job_ids:
            final_path(self.state_dir, node, job_id).with_suffix(".acked").touch()


class LinkFinals:
    """`FinalsSource` over the MUNGE-authenticated link: the agent keeps each run's summary until
    it is acknowledged, by its run key where the summary names one (a requeued job's later run
    that ended after the collection is kept for the next sweep)."""

    def __init__(self, link):
        self.link = link
        self._runs: dict[tuple[str, int], list[str]] = {}  # (node, job) -> run keys collected

    def collect(self, node: str) -> list[dict]:
        from slurm_plugin.agent.client import collect_finals

        summaries = collect_finals(self.link, node)
        for summary in summaries:
            if summary.get("run") and isinstance(summary.get("job_id"), int):
                self._runs.setdefault((node, summary["job_id"]), []).append(str(summary["run"]))
        return summaries

    def ack(self, node: str, job_ids: Iterable[int]) -> None:
        from slurm_plugin.agent.client import AgentUnavailable, ack_finals

        runs: list[int | str] = []
        for job_id in job_ids:
            runs += self._runs.pop((node, int(job_id)), None) or [int(job_id)]
        try:
            ack_finals(self.link, node, runs)
        except (AgentUnavailable, PermissionError, ValueError) as exc:  # collected again, merged by run
            log.info("final summaries on %s not acknowledged now: %s", node, exc)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return -1.0


class FinalsSweep:
    """Records what the agents' unacknowledged summaries hold, node by node."""

    def __init__(self, source: FinalsSource, recorder: HistoryRecorder):
        self.source = source
        self.recorder = recorder
        self.counts: dict[str, int] = {}  # outcome -> runs, since the start (for logs and tests)

    def node(self, node: str, only: Callable[[int], bool] = lambda _j: True) -> dict[int, str]:
        """Record the summaries `node` holds (those of the jobs `only` accepts); returns
        job -> outcome."""
        return self.sweep([node], only)

    def sweep(self, nodes: Iterable[str], only: Callable[[int], bool] = lambda _j: True,
              source: str | None = None) -> dict[int, str]:
        """Record every unacknowledged summary of `nodes`: their jobs looked up in one listing
        (on 22.05 one job costs a whole listing too). An agent that does not answer is logged,
        never raised; a Slurm that does not answer leaves every summary for the next sweep."""
        found: list[tuple[str, RunFigures]] = []
        for node in sorted(set(nodes)):
            found += [(node, f) for f in self._collect(node) if only(f.job_id)]
        if not found:
            return {}
        ids = {f.job_id for _, f in found}
        try:  # one job: the recorder asks for it alone (`scontrol show job ID` from 23.02)
            jobs = {j.job_id: j for j in self.recorder.runner.jobs(ids)} if len(ids) > 1 else {}
        except SlurmError as exc:
            log.info("Slurm did not answer (%s); %d final summaries wait for the next sweep", exc, len(found))
            return {}
        done: dict[int, str] = {}
        settled: dict[str, list[int]] = {}
        for node, figures in found:
            try:
                outcome = self.recorder.record(figures, jobs.get(figures.job_id), source=source)
            except SlurmError as exc:
                log.info("job %d: Slurm did not answer (%s); its summary waits", figures.job_id, exc)
                continue
            done[figures.job_id] = outcome
            self.counts[outcome] = self.counts.get(outcome, 0) + 1
            if outcome != NOT_FINISHED:
                settled.setdefault(node, []).append(figures.job_id)
            if outcome == UNATTRIBUTED:
                log.warning("job %d's summary on %s dropped: Slurm no longer knows the job", figures.job_id, node)
        for node, job_ids in settled.items():
            self.source.ack(node, job_ids)
        return done

    def _collect(self, node: str) -> list[RunFigures]:
        try:
            summaries = self.source.collect(node)
        except (OSError, PermissionError, ValueError) as exc:
            log.info("no final summaries from %s now: %s", node, exc)
            return []
        out = []
        for summary in summaries:
            try:
                out.append(RunFigures.from_summary(summary))
            except (KeyError, TypeError, ValueError) as exc:
                log.warning("a final summary from %s is malformed (%s): %r", node, exc, summary)
        return out


class EndedSpool:
    """The jobs the controller's epilog named, handed from the submit side to the watcher: one
    line each (`<job> <hostlist>`) appended to a file beside the helper's socket (a write of a
    few bytes on the submit path, no Slurm call, no SQLite), taken by the watcher's collector.
    The file holds at most `max_bytes`: past it a job is refused (`SpoolFull`, logged by the
    caller) and its run waits on its agent for the sweep, as does a line lost in a crash. A
    job named twice before a take is taken once."""

    def __init__(self, path: Path, max_bytes: int = SPOOL_MAX_BYTES):
        self.path = Path(path)
        self.max_bytes = max_bytes

    def append(self, job_id: int, nodes: str) -> None:
        line = f"{int(job_id)} {nodes}\n".encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            if os.fstat(fd).st_size + len(line) > self.max_bytes:
                raise SpoolFull(f"{self.path} holds {self.max_bytes} bytes already (is the watcher taking them?)")
            os.write(fd, line)
        finally:
            os.close(fd)

    def take(self) -> list[tuple[int, tuple[str, ...]]]:
        """The jobs appended since the last call, each once (the file is renamed away, then read;
        a line that is not `<job> <hostlist>` is skipped and counted in the log)."""
        taking = self.path.with_name(self.path.name + ".taking")
        try:
            os.replace(self.path, taking)
        except FileNotFoundError:
            return []
        out: dict[int, tuple[str, ...]] = {}
        skipped = 0
        for line in taking.read_text(errors="replace").splitlines():
            job, _, hostlist = line.partition(" ")
            nodes = expand_hostlist(hostlist) if job.isdigit() else ()
            if not nodes:
                skipped += 1
                continue
            out[int(job)] = nodes
        taking.unlink(missing_ok=True)
        if skipped:
            log.warning("%d line(s) of %s were not a job and its nodes: skipped", skipped, self.path)
        return list(out.items())


class SpoolFull(OSError):
    """The ended-jobs file is at its bound: the job's run waits on its agent for the sweep."""


def spool_path(socket: Path) -> Path:
    return Path(socket).with_name("ended-jobs")


class FinalsCollector:
    """The one writer of the history: a thread of the watcher process, off every
    latency-sensitive path. Every `tick_s` it writes the runs the monitor saw end
    (`monitored`) and the agents' summaries of the jobs the controller's epilog named
    (`spool`), waiting up to `wait_s` for them; every `sweep_s`, every GPU node's."""

    def __init__(self, make_sweep: Callable[[], FinalsSweep], spool: EndedSpool | None = None,
                 wait_s: float = EPILOG_WAIT_S, sweep_s: float = SWEEP_S, tick_s: float = 1.0,
                 journals: Callable[[FinalsSweep], Callable[[list[str]], object]] | None = None,
                 monitored: Callable[[], RunInbox] | None = None):
        self._make_sweep = make_sweep  # built in the thread: its own store connection
        # the runs the monitor saw end (`helper.run_inbox.RunInbox`): written here, every tick
        self._monitored = monitored
        # each sweep also mirrors the nodes' slice journals (`journal_mirror.JournalMirror`),
        # made in the thread from the sweep (its store connection)
        self._journals = journals
        self.spool = spool
        self.wait_s, self.sweep_s, self.tick_s = wait_s, sweep_s, tick_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.results: dict[int, str] = {}  # job named by the epilog -> outcome, the latest 1,000
        self.sweeps = 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="gpupack-finals", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        sweep = self._make_sweep()
        mirror = self._journals(sweep) if self._journals is not None else None
        pending: dict[int, tuple[tuple[str, ...], float]] = {}  # job -> (its nodes, until when)
        next_sweep = time.monotonic()
        while True:
            if self._monitored is not None:
                self._guarded(lambda: self._monitored().write(sweep.recorder), "writing the monitor's runs")
            if self.spool is not None:
                for job_id, nodes in self._guarded(self.spool.take, "reading the ended jobs") or []:
                    pending[job_id] = (nodes, time.monotonic() + self.wait_s)
            if pending:
                self._guarded(lambda: self._named(sweep, pending), "recording the jobs the epilog named")
            if time.monotonic() >= next_sweep:
                next_sweep = time.monotonic() + self.sweep_s
                nodes = self._guarded(lambda: gpu_nodes(sweep), "listing the GPU nodes")
                if nodes is not None:
                    self._guarded(lambda: sweep.sweep(nodes), "the sweep of the agents' summaries")
                    if mirror is not None:
                        self._guarded(lambda: mirror(nodes), "mirroring the agents' slice journals")
                self.sweeps += 1
            if self._stop.wait(self.tick_s):
                return

    def _named(self, sweep: FinalsSweep, pending: dict[int, tuple[tuple[str, ...], float]]) -> None:
        nodes = {n for job_nodes, _ in pending.values() for n in job_nodes}
        done = sweep.sweep(nodes, only=lambda j: j in pending, source="ctld-epilog")
        now = time.monotonic()
        for job_id in list(pending):
            outcome = done.get(job_id)
            if outcome is not None and outcome != NOT_FINISHED:
                self.results[job_id] = outcome
            elif now >= pending[job_id][1]:
                self.results[job_id] = "not-collected"  # the sweep records it once its summary is there
            else:
                continue
            del pending[job_id]
        while len(self.results) > 1000:
            self.results.pop(next(iter(self.results)))

    @staticmethod
    def _guarded(work: Callable[[], object], what: str) -> object:
        try:
            return work()
        except SlurmError as exc:
            log.info("%s: Slurm did not answer (%s); tried again later", what, exc)
        except Exception:  # the next pass records it; this thread must live on
            log.exception("%s failed", what)
        return None


def gpu_nodes(sweep: FinalsSweep) -> list[str]:
    """Every node with GPUs, as Slurm lists them now."""
    return [n.name for n in sweep.recorder.runner.nodes() if n.gpus_total > 0]


def open_sweep(database: Path, finals: FinalsSource | Path, slurm_conf: Path | None, source: str) -> FinalsSweep:
    """A sweep with its own store connection and Slurm runner (for a thread of its own), over
    `finals`: the agents' link (`LinkFinals`), or a folder of their final files (one host)."""
    from slurm_plugin.slurm.runner import SlurmRunner

    runner = SlurmRunner(slurm_conf=str(slurm_conf) if slurm_conf else None, timeout=10)
    if isinstance(finals, Path):
        finals = LocalFinals(finals)
    return FinalsSweep(finals, HistoryRecorder(Store(database), runner, source))
