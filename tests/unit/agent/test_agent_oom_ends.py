"""The node agent holds a packed job's out-of-memory end until the helper answers (oom_ends)."""
import os

import pytest

from gpus.sim.backend import SimGpuBackend
from slurm_plugin.agent import ops
from slurm_plugin.agent.daemon import NodeAgent
from slurm_plugin.agent.oom_ends import HOLD_MAX_S, HOLD_ROUNDS, HOLD_S, KEEP_S, hold_limit
from slurm_plugin.agent.state import BATCH_STEP
from slurm_plugin.agent.trust import Peer

GIB = 1024**3
SHARD1 = {"SLURM_JOB_GPUS": "0", "CUDA_VISIBLE_DEVICES": "0", "SLURM_SHARDS_ON_NODE": "1"}
ROOT = Peer(1, 0, 0)


class Clock:
    t = 1000.0

    def __call__(self):
        return self.t


@pytest.fixture
def node(tmp_path):
    backend = SimGpuBackend(tmp_path / "sim", "node1", gpus=["H100-80GB"])
    clock = Clock()
    agent = NodeAgent("node1", tmp_path, backend, sim_dir=tmp_path / "sim", clock=clock)
    return agent, backend, clock


def run_at(agent, backend, job: int, held: int):
    a = agent.isolate(job, BATCH_STEP, 0, SHARD1)
    backend.alloc_memory(a.device_uuid, str(job), held)
    agent.tick()
    return a


def test_a_failed_allocation_past_the_slice_holds_the_end_until_the_helper_settles_it(node):
    agent, backend, clock = node
    run_at(agent, backend, 7, 5 * GIB)
    agent.oom_ends.alloc_failed(7, 10 * GIB, 5 * GIB)
    assert agent.oom.task_exit(7, BATCH_STEP, 1) == "hold"
    (end,) = agent.oom_ends.waiting()
    assert end["limit_bytes"] == backend.catalog(0).profile("1g.10gb").memory_mib * 1024**2
    assert end["asked_bytes"] == 10 * GIB and end["peak_bytes"] == 5 * GIB and end["shards"] == 1
    clock.t += 1
    assert agent.oom.task_exit(7, BATCH_STEP, 1) == "hold"  # asked again: still waiting
    answer = ops.dispatch(agent, "oom_settle", {"job_id": 7, "outcome": "requeued"}, ROOT)
    assert answer["known"] is True
    assert agent.oom.task_exit(7, BATCH_STEP, 1) == "done" and agent.oom_ends.waiting() == []


def test_an_end_the_helper_never_answers_is_let_go_after_the_hold_and_stays_listed(node):
    agent, backend, clock = node
    run_at(agent, backend, 7, 5 * GIB)
    agent.oom_ends.alloc_failed(7, 10 * GIB, 5 * GIB)
    assert agent.oom.task_exit(7, BATCH_STEP, 1) == "hold"
    clock.t += HOLD_S
    assert agent.oom.task_exit(7, BATCH_STEP, 1) == "done"
    assert [e["job_id"] for e in agent.oom_ends.waiting()] == [7]  # the helper may still requeue it
    clock.t += KEEP_S + 1
    assert agent.oom_ends.waiting() == []


@pytest.mark.parametrize("exit_code, report", [(0, True), (1, False), (137, False)])
def test_no_evidence_no_hold(node, exit_code, report):
    agent, backend, _ = node
    run_at(agent, backend, 7, 5 * GIB)  # half its slice: a nonzero exit alone is no OOM
    if report:
        agent.oom_ends.alloc_failed(7, 10 * GIB, 5 * GIB)
    assert agent.oom.task_exit(7, BATCH_STEP, exit_code) == "done" and agent.oom_ends.waiting() == []


def test_a_silent_job_that_fails_with_its_slice_full_is_held(node):
    agent, backend, _ = node
    limit = backend.catalog(0).profile("1g.10gb").memory_mib * 1024**2
    run_at(agent, backend, 7, limit - 1024**2)
    assert agent.oom.task_exit(7, BATCH_STEP, 1) == "hold"


def test_a_whole_gpu_job_is_never_held(node):
    agent, backend, _ = node
    a = agent.isolate(8, BATCH_STEP, 0, {"SLURM_JOB_GPUS": "0", "CUDA_VISIBLE_DEVICES": "0"})
    backend.alloc_memory(a.device_uuid, "8", 79 * GIB)
    agent.tick()
    assert agent.oom.task_exit(8, BATCH_STEP, 1) == "done"


