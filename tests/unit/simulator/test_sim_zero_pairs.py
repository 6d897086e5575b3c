"""A truth pair speed of 0 (the pair cannot run together): the newest job fails, the pair is
learned, nothing divides by zero."""
from __future__ import annotations

import json
import math

import pytest

from simulator import PairTable, SimConfig, SimJobSpec, WorkloadProfile, simulate, summary

G = 1 << 30
PROFILES = [WorkloadProfile(0, "a/x/bs1/amp0", 4 * G, 30.0, 1.0, 0),
            WorkloadProfile(1, "b/x/bs1/amp0", 4 * G, 30.0, 1.0, 0)]


def table(a_beside_b: float, b_beside_a: float) -> PairTable:
    return PairTable(PROFILES, {(0, 0): 0.9, (1, 1): 0.9, (0, 1): a_beside_b, (1, 0): b_beside_a})


def run(policy, pairs, **kw):
    specs = [SimJobSpec(0, 0.0, 1000.0, 1, 0, 4 * G, 4 * G),
             SimJobSpec(1, 10.0, 100.0, 1, 1, 4 * G, 4 * G)]
    res = simulate(SimConfig(policy=policy, gpus=1, known_history=True, **kw), specs, PROFILES, pairs)
    return res, {j.id: j for j in res.jobs}


def assert_finite(summ: dict) -> None:
    json.dumps(summ, allow_nan=False)  # raises on inf or NaN anywhere
    assert all(not isinstance(v, float) or math.isfinite(v) for v in summ.values())


def test_colocate_packs_a_zero_pair_once_then_learns_it():
    res, j = run("colocate", table(0.0, 0.0))
    s = summary(res)
    # job 1 joins at 10, both stuck at speed 0; it fails oom_startup_s (60 s) after it began
    assert j[1].pair_failures == 1 and s["pair_failures"] == 1 and s["jobs_failed"] == 1
    assert j[0].end == pytest.approx(1060.0)  # job 0 lost the 60 s it was stuck
    assert j[1].first_start == 10.0 and j[1].end == pytest.approx(1160.0)  # alone after job 0
    assert s["avoided_pairs"] == 1 and s["jobs"] == 2 and s["jobs_unfinished"] == 0
    assert s["jobs_restarted"] == 1
    assert_finite(s)


def test_a_pair_known_at_zero_is_refused():
    res, j = run("colocate", table(0.0, 0.0), pair_knowledge="oracle")
    assert j[1].pair_failures == 0 and not j[1].shared_with
    assert j[1].first_start == 1000.0


def test_only_the_newcomer_stuck_the_senior_runs_on():
    res, j = run("colocate", table(0.9, 0.0))  # the newcomer cannot progress beside job 0
    assert j[1].pair_failures == 1
    # job 0 ran at 0.9 for the 60 s job 1 was there: 6 s more than alone
    assert j[0].end == pytest.approx(1006.0)
    assert_finite(summary(res))


@pytest.mark.parametrize("policy", ["shard-fixed", "lucid-like"])
def test_policies_blind_to_pairs_run_the_failed_job_alone_next(policy):
    res, j = run(policy, table(0.0, 0.0))
    assert j[1].pair_failures == 1 and j[1].end is not None
    assert j[1].remembered >= 80 * G  # alone next time, as after an out-of-memory beside a job
    assert_finite(summary(res))
