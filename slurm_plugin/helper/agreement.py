"""What the helper and each node agent must agree on, checked over the link.

When the helper first reaches an agent, and again whenever the digest its samples carry
changes (the agent restarted, the node's gres.conf changed) or gpupack.toml is reloaded, the
helper compares the agent's facts (:mod:`slurm_plugin.agent.facts`) with its own:

- the link's protocol version and the suite's version: the same on both sides;
- shares per GPU: every shard count gres.conf gives one of the node's GPUs, and the agent's
  ``--shares-per-gpu`` where it was given one, equal ``[packer] shares_per_gpu``;
- the GPU type: with ``[packer] gpu_type`` set, the node's gres.conf gpu lines carry that Type;
  every gres.conf Type names the GPUs the agent sees (its letters and digits, lower case, are
  part of the catalogue model's or of the device's name: ``h100`` in ``H100-80GB``).

A node that disagrees is treated as a stale one (:mod:`.sample_source`): nothing is packed
there and no run-time action is taken on its jobs, the reason being the disagreement. An event
(``node-disagrees``, then ``node-agrees`` when it is fixed) and the metric
``gpupack_node_disagrees`` say so. A node whose agent cannot be asked is not judged here: it is
stale because it does not answer.
"""
from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass

from slurm_plugin.agent.facts import LINK_PROTOCOL, NodeFacts, suite_version

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Expected:
    """The helper's side of the agreement."""

    shares_per_gpu: int
    gpu_type: str = ""  # "" : any
    version: str = ""
    protocol: int = LINK_PROTOCOL


def expected_from(config) -> Expected:
    """The helper's side from its [packer] settings (a PackerConfig) and its own versions."""
    return Expected(config.shares_per_gpu, config.gpu_type, suite_version(), LINK_PROTOCOL)


def _letters(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def disagreements(facts: NodeFacts, want: Expected) -> list[str]:
    """Each way the agent's facts differ from the helper's, said for an admin; [] when none."""
    out: list[str] = []
    if facts.protocol != want.protocol:
        out.append(f"link protocol {facts.protocol}, the helper speaks {want.protocol}")
    if facts.version != want.version:
        out.append(f"suite version {facts.version}, the helper runs {want.version}")
    gres = facts.gres
    if gres.error:
        out.append(f"its gres.conf ({gres.path}) cannot be checked: {gres.error}")
    elif not gres.shards_per_gpu:
        out.append(f"its gres.conf ({gres.path}) gives it no shards")
    elif set(gres.shards_per_gpu) != {want.shares_per_gpu}:
        out.append(f"{'/'.join(map(str, gres.shards_per_gpu))} shards per GPU in its gres.conf ({gres.path}), "
                   f"[packer] shares_per_gpu = {want.shares_per_gpu}")
    if facts.shares_per_gpu is not None and facts.shares_per_gpu != want.shares_per_gpu:
        out.append(f"its agent places {facts.shares_per_gpu} shares per GPU (--shares-per-gpu), "
                   f"[packer] shares_per_gpu = {want.shares_per_gpu}")
    if not gres.error:
        if want.gpu_type and set(gres.gpu_types) != {want.gpu_type}:
            out.append(f"GPU type {'/'.join(t or '(none)' for t in gres.gpu_types) or '(no gpu lines)'} in its "
                       f"gres.conf, [packer] gpu_type = {want.gpu_type!r}")
        for t in sorted({t for t in gres.gpu_types if t}):
            odd = sorted({g.model for g in facts.gpus if _letters(t) not in _letters(g.model) + "|" + _letters(g.name)})
            if odd:
                out.append(f"gres.conf Type={t} but its GPUs are {', '.join(odd)}")
    return out


class Agreement:
    """Per node: the facts its agent last told (by digest), and whether it disagrees now.

    ``ask(node)`` returns the agent's facts as a dict (``client.node_facts``); it may raise the
    client's AgentRefused (an agent without the ``hello`` op: an older one) or AgentUnavailable.
    ``changes()`` hands the nodes that started or stopped disagreeing since it was last called
    to the monitor's thread, which logs the events."""

    def __init__(self, ask: Callable[[str], dict], expected: Callable[[], Expected]):
        self.ask = ask
        self.expected = expected
        self.disagree: dict[str, list[str]] = {}  # node -> why (what the metric shows)
        self._facts: dict[str, tuple[str | None, NodeFacts | None, str | None]] = {}
        self._changed: list[tuple[str, list[str]]] = []
        self._lock = threading.Lock()

    def check(self, node: str, digest: str | None) -> list[str]:
        """Why ``node`` disagrees now ([] when it agrees); asks its agent when ``digest`` is new."""
        from slurm_plugin.agent.client import AgentRefused

        known = self._facts.get(node)
        if digest is None:
            reasons = ["its agent tells no facts to check (an agent older than the helper?)"]
        else:
            if known is None or known[0] != digest:
                try:
                    doc = self.ask(node)
                    known = (doc.get("digest"), NodeFacts.from_dict(doc), None)
                except AgentRefused as exc:
                    known = (digest, None, f"its agent does not tell its facts ({exc})")
                except (KeyError, TypeError, ValueError) as exc:
                    known = (digest, None, f"its agent's facts are malformed ({exc!r})")
                self._facts[node] = known
            _, facts, broken = known
            reasons = [broken] if facts is None else disagreements(facts, self.expected())
        self._settle(node, reasons)
        return reasons

    def _settle(self, node: str, reasons: list[str]) -> None:
        with self._lock:
            before = self.disagree.get(node)
            if reasons == (before or []):
                return
            if reasons:
                self.disagree[node] = reasons
                log.warning("node %s disagrees with the helper: %s; nothing is packed there and no action "
                            "is taken on its jobs", node, "; ".join(reasons))
            else:
                self.disagree.pop(node, None)
                log.info("node %s agrees with the helper again", node)
            self._changed.append((node, reasons))

    def changes(self) -> list[tuple[str, list[str]]]:
        with self._lock:
            out, self._changed = self._changed, []
        return out


def log_agreement_events(agreement: Agreement | None, log_event: Callable[..., None]) -> None:
    """The monitor's events for nodes that started (``node-disagrees``) or stopped
    (``node-agrees``) disagreeing since the last round."""
    if agreement is None:
        return
    for node, reasons in agreement.changes():
        if reasons:
            log_event("node-disagrees", f"{node}: not packed onto, no action on its jobs: {'; '.join(reasons)}",
                      nodes=[node], reasons=reasons)
        else:
            log_event("node-agrees", f"{node}: agrees with the helper again; packed onto as before", nodes=[node])
