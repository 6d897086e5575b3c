"""Answer one submission: decode what the shim sent, run the submit pipeline
(``submit_pipeline``: its stages, in order), say what to apply.

This is the glue between the wire format and the decision; it never raises to the
server loop: any surprise becomes a pass-through answer with its reason.
"""
from __future__ import annotations

import logging
import math
import os
import pwd
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable

from packer.comment import merge
from packer.config import PackerConfig
from packer.decision import Decision, packed_type
from packer.identity_memo import IdentityMemo
from packer.request import Candidate, JobFacts, classify, shard_request
from packer.rules import SuiteRules
from store.db import Store
from slurm_plugin.helper.cluster_view import Snapshot
from slurm_plugin.helper.submit_context import SubmitContext, SubmitView
from slurm_plugin.helper.submit_pipeline import Stage, run_stages, submit_stages
from slurm_plugin.metrics.submit import SubmitMetrics

log = logging.getLogger(__name__)

SLOW_DECISION_MS = 5.0  # a decision slower than this is logged as a warning (it eats the shim's budget)


@dataclass
class SubmitAnswer:
    verdict: str
    reason: str
    mode: str
    admin_comment: str = ""  # new AdminComment to set ("" = leave as is)
    rewrite: str = ""  # new tres_per_node ("" = leave the request as is)
    clear_field: str = ""  # fields to clear with the rewrite, comma-separated (the one that held
    #                        the GPU request; --mem-per-gpu's and --cpus-per-gpu's, made job-level)
    fingerprint: str = ""
    exclude: str = ""  # nodes to add to the job's excluded nodes (pair avoidance)
    min_mem_per_node: int | None = None  # MB: what --mem-per-gpu meant for the job's one GPU
    min_cpus: int | None = None  # what --cpus-per-gpu meant for the job's one GPU ...
    cpus_per_task: int | None = None  # ... split over its tasks (classify checked it splits evenly)

    def to_wire(self) -> dict[str, str]:
        return {
            "status": "ok",
            "verdict": self.verdict,
            "reason": self.reason,
            "mode": self.mode,
            "admin_comment": self.admin_comment,
            "rewrite": self.rewrite,
            "clear": self.clear_field,
            "fp": self.fingerprint,
            "exclude": self.exclude,
            "min_mem_per_node": "" if self.min_mem_per_node is None else str(self.min_mem_per_node),
            "min_cpus": "" if self.min_cpus is None else str(self.min_cpus),
            "cpus_per_task": "" if self.cpus_per_task is None else str(self.cpus_per_task),
        }


@lru_cache(maxsize=4096)
def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _nothing() -> None:
    pass


def _decoded(fields: dict[str, bytes]) -> dict[str, str]:
    """Every non-empty field but the script, as text (one pass: this runs per submission)."""
    return {k: v.decode("utf-8", "replace") for k, v in fields.items() if v and k != "script"}


_NUMBER_FIELDS = ("min_nodes", "max_nodes", "num_tasks", "shared", "ntasks_per_node", "requeue", "het_job_offset",
                  "min_mem_per_node", "min_mem_per_cpu", "cpus_per_task", "min_cpus")


def _number(text: str | None) -> int | None:
    """A whole, finite, non-negative number as slurmctld gives it (`4294967294`, `2`); None
    when it is not one (`inf`, `nan`, `-1`, `0.5`, text)."""
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    if not math.isfinite(value) or value < 0 or value != int(value):
        return None
    return int(value)


def job_facts(fields: dict[str, bytes], text: dict[str, str] | None = None) -> JobFacts:
    """What the shim sent, as JobFacts (`text`: the fields already decoded, if at hand). A
    number field that is not a whole number is named in `unreadable` (the job is not packed)."""
    text = _decoded(fields) if text is None else text
    uid = _number(text.get("uid"))
    numbers = {k: _number(text.get(k)) for k in _NUMBER_FIELDS}
    unreadable = tuple(k for k in _NUMBER_FIELDS if numbers[k] is None and text.get(k) is not None)
    return JobFacts(
        user=text.get("user_name") or (_user_name(uid) if uid is not None else ""),
        name=text.get("name", ""),
        script=fields.get("script", b""),
        tres_per_node=text.get("tres_per_node"),
        tres_per_job=text.get("tres_per_job"),
        tres_per_task=text.get("tres_per_task"),
        partition=text.get("partition"),
        tres_per_socket=text.get("tres_per_socket"),
        mem_per_tres=text.get("mem_per_tres"),
        cpus_per_tres=text.get("cpus_per_tres"),
        tres_freq=text.get("tres_freq"),
        tres_bind=text.get("tres_bind"),
        batch=text.get("batch", "1") != "0",
        unreadable=unreadable,
        **numbers,
    )


def _rewrite(answer: SubmitAnswer, request: Candidate, decision: Decision, config: PackerConfig,
             facts: JobFacts) -> None:
    """The packed request, meaning what the user asked (docs/request-forms.md): K shards of
    the GPU's type, and what was per GPU made per job (the job had exactly one GPU)."""
    answer.rewrite = shard_request(decision.shards or 1, request.dialect, packed_type(request, config))
    answer.exclude = ",".join(decision.avoid_nodes)
    clear = [request.field] if request.field != "tres_per_node" else []
    if request.mem_per_gpu_mb is not None:
        clear.append("mem_per_tres")
        answer.min_mem_per_node = request.mem_per_gpu_mb
    if request.cpus_per_gpu is not None:
        clear.append("cpus_per_tres")
        answer.min_cpus = request.cpus_per_gpu
        answer.cpus_per_task = request.cpus_per_gpu // request.tasks
    if request.gpu_bind:
        clear.append("tres_bind")
    answer.clear_field = ",".join(clear)


