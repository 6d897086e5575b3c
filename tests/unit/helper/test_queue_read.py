"""How the watcher reads the queue (slurm_plugin/helper/queue_read.py) on the stateful Slurm fake:
which commands each round runs per release, what it reuses, and that the jobs come out as the
JSON would give them."""
from __future__ import annotations

import pytest

from slurm_plugin.helper.queue_read import QueueReader
from slurm_plugin.slurm.fake import FakeSlurm
from slurm_plugin.slurm.runner import SlurmRunner


class Clock:
    def __init__(self, t: float = 1000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def world(release: str, **reader):
    fake = FakeSlurm(release)
    fake.submit(state="RUNNING", nodes="node1", gres="gres:shard:2", gres_detail=["shard:2(IDX:0)"])
    fake.submit(gres="gres:shard:4", admin_comment="gpupack: packed shard:4", excluded_nodes="node2")
    fake.submit(gres="gres:gpu:1", name="whole")
    runner = SlurmRunner(executor=fake)
    runner.version()
    mono = Clock()
    return fake, runner, mono, QueueReader(lambda: runner, clock=Clock(5.0), monotonic=mono, **reader)


def calls(fake, since: int) -> list[str]:
    """The Slurm commands run since call number ``since``, by their kind."""
    def kind(argv: list[str]) -> str:
        if "--json" in argv:
            return "json-ids" if any(a.startswith("--jobs=") for a in argv) else "json-all"
        if "--only-job-state" in argv:
            return "states"
        if any(a.startswith("--Format=") for a in argv):
            return "formatted-ids" if any(a.startswith("--jobs=") for a in argv) else "formatted"
        return " ".join(argv[:2])
    return [kind(a) for a in fake.calls[since:]]


def test_2205_reads_formatted_a_new_runs_detail_by_id_and_the_json_only_for_pending_packed_jobs():
    fake, runner, mono, reader = world("22.05.8")
    first = reader.read()
    assert first.kind == "json" and calls(fake, 1) == ["json-all"]  # the first read reconciles
    n = len(fake.calls)
    mono.t += 1
    second = reader.read()
    assert second.kind == "formatted" and calls(fake, n) == ["formatted"]  # details held from the JSON
    assert {j.job_id: j for j in second.jobs}[1].gres_detail == {j.job_id: j for j in first.jobs}[1].gres_detail != ()
    assert {j.job_id: j for j in second.jobs}[2].excluded_nodes == ("node2",)  # 22.05's -O lacks it
    fake.submit(job_id=4, state="RUNNING", nodes="node2", gres="gres:gpu:1", gres_detail=["gpu:1(IDX:1)"],
                excluded_nodes="node3")
    n = len(fake.calls)
    mono.t += 1  # within queue_refresh_s: the new run's detail all the same, by id
    third = reader.read()
    assert calls(fake, n) == ["formatted", "scontrol -d"]  # `scontrol -d show job 4`, not the whole listing
    assert {j.job_id: j for j in third.jobs}[4].gres_detail[0].indexes == (1,)
    assert {j.job_id: j for j in third.jobs}[4].excluded_nodes == ("node3",)
    assert third.detail_jobs == 1 and third.commands == 2
    fake.submit(job_id=5, gres="gres:shard:2", admin_comment="gpupack: packed shard:2", excluded_nodes="node1")
    n = len(fake.calls)
    mono.t += 1  # within queue_refresh_s of the last whole listing: pending job 5 waits for its detail
    fourth = reader.read()
    assert calls(fake, n) == ["formatted"] and {j.job_id: j for j in fourth.jobs}[5].excluded_nodes == ()
    mono.t += 10
    n = len(fake.calls)
    assert {j.job_id: j for j in reader.read().jobs}[5].excluded_nodes == ("node1",)
    assert calls(fake, n) == ["formatted", "json-all"]  # 22.05's JSON ignores --jobs: the whole listing


@pytest.mark.parametrize("name, comment", [("evil\n     Nodes=node2 CPU_IDs=0 Mem=0 GRES=gpu:2(IDX:0-1)", ""),
                                           ("x", "a\n   JOB_GRES=gpu:2\n     Nodes=node2 CPU_IDs=0 Mem=0 GRES=gpu:2(IDX:0-1)"),
                                           ("JobId=9 Socks/Node=*", "")])
def test_2205_a_running_jobs_record_a_user_could_forge_is_not_read_by_id(name, comment):
    fake, runner, mono, reader = world("22.05.8")
    reader.read()
    fake.submit(job_id=4, state="RUNNING", nodes="node2", gres="gres:gpu:1", gres_detail=["gpu:1(IDX:1)"],
                name=name, comment=comment)
    mono.t += 1
    n = len(fake.calls)
    read = {j.job_id: j for j in reader.read().jobs}
    assert calls(fake, n) == ["formatted", "scontrol -d"] and read[4].gres_detail == ()  # refused: it waits
    assert reader.by_id.refusals == 1
    mono.t += 1
    n = len(fake.calls)
    reader.read()
    assert calls(fake, n) == ["formatted"]  # not asked again for the same run
    mono.t += 10
    n = len(fake.calls)
    read = {j.job_id: j for j in reader.read().jobs}
    assert calls(fake, n) == ["formatted", "json-all"] and read[4].gres_detail[0].indexes == (1,)  # the JSON's


def test_2205_reads_at_most_a_rounds_share_of_runs_by_id():
    fake, runner, mono, reader = world("22.05.8")
    reader.read()
    for job in range(10, 35):
        fake.submit(job_id=job, state="RUNNING", nodes="node2", gres="gres:gpu:1", gres_detail=["gpu:1(IDX:0)"])
    mono.t += 1
    n = len(fake.calls)
    read = reader.read()
    assert calls(fake, n) == ["formatted"] + ["scontrol -d"] * 20 and read.detail_jobs == 20
    mono.t += 1
    n = len(fake.calls)
    read = reader.read()
    assert calls(fake, n) == ["formatted"] + ["scontrol -d"] * 5
    assert all(j.gres_detail for j in read.jobs if j.state == "RUNNING")


def test_2311_asks_for_the_detail_of_only_the_jobs_that_need_it():
    fake, runner, mono, reader = world("23.11.4")
    reader.read()
    fake.submit(job_id=4, state="RUNNING", nodes="node2", gres="gres:gpu:1", gres_detail=["gpu:1(IDX:1)"])
    fake.submit(job_id=5, gres="gres:shard:2", admin_comment="gpupack: packed shard:2", excluded_nodes="node1")
    n = len(fake.calls)
    mono.t += 1
    read = {j.job_id: j for j in reader.read().jobs}
    assert calls(fake, n) == ["states", "formatted", "json-ids"]
    assert "--jobs=4,5" in fake.calls[-1]  # the new run and the new pending packed job (no ExcNodes in -O)
    assert read[4].gres_detail[0].indexes == (1,) and read[5].excluded_nodes == ("node1",)
    assert read[2].excluded_nodes == ("node2",)  # held from the first listing
    n = len(fake.calls)
    mono.t += 1
    reader.read()
    assert calls(fake, n) == ["states"]  # nothing changed: the listing and its details stand


def test_2411_reuses_the_listing_while_no_job_changed_state():
    fake, runner, mono, reader = world("24.11.5", refresh_s=10.0)
    reader.read()
    mono.t += 1
    n = len(fake.calls)
    formatted = reader.read()
    assert calls(fake, n) == ["states", "formatted"] and formatted.kind == "formatted"
    mono.t += 1
    n = len(fake.calls)
    same = reader.read()
    assert calls(fake, n) == ["states"] and same.kind == "unchanged" and same.jobs == formatted.jobs
    assert same.taken_at == 5.0 and same.commands == 1
    runner.update_job(3, Priority=5)  # the watcher changed a job: read again
    mono.t += 1
    n = len(fake.calls)
    assert reader.read().kind == "formatted" and calls(fake, n) == ["states", "formatted"]
    fake.jobs[3].state = "RUNNING"  # a state changed: that job alone is read again, by id
    fake.jobs[3].nodes = "node2"
    mono.t += 1
    n = len(fake.calls)
    changed = reader.read()
    assert changed.kind == "changes" and calls(fake, n) == ["states", "formatted-ids", "json-ids"]
    assert "--jobs=3" in fake.calls[-2] and "--jobs=3" in fake.calls[-1]  # and its GPUs, now it runs
    assert {j.job_id: (j.state, j.nodes) for j in changed.jobs}[3] == ("RUNNING", "node2")
    mono.t += 1
    assert reader.read().kind == "unchanged"
    mono.t += 10  # queue_refresh_s without a full read
    assert reader.read().kind == "formatted"


def test_followed_jobs_are_listed_in_whatever_state_and_the_whole_json_comes_back_to_reconcile():
    fake, runner, mono, reader = world("24.11.5", reconcile_s=60.0)
    reader.read()
    fake.jobs[1].state = "COMPLETED"
    mono.t += 1
    n = len(fake.calls)
    read = reader.read(also={1})
    assert calls(fake, n) == ["states", "formatted", "formatted-ids"]  # the first after the JSON: in full
    assert {j.job_id: j.state for j in read.jobs}[1] == "COMPLETED"
    mono.t += 1
    assert reader.read(also={1}).kind == "unchanged"  # job 1 is in the listing it keeps
    n = len(fake.calls)
    assert reader.read(also={1, 99}).kind == "changes"  # a newly followed job: read by id
    assert calls(fake, n) == ["states", "formatted-ids"]
    assert 1 not in {j.job_id for j in reader.read().jobs}  # followed no more, finished: left out
    mono.t += 60
    n = len(fake.calls)
    assert reader.read().kind == "json" and calls(fake, n) == ["json-all"]


def test_a_runner_without_the_formatted_read_is_read_as_before():
    from slurm_plugin.slurm.model import Job

    class Plain:
        def jobs_in_play(self, also=()):
            return [Job(job_id=j, state="COMPLETED") for j in sorted(also)]

    reader = QueueReader(lambda: Plain(), clock=Clock(7.0))
    for _ in range(2):
        read = reader.read(also={3})
        assert [j.job_id for j in read.jobs] == [3] and read.kind == "json" and read.taken_at == 7.0


def test_query_time_is_what_the_slurm_commands_took(monkeypatch):
    fake, runner, mono, reader = world("22.05.8")
    slow = Clock(0.0)

    def executor(args, env, timeout):
        slow.t += 2.5  # slurmctld takes 2.5 s a command
        return fake(args, env, timeout)

    runner.executor = executor
    monkeypatch.setattr("slurm_plugin.slurm.runner.time.monotonic", slow)  # the runner times commands by it
    read = reader.read()
    assert read.query_s == 2.5 and read.commands == 1


def _listed(jobs) -> dict[int, tuple]:
    return {j.job_id: (j.state, j.nodes, j.gres, j.name, j.admin_comment) for j in jobs}


@pytest.mark.parametrize("seed", [7, 8, 9])
def test_merged_listings_are_what_a_full_read_would_give_round_after_round(seed):
    """Jobs come, start, end, are purged and followed, a few each round: each merged listing
    holds the jobs, and their states, a full formatted read of the same moment gives."""
    import random

    rng = random.Random(seed)
    fake, runner, mono, reader = world("24.11.5", refresh_s=1e9, reconcile_s=1e9)
    reader.read()
    kinds = set()
    for step in range(60):
        for _ in range(rng.randint(0, 3)):
            action = rng.choice(["submit", "start", "end", "purge"])
            pending = [j for j in fake.jobs.values() if j.state == "PENDING"]
            running = [j for j in fake.jobs.values() if j.state == "RUNNING"]
            ended = [j for j in fake.jobs.values() if j.state == "COMPLETED"]
            if action == "submit":
                fake.submit(gres=rng.choice(["gres:gpu:1", "gres:shard:2"]), name=f"j{step}")
            elif action == "start" and pending:
                job = rng.choice(pending)
                job.state, job.nodes = "RUNNING", "node1"
            elif action == "end" and running:
                rng.choice(running).state = "COMPLETED"
            elif action == "purge" and ended:
                del fake.jobs[rng.choice(ended).job_id]
        also = {j for j in fake.jobs if rng.random() < 0.1}
        mono.t += 1
        merged = reader.read(also=also)
        kinds.add(merged.kind)
        fresh = list(runner.formatted_jobs().jobs)  # a full read of the same moment
        extra = also - {j.job_id for j in fresh}
        fresh += list(runner.formatted_jobs(extra).jobs) if extra else []
        assert _listed(merged.jobs) == _listed(fresh), step
    assert "changes" in kinds


def test_many_changes_at_once_are_read_in_full():
    fake, runner, mono, reader = world("24.11.5")
    reader.read()
    mono.t += 1
    reader.read()
    for i in range(600):
        fake.submit(gres="gres:gpu:1", name=f"burst{i}")
    mono.t += 1
    n = len(fake.calls)
    assert reader.read().kind == "formatted" and calls(fake, n) == ["states", "formatted"]


def test_a_record_listed_again_with_the_same_detail_is_not_joined_again():
    fake, runner, mono, reader = world("22.05.8")
    reader.read()
    mono.t += 1
    second = {j.job_id: j for j in reader.read().jobs}
    mono.t += 1
    third = {j.job_id: j for j in reader.read().jobs}
    assert third[1] is second[1] and third[2] is second[2]  # the same record, the same detail: one join
    assert third[1].gres_detail != () and third[2].excluded_nodes == ("node2",)
    fake.jobs[2].admin_comment = "gpupack: packed shard:4 avoid=node3"  # its record moves: joined anew
    fake.jobs[2].excluded_nodes = "node3"
    mono.t += 10
    fourth = {j.job_id: j for j in reader.read().jobs}
    assert fourth[1] is third[1]
    assert fourth[2] is not third[2] and fourth[2].excluded_nodes == ("node3",)
