"""Activity per MIG instance through DCGM's dcgmi: its output as recorded (tests/unit/gpus/data,
see its README), DCGM's entity ids mapped to NVML's GPU instance ids, and every way it fails
said with a reason, never read as a 0."""
from __future__ import annotations

import stat
import sys
import time
from pathlib import Path

import pytest

from gpus.dcgm.dcgmi import DcgmiActivity
from gpus.dcgm.output import DcgmiOutputError, GiEntity, parse_dmon_line, parse_hierarchy
from gpus.sim.backend import SimGpuBackend
from gpus.sim.dcgmi import STAND_IN
from mig.errors import CountersUnavailableError

DATA = Path(__file__).parent / "data"


def wait_for(what, timeout=60.0):
    """``what()``'s first true answer: a wait on the event, not a time limit (the stand-in
    dcgmi is a process of its own; two test legs at once on 2 cores took over 10 s)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = what()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError("timed out")


def test_the_recorded_hierarchy_maps_dcgm_entities_to_nvml_gpu_instances():
    found = parse_hierarchy((DATA / "dcgmi_discovery_c.txt").read_text())
    assert [(e.gpu_index, e.gi_id, e.entity_id) for e in found] == [(0, 0, 0), (0, 1, 100), (0, 2, 200),
                                                                     (1, 0, 10), (1, 3, 310)]
    assert found[3] == GiEntity(1, 0, 10, "GPU-1a7b269f-8591-c6a5-a274-6f4f1ad9f6b3")


def test_the_recorded_dmon_rows_and_a_blank_value():
    rows = [r for line in (DATA / "dcgmi_dmon_gract.txt").read_text().splitlines()
            if (r := parse_dmon_line(line)) is not None]
    assert [(r.group, r.entity_id, r.value) for r in rows[:3]] == [("GPU-I", 0, 0.682), ("GPU-I", 100, None),
                                                                   ("GPU-I", 310, 0.047)]
    assert len(rows) == 6


@pytest.mark.parametrize("text", ["", "hello\n", "Error: Cannot get hierarchy information from the hostengine."
                                  " Return: Feature not supported\n",
                                  "| Instance Hierarchy |\n| -> I 0/1          | GPU Instance (EntityID: 3) |\n"])
def test_a_hierarchy_that_is_not_one_is_refused(text):
    with pytest.raises(DcgmiOutputError):
        parse_hierarchy(text)


@pytest.mark.parametrize("line", ["GPU-I 3         abc", "GPU-I 3         57.0",
                                  "Error setting watches. Result: -36: Profiling is not supported", "3 0.5"])
def test_a_dmon_line_that_is_not_a_row_is_refused_not_read_as_zero(line):
    with pytest.raises(DcgmiOutputError):
        parse_dmon_line(line)


def test_dcgm_not_installed_says_so():
    with pytest.raises(CountersUnavailableError, match="DCGM is not installed.*nv-hostengine") as err:
        DcgmiActivity("/nonexistent/dcgmi").activity(0, [1])
    assert err.value.reason == "no-dcgm"


def test_no_host_engine_says_so(tmp_path):
    with pytest.raises(CountersUnavailableError, match="Unable to connect to host engine") as err:
        DcgmiActivity(f"{STAND_IN} --sim-dir {tmp_path} --node n1").activity(0, [1])
    assert err.value.reason == "dcgm-hostengine"


def fake_dcgmi(tmp_path: Path, dmon: str) -> str:
    """A dcgmi that lists the recorded hierarchy and answers dmon with ``dmon``."""
    script = tmp_path / "dcgmi"
    script.write_text(f"#!{sys.executable}\nimport sys\n"
                      f"if sys.argv[1] == 'discovery':\n"
                      f"    print(open({str(DATA / 'dcgmi_discovery_c.txt')!r}).read())\n"
                      f"else:\n    print({dmon!r}, flush=True)\n    sys.exit(1 if 'Error' in {dmon!r} else 0)\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


def test_profiling_not_supported_says_so_and_is_not_retried_at_once(tmp_path):
    dcgm = DcgmiActivity(fake_dcgmi(tmp_path, "Error setting watches. Result: -36: Profiling is not "
                                              "supported for this group of GPUs or GPU"))
    assert dcgm.activity(1, [0, 3]) == {}  # the monitor starts; no row yet

    def refused():
        try:
            dcgm.activity(1, [0, 3])
        except CountersUnavailableError as exc:
            return exc
        return None

    err = wait_for(refused)
    assert err.reason == "dcgm-profiling" and "Profiling is not supported" in str(err)
    assert dcgm._stream is None and refused() is not None  # still refused, no new monitor


def test_garbage_from_dmon_is_an_error_not_a_zero(tmp_path):
    dcgm = DcgmiActivity(fake_dcgmi(tmp_path, "#Entity  GRACT\nGPU-I 10  lots\n"))
    dcgm.activity(1, [0])

    def refused():
        try:
            return dcgm.activity(1, [0]) and None
        except CountersUnavailableError as exc:
            return exc

    err = wait_for(refused)
    assert err.reason == "dcgm-output" and "not a number" in str(err)


def test_the_stand_in_reads_the_simulated_gpu_per_instance_with_dcgm_numbers(tmp_path):
    sim = SimGpuBackend(tmp_path, "n1", gpus=["H100-80GB", "H100-80GB"], mig_enabled=True)
    sim.create_instance(0, "3g.40gb", 4)
    sim.create_instance(1, "1g.10gb", 0)
    busy = sim.create_instance(1, "2g.20gb", 2)
    idle = sim.list_instances(1)[0]
    sim.start_process(busy.uuid, "job7", busy_pct=80.0)
    dcgm = DcgmiActivity(f"{STAND_IN} --sim-dir {tmp_path} --node n1", period_ms=100)
    try:
        entities = dcgm.discover()
        # DCGM numbers its entities itself: not NVML's GPU instance ids
        assert {k: e.entity_id for k, e in entities.items()} == {
            (0, sim.list_instances(0)[0].gi_id): 0, (1, idle.gi_id): 1, (1, busy.gi_id): 2}
        got = wait_for(lambda: dcgm.activity(1, [idle.gi_id, busy.gi_id]) or None)
        while len(got) < 2:
            got |= dcgm.activity(1, [idle.gi_id, busy.gi_id])
        # busy: 80 % of its instance, but the simulated workload pauses now and then (15 % of it)
        assert got[busy.gi_id].gr_active > 0.05 and got[idle.gi_id].gr_active == 0.0
        seen = got[busy.gi_id].at
        again = wait_for(lambda: dcgm.activity(1, [busy.gi_id]))
        assert again[busy.gi_id].at > seen  # a value is handed out once
    finally:
        dcgm.close()


def test_an_instance_destroyed_on_another_gpu_does_not_blind_the_node(tmp_path):
    """The monitor watches every GPU instance DCGM listed on the node. A layout change on GPU 0
    destroys one, and DCGM numbers the rest anew, while GPU 1's instances (what the agent asks
    about) stay as they were: the monitor, started with the ids listed before, is refused
    ("entity not found"). The hierarchy is read again and a monitor of it starts at once, so
    GPU 1's jobs keep their readings (seen live: none for 60 s)."""
    sim = SimGpuBackend(tmp_path, "n1", gpus=["H100-80GB", "H100-80GB"], mig_enabled=True)
    gone = sim.create_instance(0, "3g.40gb", 4)
    busy = sim.create_instance(1, "2g.20gb", 2)
    sim.start_process(busy.uuid, "job7", busy_pct=80.0)
    dcgm = DcgmiActivity(f"{STAND_IN} --sim-dir {tmp_path} --node n1", period_ms=100)

    def reading():
        try:
            return dcgm.activity(1, [busy.gi_id])
        except CountersUnavailableError as exc:
            assert "not found" in str(exc)  # the stale monitor's refusal, if the adapter gives up
            return None

    try:
        before = {k: e.entity_id for k, e in dcgm.discover().items()}
        sim.destroy_instance(0, gone.gi_id)
        got = wait_for(reading)
        assert got[busy.gi_id].gr_active > 0.0 and dcgm._failed is None
        after = {k: e.entity_id for k, e in dcgm.entities.items()}
        assert after == {(1, busy.gi_id): 0} and before[(1, busy.gi_id)] == 1  # renumbered
    finally:
        dcgm.close()


