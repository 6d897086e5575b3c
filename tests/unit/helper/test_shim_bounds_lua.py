"""The shim's settings and the numbers it reads are range-checked: a bad
value is an error in slurmctld's log and the safe default is kept; a helper answer with a
number or field out of bounds changes nothing."""
from __future__ import annotations

import re
import time

import pytest

from packer.config import PackerConfig
from shim_harness import LUA, ShimRig, recorded

pytestmark = pytest.mark.skipif(LUA is None, reason="lua5.1 is not installed")
CONFIG = PackerConfig(mode="enforce", pack_unknown=True, pack_only_when_no_idle_gpu=False, gpu_type="h100")
JOB = recorded("22.05")["forms"]["gres+plain"]["job_desc"][0]


def _elapsed_ms(logs: list[str]) -> float:
    return float(re.search(r"elapsed_ms=([0-9.]+)", logs[-1]).group(1))


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "-5", "0", "1e309", "1e12", "1001", "abc", "0x7fffffff"])
def test_a_bad_timeout_is_an_error_and_the_default_is_kept(tmp_path, value):
    """A helper that takes 1.5 s: with the default 50 ms kept, the job passes through in time.
    The bound (750 ms) is 15 times the budget, so a loaded machine does not fail it, and half the
    helper's time, so a budget taken from the bad value (1,000 ms or more) still does."""
    def slow(fields):
        time.sleep(1.5)
        return {"status": "ok", "verdict": "untouched", "reason": "slow"}

    rig = ShimRig(tmp_path, CONFIG, handler=slow, timeout_ms=value)
    try:
        (result,) = rig.run([JOB])
    finally:
        rig.close()
    assert any(f"gpupack_shim.conf: timeout_ms={value} " in line and line.startswith("error:") and "keeping 50" in line
               for line in result.logs), result.logs
    assert "passed through" in result.logs[-1] and _elapsed_ms(result.logs) < 750, result.logs
    assert result.job_desc == JOB


def test_a_timeout_in_range_is_used(tmp_path):
    rig = ShimRig(tmp_path, CONFIG, timeout_ms=400)
    try:
        (result,) = rig.run([JOB])
    finally:
        rig.close()
    assert not any(line.startswith("error:") for line in result.logs)
    assert result.job_desc["tres_per_node"] == "gres:shard:h100:1"


PACKED = {"status": "ok", "verdict": "packed", "reason": "fits", "mode": "enforce", "rewrite": "gres:shard:h100:1",
          "admin_comment": "gpupack: packed shard:1 fp=x"}


@pytest.mark.parametrize("extra", [
    {"min_cpus": "inf"}, {"min_cpus": "-1"}, {"min_cpus": "0"}, {"min_cpus": "2.5"}, {"min_cpus": "9" * 30},
    {"min_cpus": "nan"}, {"min_mem_per_node": "1e3"}, {"cpus_per_task": "65534"}, {"min_mem_per_node": str(2**41)}, {"clear": "script"},
    {"clear": "tres_per_job,partition"}, {"rewrite": "gres:gpu:8"}, {"rewrite": "gres:shard:h100:1,gres:gpu:1"},
    {"rewrite": "gres:shard:h1 00:1"}, {"exclude": "node1;rm"},
    # the shard count is a number too: 0 would take the job's GPU away, a huge one never runs
    {"rewrite": "gres:shard:0"}, {"rewrite": "gres/shard:h100:00"}, {"rewrite": "gres:shard:h100:65536"},
    {"rewrite": "gres:shard:" + "9" * 30},
], ids=lambda e: "-".join(f"{k}={v[:12]}" for k, v in e.items()))
def test_an_answer_out_of_bounds_changes_no_field(tmp_path, extra):
    rig = ShimRig(tmp_path, CONFIG, handler=lambda fields: {**PACKED, **extra})
    try:
        (result,) = rig.run([JOB])
    finally:
        rig.close()
    assert result.ok and "request left as is" in result.applied, result.logs
    assert result.job_desc == JOB  # not even the comment: the answer is refused whole


def test_an_answer_in_bounds_is_applied(tmp_path):
    answer = {**PACKED, "min_cpus": "4", "min_mem_per_node": "2048", "clear": "mem_per_tres,cpus_per_tres"}
    rig = ShimRig(tmp_path, CONFIG, handler=lambda fields: answer)
    try:
        (result,) = rig.run([{**JOB, "mem_per_tres": "gres:gpu:2048", "cpus_per_tres": "gres:gpu:4"}])
    finally:
        rig.close()
    after = result.job_desc
    assert (after["min_cpus"], after["min_mem_per_node"], after["tres_per_node"]) == (4, 2048, "gres:shard:h100:1")
    assert "mem_per_tres" not in after and "cpus_per_tres" not in after
