"""The co-runner rule over the kinds of busy GPU, for the colocate policy
(:mod:`~simulator.colocate`): which kinds of GPU qualify for a queued job and in what order.

A kind of busy GPU is what the rule sees of it: one (workload, size) job, or (more than two
per GPU) several (``ShareIndex``'s keys). Each kind is assessed alone by the run's rules
(``SuiteRules.corunners``, with this run's pair prediction), memoised per kind of queued job
(:class:`NewcomerMemo`) while the pairs to avoid and the predictions it rests on stand; the kinds
that qualify are kept up to date from those that appeared and went since.
"""
from __future__ import annotations

from packer.corunner import GpuLoad, Newcomer, Ranked, RunningJob
from packer.rules import SuiteRules
from simulator.knowledge import PairKnowledge
from simulator.sharing import ShareIndex
from simulator.state import Job
from simulator.workload import WorkloadProfile


class CorunnerKinds:
    """The kinds of busy GPU as the co-runner rule sees them, and what it found for each kind
    of queued job."""

    def __init__(self, rules: SuiteRules, know: PairKnowledge, avoid: set[tuple[str, str]], shares: ShareIndex,
                 profiles: list[WorkloadProfile], gpu_mem: int, pair_predict: bool):
        self.rules, self.know, self.avoid, self.shares = rules, know, avoid, shares
        self.profiles, self.gpu_mem, self.pair_predict = profiles, gpu_mem, pair_predict
        self._corunner_cache: dict = {}  # per (workload, size) newcomer: see newcomer
        self._loads: dict[tuple, GpuLoad] = {}  # kinds of busy GPU as the rule sees them
        self._load_key: dict[str, tuple] = {}  # a kind's GpuLoad id -> the kind
        self._wl_index = {p.key: p.index for p in profiles}

    def kind_of(self, gpu_id: str) -> tuple:
        """The kind of busy GPU a ranked ``GpuLoad`` stands for (by its id)."""
        return self._load_key[gpu_id]

    def ranked(self, memo: NewcomerMemo, cands: list[tuple]) -> list[Ranked]:
        """The qualifying kinds ``cands`` in the rule's order (rank_corunners': each kind
        assessed alone, sorted by the rule's key), ranked again only when they changed."""
        if memo.ranked_cands is not cands and memo.ranked_cands != cands:
            memo.ranked_cands = cands
            rule, keys, acc = self.rules.corunner_rule, memo.keys, memo.qualifies
            for k in cands:  # each kind's sort key, once per memo (its Ranked does not change)
                if k not in keys:
                    keys[k] = acc[k].key(rule)
            memo.ranked = [acc[k] for k in sorted(cands, key=keys.__getitem__)]
        return memo.ranked

    def pair_speed(self, a: str, b: str) -> float | None:
        """Speed of workload ``a`` beside ``b`` as this run's pair knowledge predicts it."""
        return self.know.speed(self._wl_index[a], self._wl_index[b])

    def load(self, key: tuple) -> GpuLoad:
        """A group of GPUs running the same jobs, as the co-runner rule sees it: one
        (workload, size) job each, or (more than two per GPU) several."""
        gl = self._loads.get(key)
        if gl is None:
            members = key if isinstance(key[0], tuple) else (key,)
            jobs = []
            for prof, held in members:
                p = self.profiles[prof]
                jobs.append(RunningJob(f"p{prof}", p.key, held, p.util_pct))
            gid = "+".join(f"{prof:03d}/{held}" for prof, held in members)
            gl = self._loads[key] = GpuLoad(gpu_id=gid, capacity_bytes=self.gpu_mem,
                                            jobs=tuple(jobs))
            self._load_key[gl.gpu_id] = key
        return gl

    def group(self, key: tuple) -> dict[int, None]:
        return self.shares.multi[key] if isinstance(key[0], tuple) else self.shares.single[key]

    def qualifying(self, memo: NewcomerMemo) -> list[tuple]:
        """The kinds of busy GPU that qualify for the job (each assessed alone by the rule,
        memoised per kind; the same kinds of GPU as last time give the same answer). Kept
        up to date from the kinds that appeared and went since (``ShareIndex.appeared``,
        ``gone``), not a walk over every kind; their order does not matter (the rule ranks
        them by a key no two kinds share)."""
        shares = self.shares
        if memo.kinds_version == shares.version:
            return memo.cands
        live, acc = memo.live, memo.qualifies
        if memo.kinds_version < 0:  # first use: every kind there now
            new = [*shares.single, *shares.multi]
        else:
            for key in shares.gone[memo.gone_at:]:
                if key in live and key not in (shares.multi if isinstance(key[0], tuple) else shares.single):
                    del live[key]
            new = shares.appeared[memo.appeared_at:]
        for key in new:
            if key in live or key not in (shares.multi if isinstance(key[0], tuple) else shares.single):
                continue
            r = acc.get(key)
            if r is None:
                found = self.rank(memo.new, [self.load(key)])
                r = acc[key] = found[0] if found else False
            if r:
                live[key] = None
        memo.appeared_at, memo.gone_at = len(shares.appeared), len(shares.gone)
        memo.kinds_version, memo.cands = shares.version, list(live)
        return memo.cands

    def newcomer(self, job: Job, need: int) -> NewcomerMemo:
        """The co-runner rule's view of a queued job and its memo (:class:`NewcomerMemo`). Valid
        while no pair is added to avoid and the predictions of its pairs stand."""
        # a kind of GPU qualifies by the pairs of this job's workload with those there: they
        # change when the model is refitted or a pair of this workload is observed (with more
        # than two per GPU the pairs among those there count too: any change)
        stamp = (len(self.avoid),
                 self.know.version if self.shares.multi_on else self.know.stamp(job.profile))
        key = (job.profile, need)
        hit = self._corunner_cache.get(key)
        if hit is None or hit.stamp != stamp:
            p = self.profiles[job.profile]
            hit = self._corunner_cache[key] = NewcomerMemo(stamp, Newcomer(f"p{job.profile}", p.key, need, p.util_pct))
        return hit

    def rank(self, new: Newcomer, loads: list[GpuLoad]):
        """The rules' corunners (packer.corunner.rank_corunners) with this run's pair prediction.

        A GPU qualifies on its own (memory, pairs to avoid, predicted speeds) and the order is
        a stable sort by the rule's key, so the kinds of GPU are assessed one at a time
        (memoised) and the qualifying ones sorted together give the same ranking."""
        return self.rules.corunners(new, loads, avoid=self.avoid,
                                   pair_speed=self.pair_speed if self.pair_predict else None)


