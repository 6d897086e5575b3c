"""The outcome watch on its own: an open decision of the action ledger is judged from what happened
next (a restart-oom: right when the requeued run completes, open while the job waits or runs),
each outcome also an event; a packed run that ended out of memory in its share with no memory
restart decided is recorded as a miss (the history watch, after it in a round, drops the
ended run's track)."""
from __future__ import annotations

from packer.oom_restart import KIND as OOM
from slurm_plugin.helper.watches.memory import KIND as MEMORY
from slurm_plugin.helper.watches.outcomes import OutcomeWatch
from slurm_plugin.slurm.fake import FAKE_EPOCH
from store.ledger import ActionLedger
from tests.unit.helper.rounds_support import GIB, make, running
from tests.unit.helper.watches.watch_support import context, events, tracked

E = float(FAKE_EPOCH)


def test_a_restart_oom_is_judged_right_once_the_requeued_run_completes(tmp_path):
    fake, helper, _, monitor = make(tmp_path, fixed_clock=True)
    fake.submit(job_id=7, state="PENDING", gres="gres:shard:2", restart_cnt=1)
    ledger = ActionLedger(helper.store)
    ledger.record(OOM, 7, E, "enforce", "out of memory in its share", E + 5)
    watch = OutcomeWatch()
    watch.round(context(monitor, E + 10))
    assert [row.job_id for row in ledger.open()] == [7]  # back in the queue: not judged yet
    fake.jobs[7].state = "COMPLETED"
    watch.round(context(monitor, E + 20))
    (row,) = ledger.rows(OOM)
    assert row.outcome == "right" and ledger.open() == []
    (event,) = events(helper, "action-outcome")
    assert event.job_id == 7 and event.data["outcome"] == "right" and event.data["action"] == OOM


def test_a_run_that_ran_out_of_its_share_with_no_restart_decided_is_a_miss(tmp_path):
    fake, helper, samples, monitor = make(tmp_path, fixed_clock=True)
    running(fake, 7, fp="grow", shards=1)  # one share: 10 GiB
    for t in range(3):
        samples.put(7, E + t, mem=int((6 + 2 * t) * GIB), started_at=E)  # up to 10 GiB
        tracked(monitor, E + t, samples.now.values())
    fake.jobs[7].state = "OUT_OF_MEMORY"
    OutcomeWatch().round(context(monitor, E + 5))
    (row,) = ActionLedger(helper.store).rows(MEMORY)
    assert (row.job_id, row.mode, row.outcome) == (7, "none", "missed") and "OUT_OF_MEMORY" in row.reason
    assert [e.data["outcome"] for e in events(helper, "action-outcome")] == ["missed"]


def test_a_run_that_ended_well_inside_its_share_is_no_miss(tmp_path):
    fake, helper, samples, monitor = make(tmp_path, fixed_clock=True)
    running(fake, 7, fp="small", shards=1)
    samples.put(7, E + 1, mem=2 * GIB, started_at=E)
    tracked(monitor, E + 1, samples.now.values())
    fake.jobs[7].state = "FAILED"
    OutcomeWatch().round(context(monitor, E + 5))
    assert ActionLedger(helper.store).rows() == [] and events(helper, "action-outcome") == []
