"""The helper's watcher process: polls Slurm, publishes the cluster view, runs the monitor.

It is a separate process from the submit side on purpose: parsing `squeue --json` of a
long queue holds Python's interpreter lock for tens of milliseconds, and the submit path
(which slurmctld waits on under its locks) must never queue behind that. It also runs at a
lower CPU priority, so on a small controller the submit path is served first.
"""
from __future__ import annotations

import ctypes
import logging
import os
import signal
import threading
from pathlib import Path

from store.db import Store
from slurm_plugin.config.reloading import ReloadingConfig
from slurm_plugin.helper.settings import Paths
from slurm_plugin.helper.view_file import publish, view_path
from slurm_plugin.metrics.settings import MetricsOverride
from slurm_plugin.startup import WATCHER_MODULES, require

log = logging.getLogger(__name__)

WATCHER_NICE = 10
_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int) -> None:
    """Ask the kernel to stop this process when its parent (the submit side) goes away."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError) as exc:
        log.info("prctl(PR_SET_PDEATHSIG) unavailable: %s", exc)
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)


class Watcher:
    """Poller plus monitor; the monitor reads `store`, `config` and `paths` from it."""

    def __init__(self, config_path: Path, paths: Paths | None = None, poll_interval: float = 2.0,
                 metrics: MetricsOverride | None = None):
        self.config = ReloadingConfig(config_path)  # the whole file, checked: a bad one stops the start
        self.paths = paths or self.config.file.settings.paths
        self.metrics_address = (metrics or MetricsOverride()).watch(config_path, self.paths.slurm_conf)
        self.store = Store(self.paths.database)
        self.view_file = view_path(self.paths.socket)
        # imported here: the adapter pulls in the Slurm command runner
        from slurm_plugin.slurm.runner import SlurmRunner

        self.runner = SlurmRunner(slurm_conf=str(self.paths.slurm_conf) if self.paths.slurm_conf else None,
                                  timeout=10)
        self._done = threading.Event()
        # the agents' final summaries of the jobs the controller's epilog names, and the sweep
        # of the rest (runs the monitor did not see end): a thread of its own, never in a round
        from slurm_plugin.agent.client import helper_link
        from slurm_plugin.helper.finals import EndedSpool, FinalsCollector, LinkFinals, open_sweep, spool_path

        finals_link = helper_link(config_path, self.paths, lambda: self.runner)  # the agents, over the link
        from slurm_plugin.helper.journal_mirror import JournalMirror

        self.finals = FinalsCollector(lambda: open_sweep(self.paths.database, LinkFinals(finals_link),
                                                         self.paths.slurm_conf, "sweep"),
                                      EndedSpool(spool_path(self.paths.socket)),
                                      journals=lambda sweep: JournalMirror(finals_link, sweep.recorder.store),
                                      # the one writer also writes the runs the monitor saw end
                                      monitored=lambda: self.monitor.actions.finished_runs)
        # the monitor's one job listing per round also feeds the view (one squeue a round)
        self.monitor = _load_monitor(self)

    def publish_from_jobs(self, jobs: list, taken_at: float) -> None:
        """Publish the view from a job listing the monitor already has, plus the nodes."""
        from slurm_plugin.helper.slurm_poll import snapshot_from

        stale = self.monitor.stale_nodes if self.monitor is not None else {}
        load = self.monitor.load.to_doc() if self.monitor is not None else None
        publish(self.view_file, snapshot_from(self.runner.nodes(), jobs, taken_at, stale), load)

    def run(self) -> None:
        signal.signal(signal.SIGTERM, lambda *_: self._done.set())
        signal.signal(signal.SIGINT, lambda *_: self._done.set())
        try:  # absolute: the submit side that starts it runs at a higher priority
            os.setpriority(os.PRIO_PROCESS, 0, WATCHER_NICE)
        except OSError:
            pass
        self.monitor.start()
        self.finals.start()
        endpoint = self._serve_metrics()
        log.info("watcher publishing the cluster view to %s", self.view_file)
        self._done.wait()
        log.info("watcher stopping")
        if endpoint is not None:
            endpoint.stop()
        self.monitor.stop()
        self.finals.stop()
        self.store.close()

    def _serve_metrics(self):
        """The watcher's endpoint: the monitor's registry."""
        from slurm_plugin.metrics.endpoint import serve

        return serve(self.metrics_address, self.monitor.metrics_registry(), "watcher")


def _load_monitor(owner: Watcher):
    """The run-time watcher (contention, memory growth, history). A part that cannot be
    loaded stops the start (`MissingDependency`): never a watcher with its actions off."""
    require("the gpupack watcher", WATCHER_MODULES)
    from slurm_plugin.helper import monitor

    return monitor.Monitor(owner, runner=owner.runner, on_jobs=owner.publish_from_jobs)
