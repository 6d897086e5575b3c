"""Memory curves: the downsampling rule, and the partition a curve is drawn against."""
from __future__ import annotations

import pytest

from packer.curves import MAX_POINTS, CurvePoint, downsample, mig_profile_of, partition_capacity

GIB = 1024**3


def noisy(n: int, spike_at: int | None = None) -> list[CurvePoint]:
    """A curve that rises and wobbles; a short spike at `spike_at` is its peak."""
    out, peak = [], 0
    for i in range(n):
        mem = int(2 * GIB + i * 1_000_000 + (300_000_000 if i % 7 == 0 else 0))
        if i == spike_at:
            mem = 9 * GIB
        peak = max(peak, mem)
        out.append(CurvePoint(float(i) * 0.5, mem, peak))
    return out


def test_a_short_curve_is_kept_whole():
    pts = noisy(150)
    assert downsample(pts) == tuple(pts)


@pytest.mark.parametrize("n, spike", [(201, 100), (600, 1), (600, 598), (1000, 437), (5000, None)])
def test_downsampling_keeps_the_ends_and_the_peak_within_the_bound(n, spike):
    pts = noisy(n, spike)
    kept = downsample(pts)
    assert len(kept) <= MAX_POINTS
    assert kept[0] == pts[0] and kept[-1] == pts[-1]
    top = max(p.mem_bytes for p in pts)
    assert max(p.mem_bytes for p in kept) == top
    assert max(p.peak_bytes for p in kept) == max(p.peak_bytes for p in pts)
    assert [p.t for p in kept] == sorted(p.t for p in kept)  # in order, no duplicates
    assert len({p.t for p in kept}) == len(kept)


def test_downsampling_keeps_each_stretchs_highest_point_not_a_mean():
    # a flat 1 GiB curve with a 1-sample excursion to 3 GiB every 50 samples
    pts = [CurvePoint(float(i), 3 * GIB if i % 50 == 25 else GIB, 3 * GIB if i >= 25 else GIB) for i in range(2000)]
    kept = downsample(pts, limit=60)
    assert len(kept) <= 60
    assert sum(1 for p in kept if p.mem_bytes == 3 * GIB) == 40  # every excursion survives
    with pytest.raises(ValueError, match="at least 4"):
        downsample(pts, limit=3)


def test_a_partition_is_the_mig_slice_else_the_shares_else_none():
    mib = {"1g.10gb": 9984}.get
    assert mig_profile_of("mig:1g.10gb@6") == "1g.10gb" and mig_profile_of("mps:30") is None
    assert partition_capacity("mig:1g.10gb@6", 1, 10.0, mib) == (9984 * 1024**2, "MIG 1g.10gb")
    assert partition_capacity("mig:9g.99gb@0", 2, 10.0, mib) == (20.0, "shard:2")  # a profile not known
    assert partition_capacity("mps:30", 3, 10.0, mib) == (30.0, "shard:3")
    assert partition_capacity(None, None, 10.0, mib) == (None, "")
