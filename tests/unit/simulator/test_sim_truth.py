"""The truth apart from knowledge (--truth), stress tables, and the sweep over loads and
seeds."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from slurm_plugin.cli.simulate_cmd import simulate
from simulator import WorkloadError, load_workload
from simulator.stress import StressSpec, describe, stress_pairs
from simulator.truth import read_pair_table
from simulator.workload import default_data_dir

needs_data = pytest.mark.skipif(default_data_dir() is None,
                                reason="shared/data/traces not found (set GPUPACK_DATA_DIR)")
KEYS = ["ResNet18/CIFAR-10/bs32/amp0", "ResNet18/CIFAR-10/bs64/amp0", "VGG/ImageNet/bs32/amp1"]


def table(tmp_path, text: str):
    f = tmp_path / "t.csv"
    f.write_text("workload,beside,speed\n" + text)
    return f


def test_ordered_pairs_by_model_name_with_a_key_overriding_its_model(tmp_path):
    f = table(tmp_path, "resnet18,VGG,0.5\nResNet18/CIFAR-10/bs64/amp0,VGG,0\nVGG,ResNet18,0.8\n")
    got = read_pair_table(f, KEYS)
    assert got == {(0, 2): 0.5, (1, 2): 0.0, (2, 0): 0.8, (2, 1): 0.8}


@pytest.mark.parametrize("rows, column, allowed", [
    ("ResNet18,VGG,1.5\n", "speed", "[0, 1]"),
    ("ResNet18,VGG,nan\n", "speed", "[0, 1]"),
    ("ResNet99,VGG,0.5\n", "workload", "a workload of workload_profiles.csv"),
    ("ResNet18,VGG,0.5\nResNet18,VGG,0.6\n", "beside", "already given at line 2"),
])
def test_a_bad_pair_row_is_refused(tmp_path, rows, column, allowed):
    with pytest.raises(WorkloadError) as err:
        read_pair_table(table(tmp_path, rows), KEYS)
    assert f"column {column}" in str(err.value) and allowed in str(err.value)


def test_a_lucid_row_with_an_infinite_batch_size_is_a_bad_row(tmp_path):
    f = tmp_path / "l.csv"
    f.write_text("model1,dataset1,batchsize1,amp1,speed1,model2,dataset2,batchsize2,amp2,speed2\n"
                 "ResNet18,CIFAR-10,inf,0,0.9,VGG,ImageNet,32,1,0.8\n")
    with pytest.raises(WorkloadError, match=":2: column batchsize1.*whole numbers"):
        read_pair_table(f, KEYS)


def test_stress_shares_that_are_nan_are_refused():
    for kw in ({"tail_frac": float("nan")}, {"zero_frac": float("nan")}):
        with pytest.raises(ValueError, match="--zero-frac"):
            StressSpec(**kw)


def test_a_table_with_neither_layout_names_both(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text("a,b\n1,2\n")
    with pytest.raises(WorkloadError, match="workload,beside,speed"):
        read_pair_table(f, KEYS)


def test_stress_table_has_the_asked_shape_and_is_reproducible():
    keys = [f"m{i}/d/bs1/amp0" for i in range(60)]
    spec = StressSpec(mean=0.7, spread=0.1, tail_frac=0.1, tail_max=0.3, zero_frac=0.05, seed=3)
    a, b = stress_pairs(keys, spec), stress_pairs(keys, spec)
    assert a == b and len(a) == 60 * 60
    d = describe(list(a.values()))
    assert 0.03 < d["zero"] < 0.07  # ~5 % of the pairs cannot run together
    assert 0.12 < d["below_0.5"] < 0.25  # the tail and the zeros, far below the body
    body = [s for s in a.values() if s > 0.3]
    assert abs(sum(body) / len(body) - 0.7) < 0.02
    assert all(a[(x, y)] == 0.0 for (y, x), s in a.items() if s == 0.0)  # zero both ways
    with pytest.raises(ValueError, match="--tail-max"):
        StressSpec(mean=0.5, tail_max=0.6)


@needs_data
def test_truth_sets_what_the_replay_slows_by_not_what_the_policies_know(tmp_path):
    out = tmp_path / "stress.csv"
    r = CliRunner().invoke(simulate, ["stress-pairs", "--mean", "0.7", "--zero-frac", "0.05",
                                      "-o", str(out)])
    assert r.exit_code == 0, r.output
    info = json.loads(r.output)
    assert info["stress"]["pairs"] == 66 * 66 and info["stress"]["mean"] < info["measured"]["mean"]
    _, _, shipped = load_workload(jobs=10)
    _, _, stressed = load_workload(jobs=10, truth=out)
    assert stressed.speed(0, 1) != shipped.speed(0, 1)
    args = ["--policy", "colocate", "--predictor", "on", "--jobs", "400", "--gpus", "8", "--json"]
    base = json.loads(CliRunner().invoke(simulate, args).output)
    r = CliRunner().invoke(simulate, args + ["--truth", str(out)])
    assert r.exit_code == 0, r.output
    hard = json.loads(r.output)
    assert hard["truth"] == str(out)
    # the policy learns the stress pairs only by running them: its predictions miss more
    # (about 1.9x under the load-aware admission, which packs pairs the 10 % bound refused)
    assert hard["pred_mae"] > 1.5 * base["pred_mae"]
    assert hard["pair_failures"] > 0 and hard["jobs_failed"] > 0 and base["pair_failures"] == 0
    # the oracle knows the truth table: exact predictions, and no pair at 0 is ever packed
    oracle = json.loads(CliRunner().invoke(simulate, args + ["--truth", str(out),
                                                             "--pair-knowledge", "oracle"]).output)
    assert oracle["pred_mae"] == 0.0 and oracle["pair_failures"] == 0 and oracle["jobs_shared"] > 0


@needs_data
def test_compare_sweeps_loads_and_seeds_with_spread_and_a_plot(tmp_path):
    pytest.importorskip("matplotlib")
    r = CliRunner().invoke(simulate, ["compare", "--policies", "exclusive,colocate+pred", "--jobs",
                                      "300", "--offered-loads", "0.5,2", "--seeds", "0,1",
                                      "--out", str(tmp_path), "--json"])
    assert r.exit_code == 0, r.output
    rows = [x for x in json.loads(r.output.splitlines()[-1]) if "ratio" not in x]
    assert len({x["gpus"] for x in rows}) == 2 and {x["seeds"] for x in rows} == {2}
    for key in ("avg_jct_s", "p95_jct_s", "p50_slowdown", "p95_slowdown", "jobs_failed",
                "jobs_restarted", "lost_gpu_h"):
        assert all(key in x and key + "_ci" in x and x[key + "_min"] <= x[key] <= x[key + "_max"]
                   for x in rows)
    small, big = sorted({x["gpus"] for x in rows})
    assert small < big  # offered load 2 is a smaller cluster than load 0.5
    text = (tmp_path / "sweep.md").read_text()
    assert "offered load 2 per GPU" in text and "slowdown p95" in text and "sweep_jct.png" in text
    assert (tmp_path / "sweep_jct.png").stat().st_size > 5000
