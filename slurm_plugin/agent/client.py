"""Talking to node agents.

- The helper (watcher, web view) reaches every agent only through the functions below that
  take an :class:`AgentLink`: HTTP/JSON to the agent's command endpoint on its node, every
  request carrying a MUNGE credential for that node, every answer checked against the agent's
  own credential (:mod:`slurm_plugin.munge_auth`). One function per operation.
- On the node itself (jobs' reports, the SPANK plugin's C twin, the Epilog, `gpupack agent
  status`): :func:`ask` over the agent's Unix socket, peers checked by SO_PEERCRED.
"""
from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from packer.samples import JobSample
from slurm_plugin.agent.directory import AgentAddress
from slurm_plugin.agent.paths import final_path, socket_path
from slurm_plugin.helper.settings import slurm_user_uid
from slurm_plugin.munge_auth import (
    ANSWER_HEADER, HEADER, SCHEME, CredentialRefused, Munge, MungeError, check_answer, new_claim,
)


class AgentUnavailable(OSError):
    """The agent does not answer (or its answer cannot be believed)."""


class AgentRefused(PermissionError):
    """The agent answered, and refused (the reason is its own)."""


# -- the network link (the helper) ------------------------------------------------------
class AgentLink:
    """The helper's link to every agent: where each listens (``directory``), this host's munged,
    and the uids whose credentials may sign an agent's answer (root and the SlurmUser).
    Keeps one HTTP connection per agent and thread open (a request costs no TCP handshake)."""

    def __init__(self, directory: Callable[[str], AgentAddress | None], munge: Munge,
                 signers: set[int] = frozenset({0}), timeout: float = 2.0):
        self.directory = directory
        self.munge = munge
        self.signers = set(signers) | {0}
        self.timeout = timeout
        self._local = threading.local()

    def _connection(self, address: AgentAddress, timeout: float) -> http.client.HTTPConnection:
        pool = self._local.__dict__.setdefault("pool", {})
        conn = pool.get(address)
        if conn is None:
            conn = pool[address] = http.client.HTTPConnection(address.host, address.port, timeout=timeout)
        conn.timeout = timeout
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        return conn

    def _drop(self, address: AgentAddress) -> None:
        conn = self._local.__dict__.get("pool", {}).pop(address, None)
        if conn is not None:
            conn.close()

    def call(self, node: str, op: str, request: dict | None = None, timeout: float | None = None) -> dict:
        """POST /v1/<op> to the agent of ``node``; its answer (status ok) or an exception."""
        address = self.directory(node)
        if address is None:
            raise AgentUnavailable(f"no address known for the agent of {node} (not in [agents], "
                                   f"and Slurm gives no NodeAddr)")
        path = f"/v1/{op}"
        body = json.dumps(request or {}).encode()
        claim = new_claim(node, "POST", path, body)
        try:
            cred = self.munge.encode(claim.encode())
        except MungeError as exc:
            raise AgentUnavailable(f"cannot make a MUNGE credential for {node}: {exc}") from exc
        headers = {HEADER: SCHEME + cred, "Content-Type": "application/json"}
        status, signature, data = self._exchange(address, path, body, headers, timeout or self.timeout, node)
        if status in (401, 403) and signature is None:
            # unsigned: anyone on the path could have said it; a link failure (retried, or the next
            # round), never the agent's refusal
            raise AgentUnavailable(f"agent of {node} at {address}: an unsigned {status} ({_reason(data)}); "
                                   f"not believed as the agent's refusal")
        try:
            check_answer(self.munge, signature, claim, data, self.signers)
        except CredentialRefused as exc:
            raise AgentUnavailable(f"answer of {address} for {node} not believed: {exc.reason}") from exc
        try:
            answer = json.loads(data)
        except ValueError as exc:
            raise AgentUnavailable(f"agent of {node} answered garbage: {data[:200]!r}") from exc
        if status != 200 or answer.get("status") != "ok":
            raise AgentRefused(f"agent of {node} refused {op}: {answer.get('reason')}")
        return answer

    def _exchange(self, address: AgentAddress, path: str, body: bytes, headers: dict, timeout: float,
                  node: str) -> tuple[int, str | None, bytes]:
        for attempt in (1, 2):  # a kept connection the agent closed meanwhile: once more, anew
            conn = self._connection(address, timeout)
            fresh = conn.sock is None
            try:
                conn.request("POST", path, body, headers)
                response = conn.getresponse()
                data = response.read()
                if response.getheader("Connection", "").lower() == "close":
                    self._drop(address)
                return response.status, response.getheader(ANSWER_HEADER), data
            except (OSError, http.client.HTTPException) as exc:
                self._drop(address)
                if fresh or attempt == 2:
                    raise AgentUnavailable(f"agent of {node} at {address}: {exc}") from exc
        raise AssertionError("unreachable")


def _reason(data: bytes) -> str:
    try:
        return str(json.loads(data).get("reason"))
    except (ValueError, AttributeError):
        return data[:200].decode(errors="replace")


