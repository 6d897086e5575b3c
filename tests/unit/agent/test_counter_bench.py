"""The counters benchmark runs the agent's reading and the helper's rule on the simulated GPU."""
from __future__ import annotations

from gpus.sim.counters import CounterNoise
from packer.util_contention import CounterRule
from simjobs import pairs
from slurm_plugin.bench.counters import Trial, detection_delay, evaluate, run_trial

RULE = CounterRule(z=4.0, window=20, min_before=8, min_after=8)


def test_a_clear_slowdown_is_flagged_soon_and_no_slowdown_is_not():
    speed = pairs.pair_speed("ResNet18", "LSTM")  # 0.69: the senior loses 31 %
    for mode in ("whole", "mig"):
        hit = run_trial(mode, "ResNet18", "LSTM", speed, 0, 30.0, CounterNoise())
        delay = detection_delay(hit, RULE)
        assert delay is not None and RULE.settle_s + RULE.min_after - 1 <= delay <= 20, (mode, delay)
        quiet = run_trial(mode, "ResNet18", "null", 1.0, 0, 30.0, CounterNoise())
        assert detection_delay(quiet, RULE) is None


def test_rows_count_what_was_flagged():
    made = [run_trial("whole", "ResNet18", "LSTM", 0.69, 0, 30.0, CounterNoise()),
            run_trial("whole", "ResNet18", "null", 1.0, 1, 30.0, CounterNoise())]
    assert all(isinstance(t, Trial) for t in made)
    row = evaluate(made, RULE, "whole")
    assert row.contended_pairs == 1 and row.detected == 1.0 and row.null_trials == 1 and row.null_false_positive == 0.0
