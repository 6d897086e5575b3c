"""The controller helper's run-time watcher: contention, memory growth, history, MPS, 22.05 guard.

One thread, one round every `[monitor] interval_s`:

1. read every job from Slurm (the adapter) and the newest sample of each running job from
   the node agents (`SampleSource`);
2. **history**: a tracked job that ended COMPLETED has its peak memory, mean utilisation and
   throughput written under its fingerprint (what the submit path estimates from);
3. **22.05 guard** (see `Monitor._guard_gpu_shard_collisions`);
4. **contention** (patent seed, FIG. 4): per shared GPU, `packer.preemption.find_contention`;
   the newcomer is requeued at the head of the queue and each (newcomer, hurt job) pair of
   fingerprints is recorded so they are never packed together again;
5. **memory growth** (thesis, Algorithm 1): a per-job `predictor.Forecaster` on the peak
   memory; when it is certain the job outgrows its share, the job is requeued at the head on
   the next larger size (`packer.preemption.restart_size`) and the size is remembered;
6. **steering**: pending packed jobs get the nodes of their avoided partners (and of
   collisions) in `ExcNodeList`, the user's own exclusions kept; requeued jobs keep a
   priority above every pending job and skip Slurm's requeue delay once safe;
7. **MPS**: percentages for jobs sharing a GPU through MPS (`packer.mps`), written for the
   node agents; **metrics** written and served.

"Requeue at the head" is `scontrol requeuehold` (so the job cannot start again before it is
changed), the changes (size, excluded nodes), `scontrol release`, then an administrator
priority above every pending job (`packer.preemption.head_priority`): Slurm 22.05 resets a
requeued job's submit time, so neither age nor priority/basic's order would bring it back
first, and `scontrol top` only reorders one user's own jobs. Release comes before the
priority because releasing a held job recomputes its priority.

Only `enforce` mode acts; `observe` and `advise` log what would be done as events. Nothing
is ever cancelled. Slurm hiccups are logged and the round is skipped.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from packer import comment as comment_mod
from packer.decision import max_shards
from packer.fingerprint import fingerprint as compute_fingerprint
from packer.mps import mps_percentages
from packer.placement import Running, avoid_nodes, gpu_holders, merge_exclusions, quirk_collisions
from packer.preemption import Resident, find_contention, head_priority, restart_size
from packer.samples import JobSample
from packer.store import RunRecord
from slurm_plugin.helper.monitor_settings import MonitorSettings, load_monitor_settings
from slurm_plugin.helper.sample_source import AgentSamples, SampleSource
from slurm_plugin.slurm.errors import SlurmError
from slurm_plugin.slurm.gres import expand_hostlist
from slurm_plugin.slurm.model import Job

log = logging.getLogger(__name__)

GIB = 1024**3
SAMPLES_KEPT = 600
LAYOUT_REFRESH_S = 5.0  # the queue's needs are re-sent this often even when unchanged
ACTIVE = ("RUNNING", "COMPLETING", "SUSPENDED", "CONFIGURING")


@dataclass
class Track:
    """What the monitor knows of one running job."""

    job_id: int
    fingerprint: str | None
    node: str
    gpu_index: int
    isolation: str
    started_at: float
    shards: int | None  # shares Slurm gave it (None: whole GPUs)
    user: str = ""
    name: str = ""
    samples: deque = field(default_factory=lambda: deque(maxlen=SAMPLES_KEPT))
    forecaster: object | None = None
    forecast_step: float = -1.0
    last_state: str | None = None

    @property
    def packed(self) -> bool:
        return self.shards is not None or self.isolation.startswith(("mig:", "mps:", "shard:"))

    def throughput(self) -> tuple[tuple[float, float], ...]:
        return tuple((s.at, s.throughput) for s in self.samples if s.throughput is not None)


def submit_time_exclusion(admin_comment: str | None) -> frozenset[str]:
    """Nodes the submit path added to the job's excluded nodes (`avoid=` of its record)."""
    record = comment_mod.parse(admin_comment)
    avoid = record.fields.get("avoid") if record is not None else None
    return frozenset(n for n in avoid.split(",") if n) if avoid else frozenset()


def job_shards(job: Job) -> int | None:
    """Shards a job asks for or holds (per node); None when it holds none."""
    for item in (*job.gres_detail, *job.gres):
        if item.name == "shard":
            return item.count
    return None


