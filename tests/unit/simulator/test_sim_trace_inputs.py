"""Honest trace inputs: each bad row refused with its line, column and
what is allowed, or skipped and counted; shares; time zones; bounded memory on huge lines."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_plugin.cli.simulate_cmd import simulate
from simulator import LoadReport, WorkloadError, build_jobs
from simulator.traces import load_philly, load_sacct
from simulator.workload import WorkloadProfile, default_data_dir

ROOT = Path(__file__).resolve().parents[3]
needs_data = pytest.mark.skipif(default_data_dir() is None,
                                reason="shared/data/traces not found (set GPUPACK_DATA_DIR)")
PHILLY_HEAD = "timestamp,duration,num_gpus,gpu_time,cluster\n"
GOOD = "2017-10-09 07:00:00,60.0,1,60.0,c\n"


def philly(tmp_path, *rows: str) -> Path:
    f = tmp_path / "p.csv"
    f.write_text(PHILLY_HEAD + GOOD + "".join(rows))
    return f


@pytest.mark.parametrize("row, column, allowed", [
    ("2017-10-09 07:01:00,60.0,-4,0,c\n", "num_gpus", ">= 0"),
    ("2017-10-09 07:01:00,60.0,inf,0,c\n", "num_gpus", "finite"),
    ("2017-10-09 07:01:00,-5,1,0,c\n", "duration", ">= 0"),
    ("2017-10-09 07:01:00,nan,1,0,c\n", "duration", "finite"),
    ("2017-10-09 07:01:00,inf,1,0,c\n", "duration", "finite"),
    ("2017-10-09 07:01:00,1e308,1,0,c\n", "duration", "ten years"),  # finite: sums overflow
    ("2017-10-09 07:01:00,60.0\n", "num_gpus", "5 fields"),
    ("yesterday,60.0,1,0,c\n", "timestamp", "ISO 8601"),
    ("2017-10-09T07:01:00+02:00,60.0,1,0,c\n", "timestamp", "without a zone"),
])
def test_a_bad_philly_row_is_refused_with_line_column_and_what_is_allowed(tmp_path, row, column,
                                                                          allowed):
    with pytest.raises(WorkloadError) as err:
        load_philly(path=philly(tmp_path, row))
    msg = str(err.value)
    assert ":3: column " + column in msg and allowed in msg and "--bad-rows skip" in msg


def test_bad_rows_skipped_are_counted_by_reason(tmp_path):
    f = philly(tmp_path, "2017-10-09 07:01:00,60.0,-4,0,c\n", "2017-10-09 07:02:00,nan,1,0,c\n",
               "2017-10-09 07:03:00,60.0\n", "2017-10-09 07:04:00,60.0,0,0,c\n",
               "2017-10-09 07:05:00,0,1,0,c\n")
    rep = LoadReport()
    jobs = load_philly(path=f, report=rep, bad_rows="skip")
    assert len(jobs) == 1 and rep.jobs == 1
    assert dict(rep.skipped) == {"bad num_gpus": 1, "bad duration": 1, "wrong number of fields": 1,
                                 "no GPUs": 1, "ran 0 s": 1}


def test_zero_gpus_are_skipped_and_counted_even_when_refusing(tmp_path):
    rep = LoadReport()
    load_philly(path=philly(tmp_path, "2017-10-09 07:04:00,60.0,0,0,c\n"), report=rep)
    assert rep.skipped == {"no GPUs": 1}


def test_fractional_requests_become_shares_or_whole_gpus(tmp_path):
    f = philly(tmp_path, "2017-10-09 07:01:00,60.0,0.5,0,c\n", "2017-10-09 07:02:00,60.0,1.7,0,c\n")
    rep = LoadReport()
    jobs = load_philly(path=f, report=rep)
    assert [(j.gpus, j.share) for j in jobs] == [(1, None), (1, 0.5), (2, None)]
    assert rep.shares == 1 and rep.rounded_up == 1
    prof = [WorkloadProfile(0, "big/x/bs1/amp0", 60 << 30, 50.0, 1.0, 1)]
    specs = build_jobs(jobs, prof, gpu_memory_bytes=80 << 30)
    assert specs[1].mem0 == 40 << 30  # half of an 80 GiB GPU: its memory fits in its share
    assert specs[0].mem0 == 60 << 30


def test_timestamps_without_a_zone_are_utc_unless_told(tmp_path):
    # across the end of US daylight saving time (2017-11-05 02:00 local)
    f = tmp_path / "dst.csv"
    f.write_text(PHILLY_HEAD + "2017-11-05 00:30:00,60,1,60,c\n2017-11-05 03:30:00,60,1,60,c\n")
    assert load_philly(path=f)[1].submit == 3 * 3600
    rep = LoadReport()
    assert load_philly(path=f, timezone="America/New_York", report=rep)[1].submit == 4 * 3600
    assert "America/New_York" in rep.timestamps
    with pytest.raises(WorkloadError, match="unknown time zone"):
        load_philly(path=f, timezone="Mars/Olympus")


def test_zoned_timestamps_are_normalised(tmp_path):
    f = tmp_path / "z.csv"
    f.write_text(PHILLY_HEAD + "2017-11-05T00:30:00+02:00,60,1,60,c\n2017-11-05T00:30:00+00:00,60,1,60,c\n")
    rep = LoadReport()
    assert [j.submit for j in load_philly(path=f, report=rep)] == [0.0, 2 * 3600.0]
    assert "converted to UTC" in rep.timestamps


SACCT_HEAD = "JobID|User|JobName|Submit|Start|End|Elapsed|AllocTRES|State|TRESUsageInMax\n"
SACCT_GOOD = ("1|a|t|2024-01-01T00:00:00|2024-01-01T00:00:00|2024-01-01T01:00:00|01:00:00|"
              "gres/gpu=1|COMPLETED|\n")


def sacct(tmp_path, *rows: str) -> Path:
    f = tmp_path / "s.txt"
    f.write_text(SACCT_HEAD + SACCT_GOOD + "".join(rows))
    return f


def _row(elapsed="01:00:00", tres="gres/gpu=1", state="COMPLETED", start="2024-01-01T00:10:00",
         usage="") -> str:
    return f"2|b|u|2024-01-01T00:05:00|{start}|2024-01-01T01:10:00|{elapsed}|{tres}|{state}|{usage}\n"


@pytest.mark.parametrize("row, column, allowed", [
    (_row(elapsed="nan:00:00"), "Elapsed", "[D-][HH:]MM:SS"),
    (_row(elapsed="-00:05:00"), "Elapsed", "not negative"),
    (_row(tres="gres/gpu=inf"), "AllocTRES", "finite"),
    (_row(tres="gres/gpu=-2"), "AllocTRES", ">= 0"),
    (_row(usage="gres/gpumem=infG"), "TRESUsageInMax", "finite"),
    (_row(usage="gres/gpumem=1e300G"), "TRESUsageInMax", "at most 1P"),  # finite, no int
    (_row(elapsed="9" * 400 + "-01:00:00"), "Elapsed", "ten years"),  # no float holds it
    (_row(elapsed="9" * 5000 + "-01:00:00"), "Elapsed", "ten years"),  # no int() reads it
    (_row(elapsed="4000-00:00:00"), "Elapsed", "ten years"),
    ("2|b|u|2024-01-01T00:05:00\n", "Start", "10 fields"),
    (_row().replace("2024-01-01T00:05:00", "2024-01-01T00:05:00+01:00"), "Submit", "without a zone"),
])
def test_a_bad_sacct_row_is_refused_with_line_column_and_what_is_allowed(tmp_path, row, column,
                                                                         allowed):
    with pytest.raises(WorkloadError) as err:
        load_sacct(sacct(tmp_path, row))
    msg = str(err.value)
    assert ":3: column " + column in msg and allowed in msg


def test_sacct_start_to_end_over_ten_years_is_refused(tmp_path):
    f = tmp_path / "se.txt"
    f.write_text("JobID|Submit|Start|End|AllocTRES\n"
                 "1|2024-01-01T00:00:00|2024-01-01T00:00:00|2024-01-01T01:00:00|gres/gpu=1\n"
                 "2|2024-01-01T00:00:00|2024-01-01T00:00:00|9999-01-01T00:00:00|gres/gpu=1\n")
    with pytest.raises(WorkloadError, match=":3: column End.*ten years"):
        load_sacct(f)


@pytest.mark.parametrize("kw, flag", [({"time_scale": float("nan")}, "--time-scale"),
                                      ({"time_scale": float("inf")}, "--time-scale"),
                                      ({"time_scale": 1e308}, "--time-scale"),
                                      ({"growing_fraction": float("nan")}, "--growing-fraction")])
def test_a_non_finite_or_unbounded_knob_is_refused_not_carried_into_the_results(tmp_path, kw, flag):
    prof = [WorkloadProfile(0, "a/x/bs1/amp0", 4 << 30, 50.0, 1.0, 1)]
    with pytest.raises(WorkloadError, match=flag):
        build_jobs(load_philly(path=philly(tmp_path)), prof, **kw)


def test_a_figure_that_is_not_finite_is_an_error_not_a_result():
    from simulator import PairTable, SimConfig, SimJobSpec, simulate, summary

    prof = [WorkloadProfile(0, "a/x/bs1/amp0", 4 << 30, 30.0, 1.0, 0)]
    # job specs built by a library caller, past the loaders' bounds: two such JCTs sum to inf
    specs = [SimJobSpec(i, 0.0, 1e308, 1, 0, 4 << 30, 4 << 30) for i in range(2)]
    res = simulate(SimConfig(policy="exclusive", gpus=2), specs, prof,
                   PairTable(prof, {(0, 0): 0.9}))
    with pytest.raises(ValueError, match="not finite: .*avg_jct_s"):
        summary(res)


def test_sacct_pending_jobs_never_ran_and_shares_are_counted(tmp_path):
    f = sacct(tmp_path, _row(state="PENDING", start="Unknown", elapsed="00:00:00"),
              _row(tres="gres/gpu=0.5").replace("2|", "3|", 1),
              _row(tres="gres/gpu=1.7").replace("2|", "4|", 1),
              _row(state="RUNNING").replace("2|", "5|", 1),
              _row(tres="cpu=4").replace("2|", "6|", 1))
    rep = LoadReport()
    jobs = load_sacct(f, report=rep)
    assert [(j.gpus, j.share) for j in jobs] == [(1, None), (1, 0.5), (2, None)]
    assert rep.never_ran == 1 and rep.shares == 1 and rep.rounded_up == 1
    assert dict(rep.skipped) == {"still running": 1, "no GPUs": 1}


@needs_data
def test_the_summary_counts_skips_by_reason_and_never_ran(tmp_path):
    f = sacct(tmp_path, _row(state="PENDING", start="Unknown", elapsed="00:00:00"),
              _row(elapsed="nan:00:00").replace("2|", "3|", 1),
              _row(tres="gres/gpu=0.5").replace("2|", "4|", 1))
    r = CliRunner().invoke(simulate, ["--policy", "colocate", "--trace", f"sacct:{f}", "--gpus", "2",
                                      "--json", "--bad-rows", "skip"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["jobs"] == 2 and out["skipped"] == {"bad Elapsed": 1} and out["jobs_skipped"] == 1
    assert out["jobs_never_ran"] == 1 and out["trace_load"]["shares"] == 1
    r = CliRunner().invoke(simulate, ["--policy", "colocate", "--trace", f"sacct:{f}", "--gpus", "2"])
    assert r.exit_code == 1 and ":4: column Elapsed" in r.output
    assert "Traceback" not in r.output


HUGE = r"""
import sys, time
from simulator import LoadReport, WorkloadError
from simulator.traces import load_philly
t = time.time()
rep = LoadReport()
try:
    load_philly(path=sys.argv[1], report=rep, bad_rows=sys.argv[2])
    out = dict(rep.skipped)
