"""What the node agent answers, one function per request, for both of its listeners:

- the local Unix socket (:mod:`.server`: the SPANK plugin, jobs' reports, node-local tools),
  peers checked by SO_PEERCRED;
- the network link (:mod:`.link_server`: the helper), every request MUNGE-authenticated; it
  serves only :data:`LINK_OPS` (a step's isolation and a job's reports stay on the node).
"""
from __future__ import annotations

from slurm_plugin.agent.daemon import NodeAgent
from slurm_plugin.agent.paths import AgentError
from slurm_plugin.agent.slurm_jobs import parse_outputs
from slurm_plugin.agent.trust import Peer

LINK_OPS = frozenset({"ping", "hello", "samples", "status", "layout", "finish", "jobs", "finals", "ack_finals",
                      "mps_plan", "journal", "restore", "oom_settle", "ack_unisolated"})


def _int(body: dict, key: str, default: int | None = None) -> int:
    value = body.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{key} must be a non-negative integer")
    return value


def _ints(body: dict, key: str) -> list[int]:
    values = body.get(key) or []
    if not isinstance(values, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in values):
        raise ValueError(f"{key} must be a list of integers")
    return values


def dispatch(agent: NodeAgent, op: str, body: dict, peer: Peer) -> dict:
    """The answer to one request (a ValueError or AgentError says what is wrong with it)."""
    handler = _OPS.get(op)
    if handler is None:
        raise ValueError(f"unknown op {op!r}")
    return handler(agent, body, peer)


def _ping(agent: NodeAgent, body: dict, peer: Peer) -> dict:
    return {"status": "ok", "node": agent.node}


def _hello(agent: NodeAgent, body: dict, peer: Peer) -> dict:
    """What the helper checks it agrees with (:mod:`.facts`), and their digest."""
    digest = agent.facts.digest()  # first: facts changed meanwhile make the next digest differ
    with agent.lock:  # the GPU backend is asked under the agent's one lock, as by every other op
        facts = agent.facts.facts().to_dict()
    return {"status": "ok", "node": agent.node, "facts": facts, "digest": digest}


def _isolate(agent: NodeAgent, body: dict, peer: Peer) -> dict:
    env = body.get("env") or {}
    if not isinstance(env, dict):
        raise ValueError("env must be an object")
    env = {str(k): str(v) for k, v in env.items()}
    node = body.get("node")
    if node and node != agent.node:
        raise AgentError(f"this is the agent of {agent.node}, asked for node {node}")
    uid = body.get("uid")
    a = agent.isolate(_int(body, "job_id"), _int(body, "step_id"), uid if isinstance(uid, int) else None, env)
    answer = {"status": "ok", "isolation": a.isolation, "env": a.env}
    if agent.python_site is not None and a.kind in ("mig", "mps"):  # the opt-in observer, packed steps only
        answer["prepend"] = {"PYTHONPATH": str(agent.python_site)}
    fence = agent.fence(a)
    if fence is not None:
        answer["fence"] = fence.to_dict()
    return answer


def _step_end(agent: NodeAgent, body: dict, peer: Peer) -> dict:
    summary = agent.step_end(_int(body, "job_id"), _int(body, "step_id"))
    return {"status": "ok", "isolation": "ended" if summary else "running", "env": {}, "summary": summary}


def _task_exit(agent: NodeAgent, body: dict, peer: Peer) -> dict:
    """A task ended (the SPANK plugin, in slurmstepd): "hold" asks it to wait and ask again."""
    code = body.get("exit_code")
    if isinstance(code, bool) or not isinstance(code, int):
        raise ValueError("exit_code must be an integer")
    answer = agent.oom.task_exit(_int(body, "job_id"), _int(body, "step_id"), code)
    return {"status": "ok", "isolation": answer, "env": {}}


def _alloc_failed(agent: NodeAgent, body: dict, peer: Peer) -> dict:
    return agent.oom.alloc_failed(_int(body, "job_id"), peer, body)


def _oom_settle(agent: NodeAgent, body: dict, peer: Peer) -> dict:
    """The helper's answer to an out-of-memory end: the held step may end."""
    outcome = str(body.get("outcome") or "settled")[:200]
    return {"status": "ok", "node": agent.node, "known": agent.oom.settle(_int(body, "job_id"), outcome)}


def _samples(agent: NodeAgent, body: dict, peer: Peer) -> dict:
    job = body.get("job_id")
    since = body.get("since")
    got = agent.samples(_int(body, "job_id") if job is not None else None,
                        float(since) if isinstance(since, (int, float)) else None, bool(body.get("latest")))
    # the agent's own clock twice: the helper judges staleness without comparing clocks
    return {"status": "ok", "node": agent.node, "samples": got, "sampled_at": agent.sampled_at,
            "now": agent.clock(), "facts": agent.facts.digest(), "oom_ends": agent.oom_ends.waiting(),
            "unisolated": agent.unisolated.pending()}


def _ack_unisolated(agent: NodeAgent, body: dict, peer: Peer) -> dict:
    """The helper has read these unisolated-step records (:mod:`.unisolated`): deleted."""
    keys = body.get("keys") or []
    if not isinstance(keys, list):
        raise ValueError("keys must be a list of record keys")
    return {"status": "ok", "node": agent.node, "forgotten": agent.unisolated.ack(keys)}


