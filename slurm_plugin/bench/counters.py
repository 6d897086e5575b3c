"""How well contention is seen in the GPU's counters alone: detection delay and false positives.

``gpupack simgpu counters-bench`` runs, on the simulated GPU with a simulated clock, a
senior job alone and then a newcomer beside it, for every ordered pair of workloads of
the co-location traces and several noise seeds. The senior's utilisation is read the way
the node agent reads it (:class:`slurm_plugin.agent.counters.CounterReader`, one reading
per agent round of one second) and judged each round by the helper's rule
(:func:`packer.contention.find_contention` with no reported throughput), for a grid of
``z`` (how many noise standard errors a drop must exceed).

- **detected**: of the pairs whose slowdown is past the threshold (the senior loses more
  than 10 %), the share flagged within ``horizon_s`` of the newcomer's start, and the
  delay (seconds after the newcomer started) until the flag;
- **false positives**: of the newcomers that slow the senior by at most half the threshold,
  and of null newcomers that do not slow it at all (pure counter noise), the share flagged.

Both a whole GPU (NVML per-process samples, each round the mean of ~6 integer samples
with stall samples) and MIG slices (DCGM per-instance activity, one value a round) are run.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from statistics import median

from gpus.sim.backend import SimGpuBackend
from gpus.sim.counters import CounterNoise
from packer.contention import Resident, find_contention
from packer.util_contention import CounterRule
from slurm_plugin.agent.counters import CounterReader
from slurm_plugin.agent.state import Assignment
from simjobs import pairs

ROUND_S = 1.0
ALONE_S = 30.0  # the senior runs alone this long before the newcomer starts


@dataclass(frozen=True)
class Trial:
    mode: str  # "whole" (NVML per process) | "mig" (DCGM per instance)
    senior: str
    newcomer: str
    loss: float  # the senior's true slowdown, 1 - pair speed
    seed: int
    series: tuple[tuple[float, float], ...]  # (at, util %) per agent round
    since: float  # when the newcomer started


@dataclass(frozen=True)
class Row:
    mode: str
    z: float
    threshold: float
    window: int
    min_samples: int
    contended_pairs: int
    detected: float  # share of contended trials flagged within the horizon
    detected_clear: float  # the same, for the trials losing more than twice the threshold
    delay_median_s: float | None
    delay_p90_s: float | None
    mild_trials: int
    mild_false_positive: float  # flagged though the loss is at most threshold / 2
    null_trials: int
    null_false_positive: float  # flagged though the newcomer slows nothing (noise only)


def run_trial(mode: str, senior: str, newcomer: str, speed: float, seed: int, horizon_s: float,
              noise: CounterNoise) -> Trial:
    clock = [1_000_000.0 + seed * 7.3]
    gpu = SimGpuBackend(None, "bench", gpus=["H100-80GB"], mig_enabled=(mode == "mig"),
                        clock=lambda: clock[0], noise=CounterNoise(noise.sm_sd_pct, noise.stall_p, noise.gr_sd,
                                                                   f"{noise.seed}-{seed}"))
    if mode == "mig":
        a_dev = gpu.create_instance(0, "3g.40gb", 0, owner="1")
        b_dev = gpu.create_instance(0, "3g.40gb", 4, owner="2")
        job = Assignment(1, "bench", 0, "mig", "mig:3g.40gb@0", gi_id=a_dev.gi_id, device_uuid=a_dev.uuid)
        a_uuid, b_uuid = a_dev.uuid, b_dev.uuid
    else:
        a_uuid = b_uuid = gpu.list_gpus()[0].uuid
        job = Assignment(1, "bench", 0, "mps", "mps:50", device_uuid=a_uuid)
    reader = CounterReader(gpu)
    alone = pairs.workload_util(senior)
    gpu.start_process(a_uuid, "1", senior, alone)
    start = clock[0]
    since = start + ALONE_S
    series: list[tuple[float, float]] = []
    joined = False
    while clock[0] < since + horizon_s:
        clock[0] += ROUND_S
        if not joined and clock[0] >= since:
            gpu.start_process(b_uuid, "2", newcomer, pairs.workload_util(newcomer))
            gpu.set_busy(a_uuid, "1", alone * speed)
            joined = True
        reading = reader.read([job]).get(1)
        if reading is not None and reading.util_pct is not None:
            series.append((clock[0], reading.util_pct))
    return Trial(mode, senior, newcomer, 1.0 - speed, seed, tuple(series), since)


def detection_delay(trial: Trial, rule: CounterRule) -> float | None:
    """Seconds after the newcomer started until the helper's rule flags it (None: never)."""
    for k, (at, _) in enumerate(trial.series):
        if at < trial.since + rule.settle_s:
            continue
        residents = [Resident(1, 0.0, (), "a", utilisation=trial.series[:k + 1]), Resident(2, trial.since, (), "b")]
        if find_contention(residents, rule.threshold, settle_s=rule.settle_s, counters=rule) is not None:
            return at - trial.since
    return None