except WorkloadError as exc:
    out = str(exc)
print(repr(out))
# this process's peak memory (VmHWM: its own, unlike ru_maxrss, which can keep the parent's
# peak across the fork and exec)
hwm = next(int(x.split()[1]) for x in open("/proc/self/status") if x.startswith("VmHWM"))
print(hwm // 1024, round(time.time() - t, 1))
"""


@pytest.mark.parametrize("bad_rows", ["refuse", "skip"])
def test_a_one_gigabyte_line_is_never_held_in_memory(tmp_path, bad_rows):
    f = tmp_path / "huge.csv"
    with open(f, "w") as fh:  # a sparse file: the 1-GB line costs no disk and no time to make
        fh.write(PHILLY_HEAD + GOOD + "2017-10-09 07:01:00,60,1,60,")
        fh.seek(fh.tell() + (1 << 30))
        fh.write("\n" + GOOD.replace("07:00", "07:02"))
    p = subprocess.run([sys.executable, "-c", HUGE, str(f), bad_rows], capture_output=True,
                       text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert p.returncode == 0, p.stderr
    result, usage = p.stdout.strip().splitlines()
    max_mib = int(usage.split()[0])
    assert max_mib < 200, f"{max_mib} MiB for a 1-GB line"
    if bad_rows == "refuse":
        assert ":3: column (whole line)" in result and "100,000" in result
    else:
        assert result == repr({"line too long": 1})


TZ_RUN = r"""
import hashlib, sys
from simulator.traces import load_philly
jobs = load_philly()  # the shipped trace: what the replay's figures rest on
print(len(jobs), hashlib.sha256(repr([(j.submit, j.duration, j.gpus) for j in jobs]).encode()).hexdigest())
print([j.submit for j in load_philly(path=sys.argv[1])])
"""


@needs_data
def test_the_shipped_replay_is_the_same_in_any_machine_time_zone(tmp_path):
    f = tmp_path / "dst.csv"
    f.write_text(PHILLY_HEAD + "2017-11-05 00:30:00,60,1,60,c\n2017-11-05 03:30:00,60,1,60,c\n")
    outs = []
    for tz in ("UTC", "America/New_York", "Asia/Kolkata"):
        p = subprocess.run([sys.executable, "-c", TZ_RUN, str(f)], capture_output=True, text=True,
                           cwd=ROOT, env={**os.environ, "TZ": tz, "PYTHONPATH": str(ROOT)},
                           timeout=300)
        assert p.returncode == 0, p.stderr
        outs.append(p.stdout)
    assert outs[0] == outs[1] == outs[2]
    assert "[0.0, 10800.0]" in outs[0]


def test_the_shared_data_is_found_from_the_package_not_the_working_folder(tmp_path, monkeypatch):
    from simulator import workload

    checkout = tmp_path / "repo"
    traces = tmp_path / "shared" / "data" / "traces"  # beside the checkout, as ../shared
    traces.mkdir(parents=True)
    (traces / "philly_jobs.csv").write_text("")
    monkeypatch.delenv("GPUPACK_DATA_DIR", raising=False)
    monkeypatch.setattr(workload, "_CHECKOUT", checkout)
    monkeypatch.chdir("/")  # whatever the working folder
    assert workload.default_data_dir() == traces
    monkeypatch.setattr(workload, "_CHECKOUT", tmp_path / "elsewhere" / "repo")
    monkeypatch.chdir(tmp_path)  # the data sits below the working folder: not looked for there
    assert workload.default_data_dir() is None
