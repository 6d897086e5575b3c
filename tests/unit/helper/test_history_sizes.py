"""History from the agents' summaries keeps what a run needed and runs that never touched their GPU."""
from __future__ import annotations

import pytest

from slurm_plugin.history_recorder import RECORDED, UNMEASURED

from tests.unit.helper.rounds_support import GIB
from tests.unit.helper.test_history_finals import ended, leave, summary, world  # noqa: F401 (a fixture)


def test_a_caching_runs_need_is_kept_beside_nvmls_figure_and_sizes_it(world):  # noqa: F811
    fake, store, sweep, tmp = world
    ended(fake, 5)
    leave(tmp, summary(5, 34.0, alloc_peak_bytes=4 * GIB, covered=True))
    assert sweep.sweep(["node1"]) == {5: RECORDED}
    (run,) = store.runs("fp1")
    assert (run.peak_mem_bytes, run.need_bytes) == (34 * GIB, 4 * GIB + 512 * 1024**2)
    assert store.estimate("fp1").peak_mem_bytes == run.need_bytes
    (event,) = store.events()
    assert "need 4.50GiB from its allocator" in event.detail and event.data["need_bytes"] == run.need_bytes


def test_a_completed_run_sampled_whole_that_never_touched_its_gpu_is_a_zero_byte_measurement(world):  # noqa: F811
    fake, store, sweep, tmp = world
    ended(fake, 5)
    leave(tmp, summary(5, 0.0, covered=True, mean_util_pct=None))
    assert sweep.sweep(["node1"]) == {5: RECORDED}
    (run,) = store.runs("fp1")
    assert (run.untouched, run.peak_mem_bytes, run.mean_util_pct, run.lower_bound) == (True, 0, 0.0, False)
    assert run.end_state == "completed untouched"
    est = store.estimate("fp1")
    assert (est.peak_mem_bytes, est.mean_util_pct, est.measured) == (0, 0.0, True)


@pytest.mark.parametrize("state, covered, gaps", [
    ("COMPLETED", False, 0.0),  # its start or end unseen: it may have used its GPU then
    ("COMPLETED", True, 45.0),  # a gap: the same
    ("FAILED", True, 0.0),  # cut short before it used its GPU: says nothing of what it needs
    ("CANCELLED", True, 0.0),
])
def test_no_memory_seen_is_not_history_unless_the_whole_run_completed_in_view(world, state, covered,  # noqa: F811
                                                                            gaps):
    fake, store, sweep, tmp = world
    ended(fake, 5, state)
    leave(tmp, summary(5, 0.0, covered=covered, gaps=gaps))
    assert sweep.sweep(["node1"]) == {5: UNMEASURED}
    assert store.runs("fp1") == []
