"""Fuzz the submit path: Hypothesis draws job_desc tables (what slurmctld hands job_submit/lua,
and worse), the real job_submit.lua runs them against the real helper service, and every
answer must be well-formed and never a request Slurm would refuse."""
from __future__ import annotations

import math
import re

import pytest
from hypothesis import given, settings, strategies as st

from packer.comment import parse
from packer.config import PackerConfig
from shim_harness import LUA, NO_VAL, RELEASES, ShimRig, recorded

pytestmark = pytest.mark.skipif(LUA is None, reason="lua5.1 is not installed")
CONFIG = PackerConfig(mode="enforce", pack_unknown=True, pack_only_when_no_idle_gpu=False, gpu_type="h100")
NO_VAL16 = 0xFFFE
MAY_CHANGE = {"tres_per_node", "tres_per_job", "tres_per_task", "mem_per_tres", "cpus_per_tres", "tres_bind",
              "min_mem_per_node", "pn_min_memory", "min_cpus", "cpus_per_task", "admin_comment", "exc_nodes"}
SHARD_RE = re.compile(r"^gres[:/]shard:(?:[A-Za-z0-9_][A-Za-z0-9_.\-]*:)?(\d+)$")
DRAWN: list[int] = []  # job_desc tables run, for the count in the report
REWRITTEN: list[int] = []

junk = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=30)
gres_item = st.builds(
    lambda prefix, name, gtype, sep, count: f"{prefix}{name}{gtype}{sep}{count}",
    st.sampled_from(["gres:", "gres/", ""]), st.sampled_from(["gpu", "gpu", "shard", "mps", "nic", "cpu"]),
    st.sampled_from(["", ":h100", ":a100", ":H100", ":bad type", ":"]), st.sampled_from([":", "=", "::"]),
    st.sampled_from(["1", "1", "2", "0", "-1", "99999999999999999999", "1k", "x", ""]),
)
gres_text = st.one_of(st.lists(gres_item, min_size=1, max_size=3).map(",".join), junk)
numbers = st.sampled_from([NO_VAL, NO_VAL16, 0, 1, 1, 2, 3, 16, 2**31, float(2**64 - 2), -1, 0.5, math.inf, -math.inf, math.nan])
wrong_type = st.one_of(st.integers(-5, 5), st.floats(allow_nan=True), st.booleans())

FIELD_STRATEGIES = {
    "tres_per_node": gres_text, "tres_per_job": gres_text, "tres_per_task": gres_text, "tres_per_socket": gres_text,
    "mem_per_tres": st.one_of(st.sampled_from(["gres:gpu:2048", "gres/gpu:1024", "gres:gpu:0", "gres:gpu:h100:1"]), junk),
    "cpus_per_tres": st.one_of(st.sampled_from(["gres:gpu:2", "gres/gpu:4", "gres:gpu:x"]), junk),
    "tres_freq": st.one_of(st.sampled_from(["gpu:high", "gpu:low,memory=high"]), junk),
    "tres_bind": st.one_of(st.sampled_from(["gpu:closest", "gres/gpu:per_task:1"]), junk),
    "min_nodes": numbers, "max_nodes": numbers, "num_tasks": numbers, "ntasks_per_node": numbers,
    "shared": numbers, "requeue": numbers, "het_job_offset": numbers, "min_cpus": numbers,
    "cpus_per_task": numbers, "min_mem_per_node": numbers, "min_mem_per_cpu": numbers,
    "pn_min_memory": numbers,
    "script": st.one_of(st.just("#!/bin/sh\ntrue\n"), junk), "name": junk, "user_name": junk,
    "admin_comment": junk, "exc_nodes": st.sampled_from(["node1", "node[1-2]", ""]), "req_nodes": junk,
    "partition": junk,
}
plain = st.fixed_dictionaries({}, optional=FIELD_STRATEGIES)
# now and then a value of a type slurmctld never gives: the shim must still not fail
odd = st.fixed_dictionaries({}, optional={"tres_per_node": wrong_type, "name": wrong_type, "num_tasks": st.just("2")})
# starting from a recorded table (a real request, often a packing candidate) or from nothing
real = [jd for release in RELEASES for rec in recorded(release)["forms"].values() for jd in rec["job_desc"]]
# changed in one field, in many, or not at all
one_field = st.sampled_from(sorted(FIELD_STRATEGIES)).flatmap(lambda k: FIELD_STRATEGIES[k].map(lambda v: {k: v}))
job_desc = st.builds(lambda a, b, c: {**a, **b, **c}, st.one_of(st.just({}), st.sampled_from(real)),
                     st.one_of(st.just({}), one_field, plain), st.one_of(st.just({}), st.just({}), st.just({}), odd))


