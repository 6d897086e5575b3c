"""A connection flood against one of the suite's servers, by an unprivileged user (measured, never
asserted by tests).

As root, :func:`run_flood` forks a child that (optionally entering a node's network namespace
first) drops to an unprivileged uid/gid (``nobody`` by default) and opens N connections to the
target: the helper's Unix socket, a node agent's Unix socket, or an agent's HTTP link. Each
sends a partial request (a few bytes, never a whole one: no ``END``, no newline, no blank line
after the HTTP head) and is held for ``hold_s`` seconds; with ``reopen`` a connection the server
closes is opened again, so N stay attempted for the whole hold. The child counts what happened
to each connection (connected, refused at connect and why, closed by the server and after how
long, answered with which bytes, still open at the end) and reports it as JSON on a pipe.
"Connected" is the client's view: over TCP a handshake completes while the server's accept queue
is full, so a connection never accepted stays "open" until the hold ends (the server holds no
thread or descriptor for it). ``closed_after`` tells the server's two answers apart: closed at
once (refused at accept: busy) or near a deadline (accepted, held by a thread that long); on the
link a partial head is also closed when newer connections evict it (the oldest unauthenticated
one goes first), so there ``closed_after`` spreads below the head's deadline.

Meanwhile the parent samples the target process's ``Threads``, ``VmRSS`` and open descriptors
from ``/proc/<pid>`` every ``sample_s`` (at most 0.5 s), before, during and after the flood,
and counts the lines the target's log gained during it. Whatever else is to be measured while
the server is flooded (the submit path's latency) runs in the parent between
:meth:`Flood.start` and :meth:`Flood.stop`.
"""
from __future__ import annotations

import ctypes
import errno
import json
import os
import pwd
import resource
import selectors
import signal
import socket
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

KINDS = ("helper", "agent", "link")
MAX_SAMPLE_S = 0.5
#: what each kind of target is sent: a request's first bytes, never a whole one
PARTIAL = {
    "helper": b"GPUPACK/1\nop 6\nsub",  # the helper's protocol, cut inside a field (no END)
    "agent": b'{"op": "rep',  # one JSON line, cut short (no newline)
    "link": b"POST /v1/samples HTTP/1.1\r\nHost: x\r\n",  # an HTTP head without its blank line
}
CLONE_NEWNET = 0x40000000


class FloodError(RuntimeError):
    """The flood cannot run as asked; the message says what to change."""


@dataclass(frozen=True)
class Target:
    kind: str  # helper | agent | link
    pid: int  # the process that serves it (sampled)
    log: Path | None  # its log file (lines counted)
    path: Path | None = None  # a Unix socket, as seen from here
    host: str = ""  # the link's address
    port: int = 0
    netns_pid: int | None = None  # open the connections from this process's network namespace

    @property
    def where(self) -> str:
        return str(self.path) if self.path is not None else f"{self.host}:{self.port}"


@dataclass(frozen=True)
class FloodPlan:
    connections: int = 1000
    hold_s: float = 20.0
    user: str = "nobody"
    sample_s: float = MAX_SAMPLE_S
    connect_s: float = 5.0  # how long a connection refused for a full backlog (EAGAIN) is retried
    reopen: bool = False  # open again each connection the server closes, for the whole hold
    rate: float = 0.0  # connections opened per second at most (0: as fast as they go)
    settle_s: float = 3.0  # sampled after the flood, to see what the server gives back


def check_plan(plan: FloodPlan) -> None:
    """Raise FloodError for a plan that cannot run (or would not measure what it says)."""
    if not 1 <= plan.connections <= 20000:
        raise FloodError("connections must be 1..20000")
    if plan.hold_s <= 0 or plan.connect_s <= 0 or plan.settle_s < 0:
        raise FloodError("hold and connect times must be positive, settle not negative")
    if not 0 < plan.sample_s <= MAX_SAMPLE_S:
        raise FloodError(f"the sampling interval must be in (0, {MAX_SAMPLE_S}] s")
    if plan.rate < 0:
        raise FloodError("rate must not be negative (0: unlimited)")
    try:
        entry = pwd.getpwnam(plan.user)
    except KeyError:
        raise FloodError(f"no such user {plan.user!r}") from None
    if entry.pw_uid == 0:
        raise FloodError("the flood is an unprivileged user's: not root")


