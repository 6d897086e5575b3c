"""The controller helper's run-time watcher: a thin loop over small watches.

One thread, one round every `[monitor] interval_s`: read every job from Slurm (the adapter)
and the newest sample of each running job from the node agents (`SampleSource`), then run
each watch of `Monitor.watches` (built by `monitor_wiring.build_watches`), in this order:

1. **tracks** (`watches/track_watch.py`, `watches/tracks.py`): the samples of each running job;
2. **outcomes** (`watches/outcomes.py`): open decisions of the action ledger are judged from
   what happened next; runs that needed an action and got none are recorded as misses;
3. **history** (`watches/history.py`): a job that ended COMPLETED has its peak memory, mean
   utilisation and throughput written under its fingerprint;
4. **22.05 guard** (`watches/quirk_guard.py`): a GPU given whole and as shares;
5. **out-of-memory ends** (`watches/oom.py`, docs/oom-restart.md): a packed job whose step
   ended out of memory in its share (its agent holds the end) is requeued at the head on a
   size that holds it, before Slurm marks it FAILED;
6. **contention** (`watches/contention.py`): the newcomer that slows a
   neighbour is requeued at the head and the pair is never packed together again;
7. **grow release** (`watches/grow_release.py`): the victims the grow watch left held go back
   to the head of the queue once their grower runs;
8. **grow by preemption** (`watches/grow.py`): a packed job that must grow
   requeues younger packed neighbours on its GPU and restarts at once on a larger share
   there (before the memory watch, which restarts through the queue what this one leaves);
9. **memory growth** (`watches/memory.py`): a job certain to outgrow its
   share is requeued at the head on a larger size;
10. **regrouping** (`watches/regroup.py`): a whole-GPU head of the queue waiting
    while the room exists in pieces gets GPUs freed by moving packed jobs that declared they
    can be moved (checkpoint signal, then requeue at the head away from the freed node);
11. **unisolated** (`watches/unisolated.py`): a packed job Slurm requeued because its step
    could not be isolated is told why and lifted to the head;
12. **keep at head** (`watches/at_head.py`): requeued jobs stay the next to start (lifted by
    an administrator nice that ends when they start, `watches/head_lift.py`);
13. **dispatch** (`watches/dispatch.py`): a pending packed job whose turn comes while a whole
    GPU is idle gets the whole GPU back before it starts;
14. **pack at dispatch** (`watches/dispatch_pack.py`): a pending job made exclusive at submit
    because a GPU was idle then is packed when its turn comes with none idle (23.02+);
15. **steering** (`watches/steering.py`): pending packed jobs are kept off avoided partners
    and, with `[monitor] pair_predict`, off nodes where every GPU they could land on holds a
    job predicted to slow down beside them (`watches/pair_view.py`, `packer.rules`);
16. **MPS** (`watches/mps.py`): percentages from measured utilisation, sent to the node agents;
17. **queue layouts** (`watches/layouts.py`): idle MIG slices follow the pending queue;
18. **retention** (`retention.py`): the store pruned as `[retention]` says, and the watches'
    per-job memory of jobs Slurm no longer lists forgotten (each watch names its own maps,
    `watches/round.py`'s `KeepsJobs`);
19. **metrics** (`watches/metrics.py`): metrics.prom written (the Watcher serves the registry).

While the kill switch file exists (`[paths] kill_switch`, `kill_switch.py`), and in a round whose
queue listing is older than `[monitor] max_view_age_s` when the watches start (slurmctld slow),
only the watches that observe or keep jobs safe run: no requeue, restart, grow, regroup, steering, priority
or layout change.

Each round also pushes every node's job list to its agent and takes its samples over the
MUNGE-authenticated link (`sample_source.AgentSamples`); a node whose agent is down, cut off or
behind is stale (`Monitor.stale_nodes`): the published cluster view says so (nothing is packed
there) and `Actions` takes no run-time action on its jobs, logging why.

Watches read a `RoundContext` and act only through `Actions` (requeue at the head, update
a job, log an event). The run-time actions (contention requeue, memory restart, grow by
preemption, regrouping) each have a
mode, `off | shadow | enforce` (`[monitor.actions]`, else following the helper's mode:
enforce acts, observe and advise shadow); shadow logs what would be done as an event and in
the action ledger. The other watches act only in `enforce` mode. Nothing is ever
cancelled. Slurm hiccups are logged and the round is skipped.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from packer.rules import SuiteRules
from slurm_plugin.config.bounds import RetentionSettings
from slurm_plugin.helper.agreement import log_agreement_events
from slurm_plugin.helper.kill_switch import RUN_WHILE_HALTED, KillSwitch
from slurm_plugin.helper.monitor_settings import MonitorSettings, load_monitor_settings
from slurm_plugin.helper.monitor_wiring import (
    agent_state_dir, build_watches, default_runner, retention_settings, wire_agents,
)
from slurm_plugin.helper.queue_read import QueueReader
from slurm_plugin.helper.round_load import RoundLoad
from slurm_plugin.helper.sample_source import SampleSource, job_outputs_by_node
from slurm_plugin.helper.watches.actions import Actions
from slurm_plugin.helper.watches.head_lift import Lift
from slurm_plugin.helper.watches.round import KeepsJobs, RoundContext, Watch
from slurm_plugin.helper.watches.state import WatchState
from slurm_plugin.helper.watches.tracks import ACTIVE, Fingerprints, Track
from slurm_plugin.slurm.errors import SlurmError
from slurm_plugin.slurm.gres import allocated_gpus, allocated_shards, expand_hostlist
from slurm_plugin.slurm.model import Job
from store.lifts import HeadLifts

log = logging.getLogger(__name__)


class Monitor:
    """Started by `Helper.run` (`start()` returns at once; `stop()` joins the thread)."""

    def __init__(self, helper, *, runner=None, samples: SampleSource | None = None,
                 settings: MonitorSettings | None = None, rules: SuiteRules | None = None, clock=time.time,
                 on_jobs: Callable[[list[Job], float], None] | None = None,
                 retention: RetentionSettings | None = None):
        self.helper = helper
        self.config = helper.config
        paths = helper.paths
        config_path = getattr(helper.config, "path", None)
        settings_file = self.settings_file = getattr(helper.config, "file", None)  # gpupack.toml as held
        self.settings = settings or (settings_file().monitor if settings_file is not None
                                     else load_monitor_settings(config_path))
        # the decisions every watch makes (packer.rules): one object, the simulator's too
        # (`rules`: decide through this object instead, e.g. one a simulator run shares)
        self.rules = rules or self.settings.rules(self.config())
        # [monitor.actions] follows edits of the file, as [packer] does (settings given: fixed)
        self.action_modes = ((lambda: settings_file().monitor.actions)
                             if settings is None and settings_file is not None else None)
        runner = runner or default_runner(paths)
        self.agent_state_dir = agent_state_dir(paths)
        wiring = wire_agents(config_path, paths, settings_file, self.config, lambda: self.actions.runner, samples)
        self.agents, self.agreement = wiring.agents, wiring.agreement
        self.samples_source: SampleSource = wiring.samples
        self.clock = clock
        self.on_jobs = on_jobs  # called with each round's job listing and when it was asked for
        # the head-of-queue lifts are kept in the store: after a restart they still end (store.lifts)
        self.state = WatchState(heading=HeadLifts(lambda: self.actions.store))
        self.actions = Actions(runner, helper.store, self.state, self.config, modes=self.settings.actions)
        self.actions.max_view_age_s, self.actions.clock = self.settings.max_view_age_s, clock
        # [paths] kill_switch: while it exists, the rounds only observe (slurm_plugin.helper.kill_switch)
        self.kill_switch = KillSwitch(getattr(paths, "kill_switch", None))
        if settings_file is not None:  # a refused edit of gpupack.toml is an event too
            settings_file.on_refused(lambda why: self.actions.log_event(
                "config-refused", f"{settings_file.path}: edit refused, the settings in force are kept: {why}"))
        self.fingerprint_of = Fingerprints(lambda: self.actions.runner, lambda: self.actions.store)
        # the order of a round, explicit (monitor_wiring); [retention]: the store's tables and the watches' maps
        self.watches: list[Watch] = build_watches(self, retention or retention_settings(settings_file))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_error: str | None = None
        self.cycle_s: float | None = None  # the last round plus its pause (None before the first)
        self.round_laps = RoundLaps()  # where the last round's time went
        # the queue, read as a big site can bear (formatted, what changed, JSON only where needed)
        self.queue_reader = QueueReader(lambda: self.actions.runner, reconcile_s=self.settings.queue_reconcile_s,
                                        refresh_s=self.settings.queue_refresh_s, clock=self.clock)
        self.load = RoundLoad(self.settings.interval_s)  # round and Slurm times, stretched episodes

    def job_maps(self) -> list:
        """Every map and set keyed by a job id (or a tuple starting with one) that the watches
        keep between rounds, as each names its own (`KeepsJobs`): what `JobMemory` prunes."""
        keepers = [self.state, self.fingerprint_of, *self.watches]
        return [m for k in keepers if isinstance(k, KeepsJobs) for m in k.job_maps()]

    # ------------------------------------------------------------------ what others read and swap
    @property
    def runner(self):
        return self.actions.runner

    @runner.setter
    def runner(self, runner) -> None:
        self.actions.runner = runner

    @property
    def store(self):
        return self.actions.store

    @store.setter
    def store(self, store) -> None:
        self.actions.store = store

    @property
    def tracks(self) -> dict[int, Track]:
        return self.state.tracks

    @property
    def mps_plan(self) -> dict[tuple[str, str], dict[int, int]]:
        return self.mps_watch.mps_plan

    @mps_plan.setter
    def mps_plan(self, plan: dict[tuple[str, str], dict[int, int]]) -> None:
        self.mps_watch.mps_plan = plan

    @property
    def stale_nodes(self) -> dict[str, str]:
        """Nodes whose agent's figures are not trusted now, with the reason."""
        return dict(getattr(self.samples_source, "stale", {}))

    @property
    def _heading(self) -> dict[int, Lift]:
        """Requeued jobs kept at the head (read by the metrics collector)."""
        return self.state.heading

    @property
    def rounds(self) -> int:
        return self.metrics_watch.rounds

    @property
    def enforcing(self) -> bool:
        return self.config().mode == "enforce"

    @property
    def quirk_guard(self) -> bool:
        """Whether the 22.05 gpu+shard guard runs: as configured, or (auto) where Slurm needs it."""
        return self.quirk_guard_watch.enabled(self._context(self.clock(), [], []))

    def metrics_registry(self):
        return self.metrics_watch.metrics_registry()

    def metrics_text(self) -> str:
        return self.metrics_watch.metrics_text()

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
            round_s = time.monotonic() - started
            pause = self.pause_after(round_s, self.round_laps.slowest())
            self.cycle_s = round_s + pause  # what the next round's watches can count on to act
            self._stop.wait(pause)

    def pause_after(self, round_s: float, why: str = "") -> float:
        """Seconds to wait after a round that took `round_s`: the interval, stretched so
        rounds take at most `max_duty` of the time (`why`: where its time went). A run of
        stretched rounds is one episode: said once when it starts and once when it ends.

        The stretch follows the shorter of this round and the one before: a long queue or a slow
        slurmctld slows every round and stretches from the second, while one round held up by a
        passing stall (a loaded host: single 5-s rounds seen in CI) does not triple the pause
        after it, which delayed every reaction, an out-of-memory end's requeue among them, by a
        whole stretched cycle."""
        duty = self.settings.max_duty
        previous = getattr(self, "_previous_round_s", None)
        self._previous_round_s = round_s
        paced = round_s if previous is None else min(round_s, previous)
        stretched = paced * (1 - duty) / duty
        pause = max(0.05, self.settings.interval_s - round_s, stretched)
        self.load.round_ended(round_s, round_s + pause, why)
        return pause

    # ------------------------------------------------------------------ one round
    def tick(self) -> None:
        now = self.clock()
        lap = self.round_laps = RoundLaps()
        begin_round = getattr(self.runner, "begin_round", None)
        if begin_round is not None:  # one node listing serves the round (`slurm.round_nodes`)
            begin_round()
        if self.action_modes is not None:
            self.actions.modes = self.action_modes()
        query_before = getattr(self.runner, "query_s", None)
        read = self.queue_reader.read(also=self.followed_jobs())
        listing = read.jobs
        now = read.taken_at  # the view's time: when Slurm was asked (or confirmed nothing changed)
        self.actions.view_taken_at = now
        self.load.queue_read(read)
        lap("listing")
        jobs_by_node: dict[str, list[int]] = {}
        gpus_by_node: dict[str, dict[int, tuple[int, ...]]] = {}  # Slurm's record of each job's GPUs there
        shards_by_node: dict[str, dict[int, int]] = {}  # and of its shards there (0: whole GPUs)
        for j in listing:
            if j.state in ACTIVE:
                for n in expand_hostlist(j.nodes):
                    jobs_by_node.setdefault(n, []).append(j.job_id)
                for n, gpus in allocated_gpus(j).items():
                    gpus_by_node.setdefault(n, {})[j.job_id] = gpus
                for n, shards in allocated_shards(j).items():
                    shards_by_node.setdefault(n, {})[j.job_id] = shards
        tell = getattr(self.samples_source, "tell_jobs", None)
        if tell is not None:  # the agents learn their jobs from this listing, never from slurmctld
            tell_outputs = getattr(self.samples_source, "tell_outputs", None)
            if tell_outputs is not None:  # where Slurm writes each job's output (`agent.output_tail`)
                tell_outputs(job_outputs_by_node(listing))
            tell(jobs_by_node, gpus_by_node, shards_by_node)
            samples = self.samples_source(jobs_by_node)
        else:
            samples = self.samples_source(jobs_by_node) if jobs_by_node else []
        lap("agents")
        self.actions.stale_nodes = dict(self.stale_nodes)
        log_agreement_events(self.agreement, self.actions.log_event)
        if self.on_jobs is not None:
            try:
                self.on_jobs(listing, now)
            except Exception:  # publishing the view must not stop the watching
                log.exception("publishing the cluster view failed")
            lap("view")
        ctx = self._context(now, listing, samples)
        halted = self.actions.halted = self.kill_switch.check(self.actions.log_event)
        # a listing slurmctld gave too late: this round only observes (as with the kill switch), so
        # no decision is made, and spent, on it; `Actions` refuses too, should a round outlast it
        old_view = self.actions.view_too_old("the round's actions", None)
        for watch in self.watches:
            if (halted or old_view) and watch.name not in RUN_WHILE_HALTED:
                continue
            watch.round(ctx)
            lap(watch.name)
        query_after = getattr(self.runner, "query_s", None)
        if query_before is not None and query_after is not None:
            self.load.slurm_s = query_after - query_before  # every Slurm command of the round

    def followed_jobs(self) -> set[int]:
        """Jobs listed whatever their state (how they ended matters): the tracked runs and the
        jobs of the action ledger's open decisions (the jobs they moved and those they shielded)."""
        followed = set(self.state.tracks)
        try:
            for row in self.actions.ledger.open():
                followed.add(row.job_id)
                followed.update(int(h["job_id"]) for h in row.data.get("hurt", []) if isinstance(h, dict)
                                and isinstance(h.get("job_id"), int))
        except Exception:  # noqa: BLE001 - a store hiccup: the tracked runs still are followed
            log.exception("the action ledger could not be read; following the tracked runs only")
        return followed

    def _context(self, now: float, listing: list[Job], samples: list) -> RoundContext:
        config = self.config()
        if config != self.rules.config:  # gpupack.toml's [packer] table was reloaded
            log.info("decisions follow the reloaded [packer] settings")
            self.rules = self.rules.with_overrides(config=config)
        return RoundContext(
            now=now, jobs={job.job_id: job for job in listing}, samples=samples, settings=self.settings,
            config=config, rules=self.rules, state=self.state, actions=self.actions, fingerprint_of=self.fingerprint_of,
            agent_state_dir=self.agent_state_dir, agents=self.agents, stale_nodes=self.stale_nodes,
            gpu_model=config.gpu_model or getattr(self.helper.paths, "gpu_model", None) or "H100-80GB",
            act_s=self.settings.memory_act_s + (self.cycle_s or self.settings.interval_s),
        )


class RoundLaps:
    """Where a round's time went: the seconds since the last lap, by part (said when a round
    is slow: the Slurm listing, the agents, or a watch's actions)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self._last = clock()
        self.parts: dict[str, float] = {}

    def __call__(self, part: str) -> None:
        now = self.clock()
        self.parts[part] = self.parts.get(part, 0.0) + now - self._last
        self._last = now

    def slowest(self, n: int = 3, at_least_s: float = 0.1) -> str:
        """e.g. 'listing 4.1 s, memory 0.5 s' (empty when no part took `at_least_s`)."""
        top = sorted(self.parts.items(), key=lambda kv: -kv[1])[:n]
        return ", ".join(f"{part} {s:.1f} s" for part, s in top if s >= at_least_s)