@pytest.fixture(scope="module")
def rig(tmp_path_factory):
    shim = ShimRig(tmp_path_factory.mktemp("fuzz"), CONFIG)
    yield shim
    shim.close()
    print(f"\nsubmit fuzz: {len(DRAWN)} examples, {sum(DRAWN)} job_desc tables through job_submit.lua, "
          f"{sum(REWRITTEN)} rewritten")


def _set(value: object, no_val: float = NO_VAL) -> bool:
    return isinstance(value, (int, float)) and not math.isnan(value) and value not in (no_val, NO_VAL, NO_VAL16)


def _both_nan(a: object, b: object) -> bool:
    return isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)


def check(before: dict, after: dict, logs: list[str]) -> None:
    changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k) and not _both_nan(before.get(k), after.get(k))}
    assert changed <= MAY_CHANGE, changed
    assert not any("shim error" in line or "apply failed" in line for line in logs), logs
    if "admin_comment" in changed:
        record = parse(after["admin_comment"])
        assert record is not None and record.verdict in ("packed", "exclusive", "untouched"), after["admin_comment"]
    if "tres_per_node" not in changed:
        assert not changed - {"admin_comment"}, changed  # no rewrite: nothing else moves
        return
    # a rewrite: it must be a request Slurm accepts, meaning one GPU's share on one node
    match = SHARD_RE.match(after["tres_per_node"])
    assert match and 1 <= int(match.group(1)) <= CONFIG.shares_per_gpu, after["tres_per_node"]
    for field in ("tres_per_job", "tres_per_task", "tres_per_socket", "mem_per_tres", "cpus_per_tres", "tres_bind"):
        value = after.get(field)
        assert not (isinstance(value, str) and "gpu" in value), (field, value)  # Slurm: "Invalid generic resource"
    assert before.get("requeue") != 0 and isinstance(before.get("script"), str)
    assert not _set(before.get("het_job_offset"))
    assert not (isinstance(before.get("tres_freq"), str) and "gpu" in before["tres_freq"])
    for field in ("min_nodes", "max_nodes"):
        assert not (_set(before.get(field)) and before[field] > 1), (field, before[field])
    assert before.get("shared") not in (0, 2, 3)
    for field, high in (("min_mem_per_node", 2**40), ("min_cpus", 2**20), ("cpus_per_task", 65533)):
        if field in changed:
            value = after[field]
            assert isinstance(value, (int, float)) and value == int(value) and 1 <= value <= high, (field, value)


@settings(max_examples=500)
@given(batch=st.lists(job_desc, min_size=1, max_size=4), release=st.sampled_from(RELEASES))
def test_fuzzed_job_descs_get_well_formed_answers_and_acceptable_rewrites(rig, batch, release):
    results = rig.run(batch, release=release, timeout=60)  # a hang fails here
    DRAWN.append(len(batch))
    for before, result in zip(batch, results):
        assert result.ok and result.rc == 0, result
        check(before, result.job_desc, result.logs)
        REWRITTEN.append(before.get("tres_per_node") != result.job_desc.get("tres_per_node"))
