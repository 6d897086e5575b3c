"""The suite's metrics in the Prometheus text format (version 0.0.4).

Counters come from the event log in SQLite (so they survive a helper restart and agree
with `gpupack events`) plus the monitor's own gauges. The helper serves them on a small
HTTP endpoint on localhost (`[monitor] metrics_port`, 0 = off) and writes them to a file
(`metrics.prom` next to the database) for node_exporter's textfile collector.
"""
from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable

log = logging.getLogger(__name__)

#: event kind -> (metric name, help)
EVENT_COUNTERS: dict[str, tuple[str, str]] = {
    "requeue-contention": ("gpupack_requeued_contention_total", "Newcomers requeued because they slowed a job beside them."),
    "restart-memory": ("gpupack_restarted_memory_total", "Jobs restarted early on a larger size before running out of memory."),
    "requeue-quirk": ("gpupack_requeued_gpu_shard_collision_total", "Jobs requeued because Slurm 22.05 gave their GPU whole and as shards at once."),
    "mig-reconfigure": ("gpupack_mig_reconfigurations_total", "MIG layout changes."),
    "history": ("gpupack_history_records_total", "Finished runs written to the history."),
}


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render(
    event_counts: Mapping[str, int],
    decisions: Mapping[tuple[str, str], int],
    gauges: Mapping[str, tuple[float, str]] | None = None,
) -> str:
    """Prometheus text: event counters, decisions by verdict and reason, gauges."""
    lines: list[str] = []
    for kind, (name, help_text) in EVENT_COUNTERS.items():
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} counter", f"{name} {int(event_counts.get(kind, 0))}"]
    verdict_totals: dict[str, int] = {}
    for (verdict, _reason), n in decisions.items():
        verdict_totals[verdict] = verdict_totals.get(verdict, 0) + n
    for verdict, name, help_text in (
        ("packed", "gpupack_jobs_packed_total", "Jobs packed onto a share of a GPU."),
        ("exclusive", "gpupack_jobs_exclusive_total", "Jobs left with a whole GPU."),
    ):
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} counter", f"{name} {verdict_totals.get(verdict, 0)}"]
    lines += ["# HELP gpupack_decisions_total Submit-time decisions by verdict and reason.",
              "# TYPE gpupack_decisions_total counter"]
    for (verdict, reason), n in sorted(decisions.items()):
        lines.append(f'gpupack_decisions_total{{verdict="{_escape(verdict)}",reason="{_escape(reason)}"}} {int(n)}')
    for name, (value, help_text) in sorted((gauges or {}).items()):
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge", f"{name} {value:g}"]
    return "\n".join(lines) + "\n"


def write_file(path: Path, text: str) -> None:
    """Atomic write, as the textfile collector wants."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.chmod(tmp, 0o644)
    tmp.replace(path)


class MetricsServer:
    """`GET /metrics` on 127.0.0.1:port, answered from `text()`."""

    def __init__(self, port: int, text: Callable[[], str], host: str = "127.0.0.1"):
        outer_text = text

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                if self.path.split("?")[0] not in ("/metrics", "/"):
                    self.send_error(404, "only /metrics is served")
                    return
                body = outer_text().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_args) -> None:
                return

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="metrics-http", daemon=True)

    def start(self) -> None:
        self._thread.start()
        log.info("metrics on http://127.0.0.1:%d/metrics", self.port)

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
