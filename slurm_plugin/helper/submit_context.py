"""What one submission's stages read: the job, and what the store and the published cluster
view say of it, each read at most once.

The submit path holds slurmctld's job write lock, so nothing here is read that a stage does
not ask for: the job's history is read when the context is made (every candidate's first
stage needs it), the rest on first use and then kept (a job that is not packed never asks for
its partners or its runs' length; a packed one asks once, whichever stages read them).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import cached_property
from typing import Protocol

from packer.config import PackerConfig
from packer.decision import ClusterView, Estimate
from packer.fingerprint import fingerprint
from packer.identity_memo import Identity, IdentityMemo
from packer.request import Candidate, JobFacts, NotCandidate
from packer.workload_identity import WorkloadKeys, workload_keys
from packer.rules import SuiteRules
from store.db import Store
from slurm_plugin.helper.cluster_view import Snapshot


class SubmitView(Protocol):
    """The cluster as the submit side sees it (``view_file.PublishedView`` is one)."""

    def view(self) -> ClusterView: ...

    def snapshot(self) -> Snapshot | None: ...

    def reserve_whole_gpu(self) -> None: ...


@dataclass
class SubmitContext:
    """One job's facts and what the store and the view say of it (read once, see the module)."""

    facts: JobFacts
    request: Candidate | NotCandidate
    text: dict[str, str]  # the shim's fields, decoded (not the script)
    config: PackerConfig
    rules: SuiteRules
    cluster: ClusterView  # whole GPUs idle now, less the reservations since the view
    now: float
    store: Store = field(repr=False)
    source: SubmitView = field(repr=False)
    fingerprint: str | None = None
    estimate: Estimate | None = None
    remembered_shards: int | None = None
    identity: Identity | None = field(default=None, repr=False)  # a candidate's, from the memo

    @classmethod
    def read(cls, facts: JobFacts, request: Candidate | NotCandidate, text: dict[str, str],
             config: PackerConfig, rules: SuiteRules, store: Store, source: SubmitView,
             memo: IdentityMemo | None = None) -> "SubmitContext":
        """The context of one submission: a candidate's fingerprint and history read now
        (``memo``: the identities of scripts seen lately, kept between submissions)."""
        now = time.time()
        fp = estimate = remembered = identity = None
        if isinstance(request, Candidate):
            identity = (memo.of(facts.user, facts.name, facts.script) if memo is not None
                        else Identity(facts.user, facts.name, fingerprint(facts.user, facts.name, facts.script)))
            fp = identity.fingerprint
            estimate, remembered = store.history(fp, config.history_window, since=config.history_since(now))
        return cls(facts, request, text, config, rules, source.view(), now, store, source, fp, estimate, remembered,
                   identity)

    @cached_property
    def workload_keys(self) -> WorkloadKeys:
        """The keys of each level of this job's identity (``packer.workload_identity``)."""
        if self.identity is not None:
            return self.identity.keys(self.facts.script)
        return workload_keys(self.facts.user, self.facts.name, self.facts.script)

    @cached_property
    def snapshot(self) -> Snapshot | None:
        """The published view, if fresh enough to be trusted (None: not)."""
        return self.source.snapshot()

    @cached_property
    def partners(self) -> set[str]:
        """The workloads this job must never share a GPU with (pairs learned in the store)."""
        return self.store.pairs.avoided_with(self.fingerprint) if self.fingerprint else set()

    @cached_property
    def mean_run_s(self) -> float | None:
        """The mean length of this workload's recent runs (None: none known)."""
        if not self.fingerprint:
            return None
        config = self.config
        return self.store.mean_run_s(self.fingerprint, config.history_window, since=config.history_since(self.now))

    @property
    def site_comment(self) -> str | None:
        return self.text.get("admin_comment")

    @property
    def comment_writable(self) -> bool:
        """Whether the site's AdminComment can travel back in the answer's one line (no tab
        or newline in it)."""
        comment = self.site_comment
        return not (comment and any(c in comment for c in "\t\n\r"))

    @property
    def required_nodes(self) -> str | None:
        """The nodes the user required (`-w`, a Slurm hostlist)."""
        return self.text.get("req_nodes")
