"""`gpupack helper`: the submit side (socket and decisions) and its watcher process.

Two processes by default (`role="all"`): this one answers the shim from memory and a file,
and starts the watcher (`gpupack helper --role watch`), which polls Slurm, publishes the
cluster view and runs the monitor. An admin may also run the two roles as separate
services (`--role submit` and `--role watch`).
"""
from __future__ import annotations

import gc
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from store.db import Store
from slurm_plugin.helper.finals import EndedSpool, spool_path
from slurm_plugin.helper.server import HelperServer, Reply
from slurm_plugin.config.reloading import ReloadingConfig
from slurm_plugin.helper.settings import Paths, slurm_user_uid
from slurm_plugin.helper.submit_service import SubmitService
from slurm_plugin.helper.view_file import PublishedView, view_path
from slurm_plugin.metrics.endpoint import new_registry, serve
from slurm_plugin.metrics.config_file import ConfigFileCollector
from slurm_plugin.metrics.settings import MetricsOverride
from slurm_plugin.metrics.ports import slurm_conf_path
from slurm_plugin.metrics.submit import SubmitMetrics
from slurm_plugin.slurm.conf_file import job_requeue_of
from slurm_plugin.slurm.gres import expand_hostlist
from slurm_plugin.refusals import RefusalLog, UserLimits
from slurm_plugin.startup import WATCHER_MODULES, require, require_in_child

log = logging.getLogger(__name__)

ROLES = ("all", "submit", "watch")
SUBMIT_NICE = -5
RESTART_BACKOFF_S = (1.0, 5.0, 30.0)


class Helper:
    """The submit side: answers the shim from the published cluster view and the history."""

    def __init__(self, config_path: Path, paths: Paths | None = None, poll_interval: float = 2.0,
                 spawn_watcher: bool = True, metrics: MetricsOverride | None = None, listen: bool = True):
        """``listen=False``: no socket is bound (a tool deciding in its own process, beside a
        running helper whose socket it must not take)."""
        self.config_path = Path(config_path)
        self.config = ReloadingConfig(config_path)  # the whole file, checked: a bad one stops the start
        self.paths = paths or self.config.file.settings.paths
        self.store = Store(self.paths.database)
        self.poll_interval = poll_interval
        # a view older than a few polls is not trusted (the watcher is stuck or gone)
        self.view = PublishedView(view_path(self.paths.socket), max_age_s=max(30.0, 10 * poll_interval))
        self.metrics = SubmitMetrics(new_registry())
        self.metrics.watch_state(self.view.taken_at, lambda: self.config().mode, self.paths.kill_switch, time.time)
        self.metrics.registry.register(ConfigFileCollector(self.config.file))
        override = metrics or MetricsOverride()
        self.metrics_address = override.submit(config_path, self.paths.slurm_conf)
        self.metrics_endpoint = None
        self.service = SubmitService(
            self.config, self.store, self.view, self.paths.kill_switch, metrics=self.metrics,
            rules=self.config.file().monitor.rules,
            requeue_by_default=job_requeue_of(slurm_conf_path(self.paths.slurm_conf)),
        )
        # the controller's epilog (`gpupack ctld-epilog`) names a job that ended: the watcher
        # collects its runs from its nodes' agents (no Slurm call, no SQLite on this side)
        self.ended_jobs = EndedSpool(spool_path(self.paths.socket))
        limits = self.config.file.settings.limits
        self.server = None if not listen else HelperServer(
            self.paths.socket,
            {"submit": self._submit, "ping": lambda _f: {"status": "ok", "reason": "pong"},
             "job-ended": self._job_ended},
            slurm_user_uid(self.paths.slurm_user),
            refusals=RefusalLog(logging.getLogger("slurm_plugin.helper.server"), self.metrics.registry,
                                lines_per_min=limits.refusal_log_lines_per_min),
            limits=UserLimits(limits.requests_per_s_per_user, limits.request_burst),
        )
        self._done = threading.Event()
        self.watcher = (WatcherSupervisor(self.config_path, poll_interval, override.for_watcher())
                        if spawn_watcher else None)

    def _submit(self, fields: dict[str, bytes]) -> Reply:
        answer, after = self.service.respond(fields)
        return Reply(answer.to_wire(), after=after)

    def _job_ended(self, fields: dict[str, bytes]) -> dict[str, str] | Reply:
        """`job_id`, `nodes` (a Slurm hostlist): handed to the watcher, which records the job's
        runs from its nodes' agents."""
        try:
            job_id = int(fields.get("job_id", b"").decode("ascii"))
            hostlist = fields.get("nodes", b"").decode("ascii")
            nodes = expand_hostlist(hostlist)
        except (UnicodeDecodeError, ValueError) as exc:
            return {"status": "error", "reason": f"bad-request: {exc}"[:200].replace("\t", " ").replace("\n", " ")}
        if job_id <= 0 or not nodes or any(c.isspace() for c in hostlist):
            return {"status": "error", "reason": "bad-request: a job id and its nodes (a hostlist) are needed"}

        def hand_over() -> None:
            try:
                self.ended_jobs.append(job_id, hostlist)
            except OSError as exc:  # the sweep records it later
                log.warning("job %d's end not handed to the watcher: %s", job_id, exc)

        return Reply({"status": "ok", "reason": "queued"}, after=hand_over)

    def run(self) -> None:
        if self.server is None:
            raise RuntimeError("this helper was built without its socket (listen=False)")
        signal.signal(signal.SIGTERM, lambda *_: self._done.set())
        signal.signal(signal.SIGINT, lambda *_: self._done.set())
        # slurmctld waits on this process under its locks: on a busy controller it must not
        # queue for the CPU behind ordinary processes (the watcher sets its own, lower, priority)
        try:
            os.setpriority(os.PRIO_PROCESS, 0, SUBMIT_NICE)
        except OSError as exc:
            log.info("cannot raise the submit side's CPU priority (not root?): %s", exc)
        if self.watcher is not None:
            self.watcher.start()
        # everything imported and built so far lives as long as the process: keep it out of
        # the cyclic collector, whose full pass over it (~55,000 objects, about 17 ms) would
        # otherwise land now and then on a submission slurmctld is waiting for
        gc.collect()
        gc.freeze()
        self.metrics_endpoint = serve(self.metrics_address, self.metrics.registry, "submit side")
        # the view is read, and what the stages need of it built, off the request path
        self.view.on_new_snapshot(self.service.prepare_view)
        self.view.start_loader()
        self.server.serve_in_thread()
        log.info("helper listening on %s (mode=%s)", self.paths.socket, self.config().mode)
        while not self._done.wait(1.0):
            if self.watcher is not None:
                self.watcher.check()
        log.info("helper stopping")
        self.server.shutdown()
        self.server.server_close()
        self.view.stop_loader()
        if self.metrics_endpoint is not None:
            self.metrics_endpoint.stop()
        if self.watcher is not None:
            self.watcher.stop()
        self.store.close()


