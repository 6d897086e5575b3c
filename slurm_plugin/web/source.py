"""Where the web view's data comes from (the adapter): Slurm's commands, the node agents
(over the MUNGE-authenticated link) and the SQLite store. Pages are built from a cached reading at most `refresh_s`
old, so many viewers cost one `squeue` per interval and nobody watching costs nothing."""
from __future__ import annotations

import gzip
import hashlib
import logging
import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from packer import comment as comment_mod
from packer.config import PackerConfig
from packer.curves import partition_capacity
from packer.gres import count_of
from store.curves import RunCurves
from store.db import Store, StoreError
from slurm_plugin.agent.client import helper_link
from slurm_plugin.helper.monitor_settings import load_monitor_settings
from slurm_plugin.helper.settings import Paths
from slurm_plugin.slurm.errors import JobNotFoundError, SlurmError
from slurm_plugin.slurm.gres import expand_hostlist
from slurm_plugin.slurm.runner import SlurmRunner
from slurm_plugin.web import pages
from slurm_plugin.web.forecasts import ForecastCache
from slurm_plugin.web.jobview import JobDetail, assemble_job, this_run
from slurm_plugin.web.model import ACTIVE, EventRow, Overview, assemble
from slurm_plugin.web.slices import AgentJob, IdleInstance
from slurm_plugin.web.settings import WebSettings

log = logging.getLogger(__name__)

AGENT_TIMEOUT_S = 1.0
EARLIER_RUNS = 3  # a job page draws the curves of this many earlier runs (a job restarted, requeued)
AGENT_THREADS = 16  # node agents asked at once (a silent one costs AGENT_TIMEOUT_S, not N of them)


@dataclass(frozen=True)
class Rendered:
    """A page fragment ready to send, with the validator the browser polls with."""

    html: str
    etag: str
    taken_at: float

    @cached_property
    def gzipped(self) -> bytes:
        """Compressed once per reading, for every viewer that accepts gzip (a long queue's
        page is ~1.4 MiB of HTML, mostly repeated markup)."""
        return gzip.compress(self.html.encode(), compresslevel=5, mtime=0)


def _etag(html: str) -> str:
    return '"' + hashlib.blake2b(html.encode(), digest_size=12).hexdigest() + '"'


def catalog_lookup(config: PackerConfig):
    """profile name -> (memory slices, MiB), from the MIG catalogue of the packer's
    `gpu_model`, else the one closest to the GPUs it is configured for (shares, memory)."""
    from mig.catalog import list_models, load_catalog
    from mig.errors import UnknownProfileError

    cats = [load_catalog(m) for m in list_models()]
    own = load_catalog(config.gpu_model).model if config.gpu_model else None
    cats.sort(key=lambda c: (c.model != own, c.memory_slices != config.shares_per_gpu,
                             abs(c.memory_mib - config.gpu_memory_gib * 1024)))

    def find(profile: str):
        for cat in cats:
            try:
                p = cat.profile(profile)
            except UnknownProfileError:  # not in this catalogue
                continue
            return p.memory_slices, p.memory_mib
        return None

    return find


