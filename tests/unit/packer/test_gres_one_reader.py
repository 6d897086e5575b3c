"""One GRES reader for the suite: the submit path (strict), the Slurm adapter (lenient),
the monitor's watches and the AdminComment record read GRES text with `packer.gres`."""
import pytest

from packer import comment, gres, request
from slurm_plugin.slurm import gres as slurm_gres
from slurm_plugin.slurm import model


def test_one_item_class_everywhere():
    assert request.GresItem is gres.GresItem is slurm_gres.GresItem is model.GresItem


@pytest.mark.parametrize("text", [
    "gres:gpu:1", "gres/gpu:h100:2", "gpu:1", "gres/gpu=1", "gres/gpu:h100=2", "gres:shard:h100:4",
    "gpu:h100:1(IDX:0-1)", "shard:h100:2(2/8,0/8)", "gpu:2k",
])
def test_strict_and_lenient_readers_agree_on_good_text(text):
    strict = gres.parse_gres(text)
    assert list(slurm_gres.parse_gres_list(text)) == strict
    assert [i.dialect for i in strict] == [i.dialect for i in slurm_gres.parse_gres_list(text)]


@pytest.mark.parametrize("text", ["gres:gpu:h100:x", "gpu:h1 00:1", "gres/gpu:h100:1=1", "gpu:a:b:c"])
def test_bad_item_raises_for_the_submit_path_and_is_left_out_by_the_adapter(text):
    with pytest.raises(gres.GresParseError):
        gres.parse_gres(f"{text},gres:shard:2")
    assert slurm_gres.parse_gres_list(f"{text},gres:shard:2") == (gres.GresItem("shard", None, 2),)


def test_tres_that_are_not_gres_are_passed_over():
    assert gres.parse_gres("cpu=4,gres/gpu=1") == [gres.GresItem("gpu", None, 1)]


def test_suffixed_counts_read_as_slurm_reads_them():
    # a request for 2k GPUs is not one GPU of type "2k"
    assert request.classify(request.JobFacts(tres_per_node="gres:gpu:2k")) == request.NotCandidate("multi-gpu")


def test_count_and_type_of_items():
    items = gres.parse_gres("gres:gpu:h100:1,gres:shard:h100:3")
    assert gres.count_of(items, "shard") == 3 and gres.count_of(items, "mps") is None
    assert gres.type_of(items) == "h100" and gres.type_of(gres.parse_gres("gpu:1")) is None


def test_comment_record_shard_size_is_a_gres_count():
    line = comment.render("packed", shards=3, fp="ab")
    assert "shard:3" in line and comment.parse(line).shards == 3
    assert comment.parse("gpupack: packed shard:h100:3 fp=ab").shards is None  # not the record's form
