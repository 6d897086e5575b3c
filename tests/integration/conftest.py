"""The real local Slurm cluster, shared by every integration test (a session fixture).

It is the same cluster as `gpupack devcluster up` (its own state folder and port, so a
developer's demo cluster is left alone). It needs root on Debian 12; there it installs
what is missing from Debian's packages, like the demo does.
"""
from __future__ import annotations

import atexit
import functools
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from e2e_support import idle_cluster  # noqa: F401 (its fixture, for every test of this folder)
from slurm_plugin.devcluster.manager import DevCluster, slurm_release
from slurm_plugin.devcluster.ports import claim_block
from slurm_plugin.devcluster.spec import ClusterSpec
from slurm_plugin.devcluster.topology import DEFAULT_TOPOLOGY
from slurm_plugin.slurm.runner import SlurmRunner

#: GPUPACK_TEST_CLUSTER_DIR reuses a given state folder (and keeps it); by default each run
#: makes a fresh one (its SQLite store, logs, spool), removed after a run that passed.
REUSE_STATE = bool(os.environ.get("GPUPACK_TEST_CLUSTER_DIR"))


@functools.cache
def run_port() -> int:
    """The run's slurmctld port: GPUPACK_TEST_CLUSTER_PORT, or the base of a block of free ports
    this run claims until it ends (two runs on one machine, or several releases' legs at once,
    each get their own; :mod:`slurm_plugin.devcluster.ports`)."""
    if os.environ.get("GPUPACK_TEST_CLUSTER_PORT"):
        return int(os.environ["GPUPACK_TEST_CLUSTER_PORT"])
    _CLAIMS.append(claim_block())
    return _CLAIMS[-1].base


@functools.cache
def run_state_dir() -> Path:
    """The run's state folder (made on first use, so a unit-test run makes none)."""
    if REUSE_STATE:
        return Path(os.environ["GPUPACK_TEST_CLUSTER_DIR"])
    return Path(tempfile.mkdtemp(prefix=f"gpupack-test-{run_port()}-", dir="/var/tmp"))


#: one-host (every daemon on this machine's host) or multi-host (each node a host of its own)
TOPOLOGY = os.environ.get("GPUPACK_TEST_TOPOLOGY", DEFAULT_TOPOLOGY)
FINISHED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE"}


