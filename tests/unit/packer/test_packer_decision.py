import pytest

from packer.comment import CommentRecord, merge, parse, render
from packer.config import GIB, ConfigError, PackerConfig
from slurm_plugin.config.toml_file import load_config
from packer.decision import ClusterView, Estimate, decide, max_shards, shards_needed
from packer.fingerprint import fingerprint
from packer.request import Candidate, NotCandidate

CAND = Candidate("tres_per_node", None, "22.05")
BUSY = ClusterView(idle_gpus=0)
CFG = PackerConfig(mode="enforce", gpu_memory_gib=80, shares_per_gpu=8, gpu_model="")  # any 1..8 (no MIG geometry)


def est(gib, util=30.0, runs=3):
    return Estimate(int(gib * GIB), util, runs)


def test_unknown_job_stays_exclusive_unless_configured():
    assert decide(CAND, None, BUSY, CFG, "fp").reason == "no-history"
    packed = decide(CAND, None, BUSY, CFG.with_overrides(pack_unknown=True), "fp")
    assert packed.verdict == "packed" and packed.estimate.source == "default"


def test_known_job_is_packed_only_when_no_gpu_is_idle():
    assert decide(CAND, est(7.6), ClusterView(idle_gpus=2), CFG).reason == "idle-gpu"
    assert decide(CAND, est(7.6), BUSY, CFG).verdict == "packed"
    anyway = CFG.with_overrides(pack_only_when_no_idle_gpu=False)
    assert decide(CAND, est(7.6), ClusterView(idle_gpus=2), anyway).verdict == "packed"


@pytest.mark.parametrize("gib, shards", [(1, 1), (8.5, 1), (9.2, 2), (18, 2), (21, 3), (33, 4), (60, 7)])
def test_shards_cover_peak_plus_headroom(gib, shards):
    assert shards_needed(int(gib * GIB), CFG) == shards


def test_never_above_95_percent_of_the_gpu():
    assert max_shards(CFG) == 7
    d = decide(CAND, est(66), BUSY, CFG)
    assert d.verdict == "exclusive" and d.reason == "too-large"


def test_busy_jobs_are_not_packed():
    assert decide(CAND, est(4, util=97), BUSY, CFG).reason == "high-util"


def test_remembered_size_is_a_floor():
    d = decide(CAND, est(4), BUSY, CFG, "fp", remembered_shards=4)
    assert (d.shards, d.reason) == (4, "remembered-size")
    assert decide(CAND, est(40), BUSY, CFG, "fp", remembered_shards=2).shards == 5


def test_not_candidates_are_untouched():
    assert decide(NotCandidate("multi-gpu"), est(4), BUSY, CFG) .verdict == "untouched"


def test_comment_round_trips():
    d = decide(CAND, est(7.6, util=35, runs=5), BUSY, CFG, "1a2b3c4d5e6f7a8b")
    line = d.comment()
    assert line == "gpupack: packed shard:1 est=7.6GiB util=35% src=history(5) lvl=exact fp=1a2b3c4d5e6f7a8b"
    rec = parse(line)
    assert rec == CommentRecord("packed", False, 1, {"est": "7.6GiB", "util": "35%", "src": "history(5)", "lvl": "exact",
                                                "fp": "1a2b3c4d5e6f7a8b"})
    advised = parse(d.comment(advised=True))
    assert advised.advised and advised.applied_verdict == "untouched"
    assert parse("gpupack: exclusive reason=no-history fp=ab").reason == "no-history"


@pytest.mark.parametrize("text", [None, "", "site text", "gpupack:", "gpupack: maybe shard:2"])
def test_parse_ignores_what_is_not_ours(text):
    assert parse(text) is None


def test_merge_keeps_the_site_comment_and_replaces_our_old_record():
    assert merge(None, "gpupack: exclusive reason=x") == "gpupack: exclusive reason=x"
    assert merge("site", "gpupack: exclusive reason=x") == "site | gpupack: exclusive reason=x"
    assert merge("site | gpupack: packed shard:1", "gpupack: exclusive reason=y") == "site | gpupack: exclusive reason=y"


def test_render_refuses_fields_that_would_break_parsing():
    with pytest.raises(ValueError):
        render("packed", reason="two words")
    with pytest.raises(ValueError):
        render("maybe")


def test_fingerprint_depends_on_user_name_and_script():
    base = fingerprint("alice", "train", b"#!/bin/sh\npython train.py\n")
    assert len(base) == 16
    assert base == fingerprint("alice", "train", "#!/bin/sh\npython train.py\n")
    assert base != fingerprint("bob", "train", b"#!/bin/sh\npython train.py\n")
    assert base != fingerprint("alice", "eval", b"#!/bin/sh\npython train.py\n")
    assert base != fingerprint("alice", "train", b"#!/bin/sh\npython train.py --lr 1\n")
    assert fingerprint("ab", "c", b"") != fingerprint("a", "bc", b"")
    fingerprint("\udcff", "x\n", b"\xff\x00")  # odd bytes are fine