class WebSource:
    def __init__(self, config_path: Path | None, paths: Paths, config: PackerConfig, settings: WebSettings,
                 runner: SlurmRunner | None = None, clock=time.time, agents=None):
        self.paths = paths
        self.config = config
        self.settings = settings
        self.clock = clock
        self.runner = runner or SlurmRunner(slurm_conf=str(paths.slurm_conf) if paths.slurm_conf else None, timeout=10)
        # the node agents, over the MUNGE-authenticated link ([agent], [agents] of gpupack.toml)
        self.agents = agents or helper_link(config_path, paths, lambda: self.runner)
        self.horizon_s = load_monitor_settings(config_path).memory_horizon_s if config_path else 3600.0
        self._profile = catalog_lookup(config)
        self._store: Store | None = None
        self._store_lock = threading.Lock()
        self._lock = threading.Lock()
        self._overview: tuple[Overview, Rendered] | None = None
        self.forecasts = ForecastCache()

    # -- the store (one connection, one thread at a time) --------------------------------
    def _with_store(self, fn):
        with self._store_lock:
            if self._store is None:
                if not Path(self.paths.database).exists():
                    raise FileNotFoundError(f"no gpupack database at {self.paths.database} yet (is the helper running?)")
                self._store = Store(self.paths.database)
            return fn(self._store)

    def _events(self, limit: int, job_id: int | None = None) -> list[EventRow]:
        rows = self._with_store(lambda s: s.events(limit=limit, job_id=job_id))
        return [EventRow(e.at, e.job_id, e.kind, e.detail) for e in rows]

    # -- the node agents -------------------------------------------------------------------
    def _agents(self, nodes: list[str], busy: set[str], problems: list[str]) -> tuple[list[AgentJob], list[IdleInstance]]:
        """What each node's agent isolated, and its idle MIG instances (asked in parallel).
        A node without running jobs whose agent is silent is not a problem worth showing."""
        from slurm_plugin.agent.client import AgentRefused, AgentUnavailable, status as agent_status

        def status(node: str) -> tuple[str, dict | str | None]:
            try:
                return node, agent_status(self.agents, node, timeout=AGENT_TIMEOUT_S)
            except AgentRefused as exc:
                return node, {"status": "refused", "reason": str(exc)}
            except AgentUnavailable as exc:
                return node, str(exc) if node in busy else None

        out: list[AgentJob] = []
        idle: list[IdleInstance] = []
        with ThreadPoolExecutor(max_workers=AGENT_THREADS) as pool:
            answers = list(pool.map(status, sorted(nodes)))
        for node, answer in answers:
            if answer is None:
                continue
            if isinstance(answer, str):
                if node in busy:
                    problems.append(f"node agent of {node} does not answer ({answer}); its slices are drawn from Slurm's counts")
                continue
            if answer.get("status") != "ok":
                problems.append(f"node agent of {node} refused: {answer.get('reason')}")
                continue
            for job_id, info in (answer.get("jobs") or {}).items():
                out.append(AgentJob(int(job_id), node, int(info.get("gpu_index", -1)), str(info.get("isolation") or "none")))
            for gpu, instances in (answer.get("instances") or {}).items():
                idle += [IdleInstance(node, int(gpu), str(i["profile"]), int(i["start"]), int(i["size"]))
                         for i in instances if not i.get("owner")]
        return out, idle

    # -- pages -----------------------------------------------------------------------------
    def overview(self) -> tuple[Overview, Rendered]:
        with self._lock:
            now = self.clock()
            if self._overview is not None and now - self._overview[1].taken_at < self.settings.refresh_s:
                return self._overview
            problems: list[str] = []
            try:
                nodes = self.runner.nodes()
                jobs = self.runner.jobs_in_play()
            except SlurmError as exc:
                if self._overview is not None:
                    log.warning("Slurm did not answer; showing the previous reading: %s", exc)
                    return self._overview
                raise
            busy = {n for j in jobs if j.state in ACTIVE for n in expand_hostlist(j.nodes)}
            agents, idle = self._agents([n.name for n in nodes], busy, problems)
            try:
                events = self._events(self.settings.events)
            except (OSError, sqlite3.Error, StoreError) as exc:
                problems.append(f"events unavailable: {exc}")
                events = []
            ov = assemble(nodes, jobs, agents, events, taken_at=now, shares_per_gpu=self.config.shares_per_gpu,
                          profile_slices=lambda p: (self._profile(p) or (None,))[0],
                          max_rows=self.settings.max_rows, problems=problems, idle=idle)
            html = pages.overview_fragment(ov)
            self._overview = (ov, Rendered(html, _etag(html), now))
            return self._overview

    def job(self, job_id: int) -> tuple[JobDetail, Rendered]:
        now = self.clock()
        try:
            job = self.runner.job(job_id)
        except JobNotFoundError:
            job = None
        record = comment_mod.parse(job.admin_comment) if job is not None else None
        fp = record.fingerprint if record is not None else None
        samples, started = [], None
        if job is not None and job.state in ACTIVE and job.nodes:
            samples, started = self._samples(job_id, expand_hostlist(job.nodes)[0])
        if fp:
            estimate, remembered = self._with_store(lambda s: s.history(fp, self.config.history_window))
            runs = self._with_store(lambda s: s.runs(fp, limit=10))
        else:
            estimate, remembered, runs = None, None, []
        events = self._events(50, job_id)
        shards = count_of((*job.gres_detail, *job.gres), "shard") if job is not None else None
        isolation = samples[-1].isolation if samples else None
        capacity = partition_capacity(isolation, shards, self.config.share_bytes, lambda p: (self._profile(p) or (None, None))[1])
        forecast = None
        if samples and capacity[0]:
            horizon = self.horizon_s
            if job is not None and job.end_time is not None and started is not None and job.end_time.timestamp() > started:
                horizon = min(horizon, job.end_time.timestamp() - started)
            forecast = self.forecasts.forecast(job_id, started, capacity[0], horizon, samples)
        # the curves stored at each run's end (a job that is not running: its samples went with its run)
        ended = self._with_store(lambda s: RunCurves(s).runs_of_job(job_id, limit=EARLIER_RUNS + 1))
        stored = ended[0] if ended and (job is None or job.state not in ACTIVE) else None
        detail = assemble_job(job_id, job, samples=samples, started_at=started, estimate=estimate,
                              remembered_shards=remembered, runs=runs, events=events, capacity=capacity,
                              forecast=forecast, stored=stored,
                              earlier=[c for c in ended if c is not stored][:EARLIER_RUNS])
        html = pages.job_fragment(detail)
        return detail, Rendered(html, _etag(html), now)

    def _samples(self, job_id: int, node: str):
        from slurm_plugin.agent.client import AgentUnavailable, samples

        try:
            return this_run(samples(self.agents, node, job_id, timeout=AGENT_TIMEOUT_S))
        except (AgentUnavailable, PermissionError, ValueError, TypeError) as exc:
            log.info("job %d: no samples from the agent of %s: %s", job_id, node, exc)
            return [], None

    def close(self) -> None:
        with self._store_lock:
            if self._store is not None:
                self._store.close()
                self._store = None
