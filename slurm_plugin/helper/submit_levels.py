"""Two stages of the submit decision (``submit_pipeline``): history found at a looser level
of the job's identity, and the cap on a GPU's summed utilisation.

- ``history-levels`` (:func:`history_levels`, right after ``admit``): a candidate with no
  measured run of its exact script is decided again from the nearest looser level with
  history (``packer.history_levels``: variant, then command; that level's headroom; a level
  demoted for the workload is passed over). Reads the store only for such jobs: two indexed
  look-ups per looser level;
- ``util-cap`` (:class:`UtilCap`): a pack is refused (``reason=util-cap``, a whole GPU) when
  no whole GPU is idle and every shared GPU of the published view with room for the job's
  shares would pass ``[packer] max_gpu_util_pct`` with it (0, the default: no cap; the rule is
  ``packer.util_cap``, the replay's co-runner rule's too; each job's utilisation from its
  history, read once per published view).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Protocol

from packer.config import PackerConfig
from packer.decision import ClusterView, Decision, Estimate, decide
from packer.history_levels import LevelRecord, levels_in_use, nearest_level
from packer.request import Candidate, JobFacts, NotCandidate
from packer.rules import SuiteRules
from packer.util_cap import NO_CAP, within_util_cap
from packer.workload_identity import EXACT, WorkloadKeys
from store.db import Store
from store.levels import LevelStore
from slurm_plugin.helper.cluster_view import Snapshot

log = logging.getLogger(__name__)

UTIL_CAP = "util-cap"  # the reason a pack refused by the cap gets


class StageContext(Protocol):
    """What these stages read of one submission (``submit_context.SubmitContext`` is one)."""

    facts: JobFacts
    request: Candidate | NotCandidate
    config: PackerConfig
    rules: SuiteRules
    cluster: ClusterView
    now: float
    store: Store
    fingerprint: str | None
    estimate: Estimate | None
    remembered_shards: int | None

    @property
    def snapshot(self) -> Snapshot | None: ...

    @property
    def workload_keys(self) -> WorkloadKeys: ...


def history_levels(decision: Decision, ctx: StageContext) -> Decision:
    """The decision from the nearest looser level with history, for a candidate whose exact
    script has no measured run (the decision as it was otherwise)."""
    config = ctx.config
    if (not isinstance(ctx.request, Candidate) or config.loosest_history_level == EXACT
            or (ctx.estimate is not None and ctx.estimate.measured)):
        return decision
    keys = ctx.workload_keys
    records = LevelStore(ctx.store).records(keys, levels_in_use(config), config.history_window,
                                            since=config.history_since(ctx.now))
    choice = nearest_level([LevelRecord(EXACT, keys.exact, ctx.estimate), *records], config)
    for level, why in choice.passed_over:
        log.info("%s's %s level passed over: %s", ctx.facts.name, level, why)
    if choice.level is None or choice.level == EXACT:
        return decision
    # the admission rule itself (``SuiteRules.admit`` delegates to it unchanged), on the level's estimate
    return decide(ctx.request, choice.estimate, ctx.cluster, config, fingerprint=ctx.fingerprint,
                  remembered_shards=ctx.remembered_shards)


@dataclass
class _Utils:
    taken_at: float
    of: dict[str, float | None]  # fingerprint -> mean utilisation from its history


class UtilCap:
    """The ``util-cap`` stage; keeps the residents' utilisations of one published view."""

    name = "util-cap"

    def __init__(self) -> None:
        self._utils: _Utils | None = None

    def __call__(self, decision: Decision, ctx: StageContext) -> Decision:
        if decision.verdict != "packed" or ctx.cluster.idle_gpus > 0 or ctx.config.max_gpu_util_pct == NO_CAP:
            return decision
        snapshot = ctx.snapshot
        if snapshot is None or snapshot.queue is None:
            return decision
        config = ctx.config
        shards = decision.shards or 1
        room = [g for g in snapshot.queue.shared if sum(j.shards for j in g.jobs) + shards <= config.shares_per_gpu]
        if not room:
            return decision  # no co-runner it could join is known: Slurm queues it for free shares
        utils = self._utils_of(ctx, snapshot)
        newcomer = decision.estimate.mean_util_pct if decision.estimate is not None else None
        cap = config.max_gpu_util_pct
        if any(within_util_cap(newcomer, [utils.get(j.fingerprint) if j.fingerprint else None for j in g.jobs], cap)
               for g in room):
            return decision
        log.info("%s: every shared GPU with room for it would pass the utilisation cap (%.0f%%)", ctx.facts.name, cap)
        return replace(decision, verdict="exclusive", reason=UTIL_CAP, shards=None, avoid_nodes=())

    def _utils_of(self, ctx: StageContext, snapshot: Snapshot) -> dict[str, float | None]:
        held = self._utils
        if held is None or held.taken_at != snapshot.taken_at:
            assert snapshot.queue is not None
            fps = {j.fingerprint for g in snapshot.queue.shared for j in g.jobs if j.fingerprint}
            config = ctx.config
            found = ctx.store.estimates(fps, config.history_window, since=config.history_since(ctx.now))
            held = self._utils = _Utils(snapshot.taken_at, {fp: e.mean_util_pct for fp, e in found.items()})
        return held.of
