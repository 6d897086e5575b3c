"""Parsers on output recorded from Slurm 22.05.8, 24.11.5 and 26.05.5 (tests/data/slurm/README.md)."""
from __future__ import annotations

import json
import logging
from datetime import datetime, timezone
from pathlib import Path

import pytest

from slurm_plugin.slurm.errors import SlurmParseError
from packer.gres import GresItem
from slurm_plugin.slurm.model import SlurmVersion
from slurm_plugin.slurm.parse import (
    decode_exit_code,
    detect_dialect,
    loads,
    normalise_job_state,
    parse_job,
    parse_jobs,
    parse_jobs_document,
    parse_nodes,
    parse_nodes_document,
    parse_version_output,
)

DATA = Path(__file__).resolve().parents[2] / "data" / "slurm"


def sample(name: str) -> dict:
    return json.loads((DATA / name).read_text())


def by_id(doc: dict) -> dict:
    return {job.job_id: job for job in parse_jobs(doc, strict=True)}


# ------------------------------------------------------------------ dialects


def test_dialect_of_recorded_22_05() -> None:
    dialect = detect_dialect(sample("squeue_22.05_mixed.json"))
    assert dialect.parser == "v0.0.38"
    assert dialect.version == SlurmVersion(22, 5, 8)
    assert not dialect.structured_numbers


@pytest.mark.parametrize(
    "name, parser, version",
    [
        ("squeue_24.11_v0.0.42.json", "v0.0.42", SlurmVersion(24, 11, 5)),
        ("scontrol_24.11_show_job_v0.0.42.json", "v0.0.42", SlurmVersion(24, 11, 5)),
        ("sacct_24.11_v0.0.42.json", "v0.0.42", SlurmVersion(24, 11, 5)),
        ("squeue_26.05_v0.0.45.json", "v0.0.45", SlurmVersion(26, 5, 5)),
        ("scontrol_26.05_show_node_v0.0.45.json", "v0.0.45", SlurmVersion(26, 5, 5)),
        ("sacct_26.05_v0.0.45.json", "v0.0.45", SlurmVersion(26, 5, 5)),
    ],
)
def test_dialect_of_recorded_24_11_and_26_05(name: str, parser: str, version: SlurmVersion) -> None:
    dialect = detect_dialect(sample(name))
    assert (dialect.parser, dialect.version) == (parser, version)
    assert dialect.structured_numbers


def test_dialect_without_meta_and_from_version_only() -> None:
    assert detect_dialect({"jobs": []}).parser == "unknown"
    meta = {"meta": {"slurm": {"version": {"major": "23", "minor": "02", "micro": "7"}}}}
    assert detect_dialect(meta).parser == "v0.0.39"


@pytest.mark.parametrize(
    "text, version",
    [("slurm-wlm 22.05.8\n", SlurmVersion(22, 5, 8)), ("slurm 23.11.4", SlurmVersion(23, 11, 4)),
     ("slurm 24.05.0-0rc1", SlurmVersion(24, 5, 0))],
)
def test_version_output(text: str, version: SlurmVersion) -> None:
    assert parse_version_output(text) == version
    assert str(parse_version_output("slurm 24.05.1")) == "24.05.1"


def test_version_output_garbage_names_the_field() -> None:
    with pytest.raises(SlurmParseError, match="^version:"):
        parse_version_output("command not found")


# ------------------------------------------------------------------ 22.05 recorded


def test_recorded_22_05_jobs() -> None:
    jobs = by_id(sample("squeue_22.05_mixed.json"))
    assert len(jobs) == 14
    packed = jobs[4]  # --gres=gpu:1 rewritten by the shim to shard:2
    assert (packed.name, packed.user, packed.state, packed.partition) == ("packme", "root", "RUNNING", "gpu")
    assert packed.gres == (GresItem("shard", None, 2),)
    assert packed.gres_detail[0].indexes == (0,)
    assert packed.admin_comment == "gpupack: packed shard:2"
    assert packed.priority == 4294901756
    assert packed.batch_host == "node1"
    assert packed.submit_time == datetime.fromtimestamp(1795377447, tz=timezone.utc)
    assert packed.state_reason is None and packed.exit_code == 0
    assert jobs[5].gres == (GresItem("gpu", None, 1, per="job"),)  # --gpus=1
    assert jobs[6].gres == (GresItem("gpu", None, 1, per="task"),)  # --gpus-per-task=1
    assert jobs[7].gres == (GresItem("gpu", "h100", 2),)
    assert jobs[7].state_reason == "Resources"
    assert jobs[8].exclusive is True and jobs[4].exclusive is False
    assert jobs[9].nodes == "node[1-2]" and len(jobs[9].gres_detail) == 2
    assert jobs[10].held is True and jobs[10].priority == 0 and jobs[10].state_reason == "JobHeldUser"
    assert jobs[11].gres == () and jobs[11].state == "COMPLETED"
    assert (jobs[12].state, jobs[12].exit_code, jobs[12].state_reason) == ("FAILED", 3, "NonZeroExitCode")
    assert jobs[14].name == 'we"ird %x name' and jobs[14].comment == "user comment"
    assert jobs[1].end_time is not None and jobs[7].start_time is not None


