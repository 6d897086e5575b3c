"""The MPS watch on its own: the jobs sharing a GPU through MPS get percentages from their
measured utilisation, sent to their node's agent once per change (again when the agent did not
answer), with a generation number that only grows."""
from __future__ import annotations

from slurm_plugin.helper.watches.mps import MpsWatch
from slurm_plugin.slurm.fake import FAKE_EPOCH
from tests.unit.helper.rounds_support import make, running
from tests.unit.helper.watches.watch_support import RecordingLink, context, tracked

E = float(FAKE_EPOCH)


def two_mps_jobs(tmp_path, util_1=30.0, util_2=50.0):
    fake, helper, samples, monitor = make(tmp_path, fixed_clock=True)
    running(fake, 1, fp="m1")
    running(fake, 2, fp="m2", start=FAKE_EPOCH + 1)
    samples.put(1, E + 2, isolation="mps:50", util=util_1, started_at=E)
    samples.put(2, E + 2, isolation="mps:50", util=util_2, started_at=E + 1)
    tracked(monitor, E + 2, samples.now.values())
    return fake, samples, monitor


def test_the_busier_job_gets_the_larger_share_and_the_plan_is_sent_once(tmp_path):
    _, _, monitor = two_mps_jobs(tmp_path)
    ctx = context(monitor, E + 2)
    ctx.agents = link = RecordingLink()
    watch = MpsWatch()
    watch.round(ctx)
    plan = watch.mps_plan[("node1", "0")]
    assert sum(plan.values()) == 100 and plan[2] > plan[1]
    ((node, op, request),) = link.calls
    assert (node, op) == ("node1", "mps_plan") and request["plan"] == {"0": {"1": plan[1], "2": plan[2]}}
    assert request["generation"] >= E * 1000
    watch.round(ctx)
    assert len(link.calls) == 1  # unchanged: not sent again


def test_a_plan_an_agent_did_not_take_is_sent_on_a_later_round(tmp_path):
    _, _, monitor = two_mps_jobs(tmp_path)
    ctx = context(monitor, E + 2)
    ctx.agents = link = RecordingLink()
    link.down = True
    watch = MpsWatch()
    watch.round(ctx)
    assert link.calls == [] and watch.mps_plan  # planned, not sent
    link.down = False
    watch.round(ctx)
    assert [op for _, op, _ in link.calls] == ["mps_plan"]


def test_jobs_not_under_mps_get_no_plan(tmp_path):
    fake, helper, samples, monitor = make(tmp_path, fixed_clock=True)
    running(fake, 1, fp="s1")
    samples.put(1, E + 2, isolation="shard:2", util=30.0, started_at=E)
    tracked(monitor, E + 2, samples.now.values())
    ctx = context(monitor, E + 2)
    ctx.agents = link = RecordingLink()
    watch = MpsWatch()
    watch.round(ctx)
    assert watch.mps_plan == {} and link.calls == []
