"""Pure isolation decisions: what a step was given, which MIG profile, which MPS share."""
import pytest

from mig.catalog import load_catalog
from slurm_plugin.agent import isolation as iso


def test_grant_reads_slurm_step_variables():
    g = iso.grant_from_env({"SLURM_JOB_GPUS": "1", "CUDA_VISIBLE_DEVICES": "1", "SLURM_SHARDS_ON_NODE": "2"})
    assert g == iso.StepGrant((1,), 2) and g.packed
    assert iso.grant_from_env({"CUDA_VISIBLE_DEVICES": "0,1"}) == iso.StepGrant((0, 1), 0)
    assert iso.grant_from_env({"SLURM_STEP_GPUS": "0-2"}).gpu_indexes == (0, 1, 2)
    assert iso.grant_from_env({}) == iso.StepGrant((), 0)


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
    assert iso.answer_lines("mig:1g.10gb@0", {"CUDA_VISIBLE_DEVICES": "MIG-x"}) == "OK mig:1g.10gb@0\nCUDA_VISIBLE_DEVICES=MIG-x\n"
    with pytest.raises(ValueError):
        iso.answer_lines("x", {"A": "b\nEVIL=1"})
    assert iso.error_line("no\nroom") == "ERR no room\n"
