"""Which GPU backend the agent runs: NVML by default, refusing to start without it unless the
simulated GPU is asked for; `--nvml-library simulated:DIR` runs NVML over the simulated GPU."""
from __future__ import annotations

import ctypes.util
import time
from pathlib import Path

import pynvml
import pytest
from click.testing import CliRunner

from gpus.sim.backend import SimGpuBackend
from slurm_plugin.agent.backends import BackendChoiceError, open_backend
from slurm_plugin.cli.agent_cmd import agent

ROOT = Path(__file__).resolve().parents[3]
NO_DRIVER = ctypes.util.find_library("nvidia-ml") is None


@pytest.fixture
def fresh_pynvml(monkeypatch):
    """pynvml as a new process has it (no library loaded yet); restored afterwards."""
    monkeypatch.setattr(pynvml, "nvmlLib", None)
    monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer_cache", {})
    monkeypatch.setattr(pynvml, "_nvmlLib_refcount", 0)


@pytest.mark.skipif(not NO_DRIVER, reason="this host has libnvidia-ml")
def test_auto_refuses_to_start_without_nvml(tmp_path, fresh_pynvml):
    with pytest.raises(BackendChoiceError, match="no NVIDIA GPU.*simulated:DIR"):
        open_backend("auto", None, "n1", tmp_path, ["H100-80GB"], True)
    result = CliRunner().invoke(agent, ["--node", "n1", "--state-dir", str(tmp_path), "--metrics-port", "0"])
    assert result.exit_code != 0 and "no NVIDIA GPU to run" in result.output
    assert not (tmp_path / "simgpu").exists()  # nothing simulated behind the operator's back


def test_the_shipped_unit_runs_auto():
    unit = (ROOT / "etc" / "systemd" / "gpupack-agent@.service").read_text()
    (line,) = [x for x in unit.splitlines() if x.startswith("ExecStart=")]
    assert "--backend auto" in line and "--nvml-library" not in line and "sim" not in line


def test_simulated_library_is_nvml_over_the_simulated_gpu(tmp_path, fresh_pynvml):
    opened = open_backend("auto", f"simulated:{tmp_path}", "n1", tmp_path / "unused", ["A100-40GB"], True)
    assert opened.name == "nvml" and opened.sim_dir == tmp_path
    assert type(opened.backend).__name__ == "NvmlBackend"
    (gpu,) = opened.backend.list_gpus()
    assert gpu.model == "A100-SXM4-40GB" and gpu.uuid == SimGpuBackend(tmp_path, "n1").list_gpus()[0].uuid
    inst = opened.backend.create_instance(0, "1g.5gb", 0)
    assert [i.uuid for i in SimGpuBackend(tmp_path, "n1").list_instances(0)] == [inst.uuid]
    opened.backend.close()


def test_sim_backend_only_when_asked(tmp_path):
    opened = open_backend("sim", None, "n1", tmp_path, ["H100-80GB"], True)
    assert opened.name == "sim" and isinstance(opened.backend, SimGpuBackend)
    with pytest.raises(BackendChoiceError, match="goes with the NVML backend"):
        open_backend("sim", f"simulated:{tmp_path}", "n1", tmp_path, ["H100-80GB"], True)


def test_nvml_reads_activity_per_mig_instance_through_dcgmi(tmp_path, fresh_pynvml):
    """NVML over the simulated GPU, DCGM's dcgmi its stand-in: each MIG device's GPU instance
    gets its own activity, found by NVML's GPU instance id through DCGM's entity ids."""
    from gpus.sim.dcgmi import STAND_IN
    from slurm_plugin.agent.counters import DCGM_GR_ACTIVE, CounterReader
    from slurm_plugin.agent.state import Assignment

    opened = open_backend("auto", f"simulated:{tmp_path}", "n1", tmp_path / "unused", ["H100-80GB"], True,
                          dcgmi=f"{STAND_IN} --sim-dir {tmp_path} --node n1")
    be = opened.backend
    try:
        idle, busy = be.create_instance(0, "1g.10gb", 0), be.create_instance(0, "3g.40gb", 4)
        SimGpuBackend(tmp_path, "n1").start_process(busy.uuid, "4242", busy_pct=90.0)
        jobs = [Assignment(1, "n1", 0, "mig", "mig:1g.10gb@0", gi_id=idle.gi_id, device_uuid=idle.uuid),
                Assignment(2, "n1", 0, "mig", "mig:3g.40gb@4", gi_id=busy.gi_id, device_uuid=busy.uuid)]
        reader = CounterReader(be)
        got: dict = {}
        end = time.monotonic() + 15
        while len(got) < 2 and time.monotonic() < end:
            got |= reader.read(jobs)
            time.sleep(0.1)
        assert {r.source for r in got.values()} == {DCGM_GR_ACTIVE}
        assert got[1].util_pct == 0.0 and got[2].util_pct > 5.0
        end = time.monotonic() + 5
        while not (later := be.instance_activity(0)) and time.monotonic() < end:
            time.sleep(0.1)
        assert later and {(a.gi_id, a.device_uuid) for a in later} <= {(idle.gi_id, idle.uuid), (busy.gi_id, busy.uuid)}
    finally:
        be.close()
