"""Rendering: escaping of what users write, the GPU bars, the job page's plot and forecast."""
from __future__ import annotations

import re
from html.parser import HTMLParser

from packer.decision import Estimate
from packer.samples import JobSample
from packer.gres import GresItem
from slurm_plugin.slurm.model import Job, Node
from slurm_plugin.web import pages
from slurm_plugin.web.forecasts import ForecastCache
from packer.curves import partition_capacity
from slurm_plugin.web.jobview import assemble_job, this_run
from slurm_plugin.web.model import EventRow, assemble
from slurm_plugin.web.slices import AgentJob

GIB = 1024**3


class Tags(HTMLParser):
    """Collects start tags with their attributes, and fails on a stray end tag."""

    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.stack: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag not in ("meta", "link", "br", "base", "rect", "line", "path", "polyline", "polygon"):
            self.stack.append(tag)

    def handle_endtag(self, tag):
        if tag in ("rect", "line", "path", "polyline", "polygon"):
            return
        assert self.stack and self.stack[-1] == tag, f"</{tag}> closes {self.stack[-1:]}"
        self.stack.pop()


def parse(html: str) -> Tags:
    t = Tags()
    t.feed(html)
    assert t.stack == [], f"unclosed {t.stack}"
    return t


def test_names_users_and_comments_are_escaped():
    evil = '<script>alert(1)</script>"'
    job = Job(1, evil, evil, "PENDING", state_reason="Priority", admin_comment="gpupack: exclusive reason=no-history fp=1")
    running = Job(2, evil, "u", "RUNNING", nodes="node1", gres_detail=(GresItem("shard", "h100", 2, indexes=(0,)),))
    ov = assemble([Node("node1", ("MIXED",), (GresItem("gpu", "h100", 1),))], [job, running], [],
                  [EventRow(1.0, 1, "steer", evil)], taken_at=1.0, shares_per_gpu=8)
    html = pages.overview_fragment(ov)
    assert "<script>" not in html and "&lt;script&gt;" in html
    tags = parse(html).tags
    slices = [a for t, a in tags if t == "g" and "slice" in a.get("class", "")]
    assert slices == [{"class": "slice slice-shard", "data-job": "2", "data-kind": "shard", "data-label": "shard:2",
                       "data-gpu": "0", "data-node": "node1"}]


def test_whole_page_has_base_and_the_fragment_to_poll():
    html = pages.document("cluster", "fragment/overview", "<p>x</p>", 2.0, "/gpupack/", 1.0)
    tags = dict((t, a) for t, a in parse(html).tags)
    assert tags["base"]["href"] == "/gpupack/"
    assert tags["main"]["data-fragment"] == "fragment/overview" and tags["main"]["data-refresh-ms"] == "2000"
    assert tags["script"]["src"] == "static/live.js"


def samples_growing(n: int, started: float = 100.0, per_s: float = 0.3 * GIB) -> list[JobSample]:
    out, peak = [], 0
    for i in range(n):
        mem = int(2 * GIB + per_s * i)
        peak = max(peak, mem)
        out.append(JobSample(7, "node1", 0, started + i, mem, peak, isolation="mig:1g.10gb@6", started_at=started))
    return out


def test_job_page_draws_the_curve_the_partition_and_a_forecast_that_warns():
    samples = samples_growing(30)
    run, started = this_run(samples)
    capacity = partition_capacity("mig:1g.10gb@6", 1, 10 * GIB, lambda p: 9984 if p == "1g.10gb" else None)
    assert capacity == (9984 * 1024.0**2, "MIG 1g.10gb")
    fc = ForecastCache().forecast(7, started, capacity[0], 60.0, run)
    assert fc is not None and fc.samples == 30 and fc.predicted_peak_bytes > capacity[0]
    job = Job(7, "grow", "alice", "RUNNING", nodes="node1", admin_comment="gpupack: packed shard:1 est=3.0GiB fp=ff")
    d = assemble_job(7, job, samples=run, started_at=started, estimate=Estimate(3 * GIB, 30.0, 2),
                     remembered_shards=None, runs=[], events=[EventRow(5.0, 7, "restart-memory", "will outgrow")],
                     capacity=capacity, forecast=fc)
    html = pages.job_fragment(d)
    tags = parse(html).tags
    plot = [a for t, a in tags if t == "svg" and a.get("class") == "memplot"]
    assert len(plot) == 1
    (mem,) = [a for t, a in tags if t == "polyline" and a.get("class") == "mem"]
    assert mem["data-points"] == "30" and len(mem["points"].split()) == 30
    (part,) = [a for t, a in tags if t == "g" and a.get("class") == "partition"]
    assert int(part["data-bytes"]) == 9984 * 1024**2
    (fcg,) = [a for t, a in tags if t == "g" and a.get("class") == "forecast"]
    assert fcg["data-horizon"] == "60" and int(fcg["data-predicted"]) == fc.predicted_peak_bytes
    assert "Peak 3.00 GiB, utilisation 30%, from the last 2 run(s)" in html
    assert re.search(r"restart-memory", html)


