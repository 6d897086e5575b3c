"""The live demos' shared steps that need no cluster: their events read back from a real
SQLite event log, and how an outcome is printed."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

import click
import pytest

from store.db import Store
from slurm_plugin.cli.demo_steps import echo_outcome, excluded_by, first_event, scenario_events, wait_until


@dataclass
class Outcome:
    events: list[dict] = field(default_factory=list)
    ok: bool = True

    def to_dict(self) -> dict:
        return asdict(self)


def test_scenario_events_are_the_asked_kinds_of_the_asked_jobs_oldest_first(tmp_path):
    db = tmp_path / "gpupack.db"
    store = Store(db)
    store.log_event("grow-evict", "first", 2, grower=1)
    store.log_event("grow-evict", "another job", 3)
    store.log_event("pair-avoid", "another kind", 1)
    store.log_event("grow-restart", "second", 1, excluded=["node2", "node3"])
    store.close()
    events = scenario_events(db, (1, 2), ("grow-evict", "grow-restart"))
    assert [(e["kind"], e["job"], e["detail"]) for e in events] == [("grow-evict", 2, "first"),
                                                                    ("grow-restart", 1, "second")]
    assert events[0]["data"] == {"grower": 1} and events[0]["at"] <= events[1]["at"]
    assert first_event(events, "grow-restart") is events[1] and first_event(events, "grow-release") is None
    assert excluded_by(events, "grow-restart") == ["node2", "node3"] and excluded_by(events, "grow-evict") == []


def test_wait_until_polls_until_true_or_past_its_deadline():
    answers = iter([False, False, True])
    assert wait_until(lambda: next(answers), deadline=float("inf"), interval=0) is True
    calls = []
    assert wait_until(lambda: calls.append(1), deadline=0.0, interval=0) is False and len(calls) == 1


def test_an_outcome_prints_its_events_aligned_and_fails_when_not_ok(capsys):
    out = Outcome(events=[{"kind": "grow-evict", "job": 2, "detail": "room for 1"},
                          {"kind": "grow-restart", "job": 1, "detail": "larger share"}])
    echo_outcome(out, False, header="head", summary="sum", failure="bad")
    assert capsys.readouterr().out.splitlines() == ["head", "  grow-evict   job 2: room for 1",
                                                    "  grow-restart job 1: larger share", "sum"]
    echo_outcome(out, True, header="head", summary="sum", failure="bad")
    assert json.loads(capsys.readouterr().out) == asdict(out)
    out.ok = False
    with pytest.raises(click.ClickException, match="bad"):
        echo_outcome(out, True, header="head", summary="sum", failure="bad")
