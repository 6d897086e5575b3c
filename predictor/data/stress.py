"""Robustness sweep of the forecaster over generated series (none of them is stored).

    python predictor/data/stress.py [--max-extrapolation K] [--no-deceleration-test] [--converge-by-error]
                                    [--history] [--only CATEGORIES] [--json]

The benchmark folder holds nine series; this sweep runs the same measurements
(:func:`predictor.bench.bench_series`) over 184 more, made with the models of
``make_series.py`` (same model configurations, other seeds and sizes) and a few synthetic
shapes, to see whether a change to the forecaster generalises or only fits the nine:

- ``serving``: continuous batching (``make_series._serving``), Llama-3-8B, 16/24/32 slots,
  seeds 101-112, capacity 40 GiB (the benchmark's setting) -> must not warn;
- ``serving_c115``: the same series against 1.15 x their own peak. The KV cache fills
  linearly for ~1000 steps before it levels off 15 % below the capacity: any forecaster that
  trusts a linear trend 10 times its span warns here. Reported, not a goal;
- ``lora``: LoRA training (``make_series._lora_training``), Qwen2-7B and Llama-3-8B, seeds
  201-210, capacity 1.1 x peak -> must not warn;
- ``decode``: batched generation (``predictor.kvmodel``), both models, batch 8-48, prompts
  256/1024, 4096 new tokens; crossing at 30 % and 60 % of the run (``warn/N``) and a
  capacity 1.1 x peak (must not warn);
- ``lin``: linear growth 4 GiB + 0.01 GiB/step with 1 % or 3 % Gaussian noise, crossing
  10 GiB at step 600 of 1000;
- ``flat``: 6 GiB with 3 % noise, capacity 7 GiB; ``spike``: three samples at 1.5 x then
  flat, capacity 10 GiB; ``stairs``: 0.25 GiB steps every 25 samples crossing 10 GiB;
- ``saturating``: ``10 - 4 exp(-t / 100)`` GiB with 1 % noise, capacity 11 GiB. Like
  ``serving_c115``, early on it is indistinguishable from linear growth. Reported, not a goal;
- ``stairs_coarse``: 0.5-1 GiB steps every 40-100 samples crossing 10 GiB (goal:
  warned by 25 % of the way); ``level_shift``: one jump to 70-95 % of a 10 GiB capacity, then
  flat (must not warn).
"""
from __future__ import annotations

import argparse
import collections
import json
import math
import random
import statistics
import sys
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import make_series as ms  # noqa: E402

from predictor.bench import bench_series  # noqa: E402
from predictor.forecast import ForecasterOptions  # noqa: E402
from predictor.prior import HistoryPrior, PriorRun  # noqa: E402
from predictor.kvmodel import GIB, LLAMA3_8B, QWEN2_7B, DecodeScenario, decode_series  # noqa: E402
from predictor.series import Series  # noqa: E402

Row = tuple[float, float]
Case = tuple[str, str, list[Row], float, float, bool]  # category, name, rows, capacity, horizon, crosses


def _serving() -> Iterator[Case]:
    for seed in range(101, 113):
        for slots in (16, 24, 32):
            rows = ms._serving(LLAMA3_8B, steps=40000, sample_every=100, slots=slots, seed=seed)
            peak = max(b for _, b in rows)
            yield "serving", f"serving_s{slots}_{seed}", rows, 40 * GIB, 40000, False
            yield "serving_c115", f"serving_s{slots}_{seed}_c115", rows, 1.15 * peak, 40000, False


def _lora() -> Iterator[Case]:
    for seed in range(201, 211):
        for model in (QWEN2_7B, LLAMA3_8B):
            rows = ms._lora_training(model, steps=1000, batch=4, max_seq=2048, seed=seed)
            yield "lora", f"lora_{model.name}_{seed}", rows, 1.1 * max(b for _, b in rows), 999, False


def _decode() -> Iterator[Case]:
    seed = 300
    for model in (QWEN2_7B, LLAMA3_8B):
        for batch in (8, 16, 32, 48):
            for prompt in (256, 1024):
                seed += 1
                sc = DecodeScenario(model, batch=batch, prompt_tokens=prompt, new_tokens=4096, seed=seed)
                rows = decode_series(sc)
                name = f"decode_{model.name}_b{batch}_p{prompt}"
                for frac in (0.3, 0.6):
                    target = next(b for s, b in rows if s >= frac * sc.new_tokens)
                    if rows[0][1] < target - 1:  # else the prefill spike alone would cross
                        yield "decode", f"{name}_x{int(100 * frac)}", rows, target - 1, sc.new_tokens, True
                yield "decode", f"{name}_fits", rows, 1.1 * max(b for _, b in rows), sc.new_tokens, False


