"""The web view in a real browser: headless Chromium (Debian's `chromium` and
`chromium-driver`) driven by Selenium, against the real test cluster and its `gpupack web`.

It checks what an admin looks for: every node, a packed job running in its MIG slice, the
event of a requeue appearing on the open page without a reload, the job's page with its
memory plot (curve, partition line, forecast), the restarted run's curve kept, and a
finished packed job's page with the curve stored at its run's end.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request

import pytest

from packer.comment import parse
from packer.fingerprint import fingerprint
from store.db import RunRecord, Store
from slurm_plugin.web.browser import chromium, missing

pytestmark = pytest.mark.integration

GIB = 1024**3
RUN = time.time_ns()  # the cluster's history outlives a test run: keep runs apart


@pytest.fixture(scope="module")
def browser():
    absent = missing()
    if absent:
        if os.environ.get("GPUPACK_ROOT"):
            pytest.skip("headless Chromium is not installed in this Debian root (other Slurm release); the browser "
                        "tests run on the host. Missing: " + "; ".join(absent))
        pytest.fail("the browser tests need headless Chromium from Debian's packages and Selenium: missing "
                    + "; ".join(absent) + ". Run scripts/install-deps.sh as root.")
    driver = chromium()
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


@pytest.fixture
def web(cluster):
    """The cluster's web view URL, once it answers."""
    url = cluster.spec.web_url
    deadline = time.time() + 20
    while True:
        try:
            with urllib.request.urlopen(url + "healthz", timeout=2) as resp:
                if resp.status == 200:
                    return url
        except OSError as exc:
            if time.time() > deadline:
                raise AssertionError(f"the web view at {url} does not answer: {exc}") from exc
        time.sleep(0.5)


def wait_until(driver, what: str, predicate, timeout: float = 30.0, interval: float = 0.5):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        last = predicate(driver)
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"{what}: not seen in the browser after {timeout:.0f}s (last: {last!r}); page: "
                         + driver.find_element("tag name", "main").text[:1500])


def css(driver, selector: str):
    return driver.find_elements("css selector", selector)


def test_status_lists_the_web_view_with_its_url(cluster, web):
    out = subprocess.run([sys.executable, "-m", "slurm_plugin", "devcluster", "status", "--json",
                          "--state-dir", str(cluster.spec.state_dir)], capture_output=True, text=True, timeout=60)
    (st,) = [s for s in json.loads(out.stdout) if s["role"] == "web"]
    assert st["url"] == web and st["healthy"] and st["alive"], st


def stored_curve(cluster, job: int):
    """The newest stored memory curve of ``job``'s runs (None before one is stored)."""
    from store.curves import RunCurves

    store = Store(cluster.spec.database)
    try:
        return RunCurves(store).of_job(job)
    finally:
        store.close()


def test_nodes_a_packed_job_in_its_slice_a_live_requeue_event_and_the_job_plot(cluster, web, browser):
    cluster.set_option("pack_only_when_no_idle_gpu", "false")
    body = (f"#!/bin/sh\n: 'gpupack web test {RUN}'\nexec {sys.executable} -m slurm_plugin simgpu run "
            "--workload ResNet18 --mem-start 6GiB --mem-growth 10MiB --iters 1200 --iter-ms 100\n").encode()
    # its history says 3 GiB: packed on one share (a 1g.10gb slice, 9.75 GiB); it grows by
    # ~100 MiB/s from 6 GiB (a steady trend, not a warm-up that doubles its memory) and would
    # pass its slice after ~38 s, inside its 2-minute limit: the watcher restarts it early on
    # a larger size (a requeue, and an event)
    store = Store(cluster.spec.database)
    store.record_run(RunRecord(job_id=800000 + RUN % 99999, fingerprint=fingerprint("root", "web-grow", body),
                               peak_mem_bytes=3 * GIB, mean_util_pct=30.0))
    store.close()
    try:
        job = cluster.submit(["-J", "web-grow", "-t", "2", "--gres=gpu:1"], body)
        record = parse(cluster.job(job)["AdminComment"])
        assert record is not None and record.verdict == "packed" and record.shards == 1
        cluster.wait(job, "RUNNING", 30)

        browser.get(web)
        browser.execute_script("window.loadedOnce = 'yes'")  # gone if the page reloads
        shown = [e.get_attribute("data-node") for e in css(browser, "div.node")]
        assert shown == cluster.spec.node_names
        gpus = css(browser, "div.node div.gpu")
        assert len(gpus) == cluster.spec.nodes * cluster.spec.gpus_per_node

        def slice_of_job(d):
            found = css(d, f'g.slice[data-job="{job}"]')
            return found[0] if found else None

        sl = wait_until(browser, f"job {job} in a slice", slice_of_job)
        assert (sl.get_attribute("data-kind"), sl.get_attribute("data-label")) == ("mig", "1g.10gb")
        node, gpu = sl.get_attribute("data-node"), sl.get_attribute("data-gpu")
        assert node == cluster.job(job)["NodeList"]
        (gpu_div,) = css(browser, f'div.node[data-node="{node}"] div.gpu[data-gpu="{gpu}"]')
        assert gpu_div.get_attribute("data-mode") == "packed"
        (row,) = css(browser, f'#running-jobs tr.job[data-job="{job}"]')
        assert row.get_attribute("data-decision") == "packed" and "shard:1" in row.text
        assert not css(browser, f'tr.event[data-kind="restart-memory"][data-job="{job}"]'), "restarted before the page loaded"

        # the job's page, in a second tab, while it runs in its slice
        main_tab = browser.current_window_handle
        browser.switch_to.new_window("tab")
        browser.get(web + f"job/{job}")
        wait_until(browser, "memory curve", lambda d: css(d, "svg.memplot polyline.mem"))
        (part,) = css(browser, "svg.memplot g.partition")
        assert int(part.get_attribute("data-bytes")) == pytest.approx(9.75 * GIB, rel=0.01)  # MIG 1g.10gb
        assert "packed shard:1" in browser.find_element("id", "job-decision").text
        wait_until(browser, "curve of several samples",
                   lambda d: int(css(d, "svg.memplot polyline.mem")[0].get_attribute("data-points")) >= 3)
        wait_until(browser, "forecast on the plot", lambda d: css(d, "svg.memplot g.forecast"))
        browser.close()
        browser.switch_to.window(main_tab)

        # the watcher restarts it for memory: the open page shows the event without a reload
        event = wait_until(browser, "restart-memory event on the open page",
                           lambda d: css(d, f'tr.event[data-kind="restart-memory"][data-job="{job}"]'), timeout=90)
        assert "outgrow" in event[0].text
        assert browser.execute_script("return window.loadedOnce") == "yes"
        assert int(browser.execute_script("return document.body.dataset.updates || '0'")) >= 1
        assert "live" in browser.find_element("id", "live-status").text

        # the restarted run left its curve: an admin sees later why it was restarted
        curve = wait_until(browser, "the restarted run's stored curve", lambda _d: stored_curve(cluster, job),
                           timeout=30)
        assert curve.how_it_ended == "requeued by restart-memory"
        assert curve.capacity_label == "MIG 1g.10gb" and curve.peak_bytes > 6 * GIB
        browser.get(web + f"job/{job}")  # its page, running again or waiting: that run's curve is on it
        earlier = wait_until(browser, "the restarted run on the job's page",
                             lambda d: css(d, 'div.earlier-run[data-end="REQUEUED by restart-memory"] svg.memplot.earlier')
                             or css(d, 'svg.memplot[data-source="stored"]'))
        assert int(earlier[0].find_element("css selector", "polyline.mem").get_attribute("data-points")) == len(curve.points)
    finally:
        cluster.cancel_all()
        cluster.reset_options()


