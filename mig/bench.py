"""Benchmark of the placement policies: fragmentation rejections and decision latency.

Fragmentation rejections of fsm, demand, first-fit and random on random alloc/free streams
of several size mixes, as ratios to first-fit; the whole-catalogue precompute time of each
GPU model (cold, no cache); the latency of one fsm decision over states met in a stream.
"""
from __future__ import annotations

import random
import statistics
import time

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
                  mean_live: float = 5.0) -> dict:
    cat = load_catalog(model)
    profiles = tuple(p.name for p in cat.profiles if not p.media_extensions)
    space = get_space(cat, profiles)
    out: dict[str, dict] = {}
    for mix_name, weights in MIXES.items():
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
    return {"model": model, "profiles": list(profiles), "allocs_per_stream": n_allocs,
            "streams_per_mix": seeds, "mixes": out}


def run_bench(model: str = "H100-80GB", n_allocs: int = 2000, seeds: int = 3) -> dict:
    return {
        "precompute": precompute_times(),
        "decision_latency": decision_latency(model),
        "fragmentation": fragmentation(model, n_allocs, seeds),
    }