def wants_whole_gpu(job: Job) -> bool:
    return any(item.name == "gpu" for item in job.gres)


class Monitor:
    """Started by `Helper.run` (`start()` returns at once; `stop()` joins the thread)."""

    def __init__(self, helper, *, runner=None, samples: SampleSource | None = None,
                 settings: MonitorSettings | None = None, clock=time.time,
                 on_jobs: Callable[[list[Job], float], None] | None = None):
        self.helper = helper
        self.store = helper.store
        self.config = helper.config
        paths = helper.paths
        config_path = getattr(helper.config, "path", None)
        self.settings = settings or load_monitor_settings(config_path)
        if runner is None:
            from slurm_plugin.slurm.runner import SlurmRunner

            runner = SlurmRunner(slurm_conf=str(paths.slurm_conf) if paths.slurm_conf else None, timeout=10)
        self.runner = runner
        # the agents' sockets are <state>/run/agent-<node>.sock, with <state> [paths] agent_dir
        # (else the database's folder); GPUPACK_AGENT_STATE_DIR overrides both
        self.agent_state_dir = Path(os.environ.get("GPUPACK_AGENT_STATE_DIR") or getattr(paths, "agent_dir", None)
                                    or Path(paths.database).parent)
        self.samples_source: SampleSource = samples or AgentSamples(self.agent_state_dir)
        self.clock = clock
        self.on_jobs = on_jobs  # called with each round's job listing and when it was asked for
        self.tracks: dict[int, Track] = {}
        self._fp_cache: dict[int, str | None] = {}
        self._ours_excluded: dict[int, frozenset[str]] = {}  # what the helper added to ExcNodeList
        self._quirk_excluded: dict[int, tuple[str, frozenset[int]]] = {}  # job -> (node, keepers)
        self._heading: dict[int, int] = {}  # requeued job -> the priority it was given
        self._layout_pushed: dict[str, tuple[tuple, float]] = {}  # node -> (what, when) last sent
        self._reported: set[tuple[int, float]] = set()  # (job, run start) already judged
        self.mps_plan: dict[tuple[str, int], dict[int, int]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._metrics = None
        self.rounds = 0
        self.last_error: str | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="gpupack-monitor", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.tick()
                self.last_error = None
            except SlurmError as exc:
                if str(exc) != self.last_error:
                    log.warning("monitor round skipped, Slurm did not answer: %s", exc)
                self.last_error = str(exc)
            except Exception:  # never let the watcher die: log and go on next round
                log.exception("monitor round failed")
            self._stop.wait(self.pause_after(time.monotonic() - started))

    def pause_after(self, round_s: float) -> float:
        """Seconds to wait after a round that took `round_s`: the interval, stretched so
        rounds take at most `max_duty` of the time."""
        duty = self.settings.max_duty
        stretched = round_s * (1 - duty) / duty
        pause = max(0.05, self.settings.interval_s - round_s, stretched)
        if stretched > self.settings.interval_s and round_s > 2 * self.settings.interval_s:
            log.info("a monitor round took %.1f s (long queue?); next round in %.1f s", round_s, pause)
        return pause

    # ------------------------------------------------------------------ one round
    def tick(self) -> None:
        now = self.clock()
        listing = self.runner.jobs_in_play(also=self.tracks.keys())
        if self.on_jobs is not None:
            try:
                self.on_jobs(listing, now)
            except Exception:  # publishing the view must not stop the watching
                log.exception("publishing the cluster view failed")
        jobs = {job.job_id: job for job in listing}
        running_nodes = {n for j in jobs.values() if j.state in ACTIVE for n in expand_hostlist(j.nodes)}
        samples = self.samples_source(running_nodes) if running_nodes else []
        self._observe(jobs, samples)
        self._record_finished(jobs, now)
        acted: set[int] = set()
        if self.quirk_guard:
            acted |= self._guard_gpu_shard_collisions(jobs)
        acted |= self._check_contention(jobs, acted)
        acted |= self._check_memory(jobs, acted)
        self._keep_at_head(jobs, skip=acted)
        self._steer_pending(jobs)
        self._plan_mps()
        self._follow_queue(jobs)
        self.rounds += 1
        self._write_metrics()

    @property
    def quirk_guard(self) -> bool:
        """Whether the 22.05 gpu+shard guard runs: as configured, or (auto) where Slurm needs it."""
        setting = self.settings.quirk_guard
        if setting == "auto":
            try:
                return self.runner.version().double_books_shared_gpus
            except SlurmError:
                return True
        return bool(setting)

    @property
    def enforcing(self) -> bool:
        return self.config().mode == "enforce"

    # ------------------------------------------------------------------ observing
    def fingerprint_of(self, job: Job) -> str | None:
        if job.job_id in self._fp_cache:
            return self._fp_cache[job.job_id]
        record = comment_mod.parse(job.admin_comment)
        fp = record.fingerprint if record is not None else None
        if not fp:
            try:
                script = self.runner.batch_script(job.job_id)
                fp = compute_fingerprint(job.user or "", job.name or "", script.encode("utf-8", "surrogateescape"))
            except SlurmError as exc:
                log.info("job %d: no fingerprint (%s)", job.job_id, exc)
                fp = None
        self._fp_cache[job.job_id] = fp
        return fp

    def _observe(self, jobs: dict[int, Job], samples: list[JobSample]) -> None:
        for sample in samples:
            job = jobs.get(sample.job_id)
            if job is None or job.state not in ACTIVE:
                continue
            track = self.tracks.get(sample.job_id)
            started = sample.started_at or (job.start_time.timestamp() if job.start_time else sample.at)
            if track is None or abs(track.started_at - started) > 0.5:
                # first sight, or a new run of a requeued job: start over
                track = Track(
                    job_id=job.job_id, fingerprint=self.fingerprint_of(job), node=sample.node,
                    gpu_index=sample.gpu_index, isolation=sample.isolation, started_at=started,
                    shards=job_shards(job), user=job.user or "", name=job.name or "",
                )
                self.tracks[job.job_id] = track
            if not track.samples or sample.at > track.samples[-1].at:
                track.samples.append(sample)
                track.isolation = sample.isolation
            track.last_state = job.state

    def _record_finished(self, jobs: dict[int, Job], now: float) -> None:
        for job_id, track in list(self.tracks.items()):
            job = jobs.get(job_id)
            state = job.state if job is not None else "GONE"
            if state in ACTIVE:
                continue
            del self.tracks[job_id]
            if state != "COMPLETED" or not track.fingerprint or not track.samples:
                if state not in ("PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"):
                    log.info("job %d ended %s: not recorded in the history", job_id, state)
                continue
            final = self._final_stats(track)
            peak = max(s.peak_mem_bytes for s in track.samples)
            utils = [s.util_pct for s in track.samples if s.util_pct is not None]
            thr = [s.throughput for s in track.samples if s.throughput is not None]
            mean_util = sum(utils) / len(utils) if utils else None
            mean_thr = sum(thr) / len(thr) if thr else None
            if final:
                peak = max(peak, int(final.get("peak_mem_bytes") or 0))
                mean_util = final.get("mean_util_pct", mean_util) if final.get("mean_util_pct") is not None else mean_util
                mean_thr = final.get("mean_throughput") if final.get("mean_throughput") is not None else mean_thr
            if mean_util is not None:
                mean_util = min(100.0, max(0.0, float(mean_util)))
            try:
                self.store.record_run(RunRecord(
                    job_id=job_id, fingerprint=track.fingerprint, peak_mem_bytes=int(peak),
                    mean_util_pct=mean_util, throughput=mean_thr, user=track.user, name=track.name,
                    ended_at=now, source="monitor",
                ))
                self.store.log_event(
                    "history", f"recorded peak {peak / GIB:.2f}GiB util {mean_util if mean_util is None else round(mean_util)}% "
                    f"throughput {mean_thr if mean_thr is None else round(mean_thr, 2)}/s", job_id,
                    fingerprint=track.fingerprint, peak_mem_bytes=int(peak), mean_util_pct=mean_util, throughput=mean_thr,
                )
            except ValueError as exc:
                log.warning("job %d: history not recorded: %s", job_id, exc)

    def _final_stats(self, track: Track) -> dict | None:
        try:
            from slurm_plugin.agent.client import final_stats
        except ImportError:
            return None
        try:
            return final_stats(self.agent_state_dir, track.node, track.job_id, wait_s=0.5)
        except Exception as exc:  # the agent's summary is a bonus; our samples suffice
            log.debug("job %d: no final summary from the agent: %s", track.job_id, exc)
            return None

    # ------------------------------------------------------------------ acting
    def requeue_at_head(self, job: Job, kind: str, reason: str, *, exclude: frozenset[str] = frozenset(),
                        gres: str | None = None, comment: str | None = None, **data) -> bool:
        """Requeue `job`, change it while held, release it and make it the next to start."""
        if not self.enforcing:
            self.store.log_event(kind, f"would requeue ({self.config().mode} mode): {reason}", job.job_id, **data)
            return False
        job_id = job.job_id
        try:
            self.runner.requeue(job_id, hold=True)
            changes: dict[str, object] = {}
            if gres is not None:
                changes["Gres"] = gres
            if exclude:
                ours = self._ours_excluded.get(job_id, frozenset()) | exclude
                changes["ExcNodeList"] = merge_exclusions(job.excluded_nodes, self._ours_excluded.get(job_id, ()), ours)
                self._ours_excluded[job_id] = ours
            if comment is not None:
                changes["AdminComment"] = comment_mod.merge(job.admin_comment, comment)
            if changes:
                self.runner.update_job(job_id, **changes)
            self.runner.release(job_id)
            priority = head_priority(self._pending_priorities(job_id))
            self.runner.update_job(job_id, Priority=priority)
        except SlurmError as exc:
            self.store.log_event(kind + "-failed", f"could not requeue: {exc}", job_id, reason=reason)
            log.error("job %d: requeue for %s failed: %s", job_id, kind, exc)
            return False
        self._heading[job_id] = priority
        self.tracks.pop(job_id, None)
        self.store.log_event(kind, reason, job_id, priority=priority, excluded=sorted(exclude), gres=gres, **data)
        log.warning("job %d requeued at the head (priority %d): %s", job_id, priority, reason)
        return True

    def _pending_priorities(self, exclude_job: int) -> list[int | None]:
        try:
            jobs = self.runner.jobs_in_play()
        except SlurmError:
            return []
        return [j.priority for j in jobs if j.state == "PENDING" and j.job_id != exclude_job]

    def _keep_at_head(self, jobs: dict[int, Job], skip: set[int] = frozenset()) -> None:
        """Requeued jobs: skip the requeue delay once safe, stay above every pending job.

        `skip`: jobs requeued in this round (`jobs` still shows them as they were before)."""
        pending = [j.priority for j in jobs.values() if j.state == "PENDING"]
        for job_id, given in list(self._heading.items()):
            if job_id in skip:
                continue
            job = jobs.get(job_id)
            if job is None or job.state != "PENDING":
                # COMPLETING: the old run is still being cleaned up; wait for it
                if job is None or job.state in ("RUNNING", "SUSPENDED", "CONFIGURING") or job.is_finished:
                    self._heading.pop(job_id, None)
                continue
            try:
                wanted = head_priority([p for p in pending if p != job.priority], exclude_current=job.priority)
                if job.priority is not None and wanted > job.priority:
                    self.runner.update_job(job_id, Priority=wanted)
                    self._heading[job_id] = wanted
                if self.settings.skip_requeue_delay and job.state_reason == "BeginTime":
                    # the old run is no longer COMPLETING: its launch credential cannot start anything
                    self.runner.update_job(job_id, StartTime="now")
            except SlurmError as exc:
                log.info("job %d: could not keep it at the head: %s", job_id, exc)

    # ------------------------------------------------------------------ contention
    def _check_contention(self, jobs: dict[int, Job], skip: set[int]) -> set[int]:
        by_gpu: dict[tuple[str, int], list[Track]] = {}
        for t in self.tracks.values():
            job = jobs.get(t.job_id)
            if job is None or job.state != "RUNNING" or not t.packed or t.job_id in skip or t.gpu_index < 0:
                continue
            by_gpu.setdefault((t.node, t.gpu_index), []).append(t)
        acted: set[int] = set()
        s = self.settings
        for (node, gpu), tracks in sorted(by_gpu.items()):
            # a job's reported throughput is preferred; without it, its utilisation as the
            # GPU's counters measured it
            residents = [Resident(t.job_id, t.started_at, t.throughput(), t.fingerprint,
                                  utilisation=tuple((x.at, x.util_pct) for x in t.samples if x.counted))
                         for t in tracks]
            verdict = find_contention(residents, s.contention_threshold, settle_s=s.settle_s,
                                      min_before=s.min_samples_before, min_after=s.min_samples_after,
                                      counters=s.counter_rule())
            if verdict is None:
                continue
            newcomer = jobs[verdict.newcomer]
            seen = (newcomer.job_id, self.tracks[newcomer.job_id].started_at)
            if seen in self._reported:
                continue
            self._reported.add(seen)
            for hurt in verdict.hurt:
                if self.enforcing and verdict.newcomer_fingerprint and hurt.fingerprint and verdict.newcomer_fingerprint != hurt.fingerprint:
                    self.store.avoid_pair(verdict.newcomer_fingerprint, hurt.fingerprint, verdict.reason)
            hurt_nodes = frozenset(n for h in verdict.hurt for n in expand_hostlist(jobs[h.job_id].nodes))
            if self.requeue_at_head(
                newcomer, "requeue-contention", verdict.reason, exclude=hurt_nodes,
                node=node, gpu=gpu, hurt=[h.job_id for h in verdict.hurt],
                fingerprint=verdict.newcomer_fingerprint,
                avoided=[h.fingerprint for h in verdict.hurt], signals=[h.signal for h in verdict.hurt],
            ):
                acted.add(newcomer.job_id)
        return acted

    # ------------------------------------------------------------------ memory growth
    def _capacity(self, track: Track, share_bytes: float) -> float | None:
        if track.isolation.startswith("mig:"):
            profile = track.isolation[4:].split("@", 1)[0]
            try:
                from mig.catalog import load_catalog

                model = getattr(self.helper.paths, "gpu_model", None) or "H100-80GB"
                return load_catalog(model).profile(profile).memory_mib * 1024**2
            except Exception:
                pass
        if track.shards:
            return track.shards * share_bytes
        return None

    def _check_memory(self, jobs: dict[int, Job], skip: set[int]) -> set[int]:
        from predictor.forecast import Forecaster

        acted: set[int] = set()
        config = self.config()
        for t in list(self.tracks.values()):
            job = jobs.get(t.job_id)
            if job is None or job.state != "RUNNING" or not t.shards or t.job_id in skip or not t.samples:
                continue
            capacity = self._capacity(t, config.share_bytes)
            if not capacity:
                continue
            if t.forecaster is None:
                # forecast to the job's end (its time limit) when Slurm knows it
                horizon = self.settings.memory_horizon_s
                if job.end_time is not None and job.end_time.timestamp() > t.started_at:
                    horizon = min(horizon, job.end_time.timestamp() - t.started_at)
                t.forecaster = Forecaster(capacity, horizon)
            last = t.samples[-1]
            step = last.at - t.started_at
            fc = t.forecaster
            if step <= t.forecast_step:
                continue
            forecast = fc.update(step, max(last.peak_mem_bytes, last.mem_bytes))
            t.forecast_step = step
            if not forecast.warn:
                continue
            need = max(forecast.upper_bytes, forecast.predicted_peak_bytes)
            size = restart_size(t.shards, need, config.share_bytes, max_shards(config))
            gres = "gpu:1" if size.whole_gpu else f"shard:{size.shards}"
            remembered = size.shards if size.shards is not None else max_shards(config) + 1
            reason = (f"memory will outgrow shard:{t.shards} ({capacity / GIB:.1f}GiB): forecast "
                      f"{forecast.predicted_peak_bytes / GIB:.1f}GiB (upper {forecast.upper_bytes / GIB:.1f}GiB) "
                      f"by {fc.horizon:.0f}s after its start; restart with {gres}")
            if t.fingerprint and self.enforcing:
                self.store.remember_size(t.fingerprint, remembered, "memory-restart")
            record = (comment_mod.render("exclusive", reason="memory-restart", fp=t.fingerprint)
                      if size.whole_gpu else
                      comment_mod.render("packed", shards=size.shards, reason="memory-restart", fp=t.fingerprint))
            seen = (t.job_id, t.started_at)
            if seen in self._reported:
                continue
            self._reported.add(seen)
            if self.requeue_at_head(job, "restart-memory", reason, gres=gres, comment=record,
                                    fingerprint=t.fingerprint, from_shards=t.shards, to=gres,
                                    observed_peak_bytes=forecast.observed_peak_bytes,
                                    predicted_peak_bytes=forecast.predicted_peak_bytes):
                acted.add(t.job_id)
        return acted

    # ------------------------------------------------------------------ the 22.05 guard
    def _guard_gpu_shard_collisions(self, jobs: dict[int, Job]) -> set[int]:
        """Slurm 22.05.8 can give one GPU to a job as `gres/gpu` and shares of it to another
        (fixed upstream in 23.11.5). Slurm alone knows which GPU index it picked inside a
        node, and the helper cannot choose it for Slurm, so a hold on pending jobs could
        only act on whole nodes and would either starve packing (every node with a busy
        GPU) or not prevent anything. The guard is therefore exact and after the fact:
        each round it reads the allocations (`GRES=gpu(IDX:0)`, `shard(IDX:0)`) of running
        jobs; where one GPU index has both, the job that arrived last is requeued at the
        head (nothing lost, nothing cancelled) and kept off that node (`ExcNodeList`)
        while the jobs that were there first still run, so it cannot land on the same GPU
        again. The node agent's own check (it refuses to isolate a step on a GPU held
        whole) closes the window of the first round."""
        allocations = []
        for job in jobs.values():
            if job.state not in ("RUNNING", "CONFIGURING"):
                continue
            started = job.start_time.timestamp() if job.start_time else 0.0
            for host, item in zip(expand_hostlist(job.nodes), job.gres_detail):
                if item.name in ("gpu", "shard") and item.indexes:
                    allocations.append((job.job_id, started, host, item.name, item.indexes))
        acted: set[int] = set()
        for collision in quirk_collisions(gpu_holders(allocations)):
            if collision.requeue in acted:
                continue
            job = jobs[collision.requeue]
            self._quirk_excluded[job.job_id] = (collision.node, frozenset(collision.keep))
            if self.requeue_at_head(job, "requeue-quirk", collision.reason, exclude=frozenset({collision.node}),
                                    node=collision.node, gpu=collision.index, keep=list(collision.keep)):
                acted.add(job.job_id)
        return acted

    # ------------------------------------------------------------------ steering pending jobs
    def _steer_pending(self, jobs: dict[int, Job]) -> None:
        if not self.enforcing:
            return
        running = [
            Running(j.job_id, self.fingerprint_of(j), expand_hostlist(j.nodes), job_shards(j) is not None)
            for j in jobs.values() if j.state in ACTIVE
        ]
        active_ids = {j.job_id for j in jobs.values() if j.state in ACTIVE}
        for job in jobs.values():
            if job.state != "PENDING":
                continue
            if job_shards(job) is None and job.job_id not in self._quirk_excluded:
                continue
            want: set[str] = set()
            fp = self.fingerprint_of(job)
            if job_shards(job) is not None and fp:
                partners = self.store.avoided_with(fp)  # one query per pending job
                want |= avoid_nodes(fp, running, lambda _me, other: other in partners)
            quirk = self._quirk_excluded.get(job.job_id)
            if quirk is not None:
                node, keepers = quirk
                if keepers & active_ids:
                    want.add(node)
                else:
                    self._quirk_excluded.pop(job.job_id, None)
            before = self._ours_excluded.get(job.job_id)
            if before is None:  # what the submit path excluded is written in the job's record
                before = submit_time_exclusion(job.admin_comment)
            merged = merge_exclusions(job.excluded_nodes, before, want)
            if set(merged) == set(job.excluded_nodes) and frozenset(want) == before:
                continue
            # what we exclude is also written into the job's record (`avoid=`), so a restarted
            # helper still knows which exclusions are ours and lifts them when they are done
            update: dict = {"ExcNodeList": merged}
            comment = comment_mod.with_field(job.admin_comment, "avoid", ",".join(sorted(want)) or None)
            if comment is not None and comment != job.admin_comment:
                update["AdminComment"] = comment
            try:
                self.runner.update_job(job.job_id, **update)
                self._ours_excluded[job.job_id] = frozenset(want)
                if want != before:
                    self.store.log_event("steer", f"excluded nodes now {sorted(want) or 'none'} "
                                         f"(avoided partners / GPU collisions)", job.job_id, excluded=sorted(want))
            except SlurmError as exc:
                log.info("job %d: could not set its excluded nodes: %s", job.job_id, exc)
        for job_id in list(self._ours_excluded):
            if job_id not in jobs or jobs[job_id].is_finished:
                self._ours_excluded.pop(job_id, None)

    # ------------------------------------------------------------------ MIG layouts
    def _follow_queue(self, jobs: dict[int, Job]) -> None:
        """Tell every node agent what the queue's packed jobs need, head first, so its idle
        MIG slices are laid out ahead of them (the thesis' layout policies); log the changes."""
        policy = self.settings.mig_layout
        if policy == "off" or not self.enforcing:
            return
        pending = sorted(
            (j for j in jobs.values() if j.state == "PENDING" and not j.held and job_shards(j)),
            key=lambda j: (-(j.priority or 0), j.submit_time.timestamp() if j.submit_time else 0.0, j.job_id),
        )
        shards = [job_shards(j) for j in pending][:32]
        try:
            from slurm_plugin.agent.client import AgentUnavailable, ask as agent_ask
        except ImportError:  # no node agent installed on this host
            return
        now = self.clock()
        run = self.agent_state_dir / "run"
        for sock in sorted(run.glob("agent-*.sock")):
            node = sock.name[len("agent-"):-len(".sock")]
            pushed = self._layout_pushed.get(node)
            if pushed is not None and pushed[0] == (policy, tuple(shards)) and now - pushed[1] < LAYOUT_REFRESH_S:
                continue
            try:
                answer = agent_ask(sock, {"op": "layout", "policy": policy, "pending_shards": shards}, timeout=2.0)
            except AgentUnavailable as exc:
                log.debug("layout not sent to %s: %s", node, exc)
                continue
            self._layout_pushed[node] = ((policy, tuple(shards)), now)
            changes = answer.get("changes") or []
            if answer.get("status") != "ok":
                log.info("agent of %s refused the layout: %s", node, answer.get("reason"))
            elif changes:
                text = ", ".join(f"GPU {c['gpu']} {c['op']} {c['profile']}@{c['start']}" for c in changes)
                self.store.log_event("mig-reconfigure", f"{node} ({policy}, {len(shards)} pending packed): {text}",
                                     None, node=node, policy=policy, changes=changes)

    # ------------------------------------------------------------------ MPS
    def _plan_mps(self) -> None:
        by_gpu: dict[tuple[str, int], dict[int, float | None]] = {}
        for t in self.tracks.values():
            if not t.isolation.startswith("mps") or not t.samples:
                continue
            utils = [s.util_pct for s in t.samples if s.util_pct is not None][-30:]
            by_gpu.setdefault((t.node, t.gpu_index), {})[t.job_id] = sum(utils) / len(utils) if utils else None
        plan = {
            key: mps_percentages(utils, headroom=self.settings.mps_headroom, floor_pct=self.settings.mps_floor_pct)
            for key, utils in by_gpu.items()
        }
        if plan != self.mps_plan:
            self.mps_plan = plan
            self._write_mps_plan()

    def _write_mps_plan(self) -> None:
        """One JSON file per node for its agent: {gpu_index: {job_id: percent}}."""
        import json

        from slurm_plugin.metrics import write_file

        nodes: dict[str, dict[str, dict[str, int]]] = {}
        for (node, gpu), pcts in self.mps_plan.items():
            nodes.setdefault(node, {})[str(gpu)] = {str(j): p for j, p in pcts.items()}
        run = self.agent_state_dir / "run"
        for node, doc in nodes.items():
            try:
                write_file(run / f"mps-plan-{node}.json", json.dumps(doc, sort_keys=True))
            except OSError as exc:
                log.info("cannot write the MPS plan of %s: %s", node, exc)

    # ------------------------------------------------------------------ metrics
    # (decisions are counted where they are made: the submit side, slurm_plugin.metrics.submit)
    def metrics_registry(self):
        """The watcher's Prometheus registry (served by the Watcher, written each round)."""
        return self._watcher_metrics().served

    def _watcher_metrics(self):
        if self._metrics is None:
            from slurm_plugin.metrics.watcher import WatcherMetrics

            self._metrics = WatcherMetrics(self)
        return self._metrics

    def metrics_text(self) -> str:
        from prometheus_client import generate_latest

        return generate_latest(self.metrics_registry()).decode()

    def _write_metrics(self) -> None:
        """metrics.prom beside the database, for node_exporter's textfile collector."""
        if self.store.path == ":memory:":
            return
        try:
            self._watcher_metrics().write_textfile(Path(self.store.path).with_name("metrics.prom"))
        except (OSError, ValueError) as exc:
            log.debug("metrics file not written: %s", exc)
