"""The formatted queue (`squeue -h -O`, slurm_plugin.slurm.formatted) against what real Slurm
printed (tests/data/slurm/squeue_<V>_formatted.txt, recorded by the live test
`test_formatted_listing_reads_as_the_json` with the markers of token 0123456789abcdef, beside
the JSON of the same moment), and against text a hostile user could make Slurm print."""
from __future__ import annotations

from pathlib import Path

import pytest

from slurm_plugin.slurm.fake import FakeSlurm
from slurm_plugin.slurm.formatted import (
    FIELDS, Markers, RecordMemo, carries_excluded, fields_for, format_spec, parse_formatted,
)
from slurm_plugin.slurm.model import SlurmVersion
from slurm_plugin.slurm.parse import loads, parse_jobs_document
from slurm_plugin.slurm.runner import SlurmRunner

DATA = Path(__file__).resolve().parents[2] / "data" / "slurm"
RECORDED = Markers("0123456789abcdef")
RELEASES = {"22.05": SlurmVersion(22, 5, 8), "24.11": SlurmVersion(24, 11, 5), "26.05": SlurmVersion(26, 5, 5)}
#: names and comments the recording submitted (test_slurm_adapter_live.HOSTILE)
HOSTILE = ("two words", "line\nbreak", "pipes|and,commas:0", "tab\there ~x~", "ünïcødé ✓ 名前", 'we"ird %x name')
#: what JSON and formatted text give differently on purpose: squeue -O prints the output path for
#: StdErr where none was given (22.05) or "(null)" (24.11+); both mean "with the output"
NOT_COMPARED = {"std_out", "std_err"}


def recorded(label: str):
    version = RELEASES[label]
    fields = fields_for(version)
    listing = parse_formatted((DATA / f"squeue_{label}_formatted.txt").read_text(), RECORDED, fields)
    json_jobs = parse_jobs_document(loads((DATA / f"squeue_{label}_formatted_json.json").read_text())).jobs
    return fields, listing, {j.job_id: j for j in json_jobs}


@pytest.mark.parametrize("label", sorted(RELEASES))
def test_each_release_reads_as_its_json(label):
    fields, listing, json_jobs = recorded(label)
    assert listing.skipped == ()
    assert len(listing.jobs) == 7 and {j.job_id for j in listing.jobs} <= set(json_jobs)
    compared = 0
    for job in listing.jobs:
        for _name, attr, _read in fields:
            attr = "gres" if attr.startswith("tres_per_") else attr
            if attr not in NOT_COMPARED:
                assert getattr(job, attr) == getattr(json_jobs[job.job_id], attr), (label, job.job_id, attr)
                compared += 1
        assert job.held == json_jobs[job.job_id].held
    assert compared > 7 * 25


@pytest.mark.parametrize("label", sorted(RELEASES))
def test_hostile_names_and_comments_come_back_whole(label):
    _fields, listing, _json = recorded(label)
    by_name = {j.name: j for j in listing.jobs}
    for text in HOSTILE:
        assert by_name[text].comment == f"{text} c"
        assert by_name[text].state == "PENDING" and by_name[text].held
    other = by_name["x,y"]
    assert other.time_limit_s == 93780 and other.gres[0].name == "gpu"
    assert other.excluded_nodes == (("node3",) if label != "22.05" else ())  # 22.05: from the JSON


def test_excluded_nodes_where_the_release_prints_them():
    assert not carries_excluded(SlurmVersion(22, 5, 8)) and not carries_excluded(SlurmVersion(23, 11, 4))
    assert carries_excluded(SlurmVersion(24, 5, 0)) and carries_excluded(SlurmVersion(26, 5, 5))
    assert fields_for(SlurmVersion(26, 5, 5))[-1][0] == "Name"  # the user's text last


def test_the_format_is_one_argument_squeue_splits_only_at_its_commas():
    markers = Markers.new()
    spec = format_spec(FIELDS, markers)
    assert spec.count(",") == len(FIELDS) - 1
    assert all(token.split(":", 1)[1].startswith("0~") for token in spec.split(","))
    assert Markers.new().token != markers.token and len(markers.token) == 12


def _line(values: list[str], markers: Markers) -> str:
    return markers.field_end.join(values) + markers.record_end + "\n"


def _values(job_id: str, name: str, **over: str) -> list[str]:
    base = {"JobId": job_id, "State": "PENDING", "Reason": "Priority", "PriorityLong": "100", "NumNodes": "1",
            "SubmitTime": "2026-01-01T00:00:00", "TimeLimit": "UNLIMITED", "exit_code": "0:0", "Name": name,
            "RestartCnt": "0", "Requeue": "1", "ArrayJobId": job_id, "ArrayTaskId": "N/A", "UserId": "1000"}
    base.update(over)
    return [base.get(name_, "(null)") for name_, _a, _r in FIELDS]


def test_a_name_holding_a_whole_fake_record_of_another_call_is_only_a_name():
    """A user who saw an earlier call's markers (they are on squeue's command line) puts a whole
    record in a job name: this call's markers are new, so it stays the job's name."""
    old, new = Markers("aaaaaaaaaaaaaaaa"), Markers("bbbbbbbbbbbbbbbb")
    forged = "x" + old.record_end + "\n" + _line(_values("999", "forged", State="RUNNING"), old)
    text = _line(_values("5", forged), new) + _line(_values("6", "plain\nname|,%x"), new)
    listing = parse_formatted(text, new, FIELDS)
    assert listing.skipped == ()
    assert [(j.job_id, j.name) for j in listing.jobs] == [(5, forged), (6, "plain\nname|,%x")]