@dataclass(frozen=True)
class SampleBatch:
    """An agent's samples, and its own clock: when it last sampled, and now."""

    samples: list[JobSample]
    sampled_at: float | None
    agent_now: float
    facts: str | None = None  # the digest of what the agent must agree with (None: it tells none)
    oom_ends: tuple[dict, ...] = ()  # packed jobs' out-of-memory ends it holds for the helper
    unisolated: tuple[dict, ...] = ()  # packed steps root recorded as not started (agent.unisolated)

    @property
    def age_s(self) -> float | None:
        """Seconds since the agent's last sampling round, by its own clock (None: never)."""
        return None if self.sampled_at is None else max(0.0, self.agent_now - self.sampled_at)


def sample_batch(link: AgentLink, node: str, job_id: int | None = None, *, latest: bool = False,
                 since: float | None = None, timeout: float | None = None) -> SampleBatch:
    req: dict = {"latest": latest}
    if job_id is not None:
        req["job_id"] = int(job_id)
    if since is not None:
        req["since"] = since
    answer = link.call(node, "samples", req, timeout)
    sampled_at = answer.get("sampled_at")
    ooms = answer.get("oom_ends") or []
    stopped = answer.get("unisolated") or []
    return SampleBatch([JobSample.from_dict(s) for s in answer.get("samples", [])],
                       float(sampled_at) if isinstance(sampled_at, (int, float)) else None,
                       float(answer.get("now") or time.time()),
                       answer.get("facts") if isinstance(answer.get("facts"), str) else None,
                       tuple(e for e in ooms if isinstance(e, dict)) if isinstance(ooms, list) else (),
                       tuple(r for r in stopped if isinstance(r, dict)) if isinstance(stopped, list) else ())


def samples(link: AgentLink, node: str, job_id: int | None = None, *, latest: bool = False,
            since: float | None = None, timeout: float | None = None) -> list[JobSample]:
    """The agent's samples; ``latest`` gives the newest per job, ``since`` those newer."""
    return sample_batch(link, node, job_id, latest=latest, since=since, timeout=timeout).samples


def node_facts(link: AgentLink, node: str, timeout: float | None = None) -> dict:
    """What the agent must agree with the helper on (`slurm_plugin.agent.facts.NodeFacts` as a
    dict), with ``digest``: the value its samples carry until these facts change."""
    answer = link.call(node, "hello", {}, timeout)
    facts = answer.get("facts")
    if not isinstance(facts, dict):
        raise AgentUnavailable(f"agent of {node} answered hello without its facts")
    return {**facts, "digest": answer.get("digest")}


def status(link: AgentLink, node: str, timeout: float | None = None) -> dict:
    """What the agent holds: its jobs' isolation and its MIG instances."""
    return link.call(node, "status", {}, timeout)


def push_jobs(link: AgentLink, node: str, job_ids: list[int], generation: int,
              outputs: Mapping[int, dict] | None = None, gpus: Mapping[int, tuple[int, ...]] | None = None,
              shards: Mapping[int, int] | None = None) -> None:
    """The jobs Slurm runs on ``node`` now (the agent frees the isolation of the others), where
    each writes its output (``{job: {"uid", "paths"}}``, Slurm's record; the agent reads an ended
    step's tail with the user's rights), and the GPU indexes Slurm gave each there where its
    record names them (the agent refuses a packed step whose own variables name another GPU), and the
    shards it gave each there (0: whole GPUs; the agent does not take a step as packed that Slurm's
    record says holds none)."""
    body: dict = {"job_ids": sorted(int(j) for j in job_ids), "generation": int(generation)}
    if outputs:
        body["outputs"] = {str(int(j)): v for j, v in outputs.items()}
    if gpus:
        body["gpus"] = {str(int(j)): [int(i) for i in idx] for j, idx in gpus.items()}
    if shards:
        body["shards"] = {str(int(j)): int(n) for j, n in shards.items()}
    link.call(node, "jobs", body)


def send_layout(link: AgentLink, node: str, policy: str, pending_shards: list[int], generation: int,
                pending_jobs: list[int] | None = None) -> list[dict]:
    """The pending queue's needs for the agent's idle MIG slices (``pending_jobs``: whose, in
    the same order: the agent skips those it already runs); the changes it made."""
    body: dict = {"policy": policy, "pending_shards": pending_shards, "generation": int(generation)}
    if pending_jobs is not None:
        body["pending_jobs"] = [int(j) for j in pending_jobs]
    answer = link.call(node, "layout", body)
    return list(answer.get("changes") or [])


def send_mps_plan(link: AgentLink, node: str, plan: dict[str, dict[str, int]], generation: int) -> None:
    """MPS percentages for the node's jobs, ``{gpu: {job: percent}}``."""
    link.call(node, "mps_plan", {"plan": plan, "generation": int(generation)})


