"""Workload loading (Philly, sacct), each policy on a few hundred Philly jobs, the CLI."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from slurm_plugin.cli.simulate_cmd import POLICY_NAMES, simulate
from simulator import SimConfig, load_workload, run_policy
from simulator.traces import load_sacct
from simulator.workload import default_data_dir

needs_data = pytest.mark.skipif(default_data_dir() is None,
                                reason="shared/data/traces not found (set GPUPACK_DATA_DIR)")

SACCT = """JobID|User|JobName|Submit|Start|End|Elapsed|AllocTRES|State
10|alice|train|2024-01-01T00:00:00|2024-01-01T00:00:05|2024-01-01T01:00:05|01:00:00|cpu=4,gres/gpu=1,mem=8G|COMPLETED
10.batch|alice|batch|2024-01-01T00:00:00|2024-01-01T00:00:05|2024-01-01T01:00:05|01:00:00|cpu=4,gres/gpu=1|COMPLETED
11|bob|big|2024-01-01T00:10:00|2024-01-01T00:10:00|2024-01-02T00:10:00|1-00:00:00|cpu=8,gres/gpu:a100=2,gres/gpu=2|COMPLETED
12|carol|cpu|2024-01-01T00:20:00|2024-01-01T00:20:00|2024-01-01T00:30:00|00:10:00|cpu=8|COMPLETED
13|dave|never|2024-01-01T00:30:00|Unknown|Unknown|00:00:00|gres/gpu=1|CANCELLED
"""


def test_sacct_export_is_read(tmp_path):
    f = tmp_path / "jobs.txt"
    f.write_text(SACCT)
    jobs = load_sacct(f)
    assert [(j.submit, j.duration, j.gpus) for j in jobs] == [(0.0, 3600.0, 1), (600.0, 86400.0, 2)]
    assert jobs[0].workload == "alice/train"


SACCT_GPU = """JobID|User|JobName|Submit|Start|End|Elapsed|AllocTRES|State|TRESUsageInMax|TRESUsageInAve
20|alice|train|2024-01-01T00:00:00|2024-01-01T00:00:05|2024-01-01T01:00:05|01:00:00|gres/gpu=1|COMPLETED||
20.batch|||2024-01-01T00:00:00|2024-01-01T00:00:05|2024-01-01T01:00:05|01:00:00||COMPLETED|cpu=00:01:00,gres/gpumem=6144M,gres/gpuutil=35|gres/gpumem=5000M,gres/gpuutil=31
20.0|||2024-01-01T00:00:00|2024-01-01T00:00:05|2024-01-01T01:00:05|01:00:00||COMPLETED|gres/gpumem=7G,gres/gpuutil=60|gres/gpuutil=28
21|bob|eval|2024-01-01T00:01:00|2024-01-01T00:01:00|2024-01-01T00:31:00|00:30:00|gres/gpu=1|COMPLETED||
"""


def test_sacct_gpu_figures_come_from_the_steps(tmp_path):
    f = tmp_path / "jobs.txt"
    f.write_text(SACCT_GPU)
    a, b = load_sacct(f)
    assert a.mem_bytes == 7 << 30 and a.util_pct == 31.0  # largest peak; largest step average
    assert b.mem_bytes is None and b.util_pct is None


@needs_data
def test_sacct_own_figures_give_own_profiles_and_are_counted(tmp_path):
    f = tmp_path / "jobs.txt"
    f.write_text(SACCT_GPU)
    specs, profiles, pairs = load_workload(f"sacct:{f}")
    own = [s for s in specs if s.own]
    assert len(own) == 1
    p = profiles[own[0].profile]
    assert p.key == "own/8GiB/util30" and p.mem_bytes == 8 << 30 and p.util_pct == 30.0
    assert not pairs.is_measured(own[0].profile, 0)  # predicted like any unseen pair
    assert 0 < pairs.speed(own[0].profile, 0) <= 1.0
    summ, _ = run_policy(SimConfig(policy="colocate", gpus=1), specs, profiles, pairs)
    assert summ["jobs_with_own_figures"] == 1 and summ["jobs"] == 2


@needs_data  # the replay gives each job a measured profile from shared/data
def test_sacct_without_needed_columns_names_them(tmp_path):
    f = tmp_path / "bad.txt"
    f.write_text("JobID|Submit\n1|2024-01-01T00:00:00\n")
    r = CliRunner().invoke(simulate, ["--policy", "exclusive", "--trace", f"sacct:{f}", "--gpus", "2"])
    assert r.exit_code == 1
    assert "Error:" in r.output and "AllocTRES" in r.output and "sacct -P" in r.output


@needs_data
def test_sacct_replay_through_the_cli(tmp_path):
    f = tmp_path / "jobs.txt"
    f.write_text(SACCT)
    r = CliRunner().invoke(simulate, ["--policy", "colocate", "--trace", f"sacct:{f}",
                                      "--gpus", "2", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    # the 2-GPU job waits for the 1-hour job on a 2-GPU cluster
    assert out["jobs"] == 2 and out["makespan_s"] == pytest.approx(3600 + 86400)


@needs_data
@pytest.mark.parametrize("policy", POLICY_NAMES)
def test_each_policy_on_a_few_hundred_philly_jobs(policy):
    specs, profiles, pairs = load_workload(jobs=300, growing_fraction=0.1)
    summ, _ = run_policy(SimConfig(policy=policy, gpus=24, predictor=policy != "exclusive"),
                         specs, profiles, pairs)
    assert summ["jobs"] + summ["jobs_skipped"] == 300
    assert summ["jobs_unfinished"] == 0
    assert summ["makespan_s"] > 0 and summ["avg_jct_s"] >= summ["avg_queue_s"]
    assert 0 < summ["gpu_util"] <= summ["gpu_alloc"] <= 1.0
    assert summ["pair_bound_ok"] is True


@needs_data
def test_cli_json_has_the_promised_keys():
    r = CliRunner().invoke(simulate, ["--policy", "colocate", "--trace", "philly", "--gpus", "16",
                                      "--gpu-model", "A100-80GB", "--jobs", "200", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    for key in ("policy", "jobs", "makespan_s", "avg_jct_s", "p95_jct_s", "gpu_util",
                "avg_queue_s", "p95_queue_s", "gpu_mem_util", "jobs_preempted", "oom_restarts",
                "mig_reconfigurations", "p95_slowdown"):
        assert key in out
    # every job ran: completed, or left FAILED out of memory once its retries were spent
    assert out["policy"] == "colocate" and out["jobs"] + out["oom_jobs_left_failed"] == 200


@needs_data
def test_compare_writes_a_markdown_report(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "rep"
    r = CliRunner().invoke(simulate, ["compare", "--policies", "exclusive,colocate,mig-in-order+pred",
                                      "--jobs", "200", "--gpus", "16", "--out", str(out)])
    assert r.exit_code == 0, r.output
    text = (out / "report.md").read_text()
    assert "| policy |" in text and "colocate" in text and "vs exclusive" in text
    for png in ("jct_cdf.png", "util_over_time.png", "jct_bars.png"):
        assert (out / png).stat().st_size > 1000
        assert f"]({png})" in text
    assert len(json.loads((out / "results.json").read_text())["results"]) == 3


@needs_data
def test_scaling_command_writes_a_table(tmp_path):
    out = tmp_path / "rep"
    r = CliRunner().invoke(simulate, ["scaling", "--policies", "exclusive,colocate+pred",
                                      "--jobs-list", "100,200", "--gpus-list", "8,16",
                                      "--gpus", "16", "--jobs", "200", "--out", str(out)])
    assert r.exit_code == 0, r.output
    rows = json.loads((out / "scaling.json").read_text())
    assert {(r["policy"], r["jobs"], r["gpus"]) for r in rows} == {
        (p, n, g) for p in ("exclusive", "colocate+pred") for n, g in ((100, 16), (200, 16), (200, 8))}
    assert "| policy | jobs | GPUs |" in r.output


def test_compare_rejects_unknown_policy():
    r = CliRunner().invoke(simulate, ["compare", "--policies", "exclusive,nope"])
    assert r.exit_code == 2 and "nope" in r.output


def test_every_command_has_help_and_policy_is_required():
    runner = CliRunner()
    for args in (["-h"], ["compare", "--help"]):
        r = runner.invoke(simulate, args)
        assert r.exit_code == 0 and "Usage" in r.output and len(r.output) > 200
    r = runner.invoke(simulate, [])
    assert r.exit_code == 2 and "--policy" in r.output


@needs_data
def test_cli_grow_and_regroup_switches_are_reported():
    args = ["--policy", "colocate", "--predictor", "on", "--gpus", "12", "--gpu-model", "H100-80GB",
            "--jobs", "300", "--json"]
    off = json.loads(CliRunner().invoke(simulate, args).output)
    r = CliRunner().invoke(simulate, args + ["--grow-preempt", "on", "--regroup", "on",
                                             "--movable-fraction", "0.5"])
    assert r.exit_code == 0, r.output
    on = json.loads(r.output)
    for key in ("grow_preemptions", "grow_restarts_in_place", "regroup_moves", "regroup_plans",
                "regroup_lost_work_s", "multi_gpu_avg_queue_s"):
        assert key in on and key in off
    assert off["grow_preempt"] == off["regroup"] == "off" and off["regroup_moves"] == 0
    assert on["grow_preempt"] == on["regroup"] == "on" and on["label"] == "colocate+pred+grow+regroup"
    assert on["grow_restarts_in_place"] > 0  # growing jobs on this trace restart in place
    r = CliRunner().invoke(simulate, ["--policy", "exclusive", "--regroup", "on", "--jobs", "10"])
    assert r.exit_code == 1 and "colocate" in r.output


@needs_data
def test_compare_names_the_switches(tmp_path):
    r = CliRunner().invoke(simulate, ["compare", "--policies", "colocate+pred,colocate+pred+grow+regroup",
                                      "--jobs", "300", "--gpus", "12", "--gpu-model", "H100-80GB",
                                      "--no-plots", "--out", str(tmp_path), "--json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output.splitlines()[-1])
    assert [x["label"] for x in rows] == ["colocate+pred", "colocate+pred+grow+regroup"]
    assert "colocate+pred+grow+regroup" in (tmp_path / "report.md").read_text()
    r = CliRunner().invoke(simulate, ["compare", "--policies", "colocate+grow+nope"])
    assert r.exit_code == 2 and "nope" in r.output
