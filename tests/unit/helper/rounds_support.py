"""What the tests of the monitor's rounds share: a stateful fake Slurm, a helper with a real
SQLite file, a scripted sample source, and running packed jobs.

(Imported as `tests.unit.helper.rounds_support`; not a test module.)
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from packer.config import PackerConfig
from packer.samples import JobSample
from store.db import Store
from slurm_plugin.helper.monitor import Monitor
from slurm_plugin.helper.monitor_settings import MonitorSettings
from slurm_plugin.slurm.fake import FAKE_EPOCH, FakeSlurm
from slurm_plugin.slurm.runner import SlurmRunner

GIB = 1024**3


@dataclass
class FakePaths:
    socket: Path
    database: Path
    slurm_conf: Path | None = None
    kill_switch: Path | None = None


class FakeHelper:
    """What the monitor asks of the controller helper: its paths, its store, its config."""

    def __init__(self, tmp_path: Path, mode: str = "enforce"):
        self.paths = FakePaths(socket=tmp_path / "run" / "helper.sock", database=tmp_path / "gpupack.db",
                               kill_switch=tmp_path / "gpupack.disable")
        self.store = Store(self.paths.database)
        # the rounds' scenarios count in 8 shares of 10 GiB, any count (no MIG share ladder)
        self._config = PackerConfig(mode=mode, shares_per_gpu=8, gpu_model="")

    def config(self) -> PackerConfig:
        return self._config


class Samples:
    """Scripted agent: the test sets what each job reports this round; `clock` follows the
    newest sample."""

    def __init__(self):
        self.now: dict[int, JobSample] = {}
        self.clock = float(FAKE_EPOCH)

    def __call__(self, nodes):
        return list(self.now.values())

    def put(self, job_id, at, *, node="node1", gpu=0, throughput=None, mem=GIB, started_at=FAKE_EPOCH,
            isolation="shard:2", util=None, util_source=None, **more):
        """`more`: other JobSample fields (e.g. the job's checkpoint reports)."""
        self.clock = max(self.clock, float(at))
        self.now[job_id] = JobSample(job_id=job_id, node=node, gpu_index=gpu, at=at, mem_bytes=mem,
                                     peak_mem_bytes=mem, throughput=throughput, isolation=isolation,
                                     started_at=started_at, util_pct=util, util_source=util_source, **more)


def make(tmp_path, mode="enforce", *, fixed_clock=False, release="22.05.8", priority_type="basic", **settings):
    """A monitor over a fake Slurm (`release`, `priority_type`) and scripted samples; its clock
    follows the newest sample, or stays at FAKE_EPOCH with `fixed_clock`. `settings`: MonitorSettings."""
    fake = FakeSlurm(release, priority_type=priority_type)
    helper, samples = FakeHelper(tmp_path, mode), Samples()
    clock = (lambda: float(FAKE_EPOCH)) if fixed_clock else (lambda: samples.clock)
    monitor = Monitor(helper, runner=SlurmRunner(executor=fake), samples=samples,
                      settings=MonitorSettings(skip_requeue_delay=False, **settings), clock=clock)
    writes_history(monitor, helper.store)
    return fake, helper, samples, monitor


def writes_history(monitor, store) -> None:
    """Each `monitor.tick()` is followed by what the watcher's finals thread does next: it
    writes the runs the round saw end (`history_recorder.RunInbox`, the one writer)."""
    from slurm_plugin.history_recorder import HistoryRecorder

    tick = monitor.tick

    def tick_then_write() -> None:
        tick()
        monitor.actions.finished_runs.write(HistoryRecorder(store, monitor.actions.runner, "monitor"))

    monitor.tick = tick_then_write


def running(fake, job_id, *, fp, shards=2, start=FAKE_EPOCH, node="node1", gpu=0):
    """Job `job_id` running packed (shard:`shards`) on GPU `gpu` of `node`, fingerprint `fp`."""
    fake.submit(job_id=job_id, state="RUNNING", nodes=node, gres=f"gres:shard:{shards}",
                gres_detail=[f"shard:h100:{shards}(IDX:{gpu})"], start_time=start,
                admin_comment=f"gpupack: packed shard:{shards} fp={fp}")