def test_the_next_run_of_a_requeued_job_is_judged_afresh(node):
    agent, backend, clock = node
    run_at(agent, backend, 7, 5 * GIB)
    agent.oom_ends.alloc_failed(7, 10 * GIB, 5 * GIB)
    assert agent.oom.task_exit(7, BATCH_STEP, 1) == "hold"
    agent.oom.settle(7, "requeued")
    agent.step_end(7, BATCH_STEP)
    clock.t += 30
    run_at(agent, backend, 7, 5 * GIB)  # its next run fails again the same way
    agent.oom_ends.alloc_failed(7, 10 * GIB, 5 * GIB)
    assert agent.oom.task_exit(7, BATCH_STEP, 1) == "hold"


def test_task_exit_over_the_socket_answers_in_lines_words(node):
    agent, backend, _ = node
    run_at(agent, backend, 7, 5 * GIB)
    assert ops.dispatch(agent, "task_exit", {"job_id": 7, "step_id": BATCH_STEP, "exit_code": 0}, ROOT)["isolation"] == "done"
    with pytest.raises(ValueError):
        ops.dispatch(agent, "task_exit", {"job_id": 7, "step_id": BATCH_STEP, "exit_code": "1"}, ROOT)


# --- a job that reports nothing: a framework's out-of-memory text in its output (its word) ----

TORCH_TEXT = ("Traceback (most recent call last):\n  File \"train.py\", line 9, in <module>\n"
              "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 10.00 GiB. GPU 0 has a total capacity "
              "of 9.75 GiB of which 4.75 GiB is free.\n")


@pytest.fixture
def pushed(tmp_path):
    """A node whose agent takes the helper's job lists, with the jobs' output paths."""
    from slurm_plugin.agent.slurm_jobs import PushedJobs

    backend = SimGpuBackend(tmp_path / "sim", "node1", gpus=["H100-80GB"])
    clock = Clock()
    agent = NodeAgent("node1", tmp_path, backend, sim_dir=tmp_path / "sim", clock=clock,
                      list_running_jobs=PushedJobs(clock=clock))
    return agent, backend, clock


def push_output(agent, tmp_path, text: str, job: int = 7, uid: int = 0, generation: int = 1):
    out = tmp_path / f"slurm-{job}.out"
    out.write_text(text)
    ops.dispatch(agent, "jobs", {"job_ids": [job], "generation": generation,
                                 "outputs": {str(job): {"uid": uid, "paths": [str(out)]}}}, ROOT)
    return out


def test_a_silent_jobs_framework_text_is_an_oom_end_on_its_word(pushed, tmp_path):
    agent, backend, _ = pushed
    run_at(agent, backend, 7, 5 * GIB)  # half its slice: measured alone, no OOM
    push_output(agent, tmp_path, TORCH_TEXT)
    assert agent.oom.task_exit(7, BATCH_STEP, 1) == "hold"
    (end,) = agent.oom_ends.waiting()
    assert end["evidence"] == "reported" and end["seen_in"] == "output:pytorch:torch-native"
    assert end["asked_bytes"] == 10 * GIB and end["held_bytes"] == 5 * GIB  # held: measured, not said
    assert "Tried to allocate 10.00 GiB" in end["said_line"]


def test_the_same_text_with_the_slice_measured_full_is_measured(pushed, tmp_path):
    agent, backend, _ = pushed
    limit = backend.catalog(0).profile("1g.10gb").memory_mib * 1024**2
    run_at(agent, backend, 7, limit - 1024**2)
    push_output(agent, tmp_path, TORCH_TEXT)
    assert agent.oom.task_exit(7, BATCH_STEP, 1) == "hold"
    (end,) = agent.oom_ends.waiting()
    assert end["evidence"] == "measured"