def test_recorded_22_05_after_updates() -> None:
    jobs = by_id(sample("squeue_22.05_updated.json"))
    assert jobs[14].state == "PENDING" and jobs[14].restart_cnt == 1  # scontrol requeue
    assert jobs[14].state_reason == "BeginTime"
    assert jobs[13].admin_comment == "site note | gpupack: exclusive reason=no-history fp=1a2b3c4d5e6f7a8b"
    assert jobs[7].excluded_nodes == ("node2",)
    assert jobs[8].priority == 5000


def test_recorded_22_05_nodes_from_sinfo() -> None:
    doc = parse_nodes_document(sample("sinfo_22.05_nodes.json"), strict=True)
    node1, node2 = doc.nodes
    assert node1.name == "node1" and node1.state == ("MIXED",)
    assert node1.gres == (GresItem("gpu", "h100", 2), GresItem("shard", "h100", 16))
    assert (node1.gpus_total, node1.gpus_used, node1.gpu_indexes_used) == (2, 1, (1,))
    assert node1.shards_total == 16
    assert node1.shards_used is None  # 22.05 does not say how many shards are in use
    assert node2.gpu_indexes_used == (0,)
    assert node1.partitions == ("gpu",)


def test_recorded_controller_unreachable_is_an_error_list_not_a_crash() -> None:
    doc = parse_jobs_document(sample("squeue_22.05_controller_unreachable.json"))
    assert doc.jobs == ()
    assert doc.errors == ("slurm_load_jobs: Failed while looking for jobs (Unspecified error)",)


# ------------------------------------------------------------------ 24.11 and 26.05 recorded
# The mix of tests/data/slurm/record.sh, submitted to `gpupack devcluster` inside each release's
# Debian root: 24.11 jobs 25-37, 26.05 jobs 12-24 (a = packme ... m = requeued).


def test_recorded_24_11_jobs_from_scontrol() -> None:
    jobs = by_id(sample("scontrol_24.11_show_job_v0.0.42.json"))
    assert len(jobs) == 37  # scontrol shows finished jobs until MinJobAge
    packed = jobs[21]  # a `--gres=gpu:1` run rewritten by the shim
    assert (packed.name, packed.user, packed.state, packed.partition) == ("train", "root", "COMPLETED", "gpu")
    assert packed.gres == (GresItem("shard", None, 1),)
    assert packed.admin_comment is not None and packed.admin_comment.startswith("gpupack: packed shard:1 est=4.3GiB")
    assert packed.nodes == "node2" and packed.exit_code == 0
    assert jobs[25].gres == (GresItem("gpu", None, 1),) and jobs[25].state == "RUNNING"
    assert jobs[26].gres == (GresItem("gpu", None, 1, per="job"),)  # --gpus=1
    assert jobs[27].gres == (GresItem("gpu", None, 1, per="task"),)  # --gpus-per-task=1
    assert jobs[28].gres == (GresItem("gpu", "h100", 2),) and jobs[28].admin_comment == "gpupack: untouched reason=multi-gpu"
    assert (jobs[29].exclusive, jobs[29].state, jobs[29].state_reason) == (True, "PENDING", "Resources")
    assert jobs[25].exclusive is None  # 24.11 says nothing about a job that did not ask
    assert (jobs[30].state_reason, jobs[30].admin_comment) == ("Priority", "gpupack: untouched reason=multi-node")
    assert (jobs[31].held, jobs[31].priority, jobs[31].state_reason) == (True, 0, "JobHeldUser")
    assert (jobs[32].state, jobs[32].gres) == ("COMPLETED", ())
    assert (jobs[33].state, jobs[33].exit_code, jobs[33].state_reason) == ("FAILED", 3, "NonZeroExitCode")
    assert jobs[34].gres == (GresItem("shard", None, 4),) and jobs[34].admin_comment == "site note"
    # 24.11 gives a shard job's allocation per device, with no IDX list: its GPU is the one in use
    (detail,) = jobs[34].gres_detail
    assert (detail.per_device, detail.indexes) == (((0, 8), (4, 8)), (1,))
    assert jobs[35].name == 'we"ird %x name' and jobs[35].comment == "user comment"
    assert (jobs[36].state, jobs[36].exit_signal) == ("CANCELLED", None)  # cancelled while pending
    assert (jobs[1].state, jobs[1].exit_signal) == ("CANCELLED", 15)  # cancelled while running
    requeued = jobs[37]  # `scontrol requeue` of a running job: back to PENDING, held by its BeginTime
    assert (requeued.state, requeued.restart_cnt, requeued.state_reason) == ("PENDING", 1, "BeginTime")
    assert requeued.submit_time is not None and requeued.start_time is not None
    assert jobs[25].priority == 4294901735 and jobs[25].batch_host == "node1"


