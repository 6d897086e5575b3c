"""The submit benchmark's round order: ABBA, so a drift over the run falls on both sides."""
from slurm_plugin.bench.submit import round_order


def test_rounds_are_balanced_abba():
    order = round_order(4)
    assert order == [True, False, False, True, True, False, False, True]
    # the mean position of each configuration is the same: a linear drift cancels
    pos = {flag: sum(i for i, f in enumerate(order) if f == flag) for flag in (True, False)}
    assert pos[True] == pos[False]
    assert round_order(1) == [True, False]