def _synthetic() -> Iterator[Case]:
    for seed in range(1, 9):
        rng = random.Random(seed)
        for noise in (0.01, 0.03):
            rows = [(i, 4 * GIB + 0.01 * GIB * i + rng.gauss(0, noise * 4 * GIB)) for i in range(1000)]
            yield "lin", f"lin_noise{noise}_{seed}", rows, 10 * GIB, 999, True
        rows = [(i, 6 * GIB * (1 + rng.gauss(0, 0.03))) for i in range(500)]
        yield "flat", f"flat_{seed}", rows, 7 * GIB, 499, False
        rows = [(i, (9 if i < 3 else 6) * GIB * (1 + rng.gauss(0, 0.01))) for i in range(500)]
        yield "spike", f"spike_flat_{seed}", rows, 10 * GIB, 499, False
        rows = [(i, 4 * GIB + (i // 25) * 0.25 * GIB + rng.gauss(0, 0.002 * GIB)) for i in range(1000)]
        yield "stairs", f"stairs_{seed}", rows, 10 * GIB, 999, True
        rows = [(i, (10 - 4 * math.exp(-i / 100)) * GIB * (1 + rng.gauss(0, 0.01))) for i in range(1000)]
        yield "saturating", f"saturating_{seed}", rows, 11 * GIB, 999, False


def warmup_trap() -> list[Row]:
    """A warm-up that looks like a leak: +0.7 GiB a step for 10 steps, then flat at 7.2 GiB (capacity 10 GiB)."""
    return [(i, (0.2 + 0.7 * min(i, 10)) * GIB) for i in range(300)]


def _warmup_plateau(rng: random.Random) -> tuple[list[Row], float]:
    """A job loading its working set in a linear ramp (5-40 samples, from a small level),
    then holding it for a long plateau with 0.2-2 % noise; capacity 5-40 % above the peak."""
    start, level = rng.uniform(0.1, 1.0), rng.uniform(4, 70)
    ramp, hold = rng.randint(5, 40), rng.randint(300, 1500)
    noise = rng.choice((0.0, 0.002, 0.01, 0.02))
    rows = []
    for i in range(ramp + hold):
        base = start + (level - start) * min(i, ramp) / ramp
        rows.append((i, max(0.0, base * (1 + rng.gauss(0, noise))) * GIB))
    peak = max(b for _, b in rows)
    return rows, peak * rng.uniform(1.05, 1.4)


def _staircase_plateau(rng: random.Random) -> tuple[list[Row], float]:
    """A model loading in 2-5 large steps (each held 1-40 samples), possibly after an idle
    start, then a long plateau; capacity 5-40 % above the peak."""
    level = rng.uniform(0.3, 2.0)
    rows: list[Row] = []
    noise = rng.choice((0.0, 0.002, 0.01))
    for _ in range(rng.choice((0, 0, 5, 20))):
        rows.append((len(rows), level * GIB))
    target = rng.uniform(8, 75)
    steps = rng.randint(2, 5)
    for k in range(steps):
        level += (target - level) / (steps - k) * rng.uniform(0.6, 1.0) if k < steps - 1 else target - level
        for _ in range(rng.randint(1, 40)):
            rows.append((len(rows), level * (1 + rng.gauss(0, noise)) * GIB))
    for _ in range(rng.randint(300, 1500)):
        rows.append((len(rows), level * (1 + rng.gauss(0, noise)) * GIB))
    peak = max(b for _, b in rows)
    return rows, peak * rng.uniform(1.05, 1.4)


def _oscillating(rng: random.Random) -> tuple[list[Row], float]:
    """A serving pod wandering inside a wide band (e.g. 10-25 GiB): a mean-reverting walk
    or a noisy cycle, with rare single-sample spikes towards (never over) the capacity."""
    lo = rng.uniform(2, 30)
    hi = lo * rng.uniform(1.5, 3.0)
    capacity = hi * rng.uniform(1.1, 1.5)
    n = rng.randint(500, 3000)
    mid, half = (lo + hi) / 2, (hi - lo) / 2
    period = rng.uniform(30, 400)
    phase = rng.uniform(0, 2 * math.pi)
    walk = rng.random() < 0.5
    y = mid
    rows = []
    for i in range(n):
        if walk:  # Ornstein-Uhlenbeck: reverts to the middle, spans the band
            y += (mid - y) / period * 5 + rng.gauss(0, half / math.sqrt(period / 5))
            v = min(hi, max(lo, y))
        else:
            v = mid + half * math.sin(2 * math.pi * i / period + phase) + rng.gauss(0, 0.05 * half)
        if rng.random() < 0.004:  # a single-sample spike
            v = rng.uniform(hi, 0.97 * capacity)
        rows.append((i, v * GIB))
    return rows, capacity * GIB


def _warmup_then_growth(rng: random.Random) -> tuple[list[Row], float, float]:
    """A load ramp (5-30 samples) to a level, then real linear growth (a leak or a KV cache)
    that crosses the capacity; 0.2-2 % noise. Must warn."""
    level, ramp = rng.uniform(4, 40), rng.randint(5, 30)
    n = rng.randint(800, 3000)
    rate = level * rng.uniform(0.5, 1.5) / n  # grows by 50-150 % of the level over the run
    noise = rng.choice((0.002, 0.01, 0.02))
    rows = []
    for i in range(n):
        base = level * min(i, ramp) / ramp + rate * max(0, i - ramp)
        rows.append((i, max(0.0, base * (1 + rng.gauss(0, noise))) * GIB))
    capacity = (level + rate * (0.6 * n - ramp)) * GIB
    return rows, capacity, n - 1


def _rises_that_plateau() -> Iterator[Case]:
    """Rises that end by themselves: warm-ups and staircases that plateau, oscillating pods with
    spikes (must not warn), and growth after a warm-up (must warn)."""
    yield "warmup_trap", "warmup_trap", warmup_trap(), 10 * GIB, 299, False
    for seed in range(1, 21):
        rng = random.Random(1200 + seed)
        rows, cap = _warmup_plateau(rng)
        yield "warmup_plateau", f"warmup_plateau_{seed}", rows, cap, rows[-1][0], False
        rows, cap = _staircase_plateau(rng)
        yield "staircase_plateau", f"staircase_plateau_{seed}", rows, cap, rows[-1][0], False
        rows, cap = _oscillating(rng)
        yield "oscillating", f"oscillating_{seed}", rows, cap, rows[-1][0], False
        rows, cap, horizon = _warmup_then_growth(rng)
        yield "warmup_growth", f"warmup_growth_{seed}", rows, cap, horizon, True


def _coarse_steps_and_level_shifts() -> Iterator[Case]:
    """Coarser staircases (a step of 0.5-1 GiB every 40-100 samples, crossing
    10 GiB; must warn, goal by 25 % of the way) and level shifts (one jump to 70-95 % of the
    capacity at a random step, then flat; must not warn)."""
    for seed in range(1, 9):
        rng = random.Random(2400 + seed)
        every, rise = rng.randint(40, 100), rng.uniform(0.5, 1.0)
        steps_to_cross = math.ceil(6 / rise) + 1
        n = every * (steps_to_cross + 3)
        rows = [(i, (4 + (i // every) * rise) * GIB + rng.gauss(0, 0.002 * GIB)) for i in range(n)]
        yield "stairs_coarse", f"stairs_coarse_{seed}", rows, 10 * GIB, n - 1, True
        at, low = rng.randint(20, 400), rng.uniform(2, 6)
        high, noise = rng.uniform(0.7, 0.95) * 10, rng.choice((0.002, 0.01))
        rows = [(i, (low if i < at else high) * GIB * (1 + rng.gauss(0, noise))) for i in range(at + rng.randint(300, 1500))]
        yield "level_shift", f"level_shift_{seed}", rows, 10 * GIB, rows[-1][0], False


def cases() -> Iterator[Case]:
    for make in (_serving, _lora, _decode, _synthetic, _rises_that_plateau, _coarse_steps_and_level_shifts):
        yield from make()


def earlier_runs(name: str, rows: list[Row], count: int = 2) -> HistoryPrior:
    """``count`` earlier runs of the same workload, made from this series (a model, stated so
    it can be challenged): each 0-5 % slower or faster and using 0-3 % less or more memory,
    drawn from a seed of the series' name."""
    rng = random.Random(name)
    runs = []
    for k in range(count):
        speed, size = rng.uniform(0.95, 1.05), rng.uniform(0.97, 1.03)
        runs.append(PriorRun(tuple(s * speed for s, _ in rows), tuple(b * size for _, b in rows), f"{name}#{k}"))
    return HistoryPrior(runs)


def run(options: ForecasterOptions | None = None, only: set[str] | None = None, history: bool = False) -> dict:
    """Per category: series, false alarms, misses, warn/N, peak error at 10 %. With
    ``history``, each series has two earlier runs (:func:`earlier_runs`) as its prior."""
    out: dict[str, dict] = collections.defaultdict(
        lambda: {"series": 0, "false_alarms": [], "missed": [], "warn_fraction": [], "peak_error_at_10pct": []}
    )
    for category, name, rows, capacity, horizon, crosses in cases():
        if only and category not in only:
            continue
        series = Series(tuple(float(s) for s, _ in rows), tuple(float(b) for _, b in rows), None, name)
        prior = earlier_runs(name, rows) if history else None
        r = bench_series(series, capacity, horizon, options=options, prior=prior)
        if (r.crossing_step is not None) != crosses:
            raise AssertionError(f"{name}: generated series {'does not cross' if crosses else 'crosses'}")
        c = out[category]
        c["series"] += 1
        c["peak_error_at_10pct"].append(r.peak_error_at_10pct)
        if r.false_alarm:
            c["false_alarms"].append(f"{name}@{r.warn_step:g}")
        if crosses and (r.warn_step is None or r.warn_step >= r.crossing_step):
            c["missed"].append(name)
        elif crosses:
            c["warn_fraction"].append(r.warn_fraction)
    summary = {}
    for category, c in out.items():
        fr = c["warn_fraction"]
        summary[category] = {
            "series": c["series"],
            "false_alarms": len(c["false_alarms"]),
            "false_alarm_examples": c["false_alarms"][:3],
            "missed": len(c["missed"]),
            "warned_by_10pct": sum(1 for f in fr if f <= 0.1),
            "warn_fraction_median": statistics.median(fr) if fr else None,
            "warn_fraction_max": max(fr) if fr else None,
            "mean_peak_error_at_10pct": statistics.fmean(c["peak_error_at_10pct"]),
        }
    return summary


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-extrapolation", type=float, default=None)
    parser.add_argument(
        "--no-deceleration-test", action="store_true", help="extrapolate concave windows too (the rule before it)"
    )
    parser.add_argument(
        "--converge-by-error", action="store_true",
        help="count a forecast as converged when it moves within its own sampling error (earlier linear warnings, more false alarms)",
    )
    parser.add_argument(
        "--history", action="store_true",
        help="give each series two earlier runs of its workload as a prior (the series 0-5 %% slower/faster, 0-3 %% smaller/larger)",
    )
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--only", default=None, help="comma-separated categories to run (default: all)")
    args = parser.parse_args(argv[1:])
    overrides: dict = {}
    if args.max_extrapolation is not None:
        overrides["max_extrapolation"] = args.max_extrapolation
    if args.no_deceleration_test:
        overrides["deceleration_test"] = False
    if args.converge_by_error:
        overrides["converge_by_error"] = True
    options = ForecasterOptions(**overrides)
    summary = run(options, set(args.only.split(",")) if args.only else None, args.history)
    if args.json:
        print(json.dumps(summary, sort_keys=True))
        return 0
    for category, s in summary.items():
        line = f"{category:13s} {s['series']:3d} series, false alarms {s['false_alarms']:2d}, missed {s['missed']}"
        if s["warn_fraction_median"] is not None:
            line += (
                f", warn/N median {s['warn_fraction_median']:.3f} max {s['warn_fraction_max']:.3f}, "
                f"by 10 %: {s['warned_by_10pct']}"
            )
        line += f", peak error at 10 %: {100 * s['mean_peak_error_at_10pct']:.1f} %"
        if s["false_alarm_examples"]:
            line += f"  e.g. {', '.join(s['false_alarm_examples'])}"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
