"""Every policy name runs one Policy object behind the one interface the loop calls."""
from __future__ import annotations

import pytest

from simulator import POLICIES, PairTable, SimConfig, Simulator, WorkloadProfile
from simulator.policy import Policy
from simulator.registry import POLICY_TYPES

G = 1 << 30
PROFILES = [WorkloadProfile(0, "light/a", 4 * G, 30.0, 100.0, 0)]
PAIRS = PairTable(PROFILES, {(0, 0): 0.9})


def test_each_policy_name_has_one_policy_type():
    assert sorted(POLICY_TYPES) == sorted(POLICIES)
    for name, cls in POLICY_TYPES.items():
        assert issubclass(cls, Policy) and cls.name == name
        assert cls.place is not Policy.place, f"{name} has no start rule"


@pytest.mark.parametrize("policy", POLICIES)
def test_the_simulator_runs_the_policy_its_config_names(policy):
    sim = Simulator(SimConfig(policy=policy, gpus=2), [], PROFILES, PAIRS)
    assert type(sim.policy) is POLICY_TYPES[policy]
    # what the backfill may do with a pack, and MIG heads' reservations, follow the policy
    assert sim.policy.packs == (policy in ("shard-fixed", "lucid-like", "colocate"))
    assert sim.policy.uses_mig == policy.startswith("mig")
