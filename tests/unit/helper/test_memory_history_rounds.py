"""The memory watch takes the workload's earlier runs (stored curves) as its forecast's prior:
a job whose earlier runs peaked above its share is warned within its first samples."""
from __future__ import annotations

from store.curves import RunCurves
from packer.curves import CurvePoint, RunCurve
from slurm_plugin.slurm.fake import FAKE_EPOCH
from tests.unit.helper.rounds_support import GIB, make, running


def _store_earlier_run(helper, *, fp: str, peak_gib: float, end_state: str = "COMPLETED", shards: int = 2) -> None:
    """An earlier run of `fp` (job 5, on shard:`shards`): 2 GiB rising to `peak_gib` over 60 s."""
    pts = tuple(CurvePoint(float(t), int((2 + (peak_gib - 2) * t / 60) * GIB), int((2 + (peak_gib - 2) * t / 60) * GIB))
                for t in range(0, 61, 5))
    RunCurves(helper.store).save(RunCurve(
        job_id=5, fingerprint=fp, started_at=FAKE_EPOCH - 1000, ended_at=FAKE_EPOCH - 900, end_state=end_state,
        node="node1", gpu_index=0, isolation=f"shard:{shards}", shards=shards, capacity_bytes=shards * 10.0 * GIB,
        capacity_label=f"shard:{shards}", samples=61, points=pts))


def _first_memory_event(fake, helper, samples, monitor, rounds: int = 3):
    """Job 9 (fingerprint "kv", shard:1 = 10 GiB) growing like its earlier run, 2 GiB + 0.2 GiB/s;
    the round (0-based) of the first memory event, or None within `rounds` rounds."""
    running(fake, 9, fp="kv", shards=1)
    for t in range(rounds):
        samples.put(9, FAKE_EPOCH + t, mem=int((2 + 0.2 * t) * GIB), started_at=FAKE_EPOCH, isolation="shard:1")
        monitor.tick()
        if [e for e in helper.store.events() if e.kind in ("restart-memory", "keep-memory")]:
            return t
    return None


def test_a_job_whose_earlier_runs_peaked_above_its_share_is_warned_within_its_first_samples(tmp_path):
    fake, helper, samples, monitor = make(tmp_path, memory_horizon_s=120)
    _store_earlier_run(helper, fp="kv", peak_gib=14)  # it went to 14 GiB on shard:2 (20 GiB)
    assert _first_memory_event(fake, helper, samples, monitor) == 0  # its first sample
    (event,) = [e for e in helper.store.events() if e.kind == "restart-memory"]
    assert event.data["to"] == "shard:2"  # the size the earlier run needed
    assert fake.jobs[9].state == "PENDING"


def test_without_history_or_with_earlier_runs_below_the_share_the_first_samples_are_not_warned(tmp_path):
    fake, helper, samples, monitor = make(tmp_path, memory_horizon_s=120)
    assert _first_memory_event(fake, helper, samples, monitor) is None  # no history: today's forecaster
    fake, helper, samples, monitor = make(tmp_path / "below", memory_horizon_s=120)
    _store_earlier_run(helper, fp="kv", peak_gib=9)  # its earlier run stayed under 10 GiB
    assert _first_memory_event(fake, helper, samples, monitor) is None
    fake, helper, samples, monitor = make(tmp_path / "other", memory_horizon_s=120)
    _store_earlier_run(helper, fp="another-workload", peak_gib=14)
    assert _first_memory_event(fake, helper, samples, monitor) is None


def test_an_earlier_run_that_ran_out_of_memory_in_this_share_warns_though_its_curve_stops_below(tmp_path):
    fake, helper, samples, monitor = make(tmp_path, memory_horizon_s=120)
    _store_earlier_run(helper, fp="kv", peak_gib=9.8, end_state="OUT_OF_MEMORY", shards=1)
    assert _first_memory_event(fake, helper, samples, monitor) == 0


def test_an_earlier_run_whose_allocator_needed_less_than_nvml_saw_warns_on_its_need_only(tmp_path):
    from store.db import RunRecord

    fake, helper, samples, monitor = make(tmp_path, memory_horizon_s=120)
    _store_earlier_run(helper, fp="kv", peak_gib=14)  # NVML saw 14 GiB: the allocator's cache
    helper.store.record_run(RunRecord(job_id=5, fingerprint="kv", peak_mem_bytes=14 * GIB, need_bytes=5 * GIB,
                                      started_at=FAKE_EPOCH - 1000, ended_at=FAKE_EPOCH - 900))
    assert _first_memory_event(fake, helper, samples, monitor) is None  # it needed 5 GiB: 10 GiB holds it
