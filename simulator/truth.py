"""The replay's truth: the pair speeds it slows packed jobs by (``gpupack simulate --truth``).

The truth is what the simulated GPUs do; it is not what the policies know. The policies
learn a pair's speeds only by running it (``--pair-knowledge observed``: the replay measures
the pair from this table as the node agent would) and predict the others from per-job
features (:mod:`simulator.knowledge`); only ``oracle`` reads this table.

Two layouts, told apart by the header (docs/simulator.md):

- **Lucid's measured pairs** (the shipped ``colocation_pairs.csv``): columns ``model1,
  dataset1, batchsize1, amp1, speed1`` and the same with ``2``; each row measures both jobs'
  speeds; repeated rows are averaged; a speed above 1 is measurement noise and counts as 1;
  rows naming a workload not in ``workload_profiles.csv`` are skipped and counted.
- **Ordered pairs**: columns ``workload, beside, speed``: the speed of ``workload`` while it
  shares a GPU with ``beside``, relative to running alone, in ``[0, 1]``. A name is a
  profile key (``ResNet18/CIFAR-10/bs32/amp0``, as ``workload_profiles.csv`` gives model,
  dataset, batch size and AMP) or a model name (``ResNet18``: every variant of it); a key
  wins over its model's row. A pair given twice, an unknown name or a speed outside
  ``[0, 1]`` is a bad row.

A speed of **0** means the pair cannot run together: the job that joined last fails
(:mod:`simulator.pair_failure`). Pairs the table does not give are imputed as
documented in :mod:`simulator.workload`.
"""
from __future__ import annotations

import logging
from pathlib import Path

from simulator.rows import LoadReport, RowReader, WorkloadError, finite_number

log = logging.getLogger(__name__)

LUCID_COLUMNS = ("model1", "dataset1", "batchsize1", "amp1", "speed1",
                 "model2", "dataset2", "batchsize2", "amp2", "speed2")
ORDERED_COLUMNS = ("workload", "beside", "speed")


def profile_key(model: str, dataset: str, batch: str, amp: str) -> str:
    return f"{model}/{dataset}/bs{int(float(batch))}/amp{int(float(amp))}"


def read_pair_table(path: str | Path, keys: list[str], bad_rows: str = "refuse",
                    report: LoadReport | None = None) -> dict[tuple[int, int], float]:
    """``(a, b) -> speed of a beside b`` by index into ``keys`` (the profiles' keys)."""
    path = Path(path)
    reader = RowReader(path, ",", bad_rows, report or LoadReport(source=str(path)))
    rows = reader.rows(check=_layout)
    first = next(rows, None)
    if first is None:
        raise WorkloadError(f"{path}: no pairs")
    if "workload" in reader.header:
        return _ordered(reader, [first], rows, keys)
    return _lucid(reader, [first], rows, keys)


def _layout(cols: list[str]) -> None:
    if not (set(ORDERED_COLUMNS) <= set(cols) or set(LUCID_COLUMNS) <= set(cols)):
        raise WorkloadError(f"a pair table has columns {','.join(ORDERED_COLUMNS)} (ordered "
                            f"pairs) or Lucid's {','.join(LUCID_COLUMNS)}; found "
                            f"{','.join(cols)}")


def _lucid(reader: RowReader, head: list, rows, keys: list[str]) -> dict[tuple[int, int], float]:
    by_key = {k: i for i, k in enumerate(keys)}
    sums: dict[tuple[int, int], list[float]] = {}
    for n, row in (*head, *rows):
        try:
            ka = profile_key(row["model1"], row["dataset1"], row["batchsize1"], row["amp1"])
            kb = profile_key(row["model2"], row["dataset2"], row["batchsize2"], row["amp2"])
        except (ValueError, OverflowError):  # nan, or inf (no int holds it)
            reader.bad(n, "batchsize1", row["batchsize1"], "whole numbers in batchsize and amp")
            continue
        a, b = by_key.get(ka), by_key.get(kb)
        if a is None or b is None:
            reader.report.skip("workload not in workload_profiles.csv")
            continue
        got = [(col, finite_number(row[col])) for col in ("speed1", "speed2")]
        bad = next(((c, v) for c, v in got if v is None or v < 0), None)
        if bad is not None:
            reader.bad(n, bad[0], row[bad[0]], "a speed relative to alone: a finite number >= 0")
            continue
        for x, y, (_, s) in ((a, b, got[0]), (b, a, got[1])):
            sums.setdefault((x, y), []).append(min(1.0, s))
    return {k: sum(v) / len(v) for k, v in sums.items()}


def _ordered(reader: RowReader, head: list, rows, keys: list[str]) -> dict[tuple[int, int], float]:
    exact = {k.lower(): [i] for i, k in enumerate(keys)}
    models: dict[str, list[int]] = {}
    for i, k in enumerate(keys):
        models.setdefault(k.split("/", 1)[0].lower(), []).append(i)
    # (a, b) -> (specificity, speed, line): a row naming profile keys (2) wins over one naming
    # a key and a model (1), which wins over one naming two models (0)
    given: dict[tuple[int, int], tuple[int, float, int]] = {}
    for n, row in (*head, *rows):
        names = []
        for col in ("workload", "beside"):
            name = row[col].strip().lower()
            hit = (1, exact[name]) if name in exact else (0, models.get(name))
            if not hit[1]:
                example = keys[0] if keys else "MODEL/DATASET/bsN/ampN"
                reader.bad(n, col, row[col], f"a workload of workload_profiles.csv: a key such as "
                                             f"{example} or a model name such as "
                                             f"{example.split('/')[0]}")
                break
            names.append(hit)
        else:
            speed = finite_number(row["speed"])
            if speed is None or not 0.0 <= speed <= 1.0:
                reader.bad(n, "speed", row["speed"], "a speed relative to alone in [0, 1] "
                                                     "(0: the pair cannot run together)")
                continue
            _put(reader, given, n, row, names[0][0] + names[1][0], names[0][1], names[1][1], speed)
    return {k: v[1] for k, v in given.items()}


def _put(reader: RowReader, given: dict, n: int, row: dict, level: int, a_list: list[int],
         b_list: list[int], speed: float) -> None:
    for a in a_list:
        for b in b_list:
            prev = given.get((a, b))
            if prev is not None and prev[0] == level:
                reader.bad(n, "beside", f"{row['workload']},{row['beside']}",
                           f"each pair once (already given at line {prev[2]})", "pair given twice")
                return
            if prev is None or prev[0] < level:
                given[(a, b)] = (level, speed, n)