def test_recorded_24_11_squeue_lists_only_jobs_in_play() -> None:
    """24.11's `squeue --json` applies squeue's default state filter (22.05 listed every job)."""
    listed = by_id(sample("squeue_24.11_v0.0.42.json"))
    everything = by_id(sample("scontrol_24.11_show_job_v0.0.42.json"))
    assert sorted(listed) == [25, 26, 27, 28, 29, 30, 31, 34, 35, 37]
    assert all(not job.is_finished for job in listed.values())
    for job_id, job in listed.items():
        other = everything[job_id]
        for attribute in ("state", "gres", "admin_comment", "exclusive", "held", "priority", "nodes"):
            assert getattr(job, attribute) == getattr(other, attribute), (job_id, attribute)


def test_recorded_26_05_jobs() -> None:
    jobs = by_id(sample("scontrol_26.05_show_job_v0.0.45.json"))
    assert len(jobs) == 24
    assert [jobs[i].admin_comment[:22] for i in (8, 9, 10)] == ["gpupack: packed shard:"] * 3
    assert jobs[8].gres == (GresItem("shard", None, 1),)
    assert jobs[13].gres == (GresItem("gpu", None, 1, per="job"),)
    assert jobs[14].gres == (GresItem("gpu", None, 1, per="task"),)
    assert jobs[15].gres == (GresItem("gpu", "h100", 2),)
    # 26.05 prints `shared: []` for an --exclusive job and for one that did not ask alike; only
    # `scontrol show job` (Exclusive=NODE) tells them apart, so the adapter says "unknown"
    assert jobs[16].exclusive is None and jobs[16].state_reason == "Resources"
    assert (jobs[18].held, jobs[18].priority) == (True, 0)
    assert (jobs[20].state, jobs[20].exit_code) == ("FAILED", 3)
    assert jobs[21].gres == (GresItem("shard", None, 4),) and jobs[21].admin_comment == "site note"
    assert jobs[22].name == 'we"ird %x name'
    assert (jobs[24].state, jobs[24].restart_cnt) == ("RUNNING", 1)  # requeued, and already back
    squeue = by_id(sample("squeue_26.05_v0.0.45.json"))
    assert sorted(squeue) == [12, 13, 14, 15, 16, 17, 18, 21, 22, 24]


def test_same_job_reads_the_same_in_every_dialect() -> None:
    """A running shard job, as 22.05 squeue, 24.11 and 26.05 scontrol print it."""
    old = by_id(sample("squeue_22.05_mixed.json"))[4]
    for name, job_id in (("scontrol_24.11_show_job_v0.0.42.json", 34), ("scontrol_26.05_show_job_v0.0.45.json", 21)):
        new = by_id(sample(name))[job_id]
        assert [item.name for item in new.gres] == [item.name for item in old.gres] == ["shard"]
        for attribute in ("partition", "exit_code", "held", "user", "state"):
            assert getattr(old, attribute) == getattr(new, attribute), (name, attribute)


@pytest.mark.parametrize(
    "name, used_text",
    [("scontrol_24.11_show_node_v0.0.42.json", "0/8,4/8"), ("scontrol_26.05_show_node_v0.0.45.json", "-/8,4/8")],
)
def test_recorded_nodes(name: str, used_text: str) -> None:
    node1, node2, node3 = parse_nodes(sample(name), strict=True)
    for node in (node1, node2, node3):
        assert node.gres == (GresItem("gpu", "h100", 2), GresItem("shard", "h100", 16))
        assert node.partitions == ("gpu",) and node.state == ("MIXED",)
        assert node.shards_total == 16
    # node2: GPU 0 taken whole by --gpus-per-task, GPU 1 holds the --gres=shard:4 job
    assert (node2.gpus_used, node2.gpu_indexes_used, node2.shards_used) == (1, (0,), 4)
    assert sample(name)["nodes"][1]["gres_used"].endswith(f"({used_text})")
    assert (node1.gpu_indexes_used, node1.shards_used) == ((0, 1), 0)
    assert node3.gpus_used == 2  # the --gres=gpu:h100:2 job


