"""Robustness sweep of the forecaster over generated series (none of them is stored).

    python predictor/data/stress.py [--max-extrapolation K] [--no-deceleration-test] [--json]

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
  ``serving_c115``, early on it is indistinguishable from linear growth. Reported, not a goal.
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


def cases() -> Iterator[Case]:
    for make in (_serving, _lora, _decode, _synthetic):
        yield from make()


def run(options: ForecasterOptions | None = None) -> dict:
    """Per category: series, false alarms, misses, warn/N, peak error at 10 %."""
    out: dict[str, dict] = collections.defaultdict(
        lambda: {"series": 0, "false_alarms": [], "missed": [], "warn_fraction": [], "peak_error_at_10pct": []}
    )
    for category, name, rows, capacity, horizon, crosses in cases():
        series = Series(tuple(float(s) for s, _ in rows), tuple(float(b) for _, b in rows), None, name)
        r = bench_series(series, capacity, horizon, options=options)
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
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv[1:])
    overrides: dict = {}
    if args.max_extrapolation is not None:
        overrides["max_extrapolation"] = args.max_extrapolation
    if args.no_deceleration_test:
        overrides["deceleration_test"] = False
    options = ForecasterOptions(**overrides)
    summary = run(options)
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