@pytest.mark.parametrize("case", ["other-owner", "exit-0", "no-text", "past-the-gpu", "uid-disagrees"])
def test_no_word_that_may_be_read_no_hold(pushed, tmp_path, case):
    agent, backend, _ = pushed
    run_at(agent, backend, 7, 5 * GIB)
    text = {"no-text": "loss=nan, giving up\n",
            "past-the-gpu": TORCH_TEXT.replace("10.00 GiB", "900.00 GiB")}.get(case, TORCH_TEXT)
    out = push_output(agent, tmp_path, text, uid=4321 if case == "uid-disagrees" else 0)
    if case == "other-owner":
        os.chown(out, 4321, 4321)
    assert agent.oom.task_exit(7, BATCH_STEP, 0 if case == "exit-0" else 1) == "done"
    assert agent.oom_ends.waiting() == []


def test_a_list_since_the_end_that_names_the_job_without_paths_lets_it_end(pushed):
    """Slurm's record gave no path the agent can tell (an unknown user, a pattern it cannot expand):
    once a list taken since the step's end says so, the end is judged without its output."""
    agent, backend, _ = pushed
    run_at(agent, backend, 7, 5 * GIB)
    ops.dispatch(agent, "jobs", {"job_ids": [7], "generation": 1}, ROOT)
    assert agent.oom.task_exit(7, BATCH_STEP, 1) == "hold"
    ops.dispatch(agent, "jobs", {"job_ids": [7], "generation": 2}, ROOT)
    assert agent.oom.task_exit(7, BATCH_STEP, 1) == "done"
    assert agent.oom_ends.waiting() == [] and agent.oom.awaited == {}


def test_a_job_named_without_paths_while_it_started_waits_for_the_list_that_brings_them(pushed, tmp_path):
    """A list made while the job was starting named it without paths (its record did not carry
    them yet); the step then ended out of memory. Before, that list's word was taken as final: the
    end was judged without its output and the job FAILED (seen in CI on 24.11, under load)."""
    agent, backend, _ = pushed
    run_at(agent, backend, 7, 5 * GIB)
    ops.dispatch(agent, "jobs", {"job_ids": [7], "generation": 1}, ROOT)  # no outputs for it
    assert agent.oom.task_exit(7, BATCH_STEP, 1) == "hold"
    push_output(agent, tmp_path, TORCH_TEXT, generation=2)  # the next round's list has its record's paths
    (end,) = agent.oom_ends.waiting()
    assert end["seen_in"] == "output:pytorch:torch-native" and end["evidence"] == "reported"


def test_a_report_comes_before_the_output(pushed, tmp_path):
    agent, backend, _ = pushed
    run_at(agent, backend, 7, 5 * GIB)
    push_output(agent, tmp_path, TORCH_TEXT)
    agent.oom_ends.alloc_failed(7, 6 * GIB, 5 * GIB)
    assert agent.oom.task_exit(7, BATCH_STEP, 1) == "hold"
    (end,) = agent.oom_ends.waiting()
    assert end["asked_bytes"] == 6 * GIB and end["seen_in"] == "report" and end["evidence"] == "reported"


@pytest.mark.parametrize("outputs", [[], {"7": {"uid": -1, "paths": ["/x"]}}, {"7": {"uid": 0, "paths": ["rel"]}},
                                     {"x": {"uid": 0, "paths": ["/x"]}}, {"7": {"uid": 0, "paths": ["/a", "/b", "/c"]}},
                                     {"7": {"uid": True, "paths": ["/x"]}}])
def test_a_job_list_with_bad_outputs_is_refused_whole(pushed, outputs):
    agent, _, _ = pushed
    with pytest.raises(ValueError):
        ops.dispatch(agent, "jobs", {"job_ids": [7], "generation": 1, "outputs": outputs}, ROOT)
    assert agent.list_running_jobs.output_of(7) is None


# --- a job that ends before any job list named it: its end waits for Slurm's record -------------

def test_an_end_before_any_list_waits_for_the_list_that_brings_its_output(pushed, tmp_path):
    agent, backend, clock = pushed
    run_at(agent, backend, 7, 5 * GIB)  # started after the helper's last list: no list names it
    assert agent.oom.task_exit(7, BATCH_STEP, 1) == "hold"
    assert agent.oom_ends.waiting() == []  # not an OOM end yet: nothing for the helper to judge
    ended = clock.t
    clock.t += 2
    assert agent.oom.task_exit(7, BATCH_STEP, 1) == "hold"  # the plugin asks again: still waiting
    clock.t += 1
    push_output(agent, tmp_path, TORCH_TEXT, generation=2)  # the helper's next round lists it
    (end,) = agent.oom_ends.waiting()  # judged with the list, before the same round reads the ends
    assert end["evidence"] == "reported" and end["seen_in"] == "output:pytorch:torch-native"
    assert end["asked_bytes"] == 10 * GIB and end["at"] == ended  # its hold counts from the step's end
    assert agent.oom.task_exit(7, BATCH_STEP, 1) == "hold"
    ops.dispatch(agent, "oom_settle", {"job_id": 7, "outcome": "requeued"}, ROOT)
    assert agent.oom.task_exit(7, BATCH_STEP, 1) == "done" and agent.oom.awaited == {}