@pytest.mark.parametrize("name", ["sinfo_24.11_v0.0.42.json", "sinfo_26.05_v0.0.45.json"])
def test_recorded_sinfo_of_24_11_and_later_points_to_scontrol(name: str) -> None:
    assert "sinfo" in sample(name)  # 23.11+ sinfo --json groups nodes; the adapter reads scontrol
    with pytest.raises(SlurmParseError, match="use `scontrol --json show node`"):
        parse_nodes(sample(name))


@pytest.mark.parametrize("name, packed_id, requeued_id",
                         [("sacct_24.11_v0.0.42.json", 21, 37), ("sacct_26.05_v0.0.45.json", 8, 24)])
def test_recorded_sacct(name: str, packed_id: int, requeued_id: int) -> None:
    jobs = by_id(sample(name))
    packed = jobs[packed_id]
    assert (packed.name, packed.user, packed.state, packed.nodes) == ("train", "root", "COMPLETED", "node2")
    assert packed.admin_comment is not None and packed.admin_comment.startswith("gpupack: packed shard:1")
    assert packed.priority is not None and packed.start_time is not None and packed.end_time is not None
    # what slurmdbd keeps differs from the controller's view:
    # - no gres: the default AccountingStorageTRES holds cpu, mem, node, billing only
    assert all(job.gres == () for job in jobs.values())
    # - the AdminComment reaches the database when the job ends
    assert all(job.admin_comment is None for job in jobs.values() if job.state == "RUNNING")
    # - a `"` in a job name is stored as a backtick
    assert {job.name for job in jobs.values()} >= {"we`ird %x name"}
    failed = [job for job in jobs.values() if job.state == "FAILED"]
    assert failed and all(job.exit_code == 3 for job in failed)
    assert jobs[requeued_id].base_state in ("PENDING", "RUNNING")


def test_recorded_sacct_requeued_job() -> None:
    """24.11's database holds a requeued job that waits as `state.current: [PENDING, REQUEUED]`
    with restart_cnt still 0; 26.05's had already run again and counts the restart."""
    waiting = by_id(sample("sacct_24.11_v0.0.42.json"))[37]
    assert (waiting.state, waiting.state_flags, waiting.base_state) == ("REQUEUED", ("PENDING",), "PENDING")
    assert waiting.restart_cnt == 0
    again = by_id(sample("sacct_26.05_v0.0.45.json"))[24]
    assert (again.state, again.restart_cnt) == ("RUNNING", 1)


# ------------------------------------------------------------------ shapes and tolerance


@pytest.mark.parametrize(
    "value, expected",
    [
        ("RUNNING", ("RUNNING", ())),
        (["RUNNING"], ("RUNNING", ())),
        (["PENDING", "REQUEUED"], ("REQUEUED", ("PENDING",))),
        (["RUNNING", "COMPLETING"], ("COMPLETING", ("RUNNING",))),
        (["pending"], ("PENDING", ())),
        ([], (None, ())),
    ],
)
def test_job_states(value: object, expected: tuple) -> None:
    assert normalise_job_state(value) == expected


@pytest.mark.parametrize(
    "value, expected",
    [
        (0, (0, None)),
        (768, (3, None)),  # 22.05 wait status: exit 3
        (9, (0, 9)),  # killed by signal 9
        ("3:0", (3, None)),
        ({"status": ["SUCCESS"], "return_code": {"set": True, "infinite": False, "number": 0}}, (0, None)),
        ({"status": ["SIGNALED"], "return_code": {"set": True, "number": 0},
          "signal": {"id": {"set": True, "number": 15}, "name": "SIGTERM"}}, (0, 15)),
        (None, (None, None)),
    ],
)
def test_exit_codes(value: object, expected: tuple) -> None:
    assert decode_exit_code(value) == expected


def test_unknown_fields_ignored_and_missing_ones_none() -> None:
    job = parse_job({"job_id": 5, "brand_new_field": {"x": [1]}})
    assert job.job_id == 5
    assert (job.name, job.state, job.priority, job.submit_time, job.admin_comment) == (None,) * 5
    assert job.gres == () and job.excluded_nodes == ()


