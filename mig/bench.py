"""Benchmark of the placement policies: fragmentation rejections and decision latency.

Fragmentation rejections of fsm, demand, first-fit and random on random alloc/free streams
of several size mixes (four named ones and ``random_mixes`` drawn at random, so no policy is
judged on one mix), as ratios to first-fit, per mix and averaged over mixes; the
whole-catalogue precompute time of each GPU model (cold, no cache); the latency of one fsm
decision over states met in a stream, and of one demand decision as a node makes them
(history mix, its value table rebuilt when the mix moves, counted in the decision).
"""
from __future__ import annotations

import random
import statistics
import time
from dataclasses import replace

from mig.catalog import list_models, load_catalog
from mig.fsm import PartitionSpace, get_space
from mig.policies import POLICIES, choose
from mig.simulate import generate_stream, run_events

# size mixes as weights over the profiles of an 8-memory-slice GPU, smallest first:
# (1g 1-slice, 1g 2-slice, 2g, 3g, 4g, 7g)
MIXES: dict[str, tuple[float, ...]] = {
    "small-heavy": (6, 2, 2, 1, 0.5, 0.1),
    "uniform": (1, 1, 1, 1, 1, 0.2),
    "large-heavy": (1, 1, 2, 3, 2, 0.5),
    "bimodal": (5, 0, 0, 3, 0, 0.2),
}


def random_mixes(n: int, seed: int = 0, n_profiles: int = 6) -> dict[str, tuple[float, ...]]:
    """``n`` size mixes drawn at random: exponential weights, each size absent one time in
    five, the whole-GPU size at most half a share."""
    rng = random.Random(seed)
    out = {}
    for i in range(n):
        w = [round(rng.expovariate(1.0) * (rng.random() < 0.8), 2) for _ in range(n_profiles - 1)]
        if not any(w):
            w[rng.randrange(len(w))] = 1.0
        out[f"random-{i}"] = (*w, round(rng.uniform(0.0, 0.5), 2))
    return out


def demand_latency(model: str = "H100-80GB", n_allocs: int = 4000, seed: int = 0) -> dict:
    """Seconds per demand decision on a replayed stream (value-table rebuilds included)."""
    cat = load_catalog(model)
    profiles = tuple(p.name for p in cat.profiles if not p.media_extensions)
    space = get_space(cat, profiles)
    from mig.demand import demand_value

    demand_value(space)  # built once per node (not a decision)
    events = []
    for k, w in enumerate(MIXES.values()):
        part = generate_stream(profiles, list(w)[:len(profiles)], n_allocs // len(MIXES),
                               seed=seed + k, mean_live=5.0)
        events += [replace(e, id=f"m{k}-{e.id}") for e in part]
    res = run_events(space, events, "demand", seed=seed, timed=True)
    return {"model": model, "decisions": res.decisions,
            "mean_us": res.decision_seconds / max(1, res.decisions) * 1e6}


def decision_latency(model: str = "H100-80GB", n: int = 20000, seed: int = 0) -> dict:
    """Seconds per fsm decision on random reachable states (mean, p50, p99)."""
    space = get_space(load_catalog(model))
    rng = random.Random(seed)
    states = []
    state = space.empty()
    names = [p.name for p in space.profiles]
    for _ in range(500):
        succ = state.successors(rng.choice(names))
        if succ and rng.random() < 0.7:
            state = rng.choice(succ)[1]
        elif state.placements:
            p = rng.choice(state.placements)
            state = state.free(p.profile, p.start)
        states.append(state)
    samples = []
    for i in range(n):
        s = states[i % len(states)]
        prof = names[i % len(names)]
        t0 = time.perf_counter()
        choose(s, prof, "fsm")
        samples.append(time.perf_counter() - t0)
    samples.sort()
    return {"model": model, "decisions": n, "mean_us": statistics.fmean(samples) * 1e6,
            "p50_us": samples[n // 2] * 1e6, "p99_us": samples[int(n * 0.99)] * 1e6}


def precompute_times() -> dict[str, dict]:
    out = {}
    for model in list_models():
        cat = load_catalog(model)
        t0 = time.perf_counter()
        space = PartitionSpace(cat)  # cold, bypasses the cache
        out[model] = {"seconds": time.perf_counter() - t0, "states": space.n_states,
                      "full_configs": len(space.full_configs)}
    return out


def fragmentation(model: str = "H100-80GB", n_allocs: int = 2000, seeds: int = 3,
                  mean_live: float = 5.0, n_random: int = 8) -> dict:
    cat = load_catalog(model)
    profiles = tuple(p.name for p in cat.profiles if not p.media_extensions)
    space = get_space(cat, profiles)
    out: dict[str, dict] = {}
    mixes = {**MIXES, **random_mixes(n_random, seed=1000, n_profiles=len(MIXES["uniform"]))}
    for mix_name, weights in mixes.items():
        w = list(weights)[: len(profiles)] + [0.0] * max(0, len(profiles) - len(weights))
        totals = {p: {"requests": 0, "rejected": 0, "rejected_fragmentation": 0}
                  for p in POLICIES}
        for seed in range(seeds):
            events = generate_stream(profiles, w, n_allocs, seed=seed, mean_live=mean_live)
            for policy in POLICIES:
                r = run_events(space, events, policy, seed=seed)
                for k, v in r.to_dict().items():
                    totals[policy][k] += v
        base = totals["first-fit"]["rejected_fragmentation"] or 1
        for policy in POLICIES:
            totals[policy]["ratio_to_first_fit"] = round(
                totals[policy]["rejected_fragmentation"] / base, 3)
        out[mix_name] = totals
    mean = {p: round(statistics.fmean(m[p]["ratio_to_first_fit"] for m in out.values()), 3)
            for p in POLICIES}
    worst = {p: max(m[p]["ratio_to_first_fit"] for m in out.values()) for p in POLICIES}
    return {"model": model, "profiles": list(profiles), "allocs_per_stream": n_allocs,
            "streams_per_mix": seeds, "mixes": out,
            "weights": {k: list(v) for k, v in mixes.items()}, "mean_ratio_to_first_fit": mean,
            "worst_ratio_to_first_fit": worst}


def run_bench(model: str = "H100-80GB", n_allocs: int = 2000, seeds: int = 3) -> dict:
    return {
        "precompute": precompute_times(),
        "decision_latency": decision_latency(model),
        "demand_decision_latency": demand_latency(model),
        "fragmentation": fragmentation(model, n_allocs, seeds),
    }
