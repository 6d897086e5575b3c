"""What a watch may do to Slurm and the store: requeue at the head, update a job, log.

"Requeue at the head" is `scontrol requeuehold` (so the job cannot start again before it is
changed), the changes (size, excluded nodes), `scontrol release`, then an administrator nice
that lifts it above every pending job (`watches/head_lift.py`, `packer.preemption.head_nice`):
Slurm 22.05 resets a requeued job's submit time, so neither age nor priority/basic's order
would bring it back first, and `scontrol top` only reorders one user's own jobs. Release
comes before the nice because releasing a held job recomputes its priority. The lift ends
when the job starts (the keep-at-head watch). Nothing is ever cancelled.

No run-time action is taken on a job whose node's agent figures are stale (`stale_nodes`,
set by the monitor each round): the action is skipped and an event `<kind>-stale` says so.

Nor on a stale view of the queue: when what Slurm said is older than `max_view_age_s` (the
round's listing was asked for at `view_taken_at`; slurmctld slow), no requeue and no job change
is made (`view_too_old`), with one event `stale-view` and one log line per episode; releasing a
job this watcher left held still goes ahead (it only undoes a hold).
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable

from packer import comment as comment_mod
from store.ledger import ActionLedger
from packer.action_modes import ActionMode, action_mode
from packer.config import PackerConfig
from packer.feasibility import ClusterFacts, stranded_by
from packer.placement import merge_exclusions
from store.db import Store
from slurm_plugin.helper.kill_switch import ACTIONS_WHILE_HALTED
from slurm_plugin.helper.watches.head_lift import lift, lift_of
from slurm_plugin.helper.watches.state import WatchState
from slurm_plugin.helper.run_inbox import RunInbox
from slurm_plugin.slurm.constraints import cluster_facts, job_facts
from slurm_plugin.slurm.errors import SlurmError
from slurm_plugin.slurm.gres import expand_hostlist
from slurm_plugin.slurm.model import Job

log = logging.getLogger(__name__)

SLURM_ONLY_KINDS = frozenset({"requeue-quirk"})  # decided from Slurm's own figures, not the agents'
#: decided from a record root wrote on the node (not from samples): a node whose samples are stale
#: (its agent just came back with the record) does not hold them up
NODE_RECORD_KINDS = frozenset({"requeue-unisolated"})


class Actions:
    """The only way watches change jobs; `runner` and `store` may be swapped between rounds."""

    def __init__(self, runner, store: Store, state: WatchState, config: Callable[[], PackerConfig],
                 modes: dict[str, str] | None = None):
        self.runner = runner
        self.store = store
        self.state = state
        self.config = config
        self.modes = modes or {}  # [monitor.actions]
        self.finished_runs = RunInbox()  # the runs the history watch saw end, for the one writer
        self.halted = False  # the kill switch is on: only ACTIONS_WHILE_HALTED are carried out
        self._ledger: ActionLedger | None = None
        self.stale_nodes: dict[str, str] = {}  # node -> why its agent's figures are stale (the monitor's)
        self._told_stale: set[tuple[int, str]] = set()  # (job, kind) whose skip was logged
        self.view_taken_at: float | None = None  # when the round's queue listing was asked for
        self.max_view_age_s = 30.0  # [monitor] max_view_age_s
        self.clock: Callable[[], float] = time.time
        self.refused_old_view = 0  # actions not taken on a stale view, all told
        self._old_view_told = False  # this episode of stale views was said

    def view_too_old(self, kind: str, job_id: int | None) -> bool:
        """True (counted; an event and a log line once per episode) when the round's view of the
        queue is older than `max_view_age_s`: nothing acts on it."""
        if self.view_taken_at is None:
            return False
        age = self.clock() - self.view_taken_at
        if age <= self.max_view_age_s:
            if self._old_view_told:
                log.warning("the queue view is fresh again (%.0f s old): actions resume", age)
            self._old_view_told = False
            return False
        self.refused_old_view += 1
        if not self._old_view_told:
            self._old_view_told = True
            detail = (f"the queue view is {age:.0f} s old (limit {self.max_view_age_s:.0f} s; slurmctld slow?): "
                      f"no action on it until a fresh one (first held back: {kind})")
            self.store.log_event("stale-view", detail, job_id, action=kind, age_s=round(age, 1))
            log.warning("%s", detail)
        return True

    @property
    def ledger(self) -> ActionLedger:
        """The action ledger in the store of the moment."""
        if self._ledger is None or self._ledger.store is not self.store:
            self._ledger = ActionLedger(self.store)
        return self._ledger

    def mode_of(self, kind: str) -> ActionMode:
        """off | shadow | enforce for a run-time action (`packer.action_modes`)."""
        return action_mode(self.modes, kind, self.config().mode)

    def decide(self, kind: str, job: Job, reason: str, *, run_start: float, evidence: dict, at: float,
               mode: ActionMode | None = None, **requeue: object) -> bool:
        """A run-time action's decision: requeued at the head when enforced (``at_head=False``
        among ``requeue``: at its own place), an event only in shadow; either way a ledger row
        with its evidence, judged later (`OutcomeWatch`). True when the job was requeued."""
        mode = mode or self.mode_of(kind)
        if mode.mode == "off" or self.on_stale_node(job, kind, reason):
            return False
        done = self.requeue_at_head(job, kind, reason, mode=mode, **requeue)
        if done or not mode.acts:
            self.ledger.record(kind, job.job_id, run_start, "enforce" if done else "shadow", reason, at, **evidence)
        return done

    @property
    def enforcing(self) -> bool:
        return self.config().mode == "enforce"

    def log_event(self, kind: str, detail: str, job_id: int | None = None, **data: object) -> None:
        self.store.log_event(kind, detail, job_id, **data)

    def update_job(self, job_id: int, **changes: object) -> None:
        if self.halted:  # the watches that change jobs do not run; this is the last line
            log.warning("job %d: kill switch on, change %s not made", job_id, changes)
            return
        if self.view_too_old("update", job_id):
            return
        self.runner.update_job(job_id, **changes)

    def _refused_by_kill_switch(self, kind: str, job_id: int) -> bool:
        if self.halted and kind not in ACTIONS_WHILE_HALTED:
            log.warning("job %d: kill switch on, %s not carried out", job_id, kind)
            return True
        return False

    def first_report(self, job_id: int, started_at: float) -> bool:
        """True the first time a run of a job is judged (one action per run)."""
        seen = (job_id, started_at)
        if seen in self.state.reported:
            return False
        self.state.reported.add(seen)
        return True

    def on_stale_node(self, job: Job, kind: str, reason: str) -> bool:
        """True (and an event, once per job and kind) when the job runs on a node whose agent's
        figures are stale: no run-time action is taken on stale data."""
        stale = {n: self.stale_nodes[n] for n in expand_hostlist(job.nodes) if n in self.stale_nodes}
        if not stale:
            self._told_stale = {t for t in self._told_stale if t[0] != job.job_id}
            return False
        if (job.job_id, kind) not in self._told_stale:
            self._told_stale.add((job.job_id, kind))
            why = "; ".join(f"{n}: {r}" for n, r in sorted(stale.items()))
            self.store.log_event(kind + "-stale", f"not acted on: the node's figures are stale ({why}); "
                                 f"would have: {reason}", job.job_id, nodes=sorted(stale))
            log.warning("job %d: %s not taken, stale figures (%s)", job.job_id, kind, why)
        return True

    def requeue_at_head(self, job: Job, kind: str, reason: str, *, exclude: frozenset[str] = frozenset(),
                        gres: str | None = None, comment: str | None = None, mode: ActionMode | None = None,
                        keep_held: bool = False, at_head: bool = True, **data) -> bool:
        """Requeue `job`, change it while held, release it and make it the next to start.

        `mode`: the action's own mode; without it, the helper's (enforce acts, else shadow).
        `keep_held`: leave it held (a grow eviction waits for its grower to start first);
        `release_to_head` later releases it and makes it the next to start.
        `at_head` False: released with the priority Slurm gives it, no lift (a retry earned by
        the job's own word, issue 33: never above jobs that waited longer)."""
        mode = mode or ActionMode("enforce" if self.enforcing else "shadow", self.config().mode)
        if self._refused_by_kill_switch(kind, job.job_id) or self.view_too_old(kind, job.job_id):
            return False
        if kind not in SLURM_ONLY_KINDS | NODE_RECORD_KINDS and self.on_stale_node(job, kind, reason):
            return False
        stranded = self.strands(job, exclude, gres)
        if stranded is not None:  # Slurm would take the change and the job would wait for good
            self.store.log_event(kind + "-skipped", f"not requeued ({mode.label} mode): {stranded}", job.job_id,
                                 reason=reason, shadow=not mode.acts)
            log.warning("job %d: %s not done: %s", job.job_id, kind, stranded)
            return False
        if not mode.acts:
            self.store.log_event(kind, f"would requeue ({mode.label} mode): {reason}", job.job_id,
                                 shadow=True, **data)
            return False
        job_id = job.job_id
        ours_excluded = self.state.ours_excluded
        try:
            self.runner.requeue(job_id, hold=True)
        except SlurmError as exc:  # still running as it was: nothing lost
            self.store.log_event(kind + "-failed", f"could not requeue: {exc}", job_id, reason=reason)
            log.error("job %d: requeue for %s failed: %s", job_id, kind, exc)
            return False
        changes: dict[str, object] = {}
        if gres is not None:
            changes["Gres"] = gres
        if exclude:
            ours = ours_excluded.get(job_id, frozenset()) | exclude
            changes["ExcNodeList"] = merge_exclusions(job.excluded_nodes, ours_excluded.get(job_id, ()), ours)
            ours_excluded[job_id] = ours
        if comment is not None:
            changes["AdminComment"] = comment_mod.merge(job.admin_comment, comment)
        try:
            if changes:
                self.runner.update_job(job_id, **changes)
            priority = (0 if keep_held else self._release_at_head(job_id) if at_head
                        else self._release_in_place(job_id))
        except SlurmError as exc:
            # requeued and held, but Slurm refused the change: never leave it held for good;
            # it goes back to the head of the queue as it was (a grow eviction stays held
            # for its grower, whose release watch lets it go; a job requeued on its own word
            # goes back to its own place)
            released = keep_held or self._release_unchanged(job_id, at_head)
            self.store.log_event(kind + "-failed", f"requeued, but Slurm refused the change ({exc}); "
                                 + ("released at the head as it was" if released and not keep_held
                                    else "left held for its grower" if keep_held
                                    else "could not release it either: `scontrol release` it by hand"),
                                 job_id, reason=reason, changes={k: str(v) for k, v in changes.items()})
            log.error("job %d: requeued for %s but not changed: %s", job_id, kind, exc)
            self._end_run(job_id, kind)
            return False
        self._end_run(job_id, kind)
        self.store.log_event(kind, reason, job_id, priority=priority, excluded=sorted(exclude), gres=gres,
                             at_head=at_head and not keep_held, **data)
        log.warning("job %d requeued %s: %s", job_id,
                    "and held" if keep_held else f"at the head (priority {priority})" if at_head
                    else f"at its own place in the queue (priority {priority})", reason)
        return True

    def strands(self, job: Job, exclude: frozenset[str], gres: str | None) -> str | None:
        """Why excluding `exclude` and asking for `gres` would leave `job` unable to ever start
        (`packer.feasibility`), from what Slurm says of it and the cluster; None when it can."""
        if not exclude and gres is None:
            return None
        facts = job_facts(job)
        try:
            cluster = cluster_facts(self.runner, job, with_qos=gres is not None)
        except SlurmError as exc:  # the node list is unknown: the pins are still checked
            log.warning("job %d: cannot list the nodes (%s); only its pins are checked", job.job_id, exc)
            cluster = ClusterFacts()
        return stranded_by(facts, cluster, exclude=exclude, gres=gres)

    def _end_run(self, job_id: int, kind: str) -> None:
        """The job's run ended with this requeue: its curve is kept (the history watch)."""
        track = self.state.tracks.pop(job_id, None)
        if track is not None:
            self.state.requeued_tracks.append((track, kind))

    def _release_unchanged(self, job_id: int, at_head: bool = True) -> bool:
        """Release a requeued job whose change Slurm refused, at the head of the queue (or at
        its own place)."""
        try:
            if at_head:
                self._release_at_head(job_id)
            else:
                self._release_in_place(job_id)
            return True
        except SlurmError as exc:
            log.error("job %d: could not release it after a refused change: %s", job_id, exc)
            return False

    def release_to_head(self, job_id: int, kind: str, reason: str, **data: object) -> bool:
        """Release a job left held by `requeue_at_head(keep_held=True)` and make it the next
        to start (kept there by the keep-at-head watch). False when Slurm refused."""
        if self._refused_by_kill_switch(kind, job_id):
            return False
        try:
            priority = self._release_at_head(job_id)
        except SlurmError as exc:
            self.store.log_event(kind + "-failed", f"could not release: {exc}", job_id, reason=reason)
            log.error("job %d: release for %s failed: %s", job_id, kind, exc)
            return False
        self.store.log_event(kind, reason, job_id, priority=priority, **data)
        return True

    def _release_in_place(self, job_id: int) -> int:
        """Release a held job with the priority Slurm computes for it, no lift; that priority.
        Raises SlurmError."""
        self.runner.release(job_id)
        return int(self.runner.job(job_id).priority or 0)

    def _release_at_head(self, job_id: int) -> int:
        """Release a held job, lift it above every pending job with a nice and have the
        keep-at-head watch keep it there (and end the lift when it starts); its priority.
        Raises SlurmError."""
        self.runner.release(job_id)  # Slurm computes its priority again
        formatted = getattr(self.runner, "formatted_jobs", None)  # the queue as text: no JSON of every job
        jobs = list(formatted().jobs) if formatted is not None else self.runner.jobs_in_play(also=(job_id,))
        me = next((j for j in jobs if j.job_id == job_id), None)
        if me is None:
            raise SlurmError(f"job {job_id} is not listed after its release")
        lifted = lift_of(self.runner, self.state.heading, job_id, me.restart_cnt)
        pending = [j.priority for j in jobs if j.state == "PENDING" and j.job_id != job_id]
        lifted, priority = lift(self.runner, job_id, me.priority or 0, lifted, pending)
        self.state.heading[job_id] = lifted
        return priority
