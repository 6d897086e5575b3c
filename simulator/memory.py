"""Memory in the replay: what a job holds as it grows, when the predictor warns, and the
larger size a job restarts with after an out-of-memory or a warning.

A growing job's memory rises linearly from ``mem0`` to ``mem1`` with its progress. With
``SimConfig(predictor=True)`` the suite's ``predictor.forecast.Forecaster`` reads the
job's samples as the node agent would and says when it would warn and with which size;
the warning becomes a job event (:mod:`~simulator.progress`), sized as the live
memory watch sizes it (:meth:`MemoryRestarts.restart_bytes`, ``SuiteRules.restart_size``). At the warning
the run's ``SuiteRules.restart`` (``predictor.restart.decide_restart``, the live memory
watch's rule, with the same restart costs) prices a restart now against an OOM later, from
what the replay knows as the watch would: the warning time, the checkpoint (the attempt's
start: its start or its last restart or move), the crossing the forecaster predicts, the
forecast peak and its confidence; the trace gives no time limits, so no job end. A job kept
running (the helper's ``keep-memory``) runs on and meets its OOM if its memory really
outgrows its room. A restart remembers the larger size (``Job.remembered``), as the
helper's restart does.

A job whose memory **jumps** (``Job.jump_at``) holds ``mem0`` until that fraction of its work
and ``mem1`` after: no forecast from its series sees it coming. Every out-of-memory is
contained in the job's share and decided by ``packer.oom_restart.decide_oom_restart``, the
live OOM watch's code: requeued at the head on the next size that holds what it held plus
the allocation that failed (a jump: the whole step; a linear grower: one sample's growth),
or left FAILED once its retries are spent (``OomRetryLimits``; a trace job has no identity
across jobs, so its workload's retries are its own). Counted: jobs retried, jobs left
FAILED, the work their failed attempts lost.

Silent jobs (``SimConfig.oom_output_share``, ``oom_unseen_share``; issue 35): a one-GPU job's
end is seen through its report, through its output only (a framework's text: the same
evidence, the job's word), or not at all, drawn per job (`oom_seen`). Unseen, it is an
out-of-memory end only when the node measured it at its share's limit (a linear grower);
a jump that fails far below its limit is a **miss**: the job ends FAILED instead of being
retried (counted with the GPU-hours its attempts held). A retried job goes back at the head
of the queue; with ``SimConfig.oom_word_own_place`` a retry on the job's word (not measured at
its share's limit) goes back at its own place (by arrival), as live.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from packer.decision import max_shards
from packer.oom_restart import OomDecision, OomEvidence, OomRetryLimits, decide_oom_restart
from packer.rules import SuiteRules
from simulator.config import SimConfig
from simulator.state import Job

if TYPE_CHECKING:
    from simulator.mig_state import MigState


SEEN_REPORT, SEEN_OUTPUT, UNSEEN = "report", "output", "unseen"


def oom_seen(job_id: int, gpus: int, output_share: float, unseen_share: float) -> str:
    """How a job's out-of-memory end is seen: its report, its output only, or not at all
    (one-GPU jobs only; a fixed draw from the job's id, the same in every run)."""
    if not (0 <= output_share <= 1 and 0 <= unseen_share <= 1 and output_share + unseen_share <= 1):
        raise ValueError(f"output_share {output_share} and unseen_share {unseen_share} must be shares summing to 1 "
                         "at most")
    if gpus != 1:
        return SEEN_REPORT
    u = ((job_id * 2654435761 + 0x9E3779B9) % (1 << 32)) / float(1 << 32)
    return UNSEEN if u < unseen_share else SEEN_OUTPUT if u < unseen_share + output_share else SEEN_REPORT


def mem_now(j: Job, now: float) -> int:
    """Memory a job holds now (it grows linearly with its progress)."""
    if j.mem1 == j.mem0:
        return j.mem0
    done = j.done + (now - j.last_t) * j.rate
    if j.jump_at is not None:
        return j.mem1 if done >= j.jump_at * j.duration else j.mem0
    return int(j.mem0 + (j.mem1 - j.mem0) * min(1.0, max(0.0, done) / j.duration))


class MemoryRestarts:
    """The predictor's warnings and the sizes jobs restart with."""

    def __init__(self, cfg: SimConfig, rules: SuiteRules, gpu_mem: int, mig: "MigState | None"):
        self.cfg = cfg
        self.rules = rules
        self.pk = rules.config
        self.gpu_mem = gpu_mem
        self.mig = mig
        # (mem0, mem1, cap) -> (warning, next size, crossing, forecast peak: fractions of the
        # run's work, bytes; the forecaster's confidence)
        self._warn_cache: dict[tuple, tuple] = {}
        self._forecaster_cls = None
        self.warnings_restarted = 0  # restarted (or grown in place) on a warning
        self.warnings_kept = 0  # kept running: the rule priced a restart above the OOM's risk
        self.oom_limits = OomRetryLimits()  # the live helper's defaults ([monitor] oom_retries_*)
        self.oom_retried: set[int] = set()  # jobs requeued bigger after an out-of-memory
        self.oom_left_failed = 0  # jobs left FAILED (retries spent)
        self.oom_lost_s = 0.0  # work their out-of-memory attempts lost
        self.oom_lost_gpu_s = 0.0  # GPU-seconds those attempts held (their share of a GPU)
        self.oom_retried_output: set[int] = set()  # retried on their output's word alone
        self.oom_missed = 0  # out-of-memory ends nobody saw: FAILED instead of retried
        self.oom_missed_gpu_s = 0.0  # GPU-seconds the missed jobs' last attempts held
        self.oom_missed_work_gpu_s = 0.0  # GPU-seconds of work the missed jobs never delivered (whole runs)
        oom_seen(0, 1, cfg.oom_output_share, cfg.oom_unseen_share)  # bad shares refused at the start

    def sizes(self) -> tuple[int, ...]:
        """The sizes a job may get, bytes: MIG instances, or share counts and the whole GPU."""
        if self.mig:
            return self.mig.sizes()
        k = max_shards(self.pk)
        share = self.pk.share_bytes
        return tuple(int(i * share) for i in range(1, k + 1)) + (self.gpu_mem,)

    def plan_warning(self, job: Job) -> None:
        """When would the forecaster warn (in alone-seconds of work), and with which size."""
        if not self.cfg.predictor:
            return
        key = (job.mem0, job.mem1, job.cap)
        hit = self._warn_cache.get(key)
        if hit is None:
            if self._forecaster_cls is None:
                from predictor.forecast import Forecaster
                self._forecaster_cls = Forecaster
            n = self.cfg.predictor_samples
            f = self._forecaster_cls(job.cap, n, partition_sizes=self.sizes())
            hit = (None, None, None, 0, 0.0)
            for i in range(1, n + 1):
                mem = job.mem0 + (job.mem1 - job.mem0) * i / n
                if mem > job.cap:
                    break
                fc = f.update(i, mem)
                if fc.warn:
                    crossing = fc.crossing_step / n if fc.crossing_step is not None else None
                    need = max(fc.upper_bytes, fc.predicted_peak_bytes)  # what the live memory watch sizes on
                    hit = (i / n, self.restart_bytes(job.cap, need), crossing, fc.predicted_peak_bytes,
                           f.options.confidence)
                    break
            self._warn_cache[key] = hit
        frac, nxt = hit[:2]
        if frac is not None:
            job.warn_work = frac * job.duration
            job.warn_next = nxt

    def warned_size(self, job: Job) -> int:
        """The size a warned job restarts with (what :meth:`remember_bigger` remembers)."""
        return max(job.remembered, job.warn_next or self.gpu_mem)

    def restart_on_warning(self, job: Job, now: float, growing: bool = False) -> bool:
        """The forecaster warns now: restart (True) or keep the job running (False), as the
        run's rules decide (``SuiteRules.restart``, the live memory watch's call). Counted.
        ``growing``: the grow decision evicts for it (the helper's grow watch acts before its
        memory watch prices): restarted."""
        if growing:
            self.warnings_restarted += 1
            return True
        _, _, crossing, peak, confidence = self._warn_cache[(job.mem0, job.mem1, job.cap)]
        done = job.done + (now - job.last_t) * job.rate
        # the predicted crossing in time at the job's speed now; none predicted: now (the watch's)
        at = now if crossing is None else now + max(0.0, crossing * job.duration - done) / job.rate
        d = self.rules.restart(now_s=now, checkpoint_s=min(job.start, now), crossing_s=at, end_s=None,
                               predicted_peak_bytes=peak, capacity_bytes=job.cap, p_oom=confidence)
        if d.restart:
            self.warnings_restarted += 1
            return True
        self.warnings_kept += 1
        job.warn_work = None  # judged: it runs on to its end or its OOM
        return False

    def summary(self) -> dict:
        return {"memory_warnings_restarted": self.warnings_restarted,
                "memory_warnings_kept": self.warnings_kept, "oom_jobs_retried": len(self.oom_retried),
                "oom_jobs_left_failed": self.oom_left_failed, "oom_lost_work_s": round(self.oom_lost_s, 1),
                "oom_lost_gpu_h": round(self.oom_lost_gpu_s / 3600.0, 2),
                "oom_retried_on_output": len(self.oom_retried_output), "oom_missed": self.oom_missed,
                "oom_missed_lost_gpu_h": round(self.oom_missed_gpu_s / 3600.0, 2),
                "oom_missed_work_gpu_h": round(self.oom_missed_work_gpu_s / 3600.0, 2)}

    def retry_oom(self, job: Job, now: float) -> OomDecision | None:
        """The job ran out of memory in its share: requeue it bigger (the decision, its size
        remembered; ``at_head`` only on a measurement at its share's limit) or leave it FAILED
        (None), as the live OOM watch decides."""
        done = job.done + (now - job.last_t) * job.rate
        self.oom_lost_s += max(0.0, done)
        held_gpu_s = max(0.0, now - job.start) * min(1.0, job.cap / self.gpu_mem) * max(1, job.gpus)
        self.oom_lost_gpu_s += held_gpu_s
        limit = job.room or job.cap
        if job.mem0 > limit:  # could not even get its starting memory
            held, asked = 0, job.mem0
        elif job.jump_at is not None:
            held, asked = job.mem0, job.mem1 - job.mem0
        else:
            held, asked = limit, max(1, (job.mem1 - job.mem0) // max(1, self.cfg.predictor_samples))
        share = self.pk.share_bytes
        seen = oom_seen(job.id, job.gpus, self.cfg.oom_output_share, self.cfg.oom_unseen_share)
        evidence = (OomEvidence(1, limit, held) if seen == UNSEEN  # only what the node measured
                    else OomEvidence(1, limit, held, asked, held))
        d = decide_oom_restart(evidence, shards=max(1, job.cap // share),
                               share_bytes=share, max_shards=max_shards(self.pk), job_retries=job.oom_restarts,
                               workload_retries=job.oom_restarts, limits=self.oom_limits)
        if not d.requeue:
            self.oom_left_failed += 1
            if d.evidence is None:  # not seen as an out-of-memory end at all: a miss
                self.oom_missed += 1
                self.oom_missed_gpu_s += held_gpu_s
                self.oom_missed_work_gpu_s += job.duration * min(1.0, job.cap / self.gpu_mem) * max(1, job.gpus)
            return None
        job.oom_restarts += 1
        self.oom_retried.add(job.id)
        if seen == SEEN_OUTPUT:
            self.oom_retried_output.add(job.id)
        fits = [s for s in self.sizes() if s >= d.need_bytes and s > job.cap]
        size = self.gpu_mem if d.whole_gpu or not fits else fits[0]
        job.remembered = max(job.remembered, size)
        return d

    def remember_bigger(self, job: Job) -> None:
        """Count a warned restart and raise the size the job asks for next time."""
        job.pred_restarts += 1
        job.remembered = max(job.remembered, job.warn_next or self.gpu_mem)

    def restart_bytes(self, cap: int, need_bytes: float) -> int:
        """The memory of the size a job holding ``cap`` restarts with when it needs
        ``need_bytes``: the live memory watch's ``SuiteRules.restart_size`` (rounded up to a
        slice under MIG, ``SuiteRules.mig_partitions``), the whole GPU past a packed size."""
        share = self.pk.share_bytes
        partitions = self.rules.mig_partitions(self.mig.space.catalog) if self.mig else ()
        size = self.rules.restart_size(max(1, round(cap / share)), need_bytes, partitions)
        if size.whole_gpu:
            return self.gpu_mem
        return self.mig.slice_bytes(size.shards) if self.mig else int(size.shards * share)