def settle_oom(link: AgentLink, node: str, job_id: int, outcome: str) -> bool:
    """Answer a job's out-of-memory end (`oom_ends.OomEnds`): its held step may end. Idempotent;
    False when the agent does not know the end (it restarted, or forgot it)."""
    return bool(link.call(node, "oom_settle", {"job_id": int(job_id), "outcome": outcome}).get("known"))


def ack_unisolated(link: AgentLink, node: str, keys: list[str]) -> int:
    """The agent may delete these unisolated-step records (their ``key``). Idempotent; how many it did."""
    return int(link.call(node, "ack_unisolated", {"keys": list(keys)}).get("forgotten") or 0)


def collect_finals(link: AgentLink, node: str) -> list[dict]:
    """Finished runs' summaries the agent keeps until acknowledged (`finals.job_summary` with
    ``gaps``: seconds the run went without samples, and ``run``: the run's key)."""
    return list(link.call(node, "finals").get("finals") or [])


def ack_finals(link: AgentLink, node: str, job_ids: list[int | str]) -> int:
    """The agent may forget these runs' summaries (job ids: every kept run of the job; run keys:
    that run). Idempotent. Returns how many it forgot."""
    return int(link.call(node, "ack_finals", {"runs": list(job_ids)}).get("forgotten") or 0)


def slice_journal(link: AgentLink, node: str) -> dict:
    """What the agent's slice journal says holds (``held``: ``uuid``, ``job``, ``run``,
    ``assignment`` each), the slices it accounts for by nothing (``unsure``), and its ``mark``."""
    answer = link.call(node, "journal")
    return {"held": list(answer.get("held") or []), "unsure": list(answer.get("unsure") or []),
            "mark": answer.get("mark")}


def restore_slices(link: AgentLink, node: str, assignments: list[dict]) -> dict:
    """Give the agent back the controller's records of slices it is unsure of; it takes those the
    GPU and its job list confirm: ``{"restored": [...], "left_alone": [...]}``, a line each."""
    answer = link.call(node, "restore", {"assignments": assignments})
    return {"restored": list(answer.get("restored") or []), "left_alone": list(answer.get("left_alone") or [])}


# -- the node-local Unix socket ---------------------------------------------------------
def ask(path: Path | str, request: dict, timeout: float = 2.0) -> dict:
    """Send one request (a JSON object) to the agent's Unix socket, return its JSON answer."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(str(path))
            sock.sendall((json.dumps(request) + "\n").encode())
            data = b""
            while not data.endswith(b"\n"):
                chunk = sock.recv(1 << 20)
                if not chunk:
                    break
                data += chunk
    except OSError as exc:
        raise AgentUnavailable(f"node agent at {path}: {exc}") from exc
    if not data.endswith(b"\n") or data.count(b"\n") != 1:  # one JSON line, whole: else cut short or not the agent
        raise AgentUnavailable(f"node agent at {path} gave no whole answer (one line ending in a newline): "
                               f"{data[:200]!r}")
    try:
        return json.loads(data)
    except ValueError as exc:
        raise AgentUnavailable(f"node agent at {path} answered garbage: {data[:200]!r}") from exc


def final_stats(state_dir: Path | str, node: str, job_id: int, wait_s: float = 3.0) -> dict | None:
    """The job's final summary on ``node``, read on the node itself (None when the agent never
    isolated it). The agent writes it when the job's batch step ends; if it is not there yet,
    this asks the agent to finish the job now, and waits up to ``wait_s``."""
    path = final_path(Path(state_dir), node, job_id)
    deadline = time.monotonic() + wait_s
    asked = False
    while True:
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            pass
        if not asked:
            asked = True
            try:
                answer = ask(socket_path(Path(state_dir), node), {"op": "finish", "job_id": int(job_id)}, timeout=wait_s)
                if answer.get("status") == "ok" and answer.get("summary") is None:
                    return None  # the agent does not know this job
            except AgentUnavailable:
                pass
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.1)


def link_from_config(config_path: Path | None, signer_uids: set[int],
                     node_addrs: Callable[[], dict[str, str]] | None = None) -> AgentLink:
    """The helper's AgentLink as gpupack.toml says (``[agent]``, ``[agents]``); ``node_addrs``
    gives NodeAddr per node (from ``scontrol show node``) for nodes the map does not name."""
    from slurm_plugin.agent.directory import AgentDirectory
    from slurm_plugin.config.whole import load_agent_settings

    settings = load_agent_settings(config_path)
    return AgentLink(AgentDirectory(settings, node_addrs), Munge(settings.munge_socket), signer_uids,
                     settings.timeout_s)


def helper_link(config_path: Path | None, paths, runner: Callable[[], object]) -> AgentLink:
    """The helper's (and the web view's) link: root and the SlurmUser (``[paths] slurm_user``)
    may sign answers; NodeAddr from ``runner().nodes()`` for nodes ``[agents]`` does not name."""
    def node_addrs() -> dict[str, str]:
        return {n.name: n.address or n.name for n in runner().nodes()}

    return link_from_config(config_path, slurm_user_uid(getattr(paths, "slurm_user", "slurm")), node_addrs)