def test_a_record_that_does_not_split_into_its_fields_is_refused_and_counted():
    """Text with this call's own marker cannot come from a job (the token is new), but were it
    there, the record would not shift: it is refused with the reason, the others stand."""
    m = Markers("cccccccccccccccc")
    shifted = _line(_values("7", "a" + m.field_end + "b"), m)
    bad_number = _line(_values("8", "n", PriorityLong="lots"), m)
    twice = _line(_values("9", "n"), m) * 2
    listing = parse_formatted(shifted + bad_number + twice + "trailing junk", m, FIELDS)
    assert [j.job_id for j in listing.jobs] == [9]
    assert len(listing.skipped) == 4
    assert "fields" in listing.skipped[0] and "PriorityLong" in listing.skipped[1]
    assert "twice" in listing.skipped[2] and "after the last record" in listing.skipped[3]


def test_values_read_like_the_json():
    m = Markers("dddddddddddddddd")
    job = parse_formatted(_line(_values("12", "n", State="RUNNING", exit_code="768", TimeLimit="02:30",
                                        ArrayJobId="10", ArrayTaskId="2", UserId="alice(1001)",
                                        StartTime="2026-01-01T01:00:00"), m), m, FIELDS).jobs[0]
    assert job.exit_code == 3 and job.time_limit_s == 150 and job.array_job_id == 10 and job.array_task_id == 2
    assert job.user_id == 1001 and job.start_time.hour == 1 and job.start_time.tzinfo is not None
    assert job.held is False
    unlimited = parse_formatted(_line(_values("14", "n", State="RUNNING", EndTime="NONE",
                                              TimeLimit="Partition_Limit"), m), m, FIELDS)
    assert unlimited.skipped == () and unlimited.jobs[0].end_time is None  # seen live on 22.05
    assert unlimited.jobs[0].time_limit_s is None
    held = parse_formatted(_line(_values("13", "n", Reason="JobHeldAdmin", PriorityLong="5"), m), m, FIELDS).jobs[0]
    assert held.held is True and held.array_job_id is None


@pytest.mark.parametrize("release", ["22.05.8", "23.11.4", "24.11.5"])
def test_the_fake_prints_what_its_json_says(release):
    fake = FakeSlurm(release)
    fake.submit(name="a\nb|c,~", gres="gres:gpu:1", admin_comment="gpupack: packed shard:2", excluded_nodes="node2")
    fake.submit(state="RUNNING", nodes="node1", gres_detail=["gpu:1(IDX:0)"], gres="gres:gpu:1", time_limit_min=90)
    fake.submit(state="COMPLETED", exit_code=3)
    runner = SlurmRunner(executor=fake)
    formatted = runner.formatted_jobs()
    json_jobs = {j.job_id: j for j in runner.jobs()}
    assert [j.job_id for j in formatted.jobs] == [1, 2]  # the finished one only by id
    assert [j.exit_code for j in runner.formatted_jobs([3]).jobs] == [3]
    assert fake.envs[-1]["TZ"] == "UTC"
    for job in formatted.jobs:
        for _name, attr, _read in fields_for(runner.version()):
            attr = "gres" if attr.startswith("tres_per_") else attr
            if attr not in NOT_COMPARED | {"exit_code", "user_id", "work_dir"}:
                assert getattr(job, attr) == getattr(json_jobs[job.job_id], attr), (release, job.job_id, attr)


def test_a_record_printed_the_same_again_is_taken_from_the_memo_and_a_changed_one_read_afresh():
    """The records memo: the same values (under the next call's new markers) give the very `Job`
    of the listing before; a changed value, a job gone, or a bad record are never served stale."""
    memo = RecordMemo()
    first, second = Markers("eeeeeeeeeeeeeeee"), Markers("ffffffffffffffff")
    before = parse_formatted(_line(_values("21", "a"), first) + _line(_values("22", "b"), first)
                             + _line(_values("23", "c"), first), first, FIELDS, memo)
    assert (memo.read, memo.reused, len(memo)) == (3, 0, 3)
    after = parse_formatted(_line(_values("21", "a"), second)  # the same
                            + _line(_values("22", "b", State="RUNNING"), second)  # changed
                            + _line(_values("24", "d"), second)  # new; 23 is gone
                            + _line(_values("25", "e", PriorityLong="lots"), second), second, FIELDS, memo)
    by_id = {j.job_id: j for j in after.jobs}
    assert by_id[21] is before.jobs[0]
    assert by_id[22] is not before.jobs[1] and by_id[22].state == "RUNNING"
    assert set(by_id) == {21, 22, 24} and len(after.skipped) == 1
    assert (memo.read, memo.reused, len(memo)) == (5, 1, 3)
    fresh = parse_formatted(_line(_values("21", "a"), second), second, FIELDS)  # no memo: the same reading
    assert fresh.jobs[0] == by_id[21]


def test_the_memo_of_other_fields_is_not_used():
    memo = RecordMemo()
    m = Markers("9999999999999999")
    parse_formatted(_line(_values("31", "a"), m), m, FIELDS, memo)
    excluded = fields_for(SlurmVersion(24, 11, 5))
    values = _values("31", "a")
    values.insert(len(values) - 1, "(null)")  # ExcNodes, printed before the name
    job = parse_formatted(_line(values, m), m, excluded, memo).jobs[0]
    assert memo.reused == 0 and job.excluded_nodes == ()
