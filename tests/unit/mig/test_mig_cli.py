"""`gpupack mig` through click's CliRunner."""
from __future__ import annotations

import json

import click
import pytest
from click.testing import CliRunner

from slurm_plugin.cli.mig_cmd import mig


@pytest.fixture
def run():
    runner = CliRunner()

    def _run(*args, **kw):
        return runner.invoke(mig, list(args), catch_exceptions=False, **kw)

    return _run


def test_every_command_has_help_text(run):
    assert mig.help
    for name, cmd in mig.commands.items():
        assert cmd.help, name
        res = run(name, "-h")
        assert res.exit_code == 0 and "Usage:" in res.output
    assert set(mig.commands) == {"catalog", "ladder", "configs", "plan", "simulate", "show", "apply", "assert", "bench"}


def test_catalog(run):
    res = run("catalog", "--json")
    models = {c["model"] for c in json.loads(res.output)["models"]}
    assert "H100-80GB" in models and "A30-24GB" in models
    one = json.loads(run("catalog", "--gpu", "H100-80GB", "--json").output)
    p = next(p for p in one["profiles"] if p["name"] == "1g.20gb")
    assert [pl["start"] for pl in p["placements"]] == [0, 2, 4, 6]
    assert "{0,2,4,6}:2" in run("catalog", "--gpu", "H100-80GB").output


def test_configs_json(run):
    res = run("configs", "--gpu", "A100-SXM4-40GB", "--profiles",
              "1g.5gb,2g.10gb,3g.20gb,4g.20gb,7g.40gb", "--json")
    doc = json.loads(res.output)
    assert doc["gpu"] == "A100-SXM4-40GB" and len(doc["configs"]) == 19
    assert [{"profile": "7g.40gb", "start": 0}] in doc["configs"]


def test_plan_json(run):
    res = run("plan", "--gpu", "H100-80GB", "--state", "3g.40gb@4,1g.10gb@0",
              "--request", "1g.10gb", "--json")
    assert json.loads(res.output) == {
        "profile": "1g.10gb", "start": 1, "reachable_full_configs": 5,
        "alternatives": [{"start": 1, "reachable_full_configs": 5},
                         {"start": 2, "reachable_full_configs": 3},
                         {"start": 3, "reachable_full_configs": 3}]}
    full = json.loads(run("plan", "--gpu", "H100-80GB", "--state", "7g.80gb@0", "--request",
                          "1g.10gb", "--merge-split", "--busy", "7g.80gb@0", "--json").output)
    assert full["start"] is None and full["alternatives"] == []
    assert full["merge_split"]["feasible"] is False
    ff = json.loads(run("plan", "--gpu", "H100-80GB", "--request", "1g.10gb", "--policy",
                        "first-fit", "--json").output)
    assert ff["start"] == 0


def test_simulate_json(run, tmp_path):
    ev = tmp_path / "ev.txt"
    ev.write_text("alloc a 1g.10gb\nalloc b 1g.10gb\nalloc c 4g.40gb\nfree c\nfree a\n")
    res = run("simulate", "--gpu", "H100-80GB", "--events", str(ev), "--policy", "first-fit",
              "--json")
    assert json.loads(res.output) == {"requests": 3, "rejected": 1, "rejected_fragmentation": 1}
    for policy in ("fsm", "random", "demand"):
        res = run("simulate", "--gpu", "H100-80GB", "--profiles", "1g.10gb,4g.40gb",
                  "--events", str(ev), "--policy", policy, "--json")
        assert json.loads(res.output)["requests"] == 3


def test_errors_are_one_line_that_names_the_fix(run, tmp_path):
    res = run("plan", "--gpu", "H100-80GB", "--request", "9g.1gb")
    assert res.exit_code == 1
    assert res.output.startswith("Error: profile '9g.1gb' is not in the H100-80GB catalogue")
    res = run("configs", "--gpu", "V100")
    assert res.exit_code == 1 and "known models" in res.output
    res = run("plan", "--gpu", "H100-80GB", "--state", "3g.40gb@4,1g.10gb@5", "--request", "1g.10gb")
    assert res.exit_code == 1 and "overlaps 3g.40gb@4" in res.output
    ev = tmp_path / "bad.txt"
    ev.write_text("alloc a\n")
    res = run("simulate", "--gpu", "H100-80GB", "--events", str(ev))
    assert res.exit_code == 1 and "line 1" in res.output


def test_show_and_apply_on_simulated_gpus(run, tmp_path):
    base = ["--backend", "sim", "--state-dir", str(tmp_path), "--node", "n1"]
    res = run("show", *base, "--sim-gpus", "H100-80GB,A30-24GB", "--json")
    gpus = json.loads(res.output)["gpus"]
    assert [g["model"] for g in gpus] == ["H100-80GB", "A30-24GB"]
    res = run("apply", *base, "--gpu-index", "0", "--config", "3g.40gb@4,2g.20gb@0", "--json")
    assert json.loads(res.output)["status"] == "success"
    shown = json.loads(run("show", *base, "--json").output)["gpus"][0]["instances"]
    assert {(i["profile"], i["start"]) for i in shown} == {("3g.40gb", 4), ("2g.20gb", 0)}
    assert all(i["uuid"].startswith("MIG-") for i in shown)
    res = run("apply", *base, "--gpu-index", "0", "--config", "7g.80gb@0", "--dry-run")
    assert res.exit_code == 0 and "planned" in res.output and "destroy 3g.40gb@4" in res.output
    res = run("apply", *base, "--gpu-index", "0", "--config", "7g.80gb@1")
    assert res.exit_code == 1 and "valid starts are {0}" in res.output
    res = run("show", "--backend", "sim", "--state-dir", str(tmp_path), "--node", "missing")
    assert res.exit_code == 1 and "--sim-gpus" in res.output


def test_bench_json(run):
    res = run("bench", "--allocs", "150", "--streams", "1", "--json")
    doc = json.loads(res.output)
    assert doc["precompute"]["H100-80GB"]["seconds"] < 1.0
    assert doc["decision_latency"]["mean_us"] < 1000
    for per in doc["fragmentation"]["mixes"].values():
        assert set(per) == {"fsm", "demand", "first-fit", "random"}
        assert per["first-fit"]["ratio_to_first_fit"] in (1.0, 0.0)


def test_root_cli_registers_mig():
    from slurm_plugin.cli import main

    res = CliRunner().invoke(main, ["mig", "-h"])
    assert res.exit_code == 0 and "configs" in res.output
    assert isinstance(mig, click.Group)