# -- the target process, sampled -------------------------------------------------------------


@dataclass
class Sample:
    t: float  # seconds since the flood started (negative: before it)
    threads: int
    rss_kib: int
    fds: int


def read_sample(pid: int, t: float) -> Sample | None:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None
    values = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    rss = values.get("VmRSS", "0 kB").split()[0]
    return Sample(round(t, 2), int(values.get("Threads", "0").strip()), int(rss), fds)


@dataclass
class Phase:
    samples: int
    threads_max: int
    threads_min: int
    rss_kib_max: int
    fds_max: int


def phase(samples: list[Sample]) -> Phase | None:
    if not samples:
        return None
    return Phase(len(samples), max(s.threads for s in samples), min(s.threads for s in samples),
                 max(s.rss_kib for s in samples), max(s.fds for s in samples))


def split_phases(samples: list[Sample], flood_s: float) -> dict[str, Phase | None]:
    """Before (t < 0), during (0 <= t <= flood_s) and after the flood."""
    return {
        "before": phase([s for s in samples if s.t < 0]),
        "during": phase([s for s in samples if 0 <= s.t <= flood_s]),
        "after": phase([s for s in samples if s.t > flood_s]),
    }


# -- the flooding child ----------------------------------------------------------------------


@dataclass
class ClientCounts:
    attempts: int = 0  # connect() calls
    connected: int = 0
    refused: dict[str, int] = field(default_factory=dict)  # at connect, by errno name
    closed_by_server: int = 0
    closed_with_answer: int = 0  # of them, after sending some bytes
    close_after_s: list[float] = field(default_factory=list)  # connect to the server's close
    answers: dict[str, int] = field(default_factory=dict)  # the first line of each answer (cut to 80)
    open_max: int = 0
    open_at_end: int = 0
    open_timeline: list[tuple[float, int]] = field(default_factory=list)  # (s since start, open)
    send_failed: int = 0
    seconds: float = 0.0