def test_job_page_without_samples_says_why_there_is_no_plot():
    d = assemble_job(8, None, samples=[], started_at=None, estimate=None, remembered_shards=None, runs=[],
                     events=[], capacity=(None, ""), forecast=None)
    html = pages.job_fragment(d)
    assert "memplot" not in html and "No memory curve was stored" in html and "no longer knows job 8" in html


def test_this_run_keeps_only_the_latest_run_of_a_requeued_job():
    first = samples_growing(5, started=100.0)
    second = samples_growing(3, started=200.0)
    run, started = this_run(second + first)
    assert started == 200.0 and [s.at for s in run] == [200.0, 201.0, 202.0]


def test_forecast_cache_feeds_only_new_samples_and_starts_over_on_a_new_run():
    cache = ForecastCache()
    s = samples_growing(12)
    a = cache.forecast(7, 100.0, 10 * GIB, 60.0, s[:8])
    b = cache.forecast(7, 100.0, 10 * GIB, 60.0, s)  # the first 8 again, then 4 new ones
    assert (a.samples, b.samples) == (8, 12)
    c = cache.forecast(7, 300.0, 10 * GIB, 60.0, samples_growing(7, started=300.0))
    assert c.samples == 7


def test_an_isolation_slurm_does_not_list_as_running_is_not_drawn():
    gone = Job(4, "x", "u", "COMPLETED", nodes="n1")
    ov = assemble([Node("n1", ("MIXED",), (GresItem("gpu", None, 1),))], [gone], [AgentJob(4, "n1", 0, "mig:3g.40gb@0"),
                  AgentJob(5, "n1", 0, "mig:1g.10gb@4")], [], taken_at=0.0, shares_per_gpu=8, profile_slices={"3g.40gb": 4}.get)
    assert ov.nodes[0].gpus[0].slices == ()


def stored_curve(job_id: int = 7, n: int = 40):
    from packer.curves import CurvePoint, RunCurve

    pts = tuple(CurvePoint(float(i), int(2 * GIB + 0.2 * GIB * i), int(2 * GIB + 0.2 * GIB * i)) for i in range(n))
    return RunCurve(job_id=job_id, fingerprint="ff", started_at=100.0, ended_at=1_700_000_000.0,
                    end_state="PENDING", node="node2", gpu_index=1, isolation="mig:1g.10gb@6", shards=1,
                    capacity_bytes=9984 * 1024.0**2, capacity_label="MIG 1g.10gb", samples=600, points=pts)


def test_a_finished_jobs_page_draws_its_stored_curve_with_its_partition_and_no_forecast():
    job = Job(7, "grow", "alice", "COMPLETED", nodes="node2", admin_comment="gpupack: packed shard:1 fp=ff")
    d = assemble_job(7, job, samples=[], started_at=None, estimate=None, remembered_shards=None, runs=[],
                     events=[], capacity=(None, ""), forecast=None, stored=stored_curve())
    html = pages.job_fragment(d)
    tags = parse(html).tags
    (plot,) = [a for t, a in tags if t == "svg" and a.get("class") == "memplot"]
    assert plot["data-source"] == "stored"
    (mem,) = [a for t, a in tags if t == "polyline" and a.get("class") == "mem"]
    assert mem["data-points"] == "40" and len(mem["points"].split()) == 40
    (part,) = [a for t, a in tags if t == "g" and a.get("class") == "partition"]
    assert int(part["data-bytes"]) == 9984 * 1024**2
    assert not [a for t, a in tags if t == "g" and a.get("class") == "forecast"]
    assert "Stored at the run's end (2023-11-14 22:13:20 UTC, requeued (PENDING)): 40 points kept of 600 samples" in html
    assert "On node2 GPU 1, isolation <code>mig:1g.10gb@6</code>; partition MIG 1g.10gb = 9.75 GiB" in html


