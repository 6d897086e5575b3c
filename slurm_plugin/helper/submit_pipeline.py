"""One submission's decision as a list of stages, run in order (as a scheduler framework runs
its plugins): each takes the decision so far and the job's :class:`SubmitContext` and returns
a decision. No stage calls another; what one needs from the store it reads through the
context, once.

The stages (docs/architecture.md, "2. Decide", names them in this order):

- ``admit``: exclusive or packed, and how many shares (``SuiteRules.admit``:
  ``packer.decision.decide``);
- ``history-levels``: a candidate with no measured run of its exact script decided again from
  the nearest looser level of its identity with history (``submit_levels.history_levels``);
- ``util-cap``: a pack refused where every shared GPU with room would pass the cap on a GPU's
  summed utilisation (``submit_levels.UtilCap``);
- ``load-aware``: a pack only where it pays given the queue
  (``submit_admission.LoadAwareAdmission``, the replay's rule);
- ``avoid-partners``: a pack kept off the nodes of jobs it must never share a GPU with and of
  stale agents, or a whole GPU when that leaves it nowhere to go;
- ``comment-writable``: a job whose site AdminComment cannot travel back in the answer is
  left untouched.

The submit path holds slurmctld's job write lock: a stage that raises leaves the decision
before it standing (fail open), and the answer goes back.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from packer.decision import Decision
from slurm_plugin.helper.cluster_view import packing_exclusion
from slurm_plugin.helper.submit_admission import LoadAwareAdmission
from slurm_plugin.helper.submit_context import SubmitContext
from slurm_plugin.helper.submit_levels import UtilCap, history_levels
from slurm_plugin.slurm.gres import expand_hostlist

log = logging.getLogger(__name__)

#: what a submission starts from: nothing decided (the ``admit`` stage decides)
UNDECIDED = Decision("untouched", "undecided")


@dataclass(frozen=True)
class Stage:
    name: str
    run: Callable[[Decision, SubmitContext], Decision]


def admit(decision: Decision, ctx: SubmitContext) -> Decision:
    """Exclusive or packed, and how many shares, from the job's request and history and the
    whole GPUs idle now."""
    return ctx.rules.admit(ctx.request, ctx.estimate, ctx.cluster, ctx.fingerprint, ctx.remembered_shards)


def avoid_partners(decision: Decision, ctx: SubmitContext) -> Decision:
    """Keep a job about to be packed off the nodes of jobs it must not share a GPU with, and
    off nodes whose agent's figures are stale (nothing is packed where it cannot be watched).

    When that leaves it nowhere to go (every GPU node, or a node the user required with
    `-w`, which Slurm would refuse to exclude), it keeps a whole GPU instead."""
    if decision.verdict != "packed" or not decision.fingerprint:
        return decision
    snapshot = ctx.snapshot
    if snapshot is None:
        return decision
    nodes = packing_exclusion(snapshot, decision.fingerprint, ctx.partners)
    required = ctx.required_nodes
    if nodes and required and set(nodes) & set(expand_hostlist(required)):
        nodes = None
    if nodes is None:
        return replace(decision, verdict="exclusive", reason="avoid-pair", shards=None)
    return replace(decision, avoid_nodes=tuple(sorted(nodes))) if nodes else decision


def comment_writable(decision: Decision, ctx: SubmitContext) -> Decision:
    """The answer is one line of tab-separated fields: a comment the site set with a tab or
    newline cannot travel back in it, and a packed or exclusive job needs its record."""
    if ctx.comment_writable or decision.reason == "no-gpu":
        return decision
    return Decision("untouched", "site-comment-unwritable", fingerprint=decision.fingerprint)


def submit_stages() -> tuple[Stage, ...]:
    """The stages of one submission, in the order they run (fresh ``util-cap`` and
    ``load-aware`` stages: they keep the view's residents between submissions)."""
    return (
        Stage("admit", admit),
        Stage("history-levels", history_levels),
        Stage("util-cap", UtilCap()),
        Stage("load-aware", LoadAwareAdmission()),
        Stage("avoid-partners", avoid_partners),
        Stage("comment-writable", comment_writable),
    )


def run_stages(stages: Sequence[Stage], ctx: SubmitContext) -> Decision:
    """The decision the stages leave, each given the one before it (a stage that raises is
    skipped: the decision before it stands)."""
    decision = UNDECIDED
    for stage in stages:
        try:
            decision = stage.run(decision, ctx)
        except Exception:  # a stage must never fail the submission
            log.exception("submit stage %s failed; the decision before it stands", stage.name)
    return decision