def helper_lists(agent, clock, every_s: float, count: int, first_generation: int = 1) -> int:
    """``count`` lists that do not name job 7, one every ``every_s`` seconds; the next generation."""
    for g in range(first_generation, first_generation + count):
        ops.dispatch(agent, "jobs", {"job_ids": [3], "generation": g}, ROOT)
        clock.t += every_s
    return first_generation + count


def test_a_list_without_the_job_keeps_it_waiting_and_the_hold_still_ends_it(pushed, tmp_path):
    agent, backend, clock = pushed
    generation = helper_lists(agent, clock, 1.0, 3)  # the helper's cycle: 1 s, lists made before it started
    run_at(agent, backend, 7, 5 * GIB)
    assert agent.oom.task_exit(7, BATCH_STEP, 1) == "hold"
    helper_lists(agent, clock, 1.0, 2, generation)  # still not naming it
    assert agent.oom.task_exit(7, BATCH_STEP, 1) == "hold"
    clock.t += HOLD_S - 2
    assert agent.oom.task_exit(7, BATCH_STEP, 1) == "done"  # no list in time: judged without its output
    assert agent.oom_ends.waiting() == [] and agent.oom.awaited == {}


def test_a_slow_helpers_cycle_stretches_the_wait_for_its_list(pushed, tmp_path):
    """slurmctld answering in 5 s stretched the helper's cycle to 20.6 s: a fixed 20 s hold let the
    job's end go one list too early (seen in CI on 24.11), and its OOM end failed the job."""
    agent, backend, clock = pushed
    generation = helper_lists(agent, clock, 20.6, 4)
    assert agent.list_running_jobs.pace_s() == pytest.approx(20.6)
    run_at(agent, backend, 7, 5 * GIB)
    assert agent.oom.task_exit(7, BATCH_STEP, 1) == "hold"
    clock.t += 20.5  # past the old fixed hold, within 2.5 cycles
    assert agent.oom.task_exit(7, BATCH_STEP, 1) == "hold"
    push_output(agent, tmp_path, TORCH_TEXT, generation=generation)  # the list that names it
    (end,) = agent.oom_ends.waiting()
    assert end["seen_in"] == "output:pytorch:torch-native"
    clock.t += 20.0  # the helper's next round answers it: still held (40.5 s after the end)
    assert agent.oom.task_exit(7, BATCH_STEP, 1) == "hold"
    ops.dispatch(agent, "oom_settle", {"job_id": 7, "outcome": "requeued"}, ROOT)
    assert agent.oom.task_exit(7, BATCH_STEP, 1) == "done"


def test_the_stretched_hold_still_ends(pushed, tmp_path):
    agent, backend, clock = pushed
    helper_lists(agent, clock, 1000.0, 3)  # a helper that lists once in a long while
    run_at(agent, backend, 7, 5 * GIB)
    agent.oom_ends.alloc_failed(7, 10 * GIB, 5 * GIB)
    assert agent.oom.task_exit(7, BATCH_STEP, 1) == "hold"
    clock.t += HOLD_MAX_S - 0.5
    assert agent.oom.task_exit(7, BATCH_STEP, 1) == "hold"
    clock.t += 0.5
    assert agent.oom.task_exit(7, BATCH_STEP, 1) == "done"
    assert [e["job_id"] for e in agent.oom_ends.waiting()] == [7]  # the helper may still requeue it


@pytest.mark.parametrize("pace, limit", [(None, HOLD_S), (1.0, HOLD_S), (8.0, HOLD_S), (10.0, 10.0 * HOLD_ROUNDS),
                                         (20.6, 20.6 * HOLD_ROUNDS), (500.0, HOLD_MAX_S), (float("nan"), HOLD_S),
                                         (float("inf"), HOLD_S), (-3.0, HOLD_S), (0.0, HOLD_S)])
