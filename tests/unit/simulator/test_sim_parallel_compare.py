"""`simulate compare` runs its cells in parallel processes and writes the same report."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from simulator.parallel import Cell, run_cells
from slurm_plugin.cli.simulate_cmd import simulate

ARGS = ["--jobs", "400", "--gpus", "20", "--gpu-model", "H100-80GB", "--no-plots",
        "--policies", "exclusive,shard-fixed,colocate+pred"]


def _results(path, key: str) -> list[dict]:
    rows = json.loads(path.read_text())[key]
    for r in rows:
        r.pop("sim_wall_s", None)
    return rows


def test_compare_in_parallel_gives_the_same_results(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    for out, n in ((one, "1"), (two, "2")):
        res = CliRunner().invoke(simulate, ["compare", *ARGS, "--out", str(out), "--jobs-in-parallel", n])
        assert res.exit_code == 0, res.output
        assert "replays" in res.output  # the progress bar's label (stderr)
    assert _results(one / "results.json", "results") == _results(two / "results.json", "results")


def test_sweep_in_parallel_gives_the_same_runs_in_the_same_order(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    for out, n in ((one, "1"), (two, "2")):
        res = CliRunner().invoke(simulate, ["compare", *ARGS, "--seeds", "0,1", "--gpus-list", "20,30",
                                            "--out", str(out), "--jobs-in-parallel", n])
        assert res.exit_code == 0, res.output
    a, b = _results(one / "sweep.json", "runs"), _results(two / "sweep.json", "runs")
    assert [(r["gpus"], r["seed"], r["label"]) for r in a] == [(r["gpus"], r["seed"], r["label"]) for r in b]
    assert a == b
    assert len(a) == 2 * 2 * 3


def test_run_cells_reports_each_cell_once_and_refuses_no_workers():
    from simulator import SimConfig, load_workload

    wl = {0: load_workload("philly", jobs=50, gpu_memory_bytes=80 << 30)}
    cells = [Cell(SimConfig(policy=p, gpus=8, gpu_model="H100-80GB")) for p in ("exclusive", "shard-fixed")]
    seen: list[int] = []
    out = run_cells(cells, wl, workers=2, done=lambda i, r: seen.append(i))
    assert sorted(seen) == [0, 1] and [r.summary["policy"] for r in out] == ["exclusive", "shard-fixed"]
    with pytest.raises(ValueError):
        run_cells(cells, wl, workers=0)