def percentile(values: list[float], q: float) -> float | None:
    """The nearest-rank percentile (``q`` in 0..1) of ``values``; None when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


CLOSE_BUCKETS_S = (0.1, 1.0, 5.0, 15.0)


def close_buckets(close_after_s: list[float], edges: tuple[float, ...] = CLOSE_BUCKETS_S) -> dict[str, int]:
    """How long the server kept each connection it closed, bucketed: those closed at once were
    refused at accept; those closed near a deadline were accepted and held that long."""
    names = [f"<{edges[0]:g}s"] + [f"{a:g}-{b:g}s" for a, b in zip(edges, edges[1:])] + [f">={edges[-1]:g}s"]
    out = dict.fromkeys(names, 0)
    for value in close_after_s:
        index = next((i for i, edge in enumerate(edges) if value < edge), len(edges))
        out[names[index]] += 1
    return out


def summarize_counts(c: ClientCounts) -> dict:
    """What the flood saw, in a few figures (the lists dropped)."""
    return {
        "attempts": c.attempts,
        "connected": c.connected,
        "refused_at_connect": dict(sorted(c.refused.items())),
        "closed_by_server": c.closed_by_server,
        "closed_with_answer": c.closed_with_answer,
        "closed_after_s_p50": _round(percentile(c.close_after_s, 0.5)),
        "closed_after_s_max": _round(max(c.close_after_s) if c.close_after_s else None),
        "closed_after": close_buckets(c.close_after_s),
        "answers": dict(sorted(c.answers.items(), key=lambda kv: -kv[1])[:5]),
        "open_max": c.open_max,
        "open_at_end": c.open_at_end,
        "send_failed": c.send_failed,
        "seconds": round(c.seconds, 2),
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _enter_netns(pid: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns into {pid}'s network namespace: {os.strerror(err)}")
    finally:
        os.close(fd)


def _drop_to(user: str) -> None:
    entry = pwd.getpwnam(user)
    os.setgroups([])
    os.setgid(entry.pw_gid)
    os.setuid(entry.pw_uid)
    if os.getuid() == 0 or os.geteuid() == 0:
        raise OSError("could not drop root")


class _Client:
    """The child's flood: non-blocking sockets, one selector, no threads."""

    def __init__(self, target: Target, plan: FloodPlan, stop: threading.Event | None = None):
        self.target = target
        self.plan = plan
        self.counts = ClientCounts()
        self.sel = selectors.DefaultSelector()
        self.open: dict[int, tuple[socket.socket, float, bool]] = {}  # fd -> (sock, connected at, answered)
        self.pending: dict[int, tuple[socket.socket, float]] = {}  # TCP connects in progress
        self.stop = stop or threading.Event()
        self.partial = PARTIAL[target.kind]

    def _address(self):
        if self.target.path is not None:
            return self.target.path.name  # relative: the child's working folder is the socket's
        return (self.target.host, self.target.port)

    def _refused(self, why: str) -> None:
        self.counts.refused[why] = self.counts.refused.get(why, 0) + 1

    def _connect_one(self) -> bool:
        """One connect; False when it should be tried again (backlog full)."""
        family = socket.AF_UNIX if self.target.path is not None else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setblocking(False)
        self.counts.attempts += 1
        err = sock.connect_ex(self._address())
        if err == 0:
            self._connected(sock)
            return True
        if err == errno.EINPROGRESS:
            self.pending[sock.fileno()] = (sock, time.monotonic())
            self.sel.register(sock, selectors.EVENT_WRITE, "connecting")
            return True
        sock.close()
        if err == errno.EAGAIN:
            return False
        self._refused(errno.errorcode.get(err, str(err)))
        return True

    def _connected(self, sock: socket.socket) -> None:
        self.counts.connected += 1
        try:
            sock.send(self.partial)
        except OSError:
            self.counts.send_failed += 1
        self.open[sock.fileno()] = (sock, time.monotonic(), False)
        self.sel.register(sock, selectors.EVENT_READ, "open")
        self.counts.open_max = max(self.counts.open_max, len(self.open))

    def _on_event(self, key) -> None:
        sock = key.fileobj
        fd = sock.fileno()
        if key.data == "connecting":
            self.sel.unregister(sock)
            self.pending.pop(fd, None)
            err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                sock.close()
                self._refused(errno.errorcode.get(err, str(err)))
            else:
                self._connected(sock)
            return
        _, since, answered = self.open[fd]
        try:
            data = sock.recv(4096)
        except OSError:
            data = b""
        if data:
            if not answered:
                first = data.split(b"\n", 1)[0][:80].decode(errors="replace")
                self.counts.answers[first] = self.counts.answers.get(first, 0) + 1
                self.open[fd] = (sock, since, True)
            return
        self.sel.unregister(sock)
        del self.open[fd]
        sock.close()
        self.counts.closed_by_server += 1
        self.counts.closed_with_answer += int(answered)
        self.counts.close_after_s.append(round(time.monotonic() - since, 3))

    def run(self) -> ClientCounts:
        """Open the connections, hold them ``hold_s`` (or until stopped), close what is left."""
        plan = self.plan
        start = last = time.monotonic()
        end = start + plan.hold_s
        retry_until = start + plan.connect_s
        to_open = plan.connections
        tokens = float(plan.connections if plan.rate <= 0 else 1)
        next_mark = start
        while time.monotonic() < end and not self.stop.is_set():
            now = time.monotonic()
            if plan.rate > 0:  # a token bucket: `rate` a second, a tenth of a second's worth at once
                tokens = min(max(1.0, plan.rate / 10), tokens + (now - last) * plan.rate)
            last = now
            if plan.reopen:  # keep N attempted: each one the server closed or refused is opened again
                to_open = plan.connections - len(self.open) - len(self.pending)
            while to_open > 0 and (plan.rate <= 0 or tokens >= 1):
                if self._connect_one():
                    to_open -= 1
                    tokens -= 1
                elif now >= retry_until and not plan.reopen:
                    self._refused("EAGAIN")  # backlog full for connect_s: given up
                    to_open -= 1
                else:
                    break  # backlog full: let the server accept first
            for key, _ in self.sel.select(0.05 if to_open <= 0 else 0.005):
                self._on_event(key)
            if now >= next_mark:
                self.counts.open_timeline.append((round(now - start, 2), len(self.open)))
                next_mark = now + 0.5
        self.counts.open_at_end = len(self.open)
        for sock, _, _ in self.open.values():
            sock.close()
        for sock, _ in self.pending.values():
            sock.close()
        self.counts.seconds = time.monotonic() - start
        return self.counts


