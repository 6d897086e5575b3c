"""Each policy name (``SimConfig.policy``, ``--policy``) and the :class:`~.policy.Policy` it runs."""
from __future__ import annotations

from simulator.baselines import ExclusivePolicy, LucidPolicy, ShardFixedPolicy
from simulator.colocate import ColocatePolicy
from simulator.mig_policies import MigBySizePolicy, MigInOrderPolicy, MigStaticPolicy
from simulator.policy import Policy

POLICY_TYPES: dict[str, type[Policy]] = {p.name: p for p in (
    ExclusivePolicy, ShardFixedPolicy, MigStaticPolicy, LucidPolicy, ColocatePolicy,
    MigBySizePolicy, MigInOrderPolicy)}


def policy_type(name: str) -> type[Policy]:
    """The policy class ``name`` (``SimConfig.policy``) names."""
    try:
        return POLICY_TYPES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; choose one of {', '.join(POLICY_TYPES)}") from None

