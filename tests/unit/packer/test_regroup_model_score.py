"""Regrouping inputs and metric: --signal, movability and checkpoint timing, efficiency, head start."""
from __future__ import annotations

import math

import pytest

from mig.catalog import load_catalog
from mig.fsm import PartitionState, Placement, get_space
from packer.regroup_model import (
    Cluster,
    GpuInfo,
    HeadJob,
    Holding,
    Movability,
    RunningJob,
    SignalSpec,
    parse_signal,
)
from packer.regroup_score import head_start, mig_start, prioritised, score_job, whole_gpus_start

SIG = Movability(requeue=True, signal=SignalSpec("USR1", 120, True))


def nodes(*spec: tuple[str, int]) -> tuple[GpuInfo, ...]:
    return tuple(GpuInfo(n, i) for n, k in spec for i in range(k))


# ------------------------------------------------------------------ --signal
@pytest.mark.parametrize("text, want", [
    ("B:USR1@120", SignalSpec("USR1", 120, True)),
    ("USR1", SignalSpec("USR1", 60, False)),
    ("10@30", SignalSpec("10", 30, False)),
    ("R:SIGUSR2@5", SignalSpec("USR2", 5, False)),
    ("RB:usr1@0", SignalSpec("USR1", 0, True)),
])
def test_parse_signal_reads_slurms_forms(text, want):
    assert parse_signal(text) == want


def test_parse_signal_absent_and_malformed():
    assert parse_signal(None) is None and parse_signal("  ") is None
    with pytest.raises(ValueError, match="B:USR1@120"):
        parse_signal("B:@x")
    with pytest.raises(ValueError, match="65535"):
        parse_signal("USR1@70000")


# ------------------------------------------------------------------ movability and timing
def test_movable_needs_requeue_and_a_checkpoint_way_or_an_admin_setting():
    assert not Movability().movable
    assert not Movability(requeue=True).movable
    assert "checkpoint signal" in Movability(requeue=True).why_not
    assert "may not be requeued" in Movability(signal=SignalSpec("USR1", 60)).why_not
    assert Movability(requeue=True, signal=SignalSpec("USR1", 60)).movable
    assert Movability(requeue=True, checkpoint_every_s=600).movable
    assert Movability(admin=True).movable


def test_timing_waits_for_the_checkpoint_or_counts_the_lost_work():
    assert SIG.timing(now=1000, started_at=0) == (120.0, 0.0)
    periodic = Movability(requeue=True, last_checkpoint_at=100, checkpoint_every_s=300)
    assert periodic.timing(now=500, started_at=0) == (200.0, 0.0)  # next boundary at 700
    assert periodic.timing(now=1250, started_at=0) == (50.0, 0.0)  # boundaries 400, 700, 1000, 1300
    assert periodic.timing(now=1300, started_at=0) == (0.0, 0.0)  # on a boundary: no wait
    admin = Movability(admin=True)
    assert admin.timing(now=1000, started_at=400) == (0.0, 600.0)
    reported = Movability(admin=True, last_checkpoint_at=900)
    assert reported.timing(now=1000, started_at=400) == (0.0, 100.0)


# ------------------------------------------------------------------ the metric
def test_efficiency_from_pair_speed_and_spread_and_waste_from_remaining_time():
    c = Cluster(nodes(("a", 4), ("b", 4)), (
        RunningJob(1, (Holding("a", 0), Holding("a", 1), Holding("b", 0), Holding("b", 1)), 0, 1000),
        RunningJob(2, (Holding("a", 2, shares=4),), 0, 2000, speed=0.8),
        RunningJob(3, (Holding("a", 3),), 0, 5000),
    ))
    spread, packed, alone = (score_job(j, c) for j in c.jobs)
    assert spread.nodes_spanned == 2 and spread.min_nodes == 1 and spread.efficiency == pytest.approx(0.5)
    assert spread.waste_gpu_s == pytest.approx(0.5 * 4 * 1000)
    assert packed.gpus_used == pytest.approx(0.5) and packed.efficiency == pytest.approx(0.8)
    assert packed.waste_gpu_s == pytest.approx(0.2 * 0.5 * 2000)
    assert alone.efficiency == 1.0 and alone.waste_gpu_s == 0.0
    assert [s.job_id for s in prioritised(c)] == [1, 2, 3]


def test_mig_instance_counts_its_share_of_the_gpu():
    space = get_space(load_catalog("A100-80GB"))
    state = PartitionState.parse(space, "3g.40gb@4")
    c = Cluster((GpuInfo("a", 0, mig=state),), (
        RunningJob(1, (Holding("a", 0, placement=Placement("3g.40gb", 4)),), 0, 100),))
    assert score_job(c.jobs[0], c).gpus_used == pytest.approx(0.5)


# ------------------------------------------------------------------ the head's start without regrouping
def test_whole_gpus_start_respects_the_node_span():
    c = Cluster(nodes(("a", 2), ("b", 2)), (
        RunningJob(1, (Holding("a", 0),), 0, 100),
        RunningJob(2, (Holding("b", 0),), 0, 50),
        RunningJob(3, (Holding("b", 1),), 0, 400),
    ))
    assert whole_gpus_start(c, 1, None, now=1000) == 1000  # a:1 is idle
    assert whole_gpus_start(c, 2, 1, now=1000) == 1100  # node a at 1100, node b at 1400
    assert whole_gpus_start(c, 3, 2, now=1000) == 1100
    assert whole_gpus_start(c, 5, None, now=1000) == math.inf
    assert head_start(c, HeadJob(9, 2, max_nodes=1, expected_start=1234.0), 1000) == 1234.0


def test_mig_start_waits_for_the_busy_instance_that_blocks():
    space = get_space(load_catalog("A100-80GB"))
    a = PartitionState.parse(space, "1g.10gb@0,1g.10gb@4")
    c = Cluster((GpuInfo("a", 0, mig=a),), (
        RunningJob(1, (Holding("a", 0, placement=Placement("1g.10gb", 0)),), 0, 300),
        RunningJob(2, (Holding("a", 0, placement=Placement("1g.10gb", 4)),), 0, 900),
    ))
    assert mig_start(c, "4g.40gb", now=0) == 300  # 4g.40gb starts at slice 0 only
    assert mig_start(c, "7g.80gb", now=0) == 900
    assert mig_start(c, "1g.10gb", now=0) == 0


def test_script_signal_reads_the_sbatch_lines_before_the_first_command() -> None:
    from packer.regroup_model import SignalSpec, script_signal

    script = "#!/bin/bash\n# a comment\n#SBATCH --requeue\n#SBATCH --signal=B:USR1@45\npython x.py\n"
    assert script_signal(script) == SignalSpec("USR1", 45, batch_only=True)
    assert script_signal("#!/bin/sh\n#SBATCH -J x --signal USR2\n") == SignalSpec("USR2", 60)
    assert script_signal("#!/bin/sh\nsleep 1\n#SBATCH --signal=B:USR1@45\n") is None  # after a command
    assert script_signal(None) is None and script_signal("#!/bin/sh\n#SBATCH --requeue\n") is None
    with pytest.raises(ValueError, match="--signal"):
        script_signal("#SBATCH --signal=B:USR1@forever\n")