@dataclass
class Cluster:
    dev: DevCluster
    workdir: Path
    env: dict[str, str] = field(default_factory=dict)

    @property
    def state_dir(self) -> Path:
        return self.dev.spec.state_dir

    @property
    def spec(self) -> ClusterSpec:
        return self.dev.spec

    def node_path(self, node: str, path: Path) -> Path:
        """``path`` as ``node`` sees it, read from here (multi-host: through its host's
        holder; one host: the path itself). A Unix socket there answers from here too."""
        return self.dev.hosts.path_on(node, path) if self.dev.hosts else path

    def node_view(self, node: str) -> Path:
        """The state folder as ``node`` sees it (its own run/, simgpu/, agent/ ...)."""
        return self.node_path(node, self.state_dir)

    def on_node(self, node: str) -> list[str]:
        """The command prefix that runs a program on ``node``'s host (none on one host)."""
        return self.dev.hosts.enter(node) if self.dev.hosts else []

    @property
    def link(self):
        """The helper's link to the agents, as the cluster's gpupack.toml gives it (root signs)."""
        from slurm_plugin.agent.client import link_from_config

        return link_from_config(self.spec.gpupack_toml, {0})

    @property
    def release(self) -> tuple[int, int, int]:
        """The Slurm release the cluster runs, e.g. (24, 11, 5)."""
        return slurm_release()

    def tres(self, spec: str) -> str:
        """A request as this release writes it in TresPerNode: 22.05 `gres:shard:1`, 23.11+ `gres/shard:1`."""
        return ("gres:" if self.release[:2] < (23, 11) else "gres/") + spec

    def run(self, *args: str, check: bool = True, input: bytes | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
        result = subprocess.run(list(args), env=self.env, capture_output=True, input=input, timeout=timeout, cwd=self.workdir)
        if check and result.returncode != 0:
            raise AssertionError(f"{' '.join(args)} failed ({result.returncode}): {result.stderr.decode(errors='replace')}")
        return result

    def submit(self, args: list[str], script: bytes | None = None) -> int:
        """sbatch with `args` (and `script` on stdin when given); returns the job id."""
        out = self.run("sbatch", "--parsable", "-o", "/dev/null", *args, input=script).stdout.decode()
        return int(out.strip().split(";")[0])

    def job(self, job_id: int) -> dict[str, str]:
        """`scontrol show job` as a dict (fields that are one token, plus AdminComment)."""
        text = self.run("scontrol", "show", "job", "-o", str(job_id)).stdout.decode(errors="replace")
        fields = dict(re.findall(r"(\w+(?:/\w+)?)=(\S*)", text))
        # free text: read it from the JSON through the adapter, not from the one-liner
        fields["AdminComment"] = SlurmRunner(env=self.env).job(job_id).admin_comment or ""
        return fields

    def state(self, job_id: int) -> str:
        return self.job(job_id).get("JobState", "")

    def wait(self, job_id: int, states: set[str] | str, timeout: float = 60) -> str:
        wanted = {states} if isinstance(states, str) else set(states)
        deadline = time.time() + timeout
        info: dict[str, str] = {}
        while time.time() < deadline:
            info = self.job(job_id)
            if info.get("JobState", "") in wanted:
                return info["JobState"]
            time.sleep(0.25)
        raise AssertionError(
            f"job {job_id} is {info.get('JobState')} (Reason={info.get('Reason')}), not {sorted(wanted)} after {timeout}s"
        )

    def set_mode(self, mode: str) -> None:
        toml = self.spec.gpupack_toml
        text = re.sub(r'mode = "\w+"', f'mode = "{mode}"', toml.read_text())
        toml.write_text(text)
        os.utime(toml, (time.time() + 1, time.time() + 1))  # the helper reloads on mtime change

    def set_option(self, key: str, value: str) -> None:
        """Set one `[packer]` key of the cluster's gpupack.toml (value as TOML text)."""
        toml = self.spec.gpupack_toml
        text = toml.read_text()
        line = f"{key} = {value}"
        if re.search(rf"^{key} = .*$", text, flags=re.M):
            text = re.sub(rf"^{key} = .*$", line, text, flags=re.M)
        else:
            text = text.replace("[packer]\n", f"[packer]\n{line}\n", 1)
        toml.write_text(text)
        os.utime(toml, (time.time() + 1, time.time() + 1))

    def reset_options(self) -> None:
        text = self.spec.gpupack_toml.read_text()
        for key in ("pack_only_when_no_idle_gpu", "pack_unknown"):
            text = re.sub(rf"^{key} = .*\n", "", text, flags=re.M)
        self.spec.gpupack_toml.write_text(text)
        self.set_mode("enforce")

    def cancel_all(self) -> None:
        """Clean up the jobs the tests submitted (the suite itself never cancels a job)."""
        self.run("scancel", "--full", "-u", "root", check=False)
        deadline = time.time() + 30
        while time.time() < deadline:
            out = self.run("squeue", "-h", "-o", "%i", check=False).stdout.strip()
            if not out:
                return
            time.sleep(0.25)

    def emptied(self, timeout: float = 30.0) -> None:
        """No job in the cluster, and the submit side deciding from a view of it: the jobs an
        earlier test cancelled a moment ago are gone from the cluster view the watcher
        publishes each round (cluster-view.json), not only from squeue (a job submitted at once
        was judged beside them: a load-aware refusal on 24.11)."""
        self.cancel_all()
        since, path = time.time(), self.spec.helper_socket.parent / "cluster-view.json"
        deadline, taken = since + timeout, None
        while time.time() < deadline:
            try:
                doc = json.loads(path.read_bytes())
                taken = doc["taken_at"]
                empty = not doc["running"] and not any(n["busy"] for n in doc["nodes"])
            except (OSError, ValueError, KeyError, TypeError):
                taken, empty = None, False
            if taken is not None and (taken >= since or empty):
                return
            time.sleep(0.2)
        # a watcher a test stopped publishes nothing: the submit side then finds its view too
        # old and decides as with none (whole GPUs), and the test goes on to say what it sees
        print(f"gpupack tests: the watcher published no cluster view in the {timeout:.0f} s after the queue "
              f"emptied (the last taken at {taken})")


def start_cluster(spec: ClusterSpec, workdir: Path) -> Cluster:
    """Bring the cluster of ``spec`` up (its spec saved, as `devcluster up` does, so the
    command line's `devcluster status/down --state-dir` find it)."""
    dev = DevCluster(spec)
    track(dev)  # before up: a start that fails half-way is taken down too
    spec.state_dir.mkdir(parents=True, exist_ok=True)
    (spec.state_dir / "spec.json").write_text(json.dumps(spec.to_json(), indent=1))
    dev.up()
    # the jobs the tests submit inherit sbatch's environment: their `python3 -m slurm_plugin`
    # is this checkout's, not whichever clone the editable install points at
    here = str(Path(__file__).resolve().parents[2])
    inherited = os.environ.get("PYTHONPATH")
    pythonpath = here + (f":{inherited}" if inherited else "")
    return Cluster(dev=dev, workdir=workdir, env={**os.environ, **dev.env(), "PYTHONPATH": pythonpath})


#: The clusters this run started, taken down at its end however it ends (pytest's teardown,
#: Ctrl-C, SIGTERM, a crash in a fixture): a test run owns what it starts.
_STARTED: list[DevCluster] = []
_CLAIMS: list = []
_FAILED = False


def _down_all() -> None:
    global _FAILED
    while _STARTED:
        dev = _STARTED.pop()
        try:
            dev.down()
        except Exception as exc:  # noqa: BLE001 - the next cluster still goes down
            print(f"gpupack tests: taking down the cluster in {dev.spec.state_dir} failed: {exc}")
            _FAILED = True  # its state stays: `gpupack devcluster down --state-dir` needs it
    if not REUSE_STATE and run_state_dir.cache_info().currsize:
        state = run_state_dir()
        if _FAILED:
            print(f"gpupack tests: the test cluster's state (logs, store) is kept in {state}")
        else:
            for path in (state, state.with_name(state.name + "-mh")):
                shutil.rmtree(path, ignore_errors=True)


def _on_sigterm(signum, frame):  # as Ctrl-C: unwind, so the teardown and atexit run
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_runtest_logreport(report) -> None:
    global _FAILED
    if report.failed:
        _FAILED = True


def track(dev: DevCluster) -> None:
    """Take ``dev`` down at the end of the run (in reverse order of start)."""
    if not _STARTED:
        atexit.register(_down_all)
        signal.signal(signal.SIGTERM, _on_sigterm)
    _STARTED.append(dev)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory) -> Cluster:
    if os.geteuid() != 0:
        pytest.fail("the integration tests need root (they run a real Slurm cluster); run them as CI does: `make test` as root")
    spec = ClusterSpec(state_dir=run_state_dir(), nodes=3, gpus_per_node=2, gpu_model="H100-80GB", mode="enforce",
                       port=run_port(), topology=TOPOLOGY)
    c = start_cluster(spec, tmp_path_factory.mktemp("jobs"))
    c.cancel_all()
    yield c
    c.cancel_all()
    c.reset_options()
    _down_all()
