"""GRES strings and hostlists, as Slurm 22.05 and 23.11+ print them."""
from __future__ import annotations

import pytest

from slurm_plugin.slurm.gres import (
    expand_hostlist,
    format_gres,
    parse_gres_item,
    parse_gres_list,
    parse_gres_request,
    parse_index_list,
    shard_usage,
)
from packer.gres import GresItem
from slurm_plugin.slurm.model import Job


@pytest.mark.parametrize(
    "text, expected",
    [
        ("gres:gpu:1", GresItem("gpu", None, 1)),  # 22.05
        ("gres/gpu:1", GresItem("gpu", None, 1)),  # 23.11+
        ("gres:gpu:h100:2", GresItem("gpu", "h100", 2)),
        ("gres/gpu:h100:2", GresItem("gpu", "h100", 2)),
        ("gres/gpu:h100=2", GresItem("gpu", "h100", 2)),  # TRES form
        ("gres/gpu=1", GresItem("gpu", None, 1)),
        ("gres:shard:2", GresItem("shard", None, 2)),
        ("gres:gpu", GresItem("gpu", None, 1)),
        ("gpu:h100", GresItem("gpu", "h100", 1)),
        ("gpu:a100_80gb:8", GresItem("gpu", "a100_80gb", 8)),
        ("gres:gpu:1k", GresItem("gpu", None, 1024)),
    ],
)
def test_request_items_of_both_dialects(text: str, expected: GresItem) -> None:
    assert parse_gres_item(text) == expected


@pytest.mark.parametrize(
    "text",
    ["gres:gpu:x:y:z", "gres:gpu:-1", 'gpu:"; rm -rf /', "gres:", ":1", "gres:gpu:h100:two"],
)
def test_malformed_items_are_left_out_not_raised(text: str) -> None:
    assert parse_gres_item(text) is None
    assert parse_gres_list(text) == ()


@pytest.mark.parametrize("text", [None, "", "N/A", "(null)"])
def test_empty_gres_strings(text: str | None) -> None:
    assert parse_gres_list(text) == ()


def test_other_tres_are_ignored_in_a_list() -> None:
    items = parse_gres_list("cpu=1,mem=8000M,license/matlab:1,gres/gpu:h100=1,bb/datawarp=1G")
    assert items == (GresItem("gpu", "h100", 1),)


def test_request_fields_keep_what_the_count_is_for() -> None:
    fields = {
        "tres_per_node": "gres:gpu:1",
        "tres_per_job": "gres/gpu:2",
        "tres_per_task": "gres:gpu:h100:1",
        "tres_per_socket": "",
        "tres_bind": "gres/gpu:closest",
    }
    assert parse_gres_request(fields) == (
        GresItem("gpu", None, 1, per="node"),
        GresItem("gpu", None, 2, per="job"),
        GresItem("gpu", "h100", 1, per="task"),
    )
    assert parse_gres_request({"tres_per_node": 5}) == ()


def test_node_gres_22_05_recorded() -> None:
    configured = parse_gres_list("gpu:h100:2,shard:h100:16")
    used = parse_gres_list("gpu:h100:1(IDX:1),shard:h100:1(IDX:0)")
    assert configured == (GresItem("gpu", "h100", 2), GresItem("shard", "h100", 16))
    assert used[0].indexes == (1,) and used[0].count == 1
    assert used[1].indexes == (0,)


def test_node_gres_with_sockets_index_lists_and_per_device_shards() -> None:
    assert parse_gres_list("gpu:h100:2(S:0-1)") == (GresItem("gpu", "h100", 2),)
    (gpu,) = parse_gres_list("gpu:4090:3(IDX:0,2,4)")
    assert gpu.indexes == (0, 2, 4)
    (none,) = parse_gres_list("gpu:h100:0(IDX:N/A)")
    assert none.count == 0 and none.indexes == ()
    (shard,) = parse_gres_list("shard:h100:2(2/8,0/8)")
    assert shard.per_device == ((2, 8), (0, 8))


@pytest.mark.parametrize(
    "text, expected", [("0-1", (0, 1)), ("0,2-3", (0, 2, 3)), ("N/A", ()), ("x", None), ("3-1", None)]
)
def test_index_lists(text: str, expected: tuple[int, ...] | None) -> None:
    assert parse_index_list(text) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("node1", ("node1",)),
        ("node[1-2]", ("node1", "node2")),
        ("gpu[01-02,7],login", ("gpu01", "gpu02", "gpu7", "login")),
        ("r[1-2]n[1-2]", ("r1n1", "r1n2", "r2n1", "r2n2")),
        ("", ()),
        (None, ()),
        ("(null)", ()),
    ],
)
def test_expand_hostlist(text: str | None, expected: tuple[str, ...]) -> None:
    assert expand_hostlist(text) == expected


def test_format_gres_marks_non_node_counts() -> None:
    items = (GresItem("gpu", "h100", 2), GresItem("gpu", None, 1, per="task"))
    assert format_gres(items) == "gpu:h100:2,gpu:1/task"


def test_shard_usage_counts_running_jobs_per_gpu() -> None:
    jobs = [
        Job(1, state="RUNNING", nodes="node1", gres_detail=(GresItem("shard", None, 2, indexes=(0,)),)),
        Job(2, state="RUNNING", nodes="node1", gres_detail=(GresItem("shard", None, 4, indexes=(0,)),)),
        Job(3, state="RUNNING", nodes="node[1-2]", gres_detail=(
            GresItem("shard", None, 2, indexes=(1,)), GresItem("shard", None, 2, indexes=(1,)))),
        Job(4, state="COMPLETED", nodes="node2", gres_detail=(GresItem("shard", None, 8, indexes=(0,)),)),
        Job(5, state="RUNNING", nodes="node2", gres_detail=(GresItem("gpu", "h100", 1, indexes=(0,)),)),
    ]
    assert shard_usage(jobs) == {"node1": {0: 6, 1: 2}, "node2": {1: 2}}


def test_allocated_gpus_is_slurms_record_per_node():
    """Issue 33: the node agents check a step's own variables against this record."""
    from slurm_plugin.slurm.gres import allocated_gpus, parse_gres_item
    from slurm_plugin.slurm.model import Job

    job = Job(5, nodes="node[1-2]", gres_detail=(parse_gres_item("shard:h100:2(IDX:1)"),
                                                 parse_gres_item("gpu:h100:1(IDX:0)")))
    assert allocated_gpus(job) == {"node1": (1,), "node2": (0,)}
    modern = Job(6, nodes="node1", gres_detail=(parse_gres_item("shard:h100:2(0/8,2/8)"),))
    assert allocated_gpus(modern) == {"node1": (1,)}
    # an entry that did not parse: which node is whose is unknown, nothing is claimed
    assert allocated_gpus(Job(7, nodes="node[1-2]", gres_detail=(parse_gres_item("gpu:h100:1(IDX:0)"),))) == {}


def test_allocated_shards_is_slurms_record_per_node():
    from slurm_plugin.slurm.gres import allocated_shards, parse_gres_item
    from slurm_plugin.slurm.model import Job

    job = Job(5, nodes="node[1-2]", gres_detail=(parse_gres_item("shard:h100:3(IDX:1)"),
                                                 parse_gres_item("gpu:h100:1(IDX:0)")))
    assert allocated_shards(job) == {"node1": 3, "node2": 0}
    assert allocated_shards(Job(6, nodes="node[1-2]", gres_detail=(parse_gres_item("gpu:1(IDX:0)"),))) == {}
