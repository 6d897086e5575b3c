"""The helper mirrors each agent's slice journal into the controller's store (one table,
pruned by [retention]) and gives an agent that lost its own the records of the slices it is
unsure of; what the agent leaves alone is said once."""
from __future__ import annotations

from slurm_plugin.helper.journal_mirror import JournalMirror
from store.slices import HeldSlice, SliceMirror
from store.db import Store
from slurm_plugin.agent.client import AgentUnavailable
from slurm_plugin.config.bounds import RetentionSettings
from slurm_plugin.helper.retention import DAY_S, prune_store


def entry(uuid: str, job: int, run: float = 10.0) -> dict:
    return {"uuid": uuid, "job": job, "run": run,
            "assignment": {"job_id": job, "device_uuid": uuid, "created_at": run, "profile": "1g.20gb"}}


class JournalLink:
    def __init__(self):
        self.held: list[dict] = []
        self.unsure: list[str] = []
        self.restored: list[list[dict]] = []
        self.answer = {"restored": [], "left_alone": []}
        self.down = False

    def call(self, node, op, request=None, timeout=None):
        if self.down:
            raise AgentUnavailable("connection refused")
        if op == "journal":
            return {"status": "ok", "held": self.held, "unsure": self.unsure, "mark": "1"}
        assert op == "restore"
        self.restored.append(request["assignments"])
        return {"status": "ok", **self.answer}


def test_the_copy_follows_the_journal_and_keeps_what_the_agent_is_unsure_of():
    store, link, clock = Store(), JournalLink(), [100.0]
    mirror = JournalMirror(link, store, clock=lambda: clock[0])
    link.held = [entry("MIG-a", 7), entry("MIG-b", 8)]
    mirror(["n1"])
    assert {(h.uuid, h.job_id) for h in SliceMirror(store).held("n1")} == {("MIG-a", 7), ("MIG-b", 8)}
    link.held = [entry("MIG-b", 8)]  # job 7 released its slice
    mirror(["n1"])
    assert [h.job_id for h in SliceMirror(store).held("n1")] == [8]
    link.held, link.unsure = [], ["MIG-b"]  # the agent lost everything: MIG-b is held by nothing it knows
    link.answer = {"restored": [], "left_alone": ["job 8's 1g.20gb@0 on GPU 0: no job list from the helper"]}
    mirror(["n1"])
    assert link.restored == [[entry("MIG-b", 8)["assignment"]]]  # the controller's record sent back
    assert [h.job_id for h in SliceMirror(store).held("n1")] == [8]  # and kept, not released
    mirror(["n1"])  # left alone again: said once
    unsure = [e for e in store.events() if e.kind == "slice-unsure"]
    assert len(unsure) == 1 and "n1: job 8" in unsure[0].detail
    link.down = True
    mirror(["n1"])  # an agent that does not answer: the copy stays as it was
    assert [h.job_id for h in SliceMirror(store).held("n1")] == [8]


def test_restored_slices_are_events_and_malformed_entries_are_skipped():
    store, link = Store(), JournalLink()
    mirror = JournalMirror(link, store, clock=lambda: 5.0)
    link.held = [entry("MIG-a", 7), {"uuid": "MIG-x"}]
    mirror(["n1"])
    assert [h.uuid for h in SliceMirror(store).held("n1")] == ["MIG-a"]
    link.held, link.unsure = [], ["MIG-a"]
    link.answer = {"restored": ["job 7's 1g.20gb@0 on GPU 0 (MIG-a) is its slice again"], "left_alone": []}
    mirror(["n1"])
    assert [e.kind for e in store.events()] == ["slice-restored"]


def test_retention_prunes_released_rows_and_silent_nodes():
    store = Store()
    copy = SliceMirror(store)
    now = 100 * DAY_S
    copy.mirror("n1", [HeldSlice("MIG-a", 7, 1.0, {}), HeldSlice("MIG-b", 8, 1.0, {})], now - 40 * DAY_S)
    copy.mirror("n1", [HeldSlice("MIG-b", 8, 1.0, {})], now - 35 * DAY_S)  # MIG-a released 35 days ago
    copy.mirror("n2", [HeldSlice("MIG-c", 9, 1.0, {})], now - 1 * DAY_S)
    copy.mirror("n1", [HeldSlice("MIG-b", 8, 1.0, {})], now - 2 * DAY_S)  # still held, seen 2 days ago
    deleted = prune_store(store, RetentionSettings(slice_journal_days=30), now)
    assert deleted == {"slice_journal": 1}
    assert [h.uuid for h in copy.held("n1")] == ["MIG-b"] and [h.uuid for h in copy.held("n2")] == ["MIG-c"]
    assert prune_store(store, RetentionSettings(slice_journal_days=1), now) == {"slice_journal": 1}
    assert copy.held("n1") == [] and [h.uuid for h in copy.held("n2")] == ["MIG-c"]