def test_a_finished_packed_jobs_page_shows_the_curve_stored_at_its_end(cluster, web, browser):
    from store.curves import RunCurves

    cluster.set_option("pack_only_when_no_idle_gpu", "false")
    body = (f"#!/bin/sh\n: 'gpupack stored curve test {RUN}'\nexec {sys.executable} -m slurm_plugin simgpu run "
            "--workload ResNet18 --mem-start 2GiB --mem-growth 2MiB --iters 100 --iter-ms 100\n").encode()
    # slow growth: even carried on to its 2-minute limit it stays inside its share, so the
    # memory watch has no reason to restart it (at 20 MiB an iteration it rightly did)
    fp = fingerprint("root", "web-done", body)
    store = Store(cluster.spec.database)  # its history says 3 GiB: packed on one share (MIG 1g.10gb)
    store.record_run(RunRecord(job_id=810000 + RUN % 99999, fingerprint=fp, peak_mem_bytes=3 * GIB, mean_util_pct=30.0))
    store.close()
    try:
        job = cluster.submit(["-J", "web-done", "-t", "2", "--gres=gpu:1"], body)
        record = parse(cluster.job(job)["AdminComment"])
        assert record is not None and record.verdict == "packed" and record.shards == 1
        assert cluster.wait(job, {"COMPLETED", "FAILED"}, 90) == "COMPLETED"

        browser.get(web + f"job/{job}")
        wait_until(browser, "the stored curve", lambda d: css(d, 'svg.memplot[data-source="stored"] polyline.mem'))
        stored = browser.find_element("id", "stored-curve").text
        assert "Stored at the run's end" in stored and "completed" in stored
        (part,) = css(browser, "svg.memplot g.partition")
        assert int(part.get_attribute("data-bytes")) == pytest.approx(9.75 * GIB, rel=0.01)  # MIG 1g.10gb
        assert not css(browser, "svg.memplot g.forecast")
        points = int(css(browser, "svg.memplot polyline.mem")[0].get_attribute("data-points"))

        def stored_run():  # the run's record comes by its own path (the one writer), after its curve
            store = Store(cluster.spec.database)
            try:
                return [(RunCurves(store).of_job(job), r) for r in store.runs(fp) if r.job_id == job]
            finally:
                store.close()

        ((curve, run),) = wait_until(browser, "the finished run's record in the store", lambda _d: stored_run())
        assert curve is not None and curve.started_at == run.started_at and curve.end_state == "COMPLETED"
        assert points == len(curve.points) >= 3 and curve.peak_bytes >= 2 * GIB
        out = subprocess.run([sys.executable, "-m", "slurm_plugin", "history", "show", fp, "--config",
                              str(cluster.spec.gpupack_toml)], capture_output=True, text=True, timeout=60, env=cluster.env)
        assert f"curve: {len(curve.points)} points" in out.stdout, out.stdout + out.stderr
    finally:
        cluster.cancel_all()
        cluster.reset_options()
