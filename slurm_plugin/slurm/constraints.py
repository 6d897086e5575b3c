"""What Slurm says constrains where a job may run, as `packer.feasibility` facts.

Asked only when an action is about to change a job (a requeue that excludes nodes or changes
GRES), and only for what the job uses: its reservation's nodes (`scontrol show reservation`),
the cluster's licences (`scontrol show licenses`) and its QOS limits (`sacctmgr show qos`; a
cluster without slurmdbd has none, and Slurm enforces none). A query Slurm refuses leaves that
fact unknown, which `stranded_by` does not check, and says so in the log.
"""
from __future__ import annotations

import logging
import re

from packer.feasibility import ClusterFacts, JobFacts, NodeFacts, parse_licenses
from slurm_plugin.slurm.errors import SlurmError
from slurm_plugin.slurm.gres import expand_hostlist
from slurm_plugin.slurm.model import Job

log = logging.getLogger(__name__)

_PAIR = re.compile(r"(\w+)=(\S*)")


def job_facts(job: Job) -> JobFacts:
    try:
        licenses = parse_licenses(job.licenses)
    except ValueError as exc:
        log.warning("job %d: %s; its licences are not checked", job.job_id, exc)
        licenses = {}
    return JobFacts(
        job_id=job.job_id,
        partitions=tuple(p for p in (job.partition or "").split(",") if p),
        required_nodes=frozenset(job.required_nodes), excluded_nodes=frozenset(job.excluded_nodes),
        features=job.features or "", reservation=job.reservation or "", licenses=licenses, qos=job.qos or "",
    )


def cluster_facts(runner, job: Job, *, with_qos: bool) -> ClusterFacts:
    """The facts `job`'s feasibility needs: the nodes, its reservation, licences, QOS limits."""
    nodes = tuple(NodeFacts(n.name, frozenset(n.partitions), frozenset(n.features)) for n in runner.nodes())
    reservations = {}
    if job.reservation:
        got = _reservation_nodes(runner, job.reservation)
        if got is not None:
            reservations[job.reservation] = got
    licences = _license_totals(runner) if job.licenses else {}
    qos = {job.qos: _qos_max_tres(runner, job.qos)} if with_qos and job.qos else {}
    return ClusterFacts(nodes=nodes, reservation_nodes=reservations, license_totals=licences,
                        qos_max_tres={k: v for k, v in qos.items() if v})


def _ask(runner, args: list[str]) -> str | None:
    try:
        return runner.run(args).stdout
    except SlurmError as exc:
        log.info("%s: %s (not checked)", " ".join(args), exc)
        return None


def _reservation_nodes(runner, name: str) -> frozenset[str] | None:
    text = _ask(runner, ["scontrol", "show", "reservation", name, "--oneliner"])
    if not text:
        return None
    fields = dict(_PAIR.findall(text))
    nodes = fields.get("Nodes", "")
    return frozenset(expand_hostlist(nodes)) if nodes and nodes != "(null)" else frozenset()


def _license_totals(runner) -> dict[str, int]:
    text = _ask(runner, ["scontrol", "show", "licenses", "--oneliner"]) or ""
    totals = {}
    for line in text.splitlines():
        fields = dict(_PAIR.findall(line))
        if "LicenseName" in fields and fields.get("Total", "").isdigit():
            totals[fields["LicenseName"]] = int(fields["Total"])
    return totals


def _qos_max_tres(runner, qos: str) -> dict[str, int]:
    text = _ask(runner, ["sacctmgr", "-nP", "show", "qos", qos, "format=Name,MaxTRESPerJob,MaxTRESPerNode"]) or ""
    limits: dict[str, int] = {}
    for line in text.splitlines():
        name, *columns = line.split("|")
        if name != qos:
            continue
        for column in columns:
            for item in filter(None, column.split(",")):
                key, _, value = item.partition("=")
                if value.isdigit():
                    limits[key] = min(int(value), limits.get(key, int(value)))
    return limits
