"""How long the main page takes to build with a long queue: a synthetic cluster (N jobs,
a quarter running, packed in MIG slices or whole, the rest pending with decisions), timed
through `model.assemble` and `pages.overview_fragment`, then its gzip (what each refresh
costs the server, Slurm's own command time aside).

    python3 -m slurm_plugin.web.bench --jobs 5000 --nodes 250 [--browser]

`--browser` also times headless Chromium loading that page from the real server and
swapping in one live update.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from datetime import datetime, timezone

from packer.gres import GresItem
from slurm_plugin.slurm.model import Job, Node
from slurm_plugin.web import pages
from slurm_plugin.web.model import EventRow, assemble
from slurm_plugin.web.slices import AgentJob
from slurm_plugin.web.source import Rendered

MIG = (("1g.10gb", 1), ("2g.20gb", 2), ("3g.40gb", 4))


def synthetic(jobs: int, nodes: int, gpus_per_node: int = 8, shares: int = 8):
    """Nodes, jobs, agent isolations and events like a busy site's (deterministic)."""
    node_list = [Node(f"gpu{i:03d}", ("MIXED",), (GresItem("gpu", "h100", gpus_per_node),
                                                   GresItem("shard", "h100", gpus_per_node * shares)))
                 for i in range(nodes)]
    out_jobs: list[Job] = []
    agents: list[AgentJob] = []
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    running_target = jobs // 4
    free = {(n.name, g): shares for n in node_list for g in range(gpus_per_node)}
    slots = iter(sorted(free))
    current = next(slots, None)
    for j in range(1, jobs + 1):
        name, user = f"train-{j % 97}", f"user{j % 41}"
        packed = j % 3 != 0
        profile, size = MIG[j % len(MIG)]
        comment = (f"gpupack: packed shard:{size} est={size * 9}GiB src=history(5) fp={j:016x}" if packed
                   else f"gpupack: exclusive reason={'no-history' if j % 2 else 'too-busy'} fp={j:016x}")
        gres = (GresItem("shard", None, size),) if packed else (GresItem("gpu", None, 1),)
        if j <= running_target and current is not None:
            node, gpu = current
            need = size if packed else shares
            if free[current] < need:
                current = next(slots, None)
                if current is None:
                    continue
                node, gpu = current
            start = shares - free[current]
            free[current] -= need
            detail = (GresItem("shard", None, size, indexes=(gpu,)) if packed else GresItem("gpu", None, 1, indexes=(gpu,)),)
            out_jobs.append(Job(j, name, user, "RUNNING", nodes=node, gres=gres, gres_detail=detail,
                                admin_comment=comment, priority=1000, submit_time=t0, start_time=t0))
            agents.append(AgentJob(j, node, gpu, f"mig:{profile}@{start}" if packed else "whole"))
        else:
            out_jobs.append(Job(j, name, user, "PENDING", state_reason="Resources" if j % 5 else "Priority",
                                gres=gres, admin_comment=comment, priority=10_000 - j % 1000, submit_time=t0))
    events = [EventRow(1.7e9 + k, k + 1, ("requeue-contention", "restart-memory", "history")[k % 3],
                       f"synthetic event {k}") for k in range(30)]
    return node_list, out_jobs, agents, events


def measure(jobs: int, nodes: int, repeat: int = 5) -> dict:
    node_list, job_list, agents, events = synthetic(jobs, nodes)
    times, gzip_times = [], []
    for _ in range(repeat):
        started = time.perf_counter()
        ov = assemble(node_list, job_list, agents, events, taken_at=time.time(), shares_per_gpu=8,
                      profile_slices=lambda p: {"1g.10gb": 1, "2g.20gb": 2, "3g.40gb": 4}.get(p))
        html = pages.overview_fragment(ov)
        times.append(time.perf_counter() - started)
        packed = Rendered(html, "", 0.0).gzipped
        gzip_times.append(time.perf_counter() - started - times[-1])
    return {"jobs": jobs, "nodes": nodes, "gpus": nodes * 8, "running": ov.running_total, "pending": ov.pending_total,
            "render_ms_median": round(statistics.median(times) * 1000, 1),
            "render_ms_max": round(max(times) * 1000, 1), "gzip_ms_median": round(statistics.median(gzip_times) * 1000, 1),
            "html_kib": round(len(html) / 1024, 1), "gzip_kib": round(len(packed) / 1024, 1)}


class SyntheticSource:
    """The synthetic cluster behind the real HTTP server (for `--browser`)."""

    def __init__(self, jobs: int, nodes: int):
        self.parts = synthetic(jobs, nodes)

    def overview(self):
        node_list, job_list, agents, events = self.parts
        ov = assemble(node_list, job_list, agents, events, taken_at=time.time(), shares_per_gpu=8,
                      profile_slices=lambda p: {"1g.10gb": 1, "2g.20gb": 2, "3g.40gb": 4}.get(p))
        html = pages.overview_fragment(ov)
        return ov, Rendered(html, f'"{time.time_ns()}"', time.time())  # a new reading every time

    def close(self) -> None:
        pass


def measure_browser(jobs: int, nodes: int, repeat: int = 5) -> dict:
    """Headless Chromium loading the main page, and swapping in a fresh fragment (what each
    live update costs the browser), served by the real server over the synthetic cluster."""
    from slurm_plugin.web.browser import chromium
    from slurm_plugin.web.server import WebServer
    from slurm_plugin.web.settings import WebSettings

    settings = WebSettings(port=0, refresh_s=3600.0)  # live.js stays idle; updates are timed by hand
    server = WebServer(settings, SyntheticSource(jobs, nodes))
    server.serve_in_thread()
    driver = chromium()
    try:
        loads, swaps = [], []
        for _ in range(repeat):
            driver.get(server.url)
            loads.append(driver.execute_script(
                "const n = performance.getEntriesByType('navigation')[0]; return n.loadEventEnd - n.startTime;"))
            swaps.append(driver.execute_async_script(
                "const done = arguments[0]; const t0 = performance.now();"
                "fetch('fragment/overview').then(r => r.text()).then(h => {"
                " document.getElementById('live').innerHTML = h;"
                " requestAnimationFrame(() => setTimeout(() => done(performance.now() - t0), 0)); });"))
        slices = len(driver.find_elements("css selector", "g.slice"))
    finally:
        driver.quit()
        server.shutdown()
        server.server_close()
    return {"jobs": jobs, "nodes": nodes, "slices_drawn": slices,
            "browser_load_ms_median": round(statistics.median(loads), 1),
            "browser_update_ms_median": round(statistics.median(swaps), 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--nodes", type=int, default=250)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--browser", action="store_true",
                        help="also time headless Chromium: page load and one live update (fetch + swap + paint)")
    args = parser.parse_args()
    result = measure(args.jobs, args.nodes, args.repeat)
    if args.browser:
        result |= measure_browser(args.jobs, args.nodes, args.repeat)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
