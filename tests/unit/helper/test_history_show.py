"""`gpupack history show [FP]`: each run with a stored curve prints its summary."""
from __future__ import annotations

import json

from click.testing import CliRunner

from store.curves import RunCurves
from packer.curves import CurvePoint, RunCurve
from store.db import RunRecord, Store
from slurm_plugin.cli.history_cmd import history

GIB = 1024**3


def make_db(tmp_path):
    db = tmp_path / "gpupack.db"
    config = tmp_path / "gpupack.toml"
    config.write_text(f'[paths]\ndatabase = "{db}"\n')
    store = Store(db)
    store.record_run(RunRecord(job_id=1, fingerprint="fpa", peak_mem_bytes=5 * GIB, mean_util_pct=50.0,
                               ended_at=1000.0, started_at=900.0))
    store.record_run(RunRecord(job_id=2, fingerprint="fpa", peak_mem_bytes=4 * GIB, ended_at=2000.0, started_at=1900.0))
    store.record_run(RunRecord(job_id=3, fingerprint="fpb", peak_mem_bytes=GIB, ended_at=3000.0, started_at=2900.0))

    def curve(job_id, started_at, ended_at, state, n):
        pts = tuple(CurvePoint(10.0 * i, (1 + i) * GIB, (1 + i) * GIB) for i in range(n))
        return RunCurve(job_id=job_id, fingerprint="fpa", started_at=started_at, ended_at=ended_at, end_state=state,
                        node="node1", gpu_index=0, isolation="shard:2", shards=2, capacity_bytes=10.0 * GIB,
                        capacity_label="shard:2", samples=n * 3, points=pts)

    RunCurves(store).save(curve(1, 900.0, 1000.0, "COMPLETED", 5))
    RunCurves(store).save(curve(4, 500.0, 600.0, "PENDING", 3))  # requeued: a curve, no history row
    store.close()
    return config


def test_show_fp_prints_each_runs_curve_summary(tmp_path):
    config = make_db(tmp_path)
    out = CliRunner().invoke(history, ["show", "fpa", "--config", str(config)])
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert "fpb" not in out.output
    i = next(n for n, line in enumerate(lines) if line.split()[0] == "1")
    assert lines[i + 1].split() == ["curve:", "5", "points", "of", "15", "samples,", "peak", "5.00", "GiB", "over",
                                    "40", "s,", "completed"]
    j = next(n for n, line in enumerate(lines) if line.split()[0] == "2")
    assert not lines[j + 1].strip().startswith("curve:")  # run 2 has no curve
    assert "runs of fpa that are not history" in out.output
    assert lines[-1].split()[:5] == ["4", "curve:", "3", "points", "of"] and "requeued (PENDING)" in lines[-1]


def test_show_json_carries_the_curve_summary(tmp_path):
    config = make_db(tmp_path)
    out = CliRunner().invoke(history, ["show", "fpa", "--json", "--config", str(config)])
    doc = json.loads(out.output)
    by_job = {d["job_id"]: d for d in doc}
    assert by_job[1]["curve"]["points"] == 5 and by_job[1]["curve"]["peak_mem_bytes"] == 5 * GIB
    assert by_job[1]["curve"]["duration_s"] == 40.0 and by_job[2]["curve"] is None
    assert by_job[4]["history"] is False and by_job[4]["curve"]["end_state"] == "PENDING"
    everything = json.loads(CliRunner().invoke(history, ["show", "--json", "--config", str(config)]).output)
    assert sorted(d["job_id"] for d in everything) == [1, 2, 3]  # without FP: the history, no curve-only runs


def test_show_says_which_runs_are_lower_bounds_and_why(tmp_path):
    config = make_db(tmp_path)
    store = Store(tmp_path / "gpupack.db")
    store.record_run(RunRecord(job_id=5, fingerprint="fpa", peak_mem_bytes=6 * GIB, ended_at=4000.0, started_at=3900.0,
                               lower_bound=True, end_state="cancelled"))
    store.close()
    out = CliRunner().invoke(history, ["show", "fpa", "--config", str(config)])
    line = next(x for x in out.output.splitlines() if x.split()[:1] == ["5"])
    assert ">=" in line and line.endswith("lower bound (cancelled)")
    assert next(x for x in out.output.splitlines() if x.split()[:1] == ["2"]).endswith("measured")
    (five,) = [d for d in json.loads(CliRunner().invoke(history, ["show", "fpa", "--json", "--config", str(config)]).output)
               if d["job_id"] == 5]
    assert five["lower_bound"] is True and five["end_state"] == "cancelled"