class NewcomerMemo:
    """What the co-runner rule found for one kind of queued job (workload, size)."""

    __slots__ = ("stamp", "new", "qualifies", "kinds_version", "cands", "chosen_version",
                 "chosen_kind", "ranked_cands", "ranked", "keys", "live", "appeared_at", "gone_at")

    def __init__(self, stamp: tuple, new: Newcomer):
        self.stamp = stamp  # what the answers rest on (pairs to avoid, pair predictions)
        self.new = new  # the job as the rule sees it
        self.qualifies: dict = {}  # kind of GPU -> its ``Ranked``, or False: it does not qualify
        self.kinds_version = -1  # the version of the set of kinds when ``cands`` was made
        self.cands: list[tuple] = []  # the kinds that qualified then
        self.live: dict[tuple, None] = {}  # the kinds there that qualify, kept up to date
        self.appeared_at = self.gone_at = 0  # how far ShareIndex.appeared and gone were read
        self.chosen_version = -1  # the version when the rule last chose with nothing to honour
        self.chosen_kind: tuple | None = None  # the kind it chose then
        self.ranked_cands: list[tuple] | None = None  # the qualifying kinds last ranked
        self.ranked: list = []  # the rule's order of them (it depends on those kinds alone)
        self.keys: dict = {}  # kind of GPU -> its ``Ranked``'s sort key under the rule