def test_ids_that_name_other_instances_after_a_layout_change_start_a_new_monitor(tmp_path):
    """DCGM numbers the node's GPU instances anew after a layout change: here GPU 0 loses its
    idle instance and GPU 1 gains one, so the same ids (0, 1, 2) name other instances. The
    monitor started before reads the instances it had: the busy job must not be read through
    its new id from it (seen live: a busy job read as 0 % for 14 samples)."""
    sim = SimGpuBackend(tmp_path, "n1", gpus=["H100-80GB", "H100-80GB"], mig_enabled=True)
    idle = sim.create_instance(0, "1g.10gb", 0)
    busy = sim.create_instance(0, "2g.20gb", 2)
    sim.create_instance(1, "1g.10gb", 0)
    sim.start_process(busy.uuid, "job7", busy_pct=80.0)
    dcgm = DcgmiActivity(f"{STAND_IN} --sim-dir {tmp_path} --node n1", period_ms=100)

    def busy_reading():
        got = dcgm.activity(0, [busy.gi_id])
        return got and got[busy.gi_id].gr_active > 0.0 and got[busy.gi_id]

    try:
        wait_for(busy_reading)
        before = {k: e.entity_id for k, e in dcgm.entities.items()}
        sim.destroy_instance(0, idle.gi_id)
        sim.create_instance(1, "1g.10gb", 1)
        dcgm.discover()  # as the adapter does every REDISCOVER_S while NVML and DCGM differ
        wait_for(busy_reading)
        after = {k: e.entity_id for k, e in dcgm.entities.items()}
        assert sorted(before.values()) == sorted(after.values()) == [0, 1, 2]
        assert after[(0, busy.gi_id)] != before[(0, busy.gi_id)]
    finally:
        dcgm.close()


def test_the_stand_in_refuses_what_dcgmi_refuses(tmp_path, capsys):
    from gpus.sim import dcgmi

    sim = SimGpuBackend(tmp_path, "n1", gpus=["H100-80GB"], mig_enabled=False)
    assert dcgmi.main(["--sim-dir", str(tmp_path), "--node", "n1", "discovery", "-c"]) == 0
    assert parse_hierarchy(capsys.readouterr().out) == []  # no MIG: no GPU instance
    assert dcgmi.main(["--sim-dir", str(tmp_path), "--node", "n1", "dmon", "-e", "1001", "-i", "i:0"]) == 1
    assert "not found" in capsys.readouterr().out
    sim.set_mig_mode(0, True)
    sim.create_instance(0, "1g.10gb", 0)
    assert dcgmi.main(["--sim-dir", str(tmp_path), "--node", "n1", "dmon", "-e", "1002", "-i", "i:0"]) == 1
    assert "1001" in capsys.readouterr().out
    assert dcgmi.main(["--sim-dir", str(tmp_path), "--node", "n1", "dmon", "-e", "1001", "-i", "i:0",
                       "-c", "1"]) == 0
    rows = [r for line in capsys.readouterr().out.splitlines() if (r := parse_dmon_line(line))]
    assert [(r.group, r.entity_id, r.value) for r in rows] == [("GPU-I", 0, 0.0)]
