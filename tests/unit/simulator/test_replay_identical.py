"""The replay gives the same answers as at caba947 (before the incremental decisions of
issue 37) under the settings they were recorded with (`--settings replay-legacy`): a fixed slice of the shipped Philly trace replayed under every policy, with the
shipped pair table and with a `simulate stress-pairs` table that has pairs that cannot run
together (speed 0), compared field by field with golden `--json` outputs recorded at that
commit (the wall time left out).

Regenerate the goldens (only when an answer is meant to change, saying why in the commit):
``GPUPACK_REGEN_GOLDENS=1 python3 -m pytest tests/unit/simulator/test_replay_identical.py``.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_plugin.cli.simulate_cmd import POLICY_NAMES, simulate

GOLDEN = Path(__file__).resolve().parents[2] / "data" / "replay_golden"
REGEN = os.environ.get("GPUPACK_REGEN_GOLDENS") == "1"
WALL_FIELDS = ("sim_wall_s",)  # the only fields that depend on the machine

# the first 1,500 jobs on 40 H100s: a queue hours long, packs, requeues, pair failures; under
# the settings the goldens were recorded with (the replay's own, before issue 34: `gpupack
# simulate` decides by the shipped etc/gpupack.toml unless told this preset)
BASE = ["--gpu-model", "H100-80GB", "--gpus", "40", "--jobs", "1500", "--json", "--settings", "replay-legacy"]

# (name, extra flags, tables): every policy with the predictor, with both tables; colocate's
# other pair knowledge with both; colocate without the predictor and with three jobs a GPU
# with the shipped table (the stress table there runs long on this slice)
TABLES = ("shipped", "stress")
CASES: list[tuple[str, list[str], tuple[str, ...]]] = [
    (p, ["--policy", p, "--predictor", "on"], TABLES) for p in POLICY_NAMES
] + [
    ("colocate-observed", ["--policy", "colocate", "--predictor", "on", "--pair-knowledge", "observed"], TABLES),
    ("colocate-nopred", ["--policy", "colocate"], ("shipped",)),
    ("colocate-3pergpu", ["--policy", "colocate", "--predictor", "on", "--max-jobs-per-gpu", "3"], ("shipped",)),
]
RUNS = [(name, flags, table) for name, flags, tables in CASES for table in tables]


@pytest.fixture(scope="module")
def stress_table(tmp_path_factory) -> str:
    """A stress table drawn with a fixed seed: mean 0.7, a tail, 5 % of pairs at speed 0."""
    out = tmp_path_factory.mktemp("stress") / "stress.csv"
    res = CliRunner().invoke(simulate, ["stress-pairs", "--mean", "0.7", "--tail-frac", "0.1",
                                        "--tail-max", "0.3", "--zero-frac", "0.05", "--seed", "0",
                                        "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert any(line.endswith(",0") or line.endswith(",0.0") or line.endswith(",0.0000")
               for line in out.read_text().splitlines()), "the stress table has no zero-speed pair"
    return str(out)


def _replay(args: list[str]) -> dict:
    res = CliRunner().invoke(simulate, args, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    for key in WALL_FIELDS:
        out.pop(key)
    return out


@pytest.mark.parametrize("name,flags,table", RUNS, ids=[f"{n}-{t}" for n, _f, t in RUNS])
def test_replay_matches_golden(name: str, flags: list[str], table: str, stress_table: str) -> None:
    args = BASE + flags + (["--truth", stress_table] if table == "stress" else [])
    got = _replay(args)
    if table == "stress":
        got["truth"] = "stress.csv"  # the table's path is a temporary folder's
    # the trace's path is where the checkout lies (CI checks out elsewhere): its name is what is compared
    got["trace_load"]["source"] = Path(got["trace_load"]["source"]).name
    path = GOLDEN / f"{name}.{table}.json"
    if REGEN:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    want = json.loads(path.read_text())
    # every field the golden run had is the same; fields added since are new measures of the same
    # replay (e.g. GPU-hours lost to failed attempts), and the silent jobs they model are off by default
    diff = {k: (want.get(k), got.get(k)) for k in sorted(want) if want.get(k) != got.get(k)}
    assert not diff, f"{name} / {table}: fields differ (golden, now): {diff}"
    assert got.get("oom_missed", 0) == 0 and got.get("oom_retried_on_output", 0) == 0
