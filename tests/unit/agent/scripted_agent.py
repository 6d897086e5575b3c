"""A scripted node agent for the tests of its clients (the SPANK plugin's harness, the Python
jobs' out-of-memory observer): a Unix socket that records each request and answers as told."""
from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path


class ScriptedAgent:
    """A Unix socket that records each request (one line) and answers with ``answer`` bytes (a list:
    one per request in turn, the last one repeated)."""

    def __init__(self, path: Path, answer: bytes | list[bytes], first_after_s: float = 0.0,
                 late_s: dict[int, float] | None = None):
        """``first_after_s``: the first answer comes this late (an agent busy under its lock);
        ``late_s``: request number (1: the first) -> how late its answer comes."""
        self.path, self.requests = path, []
        self.late_s = {**({1: first_after_s} if first_after_s else {}), **(late_s or {})}
        self.answers = list(answer) if isinstance(answer, list) else [answer]
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.bind(str(path))
        self.sock.listen(8)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                data = b""
                while b"\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                self.requests.append(json.loads(data.split(b"\n", 1)[0]))
                if self.late_s.get(len(self.requests)):
                    time.sleep(self.late_s[len(self.requests)])
                try:
                    conn.sendall(self.answers[min(len(self.requests), len(self.answers)) - 1])
                except OSError:  # the client gave up waiting (its own timeout): what a real agent sees too
                    pass

    def close(self):
        self.sock.close()
