"""colocate's memo of the job shapes that found no room: the fast path's way to skip them.

In a loaded cluster no GPU is idle for most of the run, and a backfill pass tries one job
of each waiting shape (workload, remembered size) against the busy GPUs, to find again
that none of them qualifies. While no GPU is idle, whether a one-GPU job finds room depends
only on (:meth:`~simulator.colocate.ColocatePolicy.place`):

- the packer's decision for it (``packer.decision.decide``: packed or not, how many shares),
  fixed by its shape and whether its workload has a history;
- the kinds of busy GPU present (:class:`~simulator.sharing.ShareIndex`), each
  qualifying for it or not on its own (memory, pairs to avoid, predicted pair speeds).

So once a shape found no room, it finds none again while no GPU is idle, no workload gained
a history, no pair was added to avoid, its pair predictions stand, and none of the kinds of
GPU that appeared since (``ShareIndex.appeared``) qualifies for it: a kind going away never
makes room. :class:`NoRoomMemo` checks exactly that, reading the kinds' qualification from
the policy's own per-newcomer memo; anything it does not know sends the job to ``place``.
"""
from __future__ import annotations

from collections.abc import Collection

from simulator.knowledge import PairKnowledge
from simulator.sharing import ShareIndex
from simulator.state import Job


class NoRoomMemo:
    """(profile, remembered, guess) -> [state, position in the log of appeared kinds, which kinds
    qualify for the shape (None: the packer would not pack it, no kind matters)]."""

    def __init__(self, *, know: PairKnowledge, avoid: Collection, history: Collection, shares: ShareIndex,
                 idle: Collection, guess=lambda job: (), guess_version=lambda: 0):
        """What decides a shape's room: the pair knowledge, the pairs to avoid, the workloads
        with a history, the kinds of busy GPU (``shares``) and the idle GPUs."""
        self.know, self.avoid, self.history, self.shares, self.idle = know, avoid, history, shares, idle
        # identity levels: what a job's estimate rests on, and a count that changes when a
        # level stops being used (simulator.recurrence.Guesses; none without levels)
        self.guess, self.guess_version = guess, guess_version
        self._seen: dict[tuple, list] = {}
        self.skips = 0  # jobs found still without room (not tried)

    def _state(self, profile: int) -> int:
        """What decides a shape's room besides the kinds of GPU: the pairs to avoid, the
        workloads with a history, the predictions of this workload's pairs (with more than
        two per GPU: of every pair). Each count only grows, so their sum changes whenever
        one does."""
        know = self.know
        return len(self.avoid) + len(self.history) + self.guess_version() + (
            know.version if self.shares.multi_on else know.model_version + know.profile_version[profile])

    def found_none(self, job: Job, qualifies: dict | None) -> bool:
        """``place`` found no room for ``job`` (no time test refused it): remember it while no
        GPU is idle. ``qualifies``: kind of GPU -> truthy when it qualifies for the job (the
        policy's memo, filled as kinds are assessed)."""
        if not self.idle:
            self._seen[(job.profile, job.remembered, self.guess(job))] = [
                self._state(job.profile), len(self.shares.appeared), qualifies]
        return False

    def still_none(self, job: Job) -> bool:
        """True when ``place`` would surely find no room for ``job`` again."""
        if self.idle:
            return False
        key_ = (job.profile, job.remembered, self.guess(job))
        seen = self._seen.get(key_)
        if seen is None:
            return False
        know = self.know  # _state, inline (called millions of times)
        if seen[0] != len(self.avoid) + len(self.history) + self.guess_version() + (
                know.version if self.shares.multi_on
                else know.model_version + know.profile_version[job.profile]):
            del self._seen[key_]  # its counts only grow: that state never comes back
            return False
        qualifies = seen[2]
        if qualifies is None:
            self.skips += 1
            return True
        shares = self.shares
        log = shares.appeared
        n = len(log)
        if seen[1] < n:
            for i in range(seen[1], n):
                key = log[i]
                ok = qualifies.get(key)
                if ok is None or (ok and key in (shares.multi if isinstance(key[0], tuple)
                                                 else shares.single)):
                    # a kind that may qualify is there: let place judge (and record the shape
                    # again if it finds no room), not this walk again at every try
                    del self._seen[key_]
                    return False
            seen[1] = n
        self.skips += 1
        return True
