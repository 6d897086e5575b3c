"""Every row of docs/request-forms.md, through the real job_submit.lua and the real helper
service, with the job_desc tables of each supported release (tests/data/job_desc, recorded on
a live cluster of each: 22.05.8 on the host, 24.11.5 and 26.05.5 in their Debian roots)."""
from __future__ import annotations

from pathlib import Path

import pytest

from packer.config import PackerConfig
from shim_harness import LUA, RELEASES, ShimRig, recorded
from submit_forms import expected, forms, render_table

pytestmark = pytest.mark.skipif(LUA is None, reason="lua5.1 is not installed")
DOC = Path(__file__).resolve().parents[3] / "docs" / "request-forms.md"
# every candidate is packed (one share: 8 GiB default estimate), typed for the dev cluster's GPUs
CONFIG = PackerConfig(mode="enforce", pack_unknown=True, pack_only_when_no_idle_gpu=False, gpu_type="h100")
CHANGED_BY_REWRITE = {"tres_per_node", "tres_per_job", "tres_per_task", "mem_per_tres", "cpus_per_tres",
                      "tres_bind", "min_mem_per_node", "pn_min_memory", "min_cpus", "cpus_per_task", "admin_comment"}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """{(release, form id): [(job_desc before, ShimResult) per component]}: one lua5.1 run per
    release, the shim kept loaded between jobs as slurmctld keeps it."""
    rig = ShimRig(tmp_path_factory.mktemp("shim"), CONFIG)
    out = {}
    try:
        for release in RELEASES:
            rec = recorded(release)["forms"]
            keys = [(fid, jd) for fid in sorted(rec) for jd in rec[fid]["job_desc"]]
            answers = rig.run([jd for _fid, jd in keys], release=release)
            for (fid, jd), answer in zip(keys, answers):
                out.setdefault((release, fid), []).append((jd, answer))
    finally:
        rig.close()
    return out


def _prefix(release: str) -> str:
    return "gres:" if release == "22.05" else "gres/"


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("form", forms(), ids=lambda f: f.id)
def test_each_request_form_does_what_the_table_says(results, release, form):
    outcome = expected(form, release)
    components = results.get((release, form.id), [])
    if outcome.kind == "refused":
        assert components == [], f"{form.id}: Slurm's client was expected to refuse it"
        assert "Invalid generic resource" in recorded(release)["forms"][form.id]["client"]
        return
    assert components, f"{form.id}: no job_desc recorded for {release}"
    for before, answer in components:
        after = answer.job_desc
        assert answer.ok and answer.rc == 0, answer
        assert not any("error" in line for line in answer.logs), answer.logs
        unchanged = {k for k in set(before) | set(after) if k not in CHANGED_BY_REWRITE}
        assert {k: after.get(k) for k in unchanged} == {k: before.get(k) for k in unchanged}
        if outcome.kind == "untouched":
            assert after["admin_comment"] == f"gpupack: untouched reason={outcome.reason}"
            assert {k: after.get(k) for k in CHANGED_BY_REWRITE - {"admin_comment"}} == \
                   {k: before.get(k) for k in CHANGED_BY_REWRITE - {"admin_comment"}}
            continue
        assert after["admin_comment"].startswith("gpupack: packed shard:1 ")
        assert after["tres_per_node"] == _prefix(release) + outcome.shard  # the type kept or given
        for gone in ("tres_per_job", "tres_per_task", "mem_per_tres", "cpus_per_tres", "tres_bind"):
            assert after.get(gone) is None, (gone, after.get(gone))  # nothing points at a gpu any more
        if form.modifier == "mem-per-gpu":
            assert (after["min_mem_per_node"], after["pn_min_memory"]) == (2048, 2048)
        else:
            assert after.get("pn_min_memory") == before.get("pn_min_memory")
        if form.modifier == "cpus-per-gpu":  # one task: -c 2 (Slurm refused min_cpus alone with -n1)
            assert (after["min_cpus"], after["cpus_per_task"]) == (2, 2)
        else:
            assert (after["min_cpus"], after["cpus_per_task"]) == (before["min_cpus"], before["cpus_per_task"])


def test_the_recordings_name_their_source_and_cover_every_form():
    ids = {f.id for f in forms()}
    for release in RELEASES:
        doc = recorded(release)
        assert doc["source"] == "recorded" and doc["release"].startswith(release + ".")
        assert set(doc["forms"]) == ids


def test_the_docs_table_is_the_one_the_tests_check():
    assert render_table() in DOC.read_text(), "docs/request-forms.md: paste submit_forms.render_table() output"


@pytest.mark.parametrize("release", RELEASES)
def test_a_cluster_that_does_not_requeue_by_default_packs_only_jobs_that_ask_for_it(tmp_path, release):
    """JobRequeue=0: a job that names neither --requeue nor --no-requeue cannot be requeued, and
    every safety net of the suite needs a requeue; one that asks for --requeue is packed."""
    rig = ShimRig(tmp_path, CONFIG, requeue_by_default=False)
    try:
        (plain,) = recorded(release)["forms"]["gres+plain"]["job_desc"]
        asks = {**plain, "requeue": 1}
        left, packed = rig.run([plain, asks], release=release)
    finally:
        rig.close()
    assert plain["requeue"] == 65534  # unset in what the release hands the shim
    assert left.job_desc["admin_comment"] == "gpupack: untouched reason=no-requeue"
    assert packed.job_desc["admin_comment"].startswith("gpupack: packed shard:1 ")
