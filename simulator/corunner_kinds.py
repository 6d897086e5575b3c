"""The co-runner rule over the kinds of busy GPU, for the colocate policy
(:mod:`~simulator.colocate`): which kinds of GPU qualify for a queued job and in what order.

A kind of busy GPU is what the rule sees of it: one (workload, size) job, or (more than two
per GPU) several (``ShareIndex``'s keys). Each kind is assessed alone by the run's rules
(``SuiteRules.corunners``, with this run's pair prediction), memoised per kind of queued job
(:class:`NewcomerMemo`) while the pairs to avoid and the predictions it rests on stand; the kinds
that qualify are kept up to date from those that appeared and went since.
"""
from __future__ import annotations

from bisect import bisect_left, insort

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
        self._avoided: set[tuple[str, str]] = set()  # the pairs to avoid already in _avoid_order
        self._avoid_order: list[tuple[str, str]] = []

    def kind_of(self, gpu_id: str) -> tuple:
        """The kind of busy GPU a ranked ``GpuLoad`` stands for (by its id)."""
        return self._load_key[gpu_id]

    def ranked(self, memo: NewcomerMemo) -> list[Ranked]:
        """The qualifying kinds in the rule's order (rank_corunners': each kind assessed alone,
        sorted by the rule's key; :attr:`NewcomerMemo.order`, kept sorted as kinds come and go)."""
        if memo.ranked_version != memo.live_version:
            memo.ranked_version = memo.live_version
            acc = memo.qualifies
            memo.ranked = [acc[k] for _, k in memo.order]
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

    def qualifying(self, memo: NewcomerMemo) -> dict[tuple, None]:
        """The kinds of busy GPU that qualify for the job (each assessed alone by the rule,
        memoised per kind; the same kinds of GPU as last time give the same answer). Kept
        up to date from the kinds that appeared and went since (``ShareIndex.appeared``,
        ``gone``), not a walk over every kind, with their rank (:attr:`NewcomerMemo.order`)."""
        shares = self.shares
        if memo.kinds_version == shares.version:
            return memo.live
        live, acc = memo.live, memo.qualifies
        if memo.kinds_version < 0:  # first use: every kind there now
            new = [*shares.single, *shares.multi]
        else:
            for key in shares.gone[memo.gone_at:]:
                if key in live and key not in (shares.multi if isinstance(key[0], tuple) else shares.single):
                    memo.drop(key)
            new = shares.appeared[memo.appeared_at:]
        rule = self.rules.corunner_rule
        for key in new:
            if key in live or key not in (shares.multi if isinstance(key[0], tuple) else shares.single):
                continue
            r = acc.get(key)
            if r is None:
                found = self.rank(memo.new, [self.load(key)])
                r = acc[key] = found[0] if found else False
            if r:
                memo.add(key, rule)
        memo.appeared_at, memo.gone_at = len(shares.appeared), len(shares.gone)
        memo.kinds_version = shares.version
        return live

    def newcomer(self, job: Job, need: int) -> NewcomerMemo:
        """The co-runner rule's view of a queued job and its memo (:class:`NewcomerMemo`). Valid
        while no pair is added to avoid and the predictions of its pairs stand; when only some
        of its pairs changed (a pair learned, a pair to avoid: not a refit), only the kinds of
        GPU holding a partner of those pairs are assessed again (:meth:`_refresh`)."""
        # a kind of GPU qualifies by the pairs of this job's workload with those there: they
        # change when the model is refitted or a pair of this workload is observed (with more
        # than two per GPU the pairs among those there count too: any change)
        know = self.know
        stamp = (len(self.avoid), know.version, -1) if self.shares.multi_on else (
            len(self.avoid), know.model_version, know.profile_version[job.profile])  # PairKnowledge.stamp
        key = (job.profile, need)
        hit = self._corunner_cache.get(key)
        if hit is not None and hit.stamp != stamp and stamp[2] >= 0 and hit.stamp[1] == stamp[1]:
            self._refresh(hit, job.profile)  # the same model: some pairs learned or avoided
            hit.stamp = stamp
        elif hit is None or hit.stamp != stamp:
            p = self.profiles[job.profile]
            hit = self._corunner_cache[key] = NewcomerMemo(stamp, Newcomer(f"p{job.profile}", p.key, need, p.util_pct))
            hit.learned_at, hit.avoid_at = len(know.learned), len(self._avoid_log())
        return hit

    def _avoid_log(self) -> list[tuple[str, str]]:
        """The pairs to avoid in the order they were seen here (``avoid`` only grows)."""
        if len(self._avoided) != len(self.avoid):
            self._avoid_order.extend(sorted(self.avoid - self._avoided))
            self._avoided = set(self.avoid)
        return self._avoid_order

    def partners(self, memo: NewcomerMemo, profile: int) -> set[int]:
        """The profiles whose pairs with ``profile`` changed for ``memo`` since it last looked
        (a pair learned: only speed(a, b) moves; a pair to avoid); the memo is brought up to date."""
        learned, log = self.know.learned, self._avoid_log()
        out = {b if a == profile else a for a, b in learned[memo.learned_at:] if profile in (a, b)}
        wl = self.profiles[profile].key
        for a, b in log[memo.avoid_at:]:
            if wl in (a, b):
                out.add(self._wl_index[b if a == wl else a])
        memo.learned_at, memo.avoid_at = len(learned), len(log)
        return out

    def _refresh(self, memo: NewcomerMemo, profile: int) -> None:
        """Assess again the kinds of GPU (single-job kinds: two per GPU) holding a partner whose
        pair with ``profile`` changed; the others' answers read none of those pairs and stand.
        Any change to what qualifies, or to a qualifying kind's speeds, bumps ``live_version``."""
        partners = self.partners(memo, profile)
        acc, live, shares, rule = memo.qualifies, memo.live, self.shares, self.rules.corunner_rule
        for key in [k for k in acc if k[0] in partners]:
            if key in live:
                memo.drop(key)
            del acc[key]
            memo.keys.pop(key, None)
            if memo.kinds_version >= 0 and key in shares.single:  # there now: assess it again
                found = self.rank(memo.new, [self.load(key)])
                r = acc[key] = found[0] if found else False
                if r:
                    memo.add(key, rule)

    def rank(self, new: Newcomer, loads: list[GpuLoad]):
        """The rules' corunners (packer.corunner.rank_corunners) with this run's pair prediction.

        A GPU qualifies on its own (memory, pairs to avoid, predicted speeds) and the order is
        a stable sort by the rule's key, so the kinds of GPU are assessed one at a time
        (memoised) and the qualifying ones sorted together give the same ranking."""
        return self.rules.corunners(new, loads, avoid=self.avoid,
                                   pair_speed=self.pair_speed if self.pair_predict else None)


