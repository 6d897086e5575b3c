"""Validate pair models on what they were not fitted on: leave whole model families out

For each model family (BERT, ResNet18, ...: the ``model`` column of workload_profiles.csv),
every model is fitted on the ordered pairs where neither job is of that family, and tested
on the pairs where either job is. Reported per model (mean over the families, weighted by
their test pairs): the mean absolute error of the predicted speed, the mean predicted
standard deviation and the share of measured speeds inside the predicted 95 % interval
(``packer.pair_model`` only: the others give no spread).

Models compared: ``processor-sharing`` (``min(1, 1/(busy_a + busy_b))``: no fit),
``feature-ridge`` (``packer.pair_knowledge``, what the replay's ``model`` knowledge and the
live steering use: utilisation, memory, sharing label), ``counters-bayes``
(``packer.pair_model``: both engines' busy fractions and memory, with uncertainty) and
``counters-no-mem-engine`` (the same without the memory controller's busy fraction: what the
history store keeps, so what the live submit path and the replay's ``counters`` knowledge fit).

    python3 -m simulator.pair_validation [--data-dir DIR] [--truth PAIRS.csv]

``--truth``: a table ``workload,beside,speed`` (``gpupack simulate stress-pairs``) instead of
the measured colocation_pairs.csv.
"""
from __future__ import annotations

import argparse
import csv
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np

from packer.pair_knowledge import JobTraits, pair_features, ridge_fit, ridge_predict
from packer.pair_model import AloneCounters, PairModel
from simulator.truth import profile_key
from simulator.workload import default_data_dir

Pair = tuple[str, str, float]  # (workload, beside, its speed)


def load(data_dir: Path, truth: Path | None) -> tuple[dict[str, dict], list[Pair]]:
    """Profiles by key (family, counters, traits) and the ordered pairs."""
    profiles = {}
    with open(data_dir / "workload_profiles.csv", newline="") as f:
        for r in csv.DictReader(f):
            key = profile_key(r["model"], r["dataset"], r["batchsize"], r["amp"])
            util, mem_util, mem_gib = float(r["gpu_util"]), float(r["gmem_util"]), float(r["gmem"]) / 1024
            profiles[key] = {"family": r["model"], "counters": AloneCounters(util / 100, mem_util / 100, mem_gib),
                             "traits": JobTraits.from_history(util, mem_gib * 2**30)}
    pairs: list[Pair] = []
    if truth is not None:
        with open(truth, newline="") as f:
            pairs = [(r["workload"], r["beside"], float(r["speed"])) for r in csv.DictReader(f)]
    else:
        with open(data_dir / "colocation_pairs.csv", newline="") as f:
            for r in csv.DictReader(f):
                a = profile_key(r["model1"], r["dataset1"], r["batchsize1"], r["amp1"])
                b = profile_key(r["model2"], r["dataset2"], r["batchsize2"], r["amp2"])
                pairs += [(a, b, min(1.0, float(r["speed1"]))), (b, a, min(1.0, float(r["speed2"])))]
    return profiles, [p for p in pairs if p[0] in profiles and p[1] in profiles]


Predictor = Callable[[str, str], tuple[float, float | None]]


def _fit(name: str, profiles: dict[str, dict], train: list[Pair]) -> Predictor:
    c = {k: p["counters"] for k, p in profiles.items()}
    t = {k: p["traits"] for k, p in profiles.items()}
    if name == "processor-sharing":
        return lambda a, b: (min(1.0, 1.0 / max(c[a].busy + c[b].busy, 1e-9)), None)
    if name == "feature-ridge":
        w = ridge_fit(np.array([pair_features(t[a], t[b]) for a, b, _ in train]), np.array([s for *_, s in train]))
        return lambda a, b: (float(ridge_predict(np.array(pair_features(t[a], t[b])), w)), None)
    if name == "counters-no-mem-engine":
        c = {k: AloneCounters(v.busy, None, v.mem_gib) for k, v in c.items()}
    model = PairModel.fit([(c[a], c[b], s) for a, b, s in train])

    def predict(a: str, b: str) -> tuple[float, float | None]:
        p = model.predict(c[a], c[b])
        return p.mean, p.sd
    return predict


MODELS = ("processor-sharing", "feature-ridge", "counters-bayes", "counters-no-mem-engine")
SPREAD = ("counters-bayes", "counters-no-mem-engine")  # the models that give a spread


def leave_families_out(profiles: dict[str, dict], pairs: list[Pair]) -> dict[str, dict[str, float]]:
    """Per model: MAE, mean sd and 95 % coverage over every family left out in turn."""
    fam = {k: p["family"] for k, p in profiles.items()}
    sums = {m: {"abs": 0.0, "sd": 0.0, "inside": 0, "n": 0} for m in MODELS}
    for family in sorted(set(fam.values())):
        test = [p for p in pairs if family in (fam[p[0]], fam[p[1]])]
        train = [p for p in pairs if family not in (fam[p[0]], fam[p[1]])]
        if not test:
            continue
        for m in MODELS:
            predict, acc = _fit(m, profiles, train), sums[m]
            for a, b, s in test:
                mean, sd = predict(a, b)
                acc["abs"] += abs(mean - s)
                acc["n"] += 1
                if sd is not None:
                    acc["sd"] += sd
                    acc["inside"] += abs(mean - s) <= 1.96 * sd
    return {m: {"mae": a["abs"] / a["n"], "pairs": a["n"],
                "mean_sd": a["sd"] / a["n"] if m in SPREAD else math.nan,
                "coverage_95": a["inside"] / a["n"] if m in SPREAD else math.nan}
            for m, a in sums.items()}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", type=Path, default=None)
    ap.add_argument("--truth", type=Path, default=None)
    args = ap.parse_args(argv)
    data_dir = args.data_dir or default_data_dir()
    if data_dir is None:
        raise SystemExit("no data folder: pass --data-dir or set GPUPACK_DATA_DIR")
    profiles, pairs = load(data_dir, args.truth)
    print(f"{len(pairs)} ordered pairs, {len({p['family'] for p in profiles.values()})} model families "
          f"({args.truth or data_dir / 'colocation_pairs.csv'})\n")
    print("| model | left-out-family MAE | mean predicted sd | inside 95 % interval | test pairs |\n|---|---|---|---|---|")
    for m, r in leave_families_out(profiles, pairs).items():
        sd = "-" if math.isnan(r["mean_sd"]) else f"{r['mean_sd']:.3f}"
        cov = "-" if math.isnan(r["coverage_95"]) else f"{r['coverage_95']:.1%}"
        print(f"| {m} | {r['mae']:.3f} | {sd} | {cov} | {r['pairs']} |")


if __name__ == "__main__":
    main()
