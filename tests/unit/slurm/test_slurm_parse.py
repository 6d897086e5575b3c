"""Parsers on recorded Slurm 22.05 output and on 23.11+/24.05 samples built from the spec."""
from __future__ import annotations

import json
import logging
from datetime import datetime, timezone
from pathlib import Path

import pytest

from slurm_plugin.slurm.errors import SlurmParseError
from slurm_plugin.slurm.model import GresItem, SlurmVersion
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


def test_dialect_of_23_11_and_24_05() -> None:
    dialect = detect_dialect(sample("squeue_23.11_v0.0.40.json"))
    assert (dialect.parser, dialect.version) == ("v0.0.40", SlurmVersion(23, 11, 4))
    assert dialect.structured_numbers
    assert detect_dialect(sample("sacct_24.05_v0.0.41.json")).parser == "v0.0.41"


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


# ------------------------------------------------------------------ 23.11+ from the spec


def test_23_11_jobs() -> None:
    jobs = by_id(sample("squeue_23.11_v0.0.40.json"))
    assert jobs[101].state == "RUNNING" and jobs[101].state_flags == ()
    assert jobs[101].gres == (GresItem("shard", None, 2),)
    assert jobs[101].priority == 4294901100
    assert jobs[101].start_time == datetime.fromtimestamp(1717000005, tz=timezone.utc)
    assert jobs[103].gres == (GresItem("gpu", "h100", 2),)
    assert jobs[104].gres == (GresItem("gpu", None, 1, per="job"),)
    assert jobs[105].gres == (GresItem("gpu", None, 1, per="task"),)
    assert jobs[106].exclusive is True and jobs[101].exclusive is False
    assert jobs[107].held is True and jobs[107].priority == 0
    requeued = jobs[108]
    assert (requeued.state, requeued.state_flags, requeued.base_state) == ("REQUEUED", ("PENDING",), "PENDING")
    assert requeued.restart_cnt == 1 and requeued.excluded_nodes == ("node1", "node2")
    assert jobs[109].end_time is not None and jobs[109].is_finished
    assert (jobs[110].state, jobs[110].exit_code) == ("FAILED", 3)
    assert (jobs[111].state, jobs[111].exit_signal) == ("CANCELLED", 9)
    assert jobs[112].state == "COMPLETING" and jobs[112].base_state == "RUNNING"
    assert jobs[112].node_count == 2
    assert jobs[103].start_time is None  # {"number": 0} is unset


def test_same_job_reads_the_same_in_both_dialects() -> None:
    old = by_id(sample("squeue_22.05_mixed.json"))[4]
    new = by_id(sample("squeue_23.11_v0.0.40.json"))[101]
    for attribute in ("state", "gres", "partition", "exclusive", "exit_code", "held"):
        assert getattr(old, attribute) == getattr(new, attribute), attribute


def test_23_11_nodes() -> None:
    node1, node2, node3 = parse_nodes(sample("scontrol_23.11_show_node_v0.0.40.json"), strict=True)
    assert node1.gres == (GresItem("gpu", "h100", 2), GresItem("shard", "h100", 16))
    assert (node1.gpus_used, node1.shards_total, node1.shards_used) == (1, 16, 4)
    assert node2.state == ("IDLE", "DRAIN") and node2.reason == "gpu reset"
    assert node2.shards_used == 0
    assert node3.shards_total == 0 and node3.shards_used == 0


def test_24_05_sacct() -> None:
    jobs = by_id(sample("sacct_24.05_v0.0.41.json"))
    first = jobs[91]
    assert (first.name, first.user, first.state) == ("profile-me", "alice", "COMPLETED")
    assert first.admin_comment == "gpupack: exclusive reason=no-history fp=0f0e0d0c0b0a0908"
    assert GresItem("gpu", "h100", 1, per="job") in first.gres
    assert jobs[92].gres == (GresItem("shard", None, 2, per="job"),)
    assert (jobs[93].state, jobs[93].exit_code, jobs[93].state_reason) == ("FAILED", 3, "NonZeroExitCode")
    assert jobs[94].start_time is None and jobs[94].nodes is None
    assert first.priority == 4294901000


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
