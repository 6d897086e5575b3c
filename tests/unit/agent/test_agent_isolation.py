"""Pure isolation decisions: what a step was given, which MIG profile, which MPS share."""
from dataclasses import dataclass

import pytest

from mig.catalog import load_catalog
from slurm_plugin.agent import isolation as iso


BATCH, INTERACTIVE = 0xFFFFFFFB, 0xFFFFFFFA


def test_grant_reads_slurm_step_variables():
    g = iso.grant_from_env({"SLURM_JOB_GPUS": "1", "CUDA_VISIBLE_DEVICES": "0", "SLURM_SHARDS_ON_NODE": "2"}, BATCH)
    assert g == iso.StepGrant((1,), 2) and g.packed
    assert iso.grant_from_env({"SLURM_STEP_GPUS": "0-2"}, 3).gpu_indexes == (0, 1, 2)
    assert iso.grant_from_env({"SLURM_JOB_GPUS": "2"}, INTERACTIVE).gpu_indexes == (2,)
    assert iso.grant_from_env({}, BATCH) == iso.StepGrant((), 0)


def test_grant_never_reads_a_variable_slurm_leaves_to_the_user():
    """Attack: Slurm gave GPU 0; the user exported SLURM_STEP_GPUS=1 (and CUDA_VISIBLE_DEVICES,
    GPU_DEVICE_ORDINAL) at sbatch time. A batch step's environment keeps them (slurmstepd runs
    gres_g_job_set_env there, which sets SLURM_JOB_GPUS only): the grant is GPU 0."""
    env = {"SLURM_STEP_GPUS": "1", "CUDA_VISIBLE_DEVICES": "1", "GPU_DEVICE_ORDINAL": "1",
           "SLURM_JOB_GPUS": "0", "SLURM_SHARDS_ON_NODE": "2"}
    assert iso.grant_from_env(env, BATCH) == iso.StepGrant((0,), 2)
    # an srun step inherits the batch step's SLURM_JOB_GPUS, which the script may change
    assert iso.grant_from_env({"SLURM_JOB_GPUS": "1", "SLURM_STEP_GPUS": "0", "SLURM_SHARDS_ON_NODE": "2"},
                              0) == iso.StepGrant((0,), 2)
    # a job with no GPU at all (slurmstepd cleared SLURM_JOB_GPUS) names none, whatever else is there
    assert iso.grant_from_env({"SLURM_STEP_GPUS": "1", "CUDA_VISIBLE_DEVICES": "1", "SLURM_SHARDS_ON_NODE": "1"},
                              BATCH) == iso.StepGrant((), 1)


@dataclass
class _Held:
    job_id: int
    gpu_index: int
    kind: str
    uid: int | None
    gi_id: int | None = None


def test_gpu_conflict_covers_every_packed_kind():
    whole_other = [_Held(5, 1, "whole", 2000)]
    for mode in ("mig", "mps"):
        assert "held whole by job 5" in iso.gpu_conflict(whole_other, 7, 1000, 1, mode)
        assert iso.gpu_conflict(whole_other, 7, 1000, 0, mode) is None  # another GPU
        assert iso.gpu_conflict(whole_other, 5, 2000, 1, mode) is None  # the job itself (a later step)
    slices_other = [_Held(5, 0, "mig", 2000, gi_id=3)]
    assert iso.gpu_conflict(slices_other, 7, 1000, 0, "mig") is None  # MIG slices of two users: fine
    assert "MPS servers are per user" in iso.gpu_conflict(slices_other, 7, 1000, 0, "mps")
    assert iso.gpu_conflict(slices_other, 7, 2000, 0, "mps") is None  # the same user
    mps_whole_other = [_Held(5, 0, "mps", 2000)]
    assert "serves MPS clients of uid 2000" in iso.gpu_conflict(mps_whole_other, 7, 1000, 0, "mig")
    assert iso.gpu_conflict([_Held(5, 0, "mps", 2000, gi_id=1)], 7, 1000, 0, "mig") is None


@pytest.mark.parametrize("text", ["MIG-abc", "NoDevFiles", "", "1-x", "../0"])
def test_indexes_reject_what_is_not_an_index_list(text):
    assert iso.parse_indexes(text) is None


@pytest.mark.parametrize("shards,profile", [(1, "1g.10gb"), (2, "1g.20gb"), (3, "3g.40gb"), (4, "3g.40gb"),
                                            (5, "7g.80gb"), (8, "7g.80gb"), (9, None), (0, None)])
def test_profile_for_shards_is_the_smallest_holding_k_slices(shards, profile):
    got = iso.profile_for_shards(load_catalog("H100-80GB"), shards)
    assert (got.name if got else None) == profile


def test_every_shard_count_fits_in_its_profile_on_every_catalogue():
    from mig.catalog import list_models

    for model in list_models():
        cat = load_catalog(model)
        for k in range(1, cat.memory_slices + 1):
            p = iso.profile_for_shards(cat, k)
            assert p is not None and p.memory_slices >= k and not p.media_extensions


def test_mps_share_and_memory_limit():
    assert iso.mps_percentage(2, 8) == 25
    assert iso.mps_percentage(1, 100) == 1
    assert iso.mps_percentage(300, 100) == 100
    assert iso.mps_memory_limit_bytes(4, 8, 81559) == 81559 * 1024 * 1024 // 2


def test_answer_lines_and_error_line():
    assert iso.answer_lines("mig:1g.10gb@0", {"CUDA_VISIBLE_DEVICES": "MIG-x"}) == \
        "OK mig:1g.10gb@0\nCUDA_VISIBLE_DEVICES=MIG-x\nEND\n"  # framed: the plugin refuses an answer without END
    with pytest.raises(ValueError):
        iso.answer_lines("x", {"A": "b\nEVIL=1"})
    assert iso.error_line("no\nroom") == "ERR no room\nEND\n"


def test_a_shard_count_slurms_record_does_not_back_is_not_taken():
    from slurm_plugin.agent.isolation import StepGrant, grant_within_record

    packed = StepGrant((0,), 2)
    assert grant_within_record(packed, None) == (packed, None)  # not listed yet: the variable decides
    assert grant_within_record(packed, 2) == (packed, None)
    grant, why = grant_within_record(packed, 0)
    assert grant == StepGrant((0,), 0) and "whole GPUs" in why
    assert grant_within_record(StepGrant((0,), 0), 0) == (StepGrant((0,), 0), None)