class SubmitService:
    """Holds what a decision needs: the config, the store, the cluster view and the stages."""

    def __init__(
        self,
        config: Callable[[], PackerConfig],
        store: Store,
        view: SubmitView,
        kill_switch: Path | None = None,
        metrics: SubmitMetrics | None = None,
        rules: Callable[[PackerConfig], SuiteRules] | None = None,
        requeue_by_default: bool = True,
    ):
        self._config = config
        self._rules: SuiteRules | None = None  # the admit decision (packer.rules), per [packer] table read
        self.store = store
        self._view = view
        self._kill_switch_text = os.fspath(kill_switch) if kill_switch is not None else None
        self._metrics = metrics
        self._requeue_by_default = requeue_by_default  # slurm.conf's JobRequeue
        # the decisions with the [monitor] table's settings (the watches' and the replay's);
        # None: the defaults
        self._make_rules = rules or (lambda config: SuiteRules(config=config))
        self.stages: tuple[Stage, ...] = submit_stages()
        self._prepare_store: Store | None = None  # the view loader's connection (prepare_view)
        self.identities = IdentityMemo()  # fingerprints of scripts seen lately (packer.identity_memo)

    def prepare_view(self, snapshot: Snapshot) -> None:
        """What the stages read of a new view, built off the request path (the view's loader
        calls this before requests see ``snapshot``), with a store connection of its own."""
        if self._prepare_store is None:
            self._prepare_store = Store(self.store.path) if self.store.path != ":memory:" else self.store
        rules = self._rules_for(self._config())
        for stage in self.stages:
            prepare = getattr(stage.run, "prepare", None)
            if prepare is not None:
                prepare(snapshot, self._prepare_store, rules, time.time())

    def _rules_for(self, config: PackerConfig) -> SuiteRules:
        """The decisions (`packer.rules.SuiteRules`, the monitor's and the simulator's) with
        the [packer] table read now; rebuilt only when it was reloaded."""
        rules = self._rules
        if rules is None or rules.config is not config:
            rules = self._rules = self._make_rules(config)
        return rules

    def answer(self, fields: dict[str, bytes]) -> SubmitAnswer:
        """Decide, and log the decision at once (see :meth:`respond`)."""
        answer, after = self.respond(fields)
        after()
        return answer

    def respond(self, fields: dict[str, bytes]) -> tuple[SubmitAnswer, Callable[[], None]]:
        """Decide; the second item records and logs the decision and is meant to run after
        the answer is on its way, before the next request (slurmctld waits for the answer,
        not for the bookkeeping)."""
        started = time.perf_counter()
        config = self._config()
        if self._kill_switch_text is not None and os.path.exists(self._kill_switch_text):
            answer = SubmitAnswer("untouched", "kill-switch", config.mode)
            return answer, self._observer(answer, started)
        text = _decoded(fields)
        facts = job_facts(fields, text)
        request = classify(facts, self._requeue_by_default)
        ctx = SubmitContext.read(facts, request, text, config, self._rules_for(config), self.store, self._view,
                                 self.identities)
        decision = run_stages(self.stages, ctx)
        answer = SubmitAnswer(decision.verdict, decision.reason, config.mode, fingerprint=ctx.fingerprint or "")
        if config.mode != "observe" and decision.reason != "no-gpu" and ctx.comment_writable:
            advised = config.mode == "advise"
            answer.admin_comment = merge(ctx.site_comment, decision.comment(advised=advised))
        if config.mode == "enforce" and decision.verdict == "packed" and isinstance(request, Candidate):
            _rewrite(answer, request, decision, config, facts)
        decided_s = time.perf_counter() - started
        return answer, self._after(facts, decision, config.mode, decided_s)

    def _after(self, facts: JobFacts, decision: Decision, mode: str, decided_s: float) -> Callable[[], None]:
        decided_ms = decided_s * 1000

        def after() -> None:
            if self._metrics is not None:
                self._metrics.observe(decision.verdict, decision.reason, decided_s)
            # the bookkeeping runs before the next request is read (one loop serves them
            # all), so the next decision sees this one's reservation
            if decision.verdict == "exclusive":
                try:
                    self._view.reserve_whole_gpu()
                except Exception:  # the bookkeeping must never break a submission
                    log.exception("recording the decision failed")
            # slurmctld's log has every decision already (the shim's line) and the job its
            # AdminComment; here only a slow one is worth a line by default
            level = logging.WARNING if decided_ms >= SLOW_DECISION_MS else logging.DEBUG
            if log.isEnabledFor(level):
                log.log(
                    level, "decision user=%s verdict=%s reason=%s shards=%s mode=%s in %.2f ms",
                    facts.user, decision.verdict, decision.reason, decision.shards, mode, decided_ms,
                )

        return after

    def _observer(self, answer: SubmitAnswer, started: float) -> Callable[[], None]:
        if self._metrics is None:
            return _nothing
        seconds = time.perf_counter() - started
        metrics = self._metrics
        return lambda: metrics.observe(answer.verdict, answer.reason, seconds)
