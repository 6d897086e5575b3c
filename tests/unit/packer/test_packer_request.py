import pytest
from hypothesis import given, strategies as st

from packer.request import (
    Candidate, GresParseError, JobFacts, NO_VAL, NotCandidate, classify, parse_gres, shard_request,
)


@pytest.mark.parametrize(
    "text, name, gtype, count, dialect",
    [
        ("gres:gpu:1", "gpu", None, 1, "22.05"),
        ("gres:gpu:h100:1", "gpu", "h100", 1, "22.05"),
        ("gres/gpu:1", "gpu", None, 1, "23.11"),
        ("gres/gpu:a100:2", "gpu", "a100", 2, "23.11"),
        ("gpu:1", "gpu", None, 1, "bare"),
        ("gres:gpu", "gpu", None, 1, "22.05"),
        ("gres:gpu:h100", "gpu", "h100", 1, "22.05"),
        ("gres/gpu=1", "gpu", None, 1, "23.11"),  # 24.11's tres_per_task for --gpus-per-task=1
        ("gres/gpu:h100=2", "gpu", "h100", 2, "23.11"),
    ],
)
def test_parse_gres_both_dialects(text, name, gtype, count, dialect):
    (item,) = parse_gres(text)
    assert (item.name, item.type, item.count, item.dialect) == (name, gtype, count, dialect)


@pytest.mark.parametrize("text", ["", ",", "gres:", "gres:gpu:h100:x", "gres:gpu::1", "a:b:c:d:e", "gres:gpu:h100:x", "gres:gpu:h100:1:2", "gres/gpu=x", "gres/gpu:h100:1=1"])
def test_parse_gres_refuses_nonsense(text):
    with pytest.raises(GresParseError):
        parse_gres(text)


@given(st.text(max_size=40))
def test_classify_never_raises(text):
    for field in ("tres_per_node", "tres_per_job", "tres_per_task"):
        result = classify(JobFacts(**{field: text}))
        assert isinstance(result, (Candidate, NotCandidate))


@pytest.mark.parametrize(
    "facts, expected",
    [
        (JobFacts(tres_per_node="gres:gpu:1"), Candidate("tres_per_node", None, "22.05")),
        (JobFacts(tres_per_job="gres/gpu:h100:1"), Candidate("tres_per_job", "h100", "23.11")),
        (JobFacts(tres_per_task="gres:gpu:1", num_tasks=1), Candidate("tres_per_task", None, "22.05")),
        (JobFacts(tres_per_node="gres:gpu:1", min_nodes=NO_VAL, shared=0xFFFE), Candidate("tres_per_node", None, "22.05")),
        (JobFacts(tres_per_node="gres:gpu:1", shared=1), Candidate("tres_per_node", None, "22.05")),
        (JobFacts(tres_per_node="gres:gpu:2"), NotCandidate("multi-gpu")),
        (JobFacts(tres_per_node="gres:gpu:1", tres_per_job="gres:gpu:1"), NotCandidate("multi-gpu")),
        (JobFacts(tres_per_task="gres:gpu:1", num_tasks=4), NotCandidate("multi-gpu")),
        (JobFacts(tres_per_task="gres/gpu=1", num_tasks=1), Candidate("tres_per_task", None, "23.11")),
        (JobFacts(tres_per_task="gres/gpu=1", num_tasks=2), NotCandidate("multi-gpu")),
        (JobFacts(tres_per_node="gres:gpu:1", min_nodes=2), NotCandidate("multi-node")),
        (JobFacts(tres_per_node="gres:gpu:1", shared=0), NotCandidate("exclusive")),
        (JobFacts(tres_per_node="gres:gpu:1", shared=2), NotCandidate("exclusive")),
        (JobFacts(tres_per_node="gres:shard:2"), NotCandidate("already-shared")),
        (JobFacts(tres_per_node="gres:gpu:1,gres:mps:50"), NotCandidate("already-shared")),
        (JobFacts(tres_per_node="gres:nic:1"), NotCandidate("no-gpu")),
        (JobFacts(), NotCandidate("no-gpu")),
        (JobFacts(tres_per_node="gres:gpu:h100:one"), NotCandidate("unparsable-gres")),
        (JobFacts(tres_per_node="gres:gpu:h100"), Candidate("tres_per_node", "h100", "22.05")),
    ],
)
def test_classify(facts, expected):
    assert classify(facts) == expected


def test_shard_request_keeps_the_dialect():
    assert shard_request(2, "22.05") == "gres:shard:2"
    assert shard_request(3, "bare") == "gres:shard:3"
    assert shard_request(1, "23.11") == "gres/shard:1"
    with pytest.raises(ValueError):
        shard_request(0, "22.05")
