"""The driver's MIG capability files: numbering and reading on recorded files, and the
simulated GPU's copy of them (written for its instances, refused to a process that cannot
open them)."""
from __future__ import annotations

import errno
import io
import os
import stat
import shutil
from pathlib import Path

import pytest

from gpus.nvml.caps import (CapError, DriverFiles, access_text, devices_text, mig_minor, mig_minors_text,
                            parse_char_major, parse_mig_minors, parse_minor)
from gpus.sim import caps as simcaps
from gpus.sim.backend import SimGpuBackend
from gpus.sim.caps import SIM_CAPS_MAJOR, open_mig_device
from simjobs.workload import run

RECORDED = Path(__file__).resolve().parents[2] / "data" / "nvidia_caps"


def test_the_numbering_is_the_drivers():
    for line in (RECORDED / "proc/driver/nvidia-caps/mig-minors").read_text().splitlines():
        name, minor = line.split()
        if name in ("config", "monitor"):
            continue
        parts = name.split("/")  # gpuN/giG[/ciC]/access
        gpu, gi = int(parts[0][3:]), int(parts[1][2:])
        ci = int(parts[2][2:]) if len(parts) == 4 else None
        assert mig_minor(gpu, gi, ci) == int(minor), line
    # and the simulated driver's list has every recorded line
    ours = set(mig_minors_text(32).splitlines())
    assert set((RECORDED / "proc/driver/nvidia-caps/mig-minors").read_text().splitlines()) <= ours
    with pytest.raises(ValueError):
        mig_minor(0, 15)


def test_reads_the_nodes_of_a_mig_device_from_recorded_proc_files():
    driver = DriverFiles(RECORDED)
    assert driver.mig_devices(0, 1, 0) == [RECORDED / "dev/nvidia-caps/nvidia-cap12",
                                           RECORDED / "dev/nvidia-caps/nvidia-cap13"]
    assert [p.name for p in driver.mig_devices(1, 5, 0)] == ["nvidia-cap183", "nvidia-cap184"]
    assert [p.name for p in driver.mig_devices(1, 5, None)] == ["nvidia-cap183"]
    with pytest.raises(CapError, match="gpu0/gi2/access"):
        driver.mig_devices(0, 2, 0)  # no such GPU instance on that node
    assert DriverFiles.for_node(None, "n1").dev_caps == Path("/dev/nvidia-caps")
    assert DriverFiles.for_node(Path("/s"), "n1").proc_caps == Path("/s/n1.driver/proc/driver/nvidia/capabilities")


def test_an_access_file_without_a_minor_is_an_error():
    assert parse_minor(access_text(42), "x") == 42
    with pytest.raises(CapError, match="DeviceFileMinor"):
        parse_minor("DeviceFileMode: 292\n", "gi1/access")


def test_the_simulated_driver_lists_its_instances_as_the_real_one(tmp_path):
    gpu = SimGpuBackend(tmp_path, "n1", gpus=["H100-80GB", "H100-80GB"])
    driver = DriverFiles.for_node(tmp_path, "n1")
    assert driver.mig_minors.read_text() == mig_minors_text(2)
    a = gpu.create_instance(1, "1g.10gb", 0)
    rel = f"proc/driver/nvidia/capabilities/gpu1/mig/gi{a.gi_id}"
    assert (driver.root / rel / "access").read_text() == access_text(mig_minor(1, a.gi_id))
    assert (driver.root / rel / "ci0/access").read_text() == access_text(mig_minor(1, a.gi_id, 0))
    nodes = driver.mig_devices(1, a.gi_id, 0)
    assert all(n.exists() for n in nodes)
    open_mig_device(driver, 1, a.gi_id, 0, a.uuid)
    gpu.destroy_instance(1, a.gi_id)
    assert not (driver.root / rel).exists()  # gone with its instance
    with pytest.raises(CapError, match="no CUDA-capable device"):
        open_mig_device(driver, 1, a.gi_id, 0, a.uuid)


def _run(gpu: SimGpuBackend, device: str, sim_dir: Path) -> tuple[int, str]:
    err = io.StringIO()
    rc = run(mem_start=1 << 30, mem_growth=0, iters=2, iter_ms=0, workload=None,
             env={"GPUPACK_SIM_DIR": str(sim_dir), "GPUPACK_NODE": "n1", "GPUPACK_SIM_DEVICE": device},
             out=io.StringIO(), err=err, backend=gpu, report_every_s=0)
    return rc, err.getvalue()


def test_a_process_that_cannot_open_the_slices_nodes_cannot_use_it(tmp_path):
    gpu = SimGpuBackend(tmp_path, "n1", gpus=["H100-80GB"])
    mine, theirs = gpu.create_instance(0, "1g.10gb", 0), gpu.create_instance(0, "1g.10gb", 1)
    driver = DriverFiles.for_node(tmp_path, "n1")
    # the fence as the task sees it: only its own slice's nodes in the caps folder
    kept = {p.name for p in driver.mig_devices(0, mine.gi_id, 0)}
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    for node in driver.dev_caps.iterdir():
        if node.name not in kept:
            shutil.move(node, hidden / node.name)
    assert _run(gpu, mine.uuid, tmp_path) == (0, "")
    rc, err = _run(gpu, theirs.uuid, tmp_path)
    assert rc == 2 and "no CUDA-capable device is detected" in err and "cannot open its capability" in err, err
    assert gpu.memory_of(str(os.getpid())).get(theirs.uuid, {}).get("peak", 0) == 0  # it allocated nothing


