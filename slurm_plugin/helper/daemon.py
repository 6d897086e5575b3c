"""`gpupack helper`: wire the store, the settings, the cluster view and the socket together."""
from __future__ import annotations

import logging
import pwd
import signal
import threading
from pathlib import Path

from packer.decision import Decision
from packer.request import JobFacts
from packer.store import Store
from slurm_plugin.helper.cluster_view import ClusterViewPoller
from slurm_plugin.helper.server import HelperServer
from slurm_plugin.helper.settings import Paths, ReloadingConfig, load_paths
from slurm_plugin.helper.submit_service import SubmitService

log = logging.getLogger(__name__)


def slurm_user_uid(name: str) -> set[int]:
    try:
        return {pwd.getpwnam(name).pw_uid}
    except KeyError:
        log.warning("SlurmUser %r does not exist; only root may use the helper", name)
        return set()


class Helper:
    """The controller helper: answers the shim and keeps the cluster view fresh."""

    def __init__(self, config_path: Path, paths: Paths | None = None, poll_interval: float = 2.0):
        self.paths = paths or load_paths(config_path)
        self.config = ReloadingConfig(config_path)
        self.store = Store(self.paths.database)
        # imported here: the adapter pulls in the Slurm command runner
        from slurm_plugin.helper.slurm_poll import fetch_snapshot

        self.poller = ClusterViewPoller(lambda: fetch_snapshot(self.paths.slurm_conf), poll_interval)
        self.service = SubmitService(
            self.config, self.store, self.poller.view, self.paths.kill_switch, self._on_decision
        )
        self.server = HelperServer(
            self.paths.socket,
            {"submit": self._submit, "ping": lambda _f: {"status": "ok", "reason": "pong"}},
            slurm_user_uid(self.paths.slurm_user),
        )
        self._done = threading.Event()
        self.monitor = _load_monitor(self)

    def _submit(self, fields: dict[str, bytes]) -> dict[str, str]:
        return self.service.answer(fields).to_wire()

    def _on_decision(self, facts: JobFacts, decision: Decision) -> None:
        if decision.verdict == "exclusive":
            self.poller.reserve_whole_gpu()

    def run(self) -> None:
        signal.signal(signal.SIGTERM, lambda *_: self._done.set())
        signal.signal(signal.SIGINT, lambda *_: self._done.set())
        self.poller.start()
        self.server.serve_in_thread()
        if self.monitor is not None:
            self.monitor.start()
        log.info("helper listening on %s (mode=%s)", self.paths.socket, self.config().mode)
        self._done.wait()
        log.info("helper stopping")
        if self.monitor is not None:
            self.monitor.stop()
        self.server.shutdown()
        self.server.server_close()
        self.poller.stop()
        self.store.close()


def _load_monitor(helper: Helper):
    """The run-time watcher (contention, memory growth, history), when it is installed."""
    try:
        from slurm_plugin.helper import monitor
    except ImportError:
        return None
    return monitor.Monitor(helper)