def test_infinite_and_unset_numbers_read_as_none() -> None:
    job = parse_job({"job_id": 5, "priority": {"set": True, "infinite": True, "number": 0},
                     "restart_cnt": {"set": False, "infinite": False, "number": 0}})
    assert job.priority is None and job.restart_cnt is None


def test_bad_field_is_logged_and_left_out(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        job = parse_job({"job_id": 5, "priority": "high", "job_state": 3, "name": ["x"]}, path="jobs[0]")
    assert job.priority is None and job.state is None and job.name is None
    assert "jobs[0].priority" in caplog.text and "jobs[0].job_state" in caplog.text


def test_strict_mode_names_the_bad_field() -> None:
    with pytest.raises(SlurmParseError, match=r"^jobs\[0\]\.priority: expected a number") as info:
        parse_jobs({"jobs": [{"job_id": 5, "priority": "high"}]}, strict=True)
    assert info.value.field == "jobs[0].priority"


@pytest.mark.parametrize("record", [{"name": "x"}, {"job_id": "abc"}, {"job_id": 0}, "not a job", {"job_id": True}])
def test_a_record_without_a_job_id_is_skipped_and_reported(record: object) -> None:
    doc = parse_jobs_document({"jobs": [record, {"job_id": 9}]})
    assert [job.job_id for job in doc.jobs] == [9]
    assert len(doc.skipped) == 1 and "jobs[0]" in doc.skipped[0]
    with pytest.raises(SlurmParseError, match=r"jobs\[0\]"):
        parse_jobs_document({"jobs": [record]}, strict=True)


@pytest.mark.parametrize("doc", [{}, {"jobs": {"1": {}}}, {"jobs": None}])
def test_a_document_without_a_job_list(doc: dict) -> None:
    with pytest.raises(SlurmParseError, match="^jobs:"):
        parse_jobs(doc)


def test_nodes_document_errors() -> None:
    with pytest.raises(SlurmParseError, match="scontrol --json show node"):
        parse_nodes({"sinfo": []})
    doc = parse_nodes_document({"nodes": [{"state": "idle"}, {"name": "n1", "state": ["IDLE"], "gres": 7}]})
    assert [n.name for n in doc.nodes] == ["n1"] and doc.nodes[0].gres == ()
    assert "nodes[0].name" in doc.skipped[0]


def test_loads_names_the_source() -> None:
    with pytest.raises(SlurmParseError, match="^squeue: not JSON"):
        loads("squeue: error: oops", source="squeue")
    with pytest.raises(SlurmParseError, match="expected a JSON object"):
        loads("[1, 2]")
    assert loads(b'{"jobs": []}') == {"jobs": []}


# ------------------------------------------------------------------ what regrouping reads

@pytest.mark.parametrize("name", ["squeue_22.05_mixed.json", "squeue_24.11_v0.0.42.json",
                                  "squeue_26.05_v0.0.45.json"])
def test_recorded_requeue_flag_qos_and_time_limit(name: str) -> None:
    """Every recorded release says whether a job may be requeued (JobRequeue=1 by default);
    none prints the job's --signal (its checkpoint signal is read from the batch script)."""
    doc = sample(name)
    jobs = by_id(doc)
    assert jobs and all(j.requeue is True for j in jobs.values())
    assert all(j.required_nodes == () for j in jobs.values())  # "" when no -w
    raw = doc["jobs"][0]
    assert not any("warn" in k or k == "signal" for k in raw)
    if name.startswith("squeue_22.05"):
        assert all(j.qos is None for j in jobs.values())  # ""
        assert jobs[1].time_limit_s is None and jobs[9].time_limit_s == 525600 * 60  # null, minutes
    else:
        minutes = raw["time_limit"]["number"]
        assert jobs[raw["job_id"]].time_limit_s == minutes * 60
    if "24.11" in name:
        assert {j.qos for j in jobs.values()} == {"normal"}


def test_requeue_false_and_unlimited_time_limit() -> None:
    job = parse_job({"job_id": 5, "requeue": False, "qos": "", "time_limit": {"set": True, "infinite": True,
                                                                              "number": 0}})
    assert job.requeue is False and job.qos is None and job.time_limit_s is None
    assert parse_job({"job_id": 6, "time_limit": 30}).time_limit_s == 1800
    assert parse_job({"job_id": 7, "required_nodes": "node[1-2]"}).required_nodes == ("node1", "node2")
