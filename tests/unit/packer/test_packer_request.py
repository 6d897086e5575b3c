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


@pytest.mark.parametrize(
    "facts, reason",
    [
        (JobFacts(tres_per_node="gres:gpu:1", requeue=0), "no-requeue"),
        (JobFacts(tres_per_node="gres:gpu:1", tres_freq="gpu:high"), "gpu-freq"),
        (JobFacts(tres_per_job="gres:gpu:1", num_tasks=2, ntasks_per_node=1), "multi-node"),
        (JobFacts(tres_per_node="gres:gpu:1", num_tasks=2), "multi-node"),  # -n2 without -N1 may span nodes
        (JobFacts(tres_per_node="gres:gpu:1", het_job_offset=0), "heterogeneous"),
        (JobFacts(tres_per_node="gres:gpu:1", batch=False), "interactive"),
        (JobFacts(tres_per_socket="gres:gpu:1"), "per-socket"),
        (JobFacts(tres_per_node="gres:gpu:1", mem_per_tres="gres:gpu:1024", min_mem_per_node=2048), "unclear"),
        (JobFacts(tres_per_node="gres:gpu:1", cpus_per_tres="gres:gpu:3", num_tasks=2, max_nodes=1), "unclear"),
        (JobFacts(tres_per_node="gres:gpu:1", unreadable=("min_nodes",)), "unclear"),
        (JobFacts(tres_per_node="gres:gpu:h1 00:1"), "unparsable-gres"),
        (JobFacts(tres_per_node="gres:gpu:1", requeue=0, het_job_offset=1), "heterogeneous"),  # the first reason
    ],
)
def test_forms_that_are_not_packed_say_why(facts, reason):
    assert classify(facts) == NotCandidate(reason)


@pytest.mark.parametrize(
    "facts, expected",
    [
        (JobFacts(tres_per_node="gres:gpu:1", num_tasks=2, max_nodes=1, min_nodes=1), Candidate("tres_per_node", None, "22.05", tasks=2)),
        (JobFacts(tres_per_node="gres:gpu:1", num_tasks=2, ntasks_per_node=2), Candidate("tres_per_node", None, "22.05", tasks=2)),
        (JobFacts(tres_per_node="gres:gpu:1", het_job_offset=NO_VAL, requeue=1), Candidate("tres_per_node", None, "22.05")),
        (JobFacts(tres_per_node="gres/gpu:h100:1", mem_per_tres="gres/gpu:2048", cpus_per_tres="gres/gpu:4"),
         Candidate("tres_per_node", "h100", "23.11", mem_per_gpu_mb=2048, cpus_per_gpu=4)),
        (JobFacts(tres_per_task="cpu=2,gres/gpu=1", num_tasks=1, tres_bind="gres/gpu:per_task:1"),
         Candidate("tres_per_task", None, "23.11", gpu_bind=True)),
    ],
)
def test_forms_that_are_packed(facts, expected):
    assert classify(facts) == expected


def test_shard_request_keeps_the_gpu_type():
    assert shard_request(2, "22.05", "h100") == "gres:shard:h100:2"
    assert shard_request(1, "23.11", "a100") == "gres/shard:a100:1"
    with pytest.raises(ValueError):
        shard_request(1, "22.05", "h1 00")


def test_an_unset_requeue_follows_the_clusters_jobrequeue():
    from packer.request import NO_VAL16

    unset = JobFacts(tres_per_node="gres:gpu:1", requeue=NO_VAL16)
    assert classify(unset, requeue_by_default=False) == NotCandidate("no-requeue")
    assert isinstance(classify(unset), Candidate)
    assert isinstance(classify(JobFacts(tres_per_node="gres:gpu:1", requeue=1), requeue_by_default=False), Candidate)
