"""The web view's HTTP server (standard library): read-only, GET only, clients checked
against `[web] allow`. Pages are server-rendered; `live.js` swaps `<main>` from a fragment
URL, which answers 304 while nothing changed; `/api/*.json` gives the same data to scripts."""
from __future__ import annotations

import json
import logging
import re
import threading
from dataclasses import asdict
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources

from slurm_plugin.slurm.errors import SlurmError
from slurm_plugin.web import pages
from slurm_plugin.web.settings import WebSettings, client_allowed
from slurm_plugin.web.source import Rendered, WebSource

log = logging.getLogger(__name__)

STATIC = {"live.js": "text/javascript; charset=utf-8", "web.css": "text/css; charset=utf-8"}
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
                               "connect-src 'self'; base-uri 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}
JOB_RE = re.compile(r"^/(job|fragment/job|api/job)/(\d{1,12})(\.json)?$")


class _Handler(BaseHTTPRequestHandler):
    server: "WebServer"
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        srv = self.server
        if not client_allowed(self.client_address[0], srv.settings.networks):
            self._send(HTTPStatus.FORBIDDEN, "text/plain; charset=utf-8",
                       f"{self.client_address[0]} is not in [web] allow\n".encode())
            return
        path = self.path.split("?", 1)[0]
        try:
            self._route(path)
        except SlurmError as exc:
            self._send(HTTPStatus.SERVICE_UNAVAILABLE, "text/plain; charset=utf-8", f"Slurm did not answer: {exc}\n".encode())
        except FileNotFoundError as exc:
            self._send(HTTPStatus.SERVICE_UNAVAILABLE, "text/plain; charset=utf-8", f"{exc}\n".encode())
        except Exception:  # a page must not take the server down
            log.exception("GET %s failed", path)
            self._send(HTTPStatus.INTERNAL_SERVER_ERROR, "text/plain; charset=utf-8", b"internal error; see the log\n")

    def _route(self, path: str) -> None:
        srv = self.server
        s = srv.settings
        if path == "/healthz":
            self._send(HTTPStatus.OK, "text/plain; charset=utf-8", b"ok\n")
        elif path.startswith("/static/") and path[8:] in STATIC:
            body = resources.files("slurm_plugin.web").joinpath("static", path[8:]).read_bytes()
            self._send(HTTPStatus.OK, STATIC[path[8:]], body, cache="max-age=300")
        elif path in ("/", "/index.html"):
            _ov, r = srv.source.overview()
            self._html(pages.document("cluster", "fragment/overview", r.html, s.refresh_s, s.base_path, r.taken_at))
        elif path == "/fragment/overview":
            self._fragment(srv.source.overview()[1])
        elif path == "/api/overview.json":
            ov, _r = srv.source.overview()
            self._json(asdict(ov))
        elif (m := JOB_RE.match(path)) is not None:
            kind, job_id, dot_json = m.group(1), int(m.group(2)), m.group(3)
            if (kind == "api/job") != bool(dot_json):
                self._not_found(path)
                return
            detail, r = srv.source.job(job_id)
            if kind == "job":
                self._html(pages.document(f"job {job_id}", f"fragment/job/{job_id}", r.html, s.refresh_s,
                                          s.base_path, r.taken_at))
            elif kind == "fragment/job":
                self._fragment(r)
            else:
                self._json(asdict(detail))
        else:
            self._not_found(path)

    def _not_found(self, path: str) -> None:
        self._send(HTTPStatus.NOT_FOUND, "text/plain; charset=utf-8",
                   f"no page {path}; try / or /job/ID or /api/overview.json\n".encode())

    def _html(self, text: str) -> None:
        self._send(HTTPStatus.OK, "text/html; charset=utf-8", text.encode())

    def _json(self, doc: dict) -> None:
        self._send(HTTPStatus.OK, "application/json", json.dumps(doc, default=str).encode())

    def _fragment(self, r: Rendered) -> None:
        extra = {"ETag": r.etag, "X-Gpupack-Taken-At": f"{r.taken_at:.3f}", "Vary": "Accept-Encoding"}
        if self.headers.get("If-None-Match") == r.etag:
            self._send(HTTPStatus.NOT_MODIFIED, None, b"", extra=extra)
        elif "gzip" in self.headers.get("Accept-Encoding", ""):
            self._send(HTTPStatus.OK, "text/html; charset=utf-8", r.gzipped, extra={**extra, "Content-Encoding": "gzip"})
        else:
            self._send(HTTPStatus.OK, "text/html; charset=utf-8", r.html.encode(), extra=extra)

    def _send(self, status: HTTPStatus, ctype: str | None, body: bytes, cache: str = "no-store",
              extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        if ctype:
            self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", cache)
        for k, v in {**SECURITY_HEADERS, **(extra or {})}.items():
            self.send_header(k, v)
        self.end_headers()
        if body and self.command != "HEAD":
            self.wfile.write(body)

    do_HEAD = do_GET

    def log_message(self, fmt: str, *args) -> None:
        log.debug("%s %s", self.client_address[0], fmt % args)


class WebServer(ThreadingHTTPServer):
    """`serve_forever()` answers the view; `url` says where (the bound address and port)."""

    daemon_threads = True

    def __init__(self, settings: WebSettings, source: WebSource):
        self.settings = settings
        self.source = source
        if ":" in settings.bind:
            import socket

            self.address_family = socket.AF_INET6
        super().__init__((settings.bind, settings.port), _Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        shown = f"[{host}]" if ":" in str(host) else host
        return f"http://{shown}:{port}{self.settings.base_path.rstrip('/')}/"

    def serve_in_thread(self) -> threading.Thread:
        thread = threading.Thread(target=self.serve_forever, name="gpupack-web", daemon=True)
        thread.start()
        return thread
