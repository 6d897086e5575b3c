"""Replay cells (one config on one workload) in parallel processes, results in cell order.

``simulate compare`` runs every (policy, size, load, seed) cell of its sweep, and every
policy of a single comparison, through :func:`run_cells`. Each replay is deterministic
(its answers depend on its config and workload alone), so running cells in other processes,
in any order, gives the report the same figures (less each run's wall time); ``workers``
1 runs them here, one after the other. The workloads go to each worker once, when it
starts (inherited where processes fork, else pickled), not once per cell.
"""
from __future__ import annotations

import logging
import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass

from simulator.config import SimConfig
from simulator.engine import simulate
from simulator.metrics import summary
from simulator.result import SimResult

log = logging.getLogger(__name__)

_WORKLOADS: dict = {}  # a worker's workloads, by key (set once, when it starts)


@dataclass(frozen=True)
class Cell:
    """One replay: ``config`` on the workload ``workload`` names (a key of the workloads)."""

    config: SimConfig
    workload: object = 0


@dataclass(frozen=True)
class CellResult:
    """A cell's summary, and its whole result when it was asked for (plots need it)."""

    summary: dict
    result: SimResult | None


def default_workers() -> int:
    return os.cpu_count() or 1


def _init(workloads: dict) -> None:
    global _WORKLOADS
    _WORKLOADS = workloads


def _run(cell: Cell, keep: bool, workloads: dict | None = None) -> CellResult:
    specs, profiles, pairs = (workloads if workloads is not None else _WORKLOADS)[cell.workload]
    res = simulate(cell.config, specs, profiles, pairs)
    return CellResult(summary(res), res if keep else None)


def run_cells(cells: Sequence[Cell], workloads: dict, workers: int = 1, keep_results: bool = False,
              done: Callable[[int, CellResult], None] | None = None) -> list[CellResult]:
    """Replay every cell; the results in the cells' order. ``workloads``: key -> (specs,
    profiles, pairs); ``workers``: processes (1: here, in order); ``keep_results``: return
    each run's :class:`SimResult` too; ``done(index, result)``: called as each cell ends
    (in the order they end)."""
    if workers < 1:
        raise ValueError(f"workers is a number of processes >= 1, got {workers}")
    out: list[CellResult | None] = [None] * len(cells)
    if workers == 1 or len(cells) <= 1:
        for i, cell in enumerate(cells):
            out[i] = _run(cell, keep_results, workloads)
            if done:
                done(i, out[i])
        return out  # type: ignore[return-value]
    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("fork" if "fork" in methods else None)
    n = min(workers, len(cells))
    log.info("replaying %d cells in %d processes", len(cells), n)
    with ProcessPoolExecutor(max_workers=n, mp_context=ctx, initializer=_init, initargs=(workloads,)) as pool:
        pending = {pool.submit(_run, cell, keep_results): i for i, cell in enumerate(cells)}
        while pending:
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in finished:
                i = pending.pop(fut)
                out[i] = fut.result()
                if done:
                    done(i, out[i])
    return out  # type: ignore[return-value]