def test_the_hold_follows_the_helpers_pace_within_bounds(pace, limit):
    assert hold_limit(HOLD_S, pace) == pytest.approx(limit)


def test_the_pace_is_the_median_gap_of_newer_lists_only():
    from slurm_plugin.agent.slurm_jobs import PushedJobs

    clock = Clock()
    jobs = PushedJobs(clock=clock)
    assert jobs.pace_s() is None
    for generation, gap in [(1, 1.0), (2, 30.0), (2, 2.0), (3, 3.0), (4, 0.0)]:  # generation 2 again: a retry
        assert jobs.update([1], generation)
        clock.t += gap
    assert not jobs.update([1], 1)  # an older list is refused and not timed
    assert jobs.pace_s() == pytest.approx(3.0)  # gaps 1, 32 (the retry is not a new list), 3


def test_a_list_that_names_the_job_without_text_lets_it_end(pushed, tmp_path):
    agent, backend, _ = pushed
    run_at(agent, backend, 7, 5 * GIB)
    assert agent.oom.task_exit(7, BATCH_STEP, 1) == "hold"
    push_output(agent, tmp_path, "loss=nan, giving up\n", generation=2)
    assert agent.oom_ends.waiting() == []
    assert agent.oom.task_exit(7, BATCH_STEP, 1) == "done" and agent.oom.awaited == {}


@pytest.mark.parametrize("code, waits", [(1, True), (134, True), (137, False), (143, False), (130, False)])
def test_only_an_exit_or_an_abort_waits_for_a_list_never_a_kill(pushed, code, waits):
    agent, backend, _ = pushed
    run_at(agent, backend, 7, 5 * GIB)  # a cancel's or a time limit's SIGTERM/SIGKILL never waits
    assert agent.oom.task_exit(7, BATCH_STEP, code) == ("hold" if waits else "done")
    assert (7 in agent.oom.awaited) is waits


@pytest.mark.parametrize("case", ["exit-0", "measured", "reported"])
def test_what_needs_no_output_never_waits_for_a_list(pushed, case):
    agent, backend, _ = pushed
    limit = backend.catalog(0).profile("1g.10gb").memory_mib * 1024**2
    run_at(agent, backend, 7, limit - 1024**2 if case == "measured" else 5 * GIB)
    if case == "reported":
        agent.oom_ends.alloc_failed(7, 10 * GIB, 5 * GIB)
    answer = agent.oom.task_exit(7, BATCH_STEP, 0 if case == "exit-0" else 1)
    assert agent.oom.awaited == {}
    if case == "exit-0":
        assert answer == "done"
    else:  # an OOM end at once, on what the node measured or the job reported
        assert answer == "hold" and [e["evidence"] for e in agent.oom_ends.waiting()] == [
            "measured" if case == "measured" else "reported"]


def test_without_pushed_lists_an_end_never_waits(node):
    agent, backend, _ = node  # another job lister (no output paths at all)
    run_at(agent, backend, 7, 5 * GIB)
    assert agent.oom.task_exit(7, BATCH_STEP, 1) == "done" and agent.oom.awaited == {}


def test_a_list_that_comes_while_the_output_is_read_does_not_end_the_wait(pushed, tmp_path, monkeypatch):
    """The plugin's ask read the output before the paths were known; the list that brought them
    came before the ask took the agent's lock. Before, the end was then judged without its
    output, and the job FAILED (seen on 26.05 in CI); now the next ask reads it."""
    agent, backend, _ = pushed
    run_at(agent, backend, 7, 5 * GIB)
    read = agent.oom.said_in_output

    def list_comes_meanwhile(a):
        said = read(a)  # nothing: no paths yet
        push_output(agent, tmp_path, TORCH_TEXT, generation=2)
        return said

    monkeypatch.setattr(agent.oom, "said_in_output", list_comes_meanwhile)
    assert agent.oom.task_exit(7, BATCH_STEP, 1) == "hold"
    monkeypatch.setattr(agent.oom, "said_in_output", read)
    assert agent.oom.task_exit(7, BATCH_STEP, 1) == "hold"  # the next ask: an OOM end on its word
    (end,) = agent.oom_ends.waiting()
    assert end["seen_in"] == "output:pytorch:torch-native"
