"""Steering by pair prediction: a pending packed job is kept off a node whose every GPU it
could land on is busy with packed jobs predicted to slow down beside it (the simulator's
colocate rule, `ctx.rules.corunners`, with the submit path's pair model)."""
from __future__ import annotations

from store.db import RunRecord

from tests.unit.helper import rounds_support
from tests.unit.helper.rounds_support import FAKE_EPOCH, GIB, running


def make(tmp_path, **settings):
    return rounds_support.make(tmp_path, fixed_clock=True, **settings)


def pending(fake, job_id, fp, shards=2):
    fake.submit(job_id=job_id, state="PENDING", gres=f"gres:shard:{shards}",
                admin_comment=f"gpupack: packed shard:{shards} fp={fp}")


def steer_events(helper, job_id):
    return [e for e in helper.store.events(job_id=job_id) if e.kind == "steer"]


def test_a_measured_bad_pair_keeps_the_node_off_and_says_why(tmp_path):
    fake, helper, _, monitor = make(tmp_path)
    helper.store.pairs.record_pair_speed("aaaa", "bbbb", 0.6)  # aaaa kept 60 % of its speed beside bbbb
    running(fake, 1, fp="aaaa", gpu=0)
    running(fake, 2, fp="aaaa", gpu=1)  # node1: both GPUs busy with aaaa; node2 idle
    pending(fake, 3, "bbbb")
    monitor.tick()
    assert fake.jobs[3].excluded_nodes == "node1"
    (event,) = steer_events(helper, 3)
    assert "predicted slowdown with job 1 (aaaa): 0.60" in event.detail
    assert set(event.data["predicted"]) == {"node1"}


def test_a_good_pair_does_not_keep_the_node_off(tmp_path):
    fake, helper, _, monitor = make(tmp_path)
    helper.store.pairs.record_pair_speed("aaaa", "bbbb", 0.95)
    running(fake, 1, fp="aaaa", gpu=0)
    running(fake, 2, fp="aaaa", gpu=1)
    pending(fake, 3, "bbbb")
    monitor.tick()
    assert fake.jobs[3].excluded_nodes == "" and not steer_events(helper, 3)


def test_a_free_gpu_keeps_the_node_allowed(tmp_path):
    fake, helper, _, monitor = make(tmp_path)
    helper.store.pairs.record_pair_speed("aaaa", "bbbb", 0.6)
    running(fake, 1, fp="aaaa", gpu=0)  # GPU 1 of node1 is free
    pending(fake, 3, "bbbb")
    monitor.tick()
    assert fake.jobs[3].excluded_nodes == ""


def test_a_qualifying_gpu_keeps_the_node_allowed(tmp_path):
    fake, helper, _, monitor = make(tmp_path)
    helper.store.pairs.record_pair_speed("aaaa", "bbbb", 0.6)
    helper.store.pairs.record_pair_speed("cccc", "bbbb", 0.97)
    running(fake, 1, fp="aaaa", gpu=0)
    running(fake, 2, fp="cccc", gpu=1)
    pending(fake, 3, "bbbb")
    monitor.tick()
    assert fake.jobs[3].excluded_nodes == ""


def _history(helper, utils: dict[str, float]) -> None:
    for i, (fp, util) in enumerate(utils.items()):
        helper.store.record_run(RunRecord(job_id=100 + i, fingerprint=fp, peak_mem_bytes=8 * GIB,
                                          mean_util_pct=util, ended_at=FAKE_EPOCH - 3600.0))


def _busy_unseen_pairs(fake):
    running(fake, 1, fp="aaaa", gpu=0)
    running(fake, 2, fp="aaaa", gpu=1)
    pending(fake, 3, "bbbb")  # 90 % + 90 %: processor sharing gives each 100 / 180 = 0.56
    pending(fake, 4, "cccc")  # 90 % + 20 %: 0.91, kept
    pending(fake, 5, "dddd")  # no history: no prediction, no reason to steer


def test_an_unseen_pair_the_model_is_sure_of_is_predicted_from_both_jobs_history(tmp_path):
    """The submit path's pair model (fitted on the measured pairs, here 24 that follow
    processor sharing): an unseen pair is kept off where even its upper bound is slow."""
    fake, helper, _, monitor = make(tmp_path)
    utils = {f"w{i:02d}": 10.0 + 10 * (i % 10) for i in range(12)}
    _history(helper, {**utils, "aaaa": 90.0, "bbbb": 90.0, "cccc": 20.0})
    names = sorted(utils)
    for i, a in enumerate(names):
        for b in names[i + 1:i + 3]:
            helper.store.pairs.record_pair_speed(a, b, min(1.0, 100.0 / (utils[a] + utils[b])))
    _busy_unseen_pairs(fake)
    monitor.tick()
    assert fake.jobs[3].excluded_nodes == "node1"
    (event,) = steer_events(helper, 3)
    assert "predicted slowdown with job 1 (aaaa)" in event.detail
    assert float(event.detail.split("(aaaa): ")[1][:4]) < 0.8
    assert fake.jobs[4].excluded_nodes == "" and fake.jobs[5].excluded_nodes == ""


