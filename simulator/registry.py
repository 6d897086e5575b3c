"""Each policy name (``SimConfig.policy``, ``--policy``) and the :class:`~.policy.Policy` it runs."""
from __future__ import annotations

from typing import TYPE_CHECKING

from simulator.baselines import ExclusivePolicy, LucidPolicy, ShardFixedPolicy
from simulator.colocate import ColocatePolicy
from simulator.mig_policies import MigBySizePolicy, MigInOrderPolicy, MigStaticPolicy
from simulator.policy import Policy

if TYPE_CHECKING:
    from simulator.engine import Simulator

POLICY_TYPES: dict[str, type[Policy]] = {p.name: p for p in (
    ExclusivePolicy, ShardFixedPolicy, MigStaticPolicy, LucidPolicy, ColocatePolicy,
    MigBySizePolicy, MigInOrderPolicy)}


def make_policy(sim: "Simulator") -> Policy:
    """The policy object ``sim.cfg.policy`` names, bound to ``sim``."""
    name = sim.cfg.policy
    try:
        return POLICY_TYPES[name](sim)
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; choose one of {', '.join(POLICY_TYPES)}") from None
