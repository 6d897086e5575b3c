"""MIG placement on mixes drawn from the Philly virtual clusters' job sizes."""
from __future__ import annotations

import pytest

from simulator.mig_mixes import run, trace_mixes
from simulator.workload import default_data_dir


@pytest.fixture
def data():
    d = default_data_dir()
    if d is None:
        pytest.skip("needs shared/data/traces or $GPUPACK_DATA_DIR (CI has it)")
    return d


def test_mixes_are_the_virtual_clusters_sizes(data):
    names = ["1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb"]
    gib = {"1g.10gb": 10.0, "2g.20gb": 20.0, "3g.40gb": 40.0, "7g.80gb": 80.0}
    mixes = trace_mixes(data, names, gib, draws=2)
    assert len(mixes) == 30 and all(sum(w) > 0 for w in mixes.values())
    vcs = {m.split("/")[0] for m in mixes}
    assert any(mixes[f"{vc}/0"] != mixes[f"{vc}/1"] for vc in vcs)  # each draw: the team's own workloads
    assert any(w[-1] > 0 for w in mixes.values())  # multi-GPU jobs ask for the whole GPU


def test_demand_rejects_no_more_than_fsm_on_any_trace_mix(data):
    res = run(data, draws=1, streams=1)
    assert len(res) == 15
    assert [m for m, r in res.items() if r["demand"] > r["fsm"]] == []