def _child(target: Target, plan: FloodPlan, out_fd: int) -> None:
    """The forked child: enter the namespace, drop root, flood, write the counts; never returns."""
    code = 0
    try:
        stop = threading.Event()
        signal.signal(signal.SIGUSR1, lambda *_: stop.set())
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = plan.connections + 64
        if soft < want:
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(max(want, soft), hard), hard))
        if target.netns_pid is not None:
            _enter_netns(target.netns_pid)
        if target.path is not None:
            os.chdir(target.path.parent)  # as root: the path may run through /proc/<holder>/root
        _drop_to(plan.user)
        result = {"uid": os.getuid(), "counts": asdict(_Client(target, plan, stop).run())}
    except BaseException as exc:  # reported, not raised: this is a forked child
        result = {"error": f"{type(exc).__name__}: {exc}"}
        code = 1
    with os.fdopen(out_fd, "w") as out:
        out.write(json.dumps(result))
    os._exit(code)


# -- the parent: start, sample, stop ---------------------------------------------------------


class Flood:
    """One flood: :meth:`start` (after ``baseline_s`` of samples), then :meth:`stop`."""

    def __init__(self, target: Target, plan: FloodPlan):
        check_plan(plan)
        if os.geteuid() != 0:
            raise FloodError("run as root (the flood's child drops to the unprivileged user itself)")
        if not Path(f"/proc/{target.pid}").exists():
            raise FloodError(f"the {target.kind}'s process {target.pid} is not running")
        self.target = target
        self.plan = plan
        self.samples: list[Sample] = []
        self._t0 = time.monotonic()
        self._started: float | None = None
        self._stopped: float | None = None
        self._done = threading.Event()
        self._sampler = threading.Thread(target=self._sample, name="flood-sampler", daemon=True)
        self._child: int | None = None
        self._read_fd: int | None = None
        self._log_offset = 0
        self._baseline: tuple[float, int | None] = (0.0, None)

    def _sample(self) -> None:
        while not self._done.is_set():
            s = read_sample(self.target.pid, time.monotonic())
            if s is not None:
                self.samples.append(s)
            self._done.wait(self.plan.sample_s)

    def start(self, baseline_s: float = 2.0) -> None:
        self._sampler.start()
        self._log_offset = self._log_size()
        time.sleep(baseline_s)
        self._baseline = (baseline_s, self._log_lines())  # the log's own pace, without a flood
        self._log_offset = self._log_size()
        read_fd, write_fd = os.pipe()
        self._started = time.monotonic()
        pid = os.fork()
        if pid == 0:  # the child
            os.close(read_fd)
            _child(self.target, self.plan, write_fd)
        os.close(write_fd)
        self._child, self._read_fd = pid, read_fd

    def stop(self, early: bool = True) -> dict:
        """End the hold (at once when ``early``, else when it runs out), collect the child's
        counts, sample ``settle_s`` more, and summarize."""
        assert self._child is not None and self._read_fd is not None
        if early:
            try:
                os.kill(self._child, signal.SIGUSR1)
            except ProcessLookupError:
                pass
        with os.fdopen(self._read_fd) as fh:
            raw = fh.read()
        os.waitpid(self._child, 0)
        self._stopped = time.monotonic()
        log_lines = self._log_lines()
        time.sleep(self.plan.settle_s)
        self._done.set()
        self._sampler.join()
        flood_s = self._stopped - self._started
        child = json.loads(raw) if raw else {"error": "the child said nothing"}
        if "error" in child:
            raise FloodError(f"the flood's child failed: {child['error']}")
        counts = ClientCounts(**child["counts"])
        for s in self.samples:  # seconds since the flood started
            s.t = round(s.t - self._started, 2)
        phases = split_phases(self.samples, flood_s)
        return {
            "target": self.target.kind,
            "where": self.target.where,
            "pid": self.target.pid,
            "user": f"{self.plan.user} (uid {child['uid']})",
            "connections": self.plan.connections,
            "reopen": self.plan.reopen,
            "flood_s": round(flood_s, 2),
            "client": summarize_counts(counts),
            "open_timeline": counts.open_timeline[::max(1, len(counts.open_timeline) // 20)],
            "log_lines_during": log_lines,
            "log_lines_before": f"{self._baseline[1]} in the {self._baseline[0]:g} s before",
            **{f"{name}": (asdict(p) if p else None) for name, p in phases.items()},
            "samples": [asdict(s) for s in self.samples if 0 <= s.t <= flood_s][:: max(1, int(1 / self.plan.sample_s))],
        }

    def _log_size(self) -> int:
        log = self.target.log
        return log.stat().st_size if log is not None and log.exists() else 0

    def _log_lines(self) -> int | None:
        log = self.target.log
        if log is None or not log.exists():
            return None
        with open(log, "rb") as fh:
            fh.seek(self._log_offset)
            return fh.read().count(b"\n")


def run_flood(target: Target, plan: FloodPlan, during=None, baseline_s: float = 2.0) -> tuple[dict, object]:
    """Flood ``target``; ``during()`` (if given) runs while the flood holds, and then ends it
    early; without it the flood holds ``plan.hold_s``. Returns the summary and what ``during``
    returned."""
    flood = Flood(target, plan)
    flood.start(baseline_s)
    got = None
    try:
        if during is not None:
            time.sleep(min(1.0, plan.hold_s / 4))  # the flood in full swing first
            got = during()
    finally:
        summary = flood.stop(early=during is not None)
    return summary, got


# -- targets on the dev cluster --------------------------------------------------------------


def dev_target(state_dir: Path, kind: str, node: str = "node1", from_node: str | None = None) -> Target:
    """The helper's socket, or ``node``'s agent socket or link, of the running dev cluster."""
    from slurm_plugin.cli.devcluster_cmd import _cluster

    if kind not in KINDS:
        raise FloodError(f"target must be one of {', '.join(KINDS)}")
    cluster = _cluster(state_dir)
    procs = {(p.role, p.name): p for p in cluster._load()}
    if not procs:
        raise FloodError(f"the dev cluster in {state_dir} is not up: run `gpupack devcluster up` first")
    spec = cluster.spec
    netns = None
    if from_node is not None:
        if ("host", from_node) not in procs:
            raise FloodError(f"no host {from_node!r} in the dev cluster (multi-host only)")
        netns = procs[("host", from_node)].pid
    if kind == "helper":
        return Target("helper", procs[("helper", "helper")].pid, spec.log / "helper.log",
                      path=spec.helper_socket, netns_pid=netns)
    if ("agent", node) not in procs:
        raise FloodError(f"no agent of {node!r} in the dev cluster")
    pid = procs[("agent", node)].pid
    log = spec.log / f"{node}.log"
    if kind == "agent":
        path = spec.run / f"agent-{node}.sock"
        if ("host", node) in procs:  # multi-host: the socket as the node's host sees it, reached from here
            cluster.hosts.holders = {n: p.pid for (role, n), p in procs.items() if role == "host"}
            seen = cluster.hosts.path_on(node, path)
        else:
            seen = path
        return Target("agent", pid, log, path=seen)
    host, port = spec.agent_address(node).rsplit(":", 1)
    return Target("link", pid, log, host=host, port=int(port), netns_pid=netns)