def trials(modes: tuple[str, ...], seeds: int, horizon_s: float, noise: CounterNoise,
           null_seeds: int | None = None) -> list[Trial]:
    names = pairs.known_workloads()
    out = []
    for mode in modes:
        for senior in names:
            for newcomer in names:
                speed = pairs.pair_speed(senior, newcomer)
                for seed in range(seeds):
                    out.append(run_trial(mode, senior, newcomer, speed, seed, horizon_s, noise))
            for seed in range(seeds if null_seeds is None else null_seeds):  # slows nothing: noise only
                out.append(run_trial(mode, senior, "null", 1.0, 1000 + seed, horizon_s, noise))
    return out


def _p90(values: list[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(0.9 * (len(ordered) - 1))))]


def evaluate(all_trials: list[Trial], rule: CounterRule, mode: str) -> Row:
    mine = [t for t in all_trials if t.mode == mode]
    contended = [t for t in mine if t.newcomer != "null" and t.loss > rule.threshold]
    mild = [t for t in mine if t.newcomer != "null" and t.loss <= rule.threshold / 2]
    null = [t for t in mine if t.newcomer == "null"]
    found = [(t, detection_delay(t, rule)) for t in contended]
    delays = [d for _, d in found if d is not None]
    clear = [d for t, d in found if t.loss > 2 * rule.threshold]
    fp_mild = sum(detection_delay(t, rule) is not None for t in mild)
    fp_null = sum(detection_delay(t, rule) is not None for t in null)
    return Row(mode, rule.z, rule.threshold, rule.window, rule.min_before, len(contended),
               round(len(delays) / len(contended), 4) if contended else 0.0,
               round(sum(d is not None for d in clear) / len(clear), 4) if clear else 0.0,
               median(delays) if delays else None, _p90(delays),
               len(mild), round(fp_mild / len(mild), 4) if mild else 0.0,
               len(null), round(fp_null / len(null), 4) if null else 0.0)


def bench(zs: tuple[float, ...] = (2.0, 3.0, 4.0, 5.0), seeds: int = 3, horizon_s: float = 40.0,
          modes: tuple[str, ...] = ("whole", "mig"), noise: CounterNoise = CounterNoise(),
          window: int = 20, min_samples: int = 5, threshold: float = 0.10,
          null_seeds: int | None = None) -> list[Row]:
    made = trials(modes, seeds, horizon_s, noise, null_seeds)
    return [evaluate(made, CounterRule(threshold=threshold, z=z, window=window, min_before=min_samples,
                                       min_after=min_samples), mode)
            for mode in modes for z in zs]


def render(rows: list[Row], as_json: bool = False) -> str:
    if as_json:
        return json.dumps([asdict(r) for r in rows], indent=1)
    head = (f"{'mode':6} {'z':>4} {'contended':>9} {'detected':>8} {'>2x thr':>8} {'delay med':>9} {'delay p90':>9} "
            f"{'mild FP':>8} {'null FP':>8}")
    lines = [head]
    for r in rows:
        med = "-" if r.delay_median_s is None else f"{r.delay_median_s:.0f}s"
        p90 = "-" if r.delay_p90_s is None else f"{r.delay_p90_s:.0f}s"
        lines.append(f"{r.mode:6} {r.z:4.1f} {r.contended_pairs:9d} {r.detected:8.1%} {r.detected_clear:8.1%} {med:>9} {p90:>9} "
                     f"{r.mild_false_positive:8.1%} {r.null_false_positive:8.1%}")
    lines.append(f"(threshold {rows[0].threshold:.0%}, window {rows[0].window} rounds, at least "
                 f"{rows[0].min_samples} a side; mild: {rows[0].mild_trials} trials with a loss <= half the "
                 f"threshold; null: {rows[0].null_trials} trials with no slowdown)" if rows else "")
    return "\n".join(lines)
