"""The submit pipeline: its stages are the ones docs/architecture.md names, in that order; each
is given the decision the one before it returned and calls no other; the pack judge is given
plain settings, not the rules; and what the store says of a packed job is read once."""
from __future__ import annotations

import ast
import inspect
import re
import time
from pathlib import Path

import packer.pack_judge
from packer.config import GIB, PackerConfig
from packer.decision import ClusterView, Decision
from packer.fingerprint import fingerprint
from packer.pack_judge import JudgeSettings
from packer.placement import Running
from packer.rules import SuiteRules
from store.db import RunRecord, Store
from slurm_plugin.helper import submit_pipeline
from slurm_plugin.helper.cluster_view import NodeGpus, Snapshot
from slurm_plugin.helper.monitor_settings import MonitorSettings
from slurm_plugin.helper.queue_state import QueueState, SharedGpu, SharedJob
from slurm_plugin.helper.submit_context import SubmitContext
from slurm_plugin.helper.submit_pipeline import Stage, submit_stages
from slurm_plugin.helper.submit_service import SubmitService
from fixed_view import FixedView

ROOT = Path(__file__).resolve().parents[3]
BODY = b"#!/bin/sh\ntrain\n"
NEW_FP = fingerprint("alice", "t", BODY)
FIELDS = {"user_name": b"alice", "name": b"t", "script": BODY, "tres_per_node": b"gres:gpu:1"}


def documented_stages() -> list[str]:
    text = (ROOT / "docs" / "architecture.md").read_text()
    found = re.search(r"Its stages, in order:\n\n(.*?)\n\n", text, re.S)
    assert found, "docs/architecture.md lists the submit pipeline's stages ('Its stages, in order:' and a list)"
    items = re.findall(r"^(\d+)\. `([^`]+)`:", found.group(1), re.M)
    assert [int(n) for n, _ in items] == list(range(1, len(items) + 1))
    return [name for _, name in items]


def test_the_stages_are_the_ones_the_docs_name_in_their_order():
    names = [s.name for s in submit_stages()]
    assert names == documented_stages() == ["admit", "history-levels", "util-cap", "load-aware", "avoid-partners",
                                            "comment-writable"]
    assert len(set(names)) == len(names)
    assert all(f"``{n}``" in submit_pipeline.__doc__ for n in names)  # the module's own list too


def _code_of(stage: Stage) -> str:
    run = stage.run
    return inspect.getsource(run if inspect.isfunction(run) else type(run))


def test_no_stage_names_another_or_the_pipeline():
    """Each stage's code refers to no other stage and not to the pipeline (it cannot call back)."""
    stages = submit_stages()
    own = {s.name: {(s.run if inspect.isfunction(s.run) else type(s.run)).__name__} for s in stages}
    for stage in stages:
        used = {n.id for n in ast.walk(ast.parse(_code_of(stage).lstrip())) if isinstance(n, ast.Name)}
        used |= {n.attr for n in ast.walk(ast.parse(_code_of(stage).lstrip())) if isinstance(n, ast.Attribute)}
        others = set().union(*(own[s.name] for s in stages if s is not stage))
        assert not used & (others | {"run_stages", "submit_stages", "stages"}), stage.name
    # and the context a stage is given holds no stage
    assert not {"stages", "stage", "pipeline"} & set(SubmitContext.__dataclass_fields__)


def test_the_judge_reads_plain_settings_and_calls_nothing_back():
    tree = ast.parse(inspect.getsource(packer.pack_judge))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert "packer.rules" not in imported
    params = inspect.signature(packer.pack_judge.judge_pack).parameters
    assert next(iter(params.values())).annotation == "JudgeSettings"
    rules = SuiteRules(admission="load-aware", min_speed=0.6)
    settings = rules.judge_settings
    assert settings == JudgeSettings(rules.config.max_gpu_fraction, rules.max_jobs_per_gpu, rules.corunner_rule,
                                     1.0 - rules.tolerated_loss, 0.6, settings.fairness)
    assert settings.fairness is not None and settings.fairness.min_speed == 0.6
    assert SuiteRules().judge_settings.fairness is None  # slowdown-bound: no payoff rule