class WatcherSupervisor:
    """Starts `gpupack helper --role watch`, restarts it if it dies, stops it at the end."""

    def __init__(self, config_path: Path, poll_interval: float, metrics_args: list[str] | None = None):
        self.command = [sys.executable, "-m", "slurm_plugin", "helper", "--role", "watch",
                        "--config", str(config_path), "--poll-interval", str(poll_interval), *(metrics_args or [])]
        self.process: subprocess.Popen | None = None
        self.restarts = 0
        self._next_start = 0.0

    def start(self) -> None:
        env = {**os.environ, "GPUPACK_HELPER_PARENT": str(os.getpid())}
        self.process = subprocess.Popen(self.command, env=env, stdin=subprocess.DEVNULL)
        log.info("watcher started (pid %d)", self.process.pid)

    def check(self) -> None:
        if self.process is None or self.process.poll() is None:
            return
        now = time.monotonic()
        if self._next_start == 0.0:
            delay = RESTART_BACKOFF_S[min(self.restarts, len(RESTART_BACKOFF_S) - 1)]
            log.error("the watcher exited with %s; restarting it in %.0f s (decisions keep jobs "
                      "exclusive while the cluster view is stale)", self.process.returncode, delay)
            self._next_start = now + delay
        if now >= self._next_start:
            self.restarts += 1
            self._next_start = 0.0
            self.start()

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            log.error("the watcher did not stop in 15 s; killing it")
            self.process.kill()
            self.process.wait()


def run_role(role: str, config_path: Path, poll_interval: float, metrics: MetricsOverride | None = None) -> None:
    """Run one side (or both); `MissingDependency` before anything starts when a part of the
    watcher cannot be loaded (role all checks for the watcher process it starts)."""
    if role == "watch":
        require(f"gpupack helper --role {role}", WATCHER_MODULES)
    elif role == "all":  # checked in a child: the submit side keeps none of the watcher's libraries
        require_in_child(f"gpupack helper --role {role}", WATCHER_MODULES)
    if role == "watch":
        from slurm_plugin.helper.watcher import Watcher, die_with_parent

        parent = os.environ.get("GPUPACK_HELPER_PARENT")
        if parent and parent.isdigit():
            die_with_parent(int(parent))
        Watcher(config_path, poll_interval=poll_interval, metrics=metrics).run()
    else:
        Helper(config_path, poll_interval=poll_interval, spawn_watcher=(role == "all"), metrics=metrics).run()