class NewcomerMemo:
    """What the co-runner rule found for one kind of queued job (workload, size)."""

    __slots__ = ("stamp", "new", "qualifies", "kinds_version", "live", "order", "live_version",
                 "ranked_version", "ranked", "keys", "appeared_at", "gone_at", "learned_at", "avoid_at")

    def __init__(self, stamp: tuple, new: Newcomer):
        self.stamp = stamp  # what the answers rest on (pairs to avoid, pair predictions)
        self.new = new  # the job as the rule sees it
        self.qualifies: dict = {}  # kind of GPU -> its ``Ranked``, or False: it does not qualify
        self.kinds_version = -1  # ShareIndex.version when ``live`` was last brought up to date
        self.live: dict[tuple, None] = {}  # the kinds there that qualify, kept up to date
        self.order: list[tuple] = []  # (sort key, kind) of the kinds in ``live``, sorted: the rule's order
        # bumped whenever the qualifying kinds or a qualifying kind's answer change
        self.live_version = 0
        self.ranked_version = -1  # live_version when ``ranked`` was made
        self.ranked: list = []  # the ``Ranked`` of ``order``
        self.keys: dict = {}  # kind of GPU -> its ``Ranked``'s sort key under the rule
        self.appeared_at = self.gone_at = 0  # how far ShareIndex.appeared and gone were read
        self.learned_at = self.avoid_at = 0  # how far PairKnowledge.learned and the avoid log were read

    def add(self, key: tuple, rule: str) -> None:
        """Kind ``key`` is there and qualifies (its ``Ranked`` in ``qualifies``): rank it in."""
        sk = self.keys.get(key)
        if sk is None:
            sk = self.keys[key] = self.qualifies[key].key(rule)
        self.live[key] = None
        insort(self.order, (sk, key))  # no two kinds share a sort key (it ends in the kind's id)
        self.live_version += 1

    def drop(self, key: tuple) -> None:
        """Kind ``key`` went, or its answer is to be made again: rank it out."""
        del self.live[key]
        order = self.order
        del order[bisect_left(order, (self.keys[key], key))]
        self.live_version += 1

    def best(self):
        """The ``Ranked`` of the kind the rule puts first (None: none qualifies)."""
        return self.qualifies[self.order[0][1]] if self.order else None