def test_config_file(tmp_path):
    path = tmp_path / "gpupack.toml"
    assert load_config(path) == PackerConfig()
    path.write_text('[packer]\nmode = "advise"\nshares_per_gpu = 7\n')
    assert load_config(path).mode == "advise"
    path.write_text('[packer]\nmode = "yolo"\n')
    with pytest.raises(ConfigError, match="mode"):
        load_config(path)
    path.write_text('[packer]\nmodee = "advise"\n')
    with pytest.raises(ConfigError, match="unknown"):
        load_config(path)


def test_shares_are_sized_for_one_gpu_type():
    """K shares are sized for `gpu_type`; an untyped job is typed to it, a job
    typed for another model keeps its whole GPU."""
    from packer.decision import packed_type

    config = PackerConfig(mode="enforce", gpu_type="h100", pack_only_when_no_idle_gpu=False)
    known = Estimate(int(7 * GIB), 30.0, 3)
    other = decide(Candidate("tres_per_node", "a100", "22.05"), known, ClusterView(0), config)
    assert (other.verdict, other.reason) == ("exclusive", "other-gpu-type")
    same = Candidate("tres_per_node", "H100", "22.05")
    assert decide(same, known, ClusterView(0), config).verdict == "packed"
    assert packed_type(same, config) == "H100"
    assert packed_type(Candidate("tres_per_node", None, "22.05"), config) == "h100"
    assert packed_type(Candidate("tres_per_node", None, "22.05"), PackerConfig()) is None
    with pytest.raises(ConfigError):
        PackerConfig(gpu_type="h 100")


def test_lower_bounds_alone_are_no_history_and_never_pack_below_the_bound():
    """A workload whose only run failed at 12 GiB is not packed as a 12 GiB job."""
    bound = Estimate(12 * GIB, None, 1, source="lower-bound", lower_bound_bytes=12 * GIB)
    d = decide(CAND, bound, BUSY, CFG, "fp")
    assert (d.verdict, d.reason) == ("exclusive", "no-history") and "src=lower-bound(1)" in d.comment()
    unknown = CFG.with_overrides(pack_unknown=True, unknown_estimate_gib=2.0)
    packed = decide(CAND, bound, BUSY, unknown, "fp")  # the default size, raised to the bound
    assert packed.verdict == "packed" and packed.shards == shards_needed(12 * GIB, CFG) > decide(
        CAND, None, BUSY, unknown, "fp").shards


def test_a_lower_bound_above_the_measured_peak_keeps_the_job_off_a_smaller_share():
    from store.db import RunRecord, Store

    store = Store()
    store.record_run(RunRecord(job_id=1, fingerprint="fp", peak_mem_bytes=4 * GIB, ended_at=10))
    assert decide(CAND, store.estimate("fp"), BUSY, CFG, "fp").shards == 1
    store.record_run(RunRecord(job_id=2, fingerprint="fp", peak_mem_bytes=15 * GIB, lower_bound=True, ended_at=20))
    d = decide(CAND, store.estimate("fp"), BUSY, CFG, "fp")
    assert d.verdict == "packed" and d.shards == shards_needed(15 * GIB, CFG) == 2
    assert "src=history(1)+bound" in d.comment()


def test_packed_jobs_are_asked_share_counts_on_the_models_ladder():
    """The default [packer] (H100-80GB, 5 shares): sizes round up to 1, 2 or 4 shares (5 is
    the whole GPU: too large to pack), restart and grow sizes too; 8 shares are refused."""
    from packer.grow import grow_request
    from packer.preemption import restart_size

    cfg = PackerConfig(mode="enforce")
    assert (cfg.shares_per_gpu, cfg.rungs, max_shards(cfg)) == (5, (1, 2, 4, 5), 4)
    asked = {shards_needed(int(g * GIB), cfg) for g in (1, 8, 12, 16, 21, 30, 34)}
    assert asked == {1, 2, 4}
    d = decide(CAND, Estimate(int(25 * GIB), 20.0, 3), ClusterView(idle_gpus=0), cfg)
    assert d.shards == 4  # 3 shares' worth of memory: the 3g.40gb rung
    assert decide(CAND, Estimate(int(45 * GIB), 20.0, 3), ClusterView(idle_gpus=0), cfg).reason == "too-large"
    assert decide(CAND, Estimate(int(1 * GIB), 20.0, 3), ClusterView(idle_gpus=0), cfg,
                  remembered_shards=3).shards == 4
    size = restart_size(2, 25 * GIB, cfg.share_bytes, max_shards(cfg), partition_shards=cfg.rungs)
    assert size.shards == 4
    assert grow_request(1, 12 * GIB, cfg.share_bytes, max_shards(cfg), upper_bytes=30 * GIB, rungs=cfg.rungs) == (2, 4)
    with pytest.raises(ConfigError, match="use 5"):
        PackerConfig(shares_per_gpu=8)