def test_an_unseen_pair_is_tried_while_the_model_has_nothing_fitted(tmp_path):
    """Before the model has enough measured pairs its guess is wide: the pair is tried (a
    pair is learnt only by running it), as the submit path tries it."""
    fake, helper, _, monitor = make(tmp_path)
    _history(helper, {"aaaa": 90.0, "bbbb": 90.0, "cccc": 20.0})
    _busy_unseen_pairs(fake)
    monitor.tick()
    assert fake.jobs[3].excluded_nodes == "" and not steer_events(helper, 3)


def test_pair_predict_off_steers_by_avoided_pairs_alone(tmp_path):
    fake, helper, _, monitor = make(tmp_path, pair_predict=False)
    helper.store.pairs.record_pair_speed("aaaa", "bbbb", 0.6)
    running(fake, 1, fp="aaaa", gpu=0)
    running(fake, 2, fp="aaaa", gpu=1)
    pending(fake, 3, "bbbb")
    monitor.tick()
    assert fake.jobs[3].excluded_nodes == ""


def test_every_gpu_node_slow_is_not_excluded_and_the_exclusion_lifts_when_a_gpu_frees(tmp_path):
    fake, helper, _, monitor = make(tmp_path)
    helper.store.pairs.record_pair_speed("aaaa", "bbbb", 0.6)
    for job_id, node, gpu in ((1, "node1", 0), (2, "node1", 1), (6, "node2", 0), (7, "node2", 1)):
        running(fake, job_id, fp="aaaa", node=node, gpu=gpu)
    pending(fake, 3, "bbbb")
    monitor.tick()
    assert fake.jobs[3].excluded_nodes == ""  # Slurm would refuse a job excluded everywhere
    fake.jobs[7].state = "COMPLETED"  # node2 has a free GPU now: node1 alone is kept off
    monitor.tick()
    assert fake.jobs[3].excluded_nodes == "node1"
    fake.jobs[2].state = "COMPLETED"  # and node1 has one too: nothing is
    monitor.tick()
    assert fake.jobs[3].excluded_nodes == ""


def test_a_job_pinned_with_w_is_not_steered_by_prediction(tmp_path):
    fake, helper, _, monitor = make(tmp_path)
    helper.store.pairs.record_pair_speed("aaaa", "bbbb", 0.6)
    running(fake, 1, fp="aaaa", gpu=0)
    running(fake, 2, fp="aaaa", gpu=1)
    fake.submit(job_id=3, state="PENDING", gres="gres:shard:2", required_nodes="node1",
                admin_comment="gpupack: packed shard:2 fp=bbbb")
    monitor.tick()
    assert fake.jobs[3].excluded_nodes == ""


def test_exclusions_change_in_the_order_slurm_would_start_the_jobs(tmp_path):
    """Lifting an exclusion can start the job at once (Slurm schedules on an update): the
    job with the higher priority gets its node back first, whatever the job ids."""
    fake, helper, _, monitor = make(tmp_path)
    helper.store.pairs.record_pair_speed("aaaa", "bbbb", 0.6)
    running(fake, 1, fp="aaaa", gpu=0)
    running(fake, 2, fp="aaaa", gpu=1)
    pending(fake, 3, "bbbb")
    pending(fake, 4, "bbbb")
    fake.jobs[3].priority, fake.jobs[4].priority = 100, 300  # the younger job goes first
    monitor.tick()
    assert fake.jobs[3].excluded_nodes == fake.jobs[4].excluded_nodes == "node1"
    fake.jobs[2].state = "COMPLETED"  # node1:1 is free again
    mark = len(fake.calls)
    monitor.tick()
    lifted = [int(a.split("=", 1)[1]) for argv in fake.calls[mark:] if "update" in argv
              for a in argv if a.startswith("JobId=")]
    assert lifted[:2] == [4, 3], fake.calls[mark:]
    assert fake.jobs[3].excluded_nodes == fake.jobs[4].excluded_nodes == ""