def test_a_finished_job_without_a_stored_curve_says_so():
    for job in (Job(7, "x", "u", "COMPLETED", nodes="node2"), None):
        d = assemble_job(7, job, samples=[], started_at=None, estimate=None, remembered_shards=None, runs=[],
                         events=[], capacity=(None, ""), forecast=None, stored=None)
        html = pages.job_fragment(d)
        assert "memplot" not in html and 'id="no-stored-curve"' in html and "No memory curve was stored" in html
    pending = Job(8, "x", "u", "PENDING", state_reason="Priority")
    d = assemble_job(8, pending, samples=[], started_at=None, estimate=None, remembered_shards=None, runs=[],
                     events=[], capacity=(None, ""), forecast=None)
    assert "No memory samples: the job is not running" in pages.job_fragment(d)


def test_a_running_jobs_live_samples_win_over_a_stored_curve():
    samples = samples_growing(10)
    run, started = this_run(samples)
    job = Job(7, "grow", "alice", "RUNNING", nodes="node1")
    d = assemble_job(7, job, samples=run, started_at=started, estimate=None, remembered_shards=None, runs=[],
                     events=[], capacity=(None, ""), forecast=None, stored=stored_curve())
    html = pages.job_fragment(d)
    assert d.stored is None and 'data-source="live"' in html and "stored-curve" not in html


def test_a_restarted_jobs_page_draws_each_earlier_runs_stored_curve():
    from dataclasses import replace

    restarted = replace(stored_curve(n=25), end_state="REQUEUED by restart-memory", ended_at=1_700_000_100.0)
    samples = samples_growing(10, started=500.0)
    run, started = this_run(samples)
    job = Job(7, "grow", "alice", "RUNNING", nodes="node1", restart_cnt=1)
    d = assemble_job(7, job, samples=run, started_at=started, estimate=None, remembered_shards=None, runs=[],
                     events=[], capacity=(None, ""), forecast=None, earlier=[restarted])
    html = pages.job_fragment(d)
    tags = parse(html).tags
    plots = [a for t, a in tags if t == "svg" and "memplot" in a.get("class", "")]
    assert [(p["class"], p["data-source"]) for p in plots] == [("memplot", "live"), ("memplot earlier", "stored")]
    (div,) = [a for t, a in tags if t == "div" and a.get("class") == "earlier-run"]
    assert div["data-end"] == "REQUEUED by restart-memory"
    assert "requeued by restart-memory, on node2 GPU 1; partition MIG 1g.10gb = 9.75 GiB: 25 points kept" in html
    mems = [a for t, a in tags if t == "polyline" and a.get("class") == "mem"]
    assert [m["data-points"] for m in mems] == ["10", "25"]


def test_job_page_shows_a_lower_bound_as_one_and_an_estimate_of_bounds_only_as_no_measurement():
    from store.db import RunRecord

    job = Job(7, "w", "alice", "COMPLETED", admin_comment="gpupack: exclusive reason=no-history fp=ff")
    runs = [RunRecord(job_id=6, fingerprint="ff", peak_mem_bytes=5 * GIB, lower_bound=True, end_state="failed"),
            RunRecord(job_id=5, fingerprint="ff", peak_mem_bytes=4 * GIB)]
    d = assemble_job(7, job, samples=[], started_at=None, remembered_shards=None, runs=runs, events=[],
                     estimate=Estimate(5 * GIB, None, 1, source="lower-bound", lower_bound_bytes=5 * GIB),
                     capacity=(None, ""), forecast=None)
    html = pages.job_fragment(d)
    assert "from 1 lower bound(s) only: no run measured it whole" in html
    assert "&ge; 5.00 GiB (failed)" in html and "<td>4.00 GiB</td>" in html