def _finish(agent: NodeAgent, body: dict, peer: Peer) -> dict:
    return {"status": "ok", "summary": agent.finish(_int(body, "job_id"), "asked by uid %d" % peer.uid)}


def _status(agent: NodeAgent, body: dict, peer: Peer) -> dict:
    return {"status": "ok", **agent.status()}


def _adoption(agent: NodeAgent, body: dict, peer: Peer) -> dict:
    """Whether a login of ``uid`` may be adopted into its job here (pam_slurm_adopt): ``refuse`` says
    why not (:mod:`.adoption`)."""
    return {"status": "ok", "node": agent.node, "refuse": agent.adoption_refusal(_int(body, "uid"))}


def _report(agent: NodeAgent, body: dict, peer: Peer) -> dict:
    return agent.reports.report(_int(body, "job_id"), peer, body)


def _layout(agent: NodeAgent, body: dict, peer: Peer) -> dict:
    shards, jobs = _ints(body, "pending_shards"), _ints(body, "pending_jobs")
    if jobs and len(jobs) != len(shards):
        raise ValueError(f"pending_jobs names {len(jobs)} jobs for {len(shards)} pending_shards: one each, in order")
    if "generation" in body:
        agent.generations.take("layout", _int(body, "generation"))
    changes = agent.follow_queue(str(body.get("policy", "off")), shards, jobs or None)
    return {"status": "ok", "node": agent.node, "changes": changes}


def _shard_counts(raw: object) -> dict[int, int]:
    """``{"<job>": <shards on this node>}`` of a pushed list, checked whole (a bad entry refuses the list)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict) or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                                            for v in raw.values()):
        raise ValueError("shards must map job ids to shard counts")
    try:
        return {int(k): v for k, v in raw.items()}
    except ValueError as exc:
        raise ValueError(f"shards must map job ids to shard counts: {exc}") from None


def _jobs(agent: NodeAgent, body: dict, peer: Peer) -> dict:
    """The jobs Slurm runs on this node, pushed by the helper each round."""
    pushed = getattr(agent.list_running_jobs, "update", None)
    if pushed is None:
        raise AgentError("this agent does not take job lists (started with another job lister)")
    generation = _int(body, "generation")
    raw = body.get("gpus") or {}
    if not isinstance(raw, dict) or not all(isinstance(v, list) and all(isinstance(i, int) and not isinstance(i, bool)
                                                                        and i >= 0 for i in v) for v in raw.values()):
        raise ValueError("gpus must map job ids to lists of GPU indexes")
    try:
        gpus = {int(k): tuple(v) for k, v in raw.items()}
    except ValueError as exc:
        raise ValueError(f"gpus must map job ids to lists of GPU indexes: {exc}") from None
    shards = _shard_counts(body.get("shards"))
    agent.generations.take("jobs", generation)  # kept across restarts (a StalePlan is refused)
    outputs = parse_outputs(body.get("outputs"))
    if not pushed(_ints(body, "job_ids"), generation, gpus, shards):
        raise ValueError(f"job list generation {generation} is older than the one this agent has")
    take = getattr(agent.list_running_jobs, "take_outputs", None)
    if take is not None:
        take(outputs)
        agent.oom.outputs_arrived()  # ends waiting for where their output is (`oom_desk`)
    return {"status": "ok", "node": agent.node}


def _finals(agent: NodeAgent, body: dict, peer: Peer) -> dict:
    return {"status": "ok", "node": agent.node, "finals": agent.kept_finals.pending()}


def _ack_finals(agent: NodeAgent, body: dict, peer: Peer) -> dict:
    keys = body.get("runs") or []
    if not isinstance(keys, list) or not all(isinstance(k, (int, str)) and not isinstance(k, bool) for k in keys):
        raise ValueError("runs must be a list of job ids or run keys")
    return {"status": "ok", "node": agent.node, "forgotten": agent.kept_finals.ack(keys)}


def _mps_plan(agent: NodeAgent, body: dict, peer: Peer) -> dict:
    plan = body.get("plan")
    agent.mps_plan.write(plan if isinstance(plan, dict) else {}, _int(body, "generation"))
    return {"status": "ok", "node": agent.node}


def _journal(agent: NodeAgent, body: dict, peer: Peer) -> dict:
    """The slice journal's view, mirrored by the helper on the controller."""
    return {"status": "ok", "node": agent.node, **agent.journal_view()}


def _restore(agent: NodeAgent, body: dict, peer: Peer) -> dict:
    """The controller's copy of this node's journal, for the slices the agent is unsure of."""
    records = body.get("assignments")
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise ValueError("assignments must be a list of the journal's records")
    return {"status": "ok", "node": agent.node, **agent.restore(records)}


_OPS = {
    "ping": _ping, "hello": _hello, "isolate": _isolate, "step_end": _step_end, "samples": _samples,
    "finish": _finish, "status": _status, "report": _report, "layout": _layout, "jobs": _jobs, "finals": _finals,
    "ack_finals": _ack_finals, "mps_plan": _mps_plan, "journal": _journal, "restore": _restore,
    "task_exit": _task_exit, "alloc_failed": _alloc_failed, "oom_settle": _oom_settle,
    "ack_unisolated": _ack_unisolated, "adoption": _adoption,
}
