"""The agents' slice journals, mirrored on the controller, and given back to an agent that lost its own.

Every sweep of the watcher's finals collector (`finals.FinalsCollector`, every `finals.SWEEP_S`),
for each GPU node:

1. the agent's journal view over the link (`client.slice_journal`): what holds now, and the
   slices it cannot account for (``unsure``: it lost ``state.json`` and its journal);
2. for those slices, the controller's copy (`SliceMirror` below) is sent back
   (`client.restore_slices`); the agent takes each record only when NVML and its job list
   confirm it, and says why for each one it leaves alone: events ``slice-restored`` and
   ``slice-unsure`` (each said once);
3. the copy is brought up to date: rows the journal lists are held, the others released,
   except those of slices the agent is unsure of (what it may still be given back).

A node whose agent does not answer is skipped (its copy is kept as it was).

The copy (`store.slices.SliceMirror`, the store's `slice_journal` table, schema 6): a row is one (node,
slice, job, run). It is *held* while the agent's journal lists it, and gets ``released_at``
the first time the journal no longer does (unless the agent is unsure of that slice: then
the row stays held, it is what the agent may be given back). Released rows, and held rows of
a node not heard from, go after ``[retention] slice_journal_days`` (`retention.py`).
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from store.db import Store
from store.slices import HeldSlice, SliceMirror

log = logging.getLogger(__name__)

SAID_KEPT = 10_000  # lines already logged as events, remembered so each is said once


class JournalMirror:
    """Mirrors each node's slice journal into ``store`` over ``link`` (an AgentLink)."""

    def __init__(self, link, store: Store, clock: Callable[[], float] = time.time):
        self.link = link
        self.store = store
        self.copy = SliceMirror(store)
        self.clock = clock
        self._said: dict[tuple[str, str], None] = {}

    def __call__(self, nodes: Iterable[str]) -> None:
        for node in nodes:
            self.node(node)

    def node(self, node: str) -> dict | None:
        """One node's pass; the agent's answer to ``restore`` (None when nothing was sent or
        the agent did not answer)."""
        from slurm_plugin.agent.client import AgentRefused, AgentUnavailable, restore_slices, slice_journal

        try:
            view = slice_journal(self.link, node)
        except (AgentUnavailable, AgentRefused, OSError, ValueError) as exc:
            log.info("slice journal of %s not collected now: %s", node, exc)
            return None
        held = self._held(node, view["held"])
        unsure = {str(u) for u in view["unsure"]}
        answer = None
        if unsure:
            listed = {h.uuid for h in held}
            newest: dict[str, HeldSlice] = {}
            for h in self.copy.held(node, unsure - listed):
                newest.setdefault(h.uuid, h)
            if newest:
                try:
                    answer = restore_slices(self.link, node, [h.assignment for h in newest.values()])
                except (AgentUnavailable, AgentRefused, OSError, ValueError) as exc:
                    log.info("slices of %s not given back now: %s", node, exc)
                else:
                    self._tell(node, answer)
        added, released = self.copy.mirror(node, held, self.clock(), keep=unsure)
        if added or released:
            log.info("slice journal of %s mirrored: %d new, %d released", node, added, released)
        return answer

    def _held(self, node: str, entries: list) -> list[HeldSlice]:
        out = []
        for entry in entries:
            try:
                out.append(HeldSlice.from_dict(entry))
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                log.warning("a slice journal entry of %s is malformed (%r): %r; not mirrored", node, exc, entry)
        return out

    def _tell(self, node: str, answer: dict) -> None:
        for kind, lines in (("slice-restored", answer["restored"]), ("slice-unsure", answer["left_alone"])):
            for line in lines:
                if (node, line) in self._said:
                    continue
                self._said[(node, line)] = None
                self.store.log_event(kind, f"{node}: {line}", node=node)
        while len(self._said) > SAID_KEPT:
            self._said.pop(next(iter(self._said)))