# -- one packed job through the real service, load-aware, beside a partner it must avoid ---------
NOW = 1_700_000_000.0


def _store() -> Store:
    store = Store()
    store.record_run(RunRecord(1, NEW_FP, int(7.6 * GIB), 60.0, started_at=NOW - 7200, ended_at=NOW - 3600))
    store.record_run(RunRecord(2, "aaaa", 10 * GIB, 60.0, started_at=NOW - 9000, ended_at=NOW - 100))
    store.pairs.avoid_pair(NEW_FP, "aaaa", "failed together")
    return store


def _view() -> Snapshot:
    queue = QueueState(waiting=0, gpus=2, releases_s=(1e9,), shared=(SharedGpu("n1", 0, (SharedJob(11, "aaaa", 2, 7200.0),)),))
    return Snapshot(nodes=(NodeGpus("n1", frozenset({"MIXED"}), 2, frozenset({0, 1})),
                           NodeGpus("n2", frozenset({"ALLOCATED"}), 2, frozenset({0, 1}))),
                    pending_whole_gpu_jobs=0, taken_at=NOW, running=(Running(11, "aaaa", ("n1",), True),), queue=queue)


def _service(store: Store) -> SubmitService:
    cfg = PackerConfig(mode="enforce")
    return SubmitService(lambda: cfg, store, FixedView(ClusterView(0), _view), rules=MonitorSettings().rules)


def test_each_stage_gets_the_decision_the_one_before_returned(monkeypatch):
    monkeypatch.setattr(time, "time", lambda: NOW)  # the runs' ages and the view's age
    service = _service(_store())
    seen: list[tuple[str, Decision, Decision]] = []

    def recorded(stage: Stage) -> Stage:
        def run(decision: Decision, ctx: SubmitContext) -> Decision:
            out = stage.run(decision, ctx)
            seen.append((stage.name, decision, out))
            return out

        return Stage(stage.name, run)

    service.stages = tuple(recorded(s) for s in service.stages)
    answer = service.answer(FIELDS)
    assert [name for name, _, _ in seen] == documented_stages()
    assert seen[0][1] == submit_pipeline.UNDECIDED
    assert all(seen[i][1] is seen[i - 1][2] for i in range(1, len(seen)))
    assert (answer.verdict, answer.exclude) == ("packed", "n1")  # kept off its partner's node
    out = {name: after for name, _, after in seen}
    assert out["load-aware"].avoid_nodes == () and out["avoid-partners"].avoid_nodes == ("n1",)


def test_what_the_store_says_of_a_packed_job_is_read_once(monkeypatch):
    """The partners to avoid feed two stages (the judge's floor and the exclusion): one read.
    The view's residents are read once per published view, so the second job counts."""
    monkeypatch.setattr(time, "time", lambda: NOW)
    store = _store()
    counts: dict[str, int] = {}
    for tables in (store, store.pairs):
        for name, _ in inspect.getmembers(type(tables), inspect.isfunction):
            if name.startswith("_"):
                continue

            def counted(*args, _name=name, _real=getattr(tables, name), **kw):
                counts[_name] = counts.get(_name, 0) + 1
                return _real(*args, **kw)

            setattr(tables, name, counted)
    service = _service(store)
    assert service.answer(FIELDS).verdict == "packed"
    counts.clear()
    answer = service.answer(FIELDS)
    assert (answer.verdict, answer.exclude) == ("packed", "n1")
    assert counts == {"history": 1, "pair_speeds_with": 1, "avoided_with": 1, "mean_run_s": 1}


def test_a_stage_that_raises_leaves_the_decision_before_it(caplog):
    def broken(decision: Decision, ctx: SubmitContext) -> Decision:
        raise RuntimeError("view unreadable")

    store = Store()
    store.record_run(RunRecord(1, NEW_FP, int(7.6 * GIB), 35.0))
    cfg = PackerConfig(mode="enforce")
    service = SubmitService(lambda: cfg, store, FixedView(ClusterView(0)))
    service.stages = (service.stages[0], Stage("broken", broken), *service.stages[1:])
    answer = service.answer(FIELDS)
    assert (answer.verdict, answer.rewrite) == ("packed", "gres:shard:1")
    assert any("submit stage broken failed" in r.getMessage() for r in caplog.records)
