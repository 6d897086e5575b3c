"""What a run needed (`packer.need`) and the dispatch rule's other way (`packed_at_dispatch`)."""
from __future__ import annotations

from packer.config import GIB, PackerConfig
from packer.decision import ClusterView, Estimate, decide, shards_needed
from packer.dispatch import QueuedJob, packed_at_dispatch
from packer.need import NEED_OVERHEAD_BYTES, need_bytes
from packer.request import Candidate


def test_the_need_is_the_allocated_peak_plus_the_context_never_above_nvml():
    assert need_bytes(34 * GIB, 4 * GIB) == 4 * GIB + NEED_OVERHEAD_BYTES
    assert need_bytes(4 * GIB, 4 * GIB) == 4 * GIB  # what it held bounds what it needed
    assert need_bytes(34 * GIB, None) is None  # the allocator said nothing: NVML's figure stands
    assert need_bytes(0, GIB) is None  # NVML saw nothing: the job's word alone is not a size


def test_a_caching_job_sized_on_its_need_fits_the_smallest_share_and_on_nvml_it_does_not():
    config = PackerConfig(mode="enforce")
    assert shards_needed(need_bytes(34 * GIB, 4 * GIB), config) == config.rungs[0]
    assert shards_needed(34 * GIB, config) > config.rungs[0]


def test_an_untouched_workload_packs_at_the_smallest_share():
    config = PackerConfig(mode="enforce")
    d = decide(Candidate("tres_per_node", None, "gres/"), Estimate(0, 0.0, 1), ClusterView(0), config, "fp")
    assert (d.verdict, d.shards) == ("packed", config.rungs[0])


def q(job_id, priority, *, packed=False, repack=False, gpus=1, excluded=()):
    return QueuedJob(job_id, priority, packed, gpus=gpus, repack=repack, excluded=frozenset(excluded))


def test_an_idle_gpu_exclusive_job_with_no_gpu_idle_at_its_turn_is_packed():
    assert packed_at_dispatch([q(1, 10, repack=True)], {}) == [1]
    assert packed_at_dispatch([q(1, 10, repack=True)], {"n1": 1}) == []  # it takes the idle GPU whole


def test_jobs_ahead_take_the_idle_gpus_first_and_packed_jobs_take_none():
    queue = [q(1, 30), q(2, 20, repack=True), q(3, 10, repack=True), q(4, 40, packed=True)]
    assert packed_at_dispatch(queue, {"n1": 2}) == [3]  # 1 and 2 take the two GPUs, 3 finds none
    assert packed_at_dispatch(queue, {"n1": 1}) == [2, 3]


def test_an_idle_gpu_it_may_not_use_is_none_for_it():
    assert packed_at_dispatch([q(1, 10, repack=True, excluded=("n1",))], {"n1": 1}) == [1]