def test_the_files_of_a_state_kept_from_before_are_made_when_the_gpu_is_opened(tmp_path):
    gpu = SimGpuBackend(tmp_path, "n1", gpus=["H100-80GB"])
    a = gpu.create_instance(0, "1g.10gb", 0)
    driver = DriverFiles.for_node(tmp_path, "n1")
    shutil.rmtree(driver.root)  # a state file written before the driver files existed
    SimGpuBackend(tmp_path, "n1", gpus=["H100-80GB"])  # the agent opens it at its start
    assert [p.exists() for p in driver.mig_devices(0, a.gi_id, 0)] == [True, True]


def test_the_caps_major_and_every_mig_minor_are_read_from_the_drivers_files():
    driver = DriverFiles(RECORDED)
    assert driver.caps_major() == 508
    minors = driver.all_mig_minors()
    assert 1 not in minors and 2 not in minors  # config and monitor are every MIG user's
    assert minors == [3, 4, 5, 6, 439, 440, 441, 918, 919, 920, 4321, 4322]
    with pytest.raises(CapError, match="no character device 'nvidia-caps'"):
        parse_char_major("Character devices:\n195 nvidia\n\nBlock devices:\n508 nvidia-caps\n")
    assert parse_char_major(devices_text(61)) == 61
    with pytest.raises(CapError, match="mig-minors line 2"):
        parse_mig_minors("config 1\ngpu0/gi0/access three\n")
    assert parse_mig_minors(mig_minors_text(1))["gpu0/gi14/ci7/access"] == mig_minor(0, 14, 7)


def test_the_simulated_nodes_are_device_nodes_that_no_driver_serves(tmp_path):
    gpu = SimGpuBackend(tmp_path, "n1", gpus=["H100-80GB"])
    a = gpu.create_instance(0, "1g.10gb", 0)
    driver = DriverFiles.for_node(tmp_path, "n1")
    assert driver.caps_major() == SIM_CAPS_MAJOR
    for node in driver.mig_devices(0, a.gi_id, 0):
        st = os.stat(node)
        if os.geteuid() == 0:
            assert stat.S_ISCHR(st.st_mode) and os.major(st.st_rdev) == SIM_CAPS_MAJOR
            assert os.minor(st.st_rdev) == int(node.name.removeprefix("nvidia-cap"))
            with pytest.raises(OSError) as exc:
                os.open(node, os.O_RDONLY)
            assert exc.value.errno == errno.ENXIO  # the kernel let it through; no driver
    open_mig_device(driver, 0, a.gi_id, 0, a.uuid)  # reached: ENXIO is no refusal


def test_a_node_the_device_cgroup_denies_is_refused(tmp_path, monkeypatch):
    gpu = SimGpuBackend(tmp_path, "n1", gpus=["H100-80GB"])
    a = gpu.create_instance(0, "1g.10gb", 0)
    driver = DriverFiles.for_node(tmp_path, "n1")

    def denied(path, flags, *args):
        raise PermissionError(errno.EPERM, os.strerror(errno.EPERM), str(path))
    monkeypatch.setattr(simcaps.os, "open", denied)
    with pytest.raises(CapError, match="no CUDA-capable device .*cannot open its capability .*Operation not permitted"):
        open_mig_device(driver, 0, a.gi_id, 0, a.uuid)


def test_without_mknod_the_nodes_are_regular_files_and_the_log_says_so(tmp_path, monkeypatch, caplog):
    def refused(*args, **kwargs):
        raise PermissionError(errno.EPERM, os.strerror(errno.EPERM))
    monkeypatch.setattr(simcaps.os, "mknod", refused)
    gpu = SimGpuBackend(tmp_path, "n1", gpus=["H100-80GB"])
    a = gpu.create_instance(0, "1g.10gb", 0)
    driver = DriverFiles.for_node(tmp_path, "n1")
    assert all(n.is_file() for n in driver.mig_devices(0, a.gi_id, 0))
    assert "regular files, which no device cgroup fences" in caplog.text
    open_mig_device(driver, 0, a.gi_id, 0, a.uuid)


@pytest.mark.skipif(os.geteuid() != 0, reason="making a device node needs CAP_MKNOD")
def test_a_regular_file_an_older_simulated_driver_left_becomes_a_device_node(tmp_path):
    gpu = SimGpuBackend(tmp_path, "n1", gpus=["H100-80GB"])
    driver = DriverFiles.for_node(tmp_path, "n1")
    a = gpu.create_instance(0, "1g.10gb", 0)
    gpu.destroy_instance(0, a.gi_id)
    old = driver.device(mig_minor(0, a.gi_id))
    old.unlink()
    old.write_text("simulated nvidia-cap\n")  # as the simulated driver wrote them before
    gpu.create_instance(0, "1g.10gb", 0)
    assert old.is_char_device() and os.minor(old.stat().st_rdev) == mig_minor(0, a.gi_id)
