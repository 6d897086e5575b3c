"""The Slurm fake's JSON (:mod:`slurm_plugin.slurm.fake`): jobs and nodes as squeue, sinfo
and scontrol print them in Slurm 22.05 (v0.0.38) or 23.11 (v0.0.40)."""
from __future__ import annotations

import json
from typing import Any

from slurm_plugin.slurm.fake_records import FakeJob, FakeNode

__all__ = ["FakeJson"]


def _nv(number: int, *, set_: bool = True) -> dict[str, Any]:
    return {"set": set_, "infinite": False, "number": number}


class FakeJson:
    """Renders the fake's jobs and nodes as Slurm `release` does."""

    def __init__(self, release: str, modern: bool) -> None:
        self.release = release
        self.modern = modern

    def jobs(self, jobs: list[FakeJob]) -> str:
        """A squeue/scontrol --json document of ``jobs``."""
        return self.dump({"jobs": [self.job(j) for j in jobs]})

    def nodes(self, nodes: list[FakeNode]) -> str:
        """A sinfo/scontrol --json document of ``nodes``."""
        return self.dump({"nodes": [self.node(n) for n in nodes]})

    def meta(self) -> dict[str, Any]:
        major, minor, micro = self.release.split(".")
        if self.modern:
            return {
                "plugin": {"type": "openapi/slurmctld", "name": "Slurm OpenAPI slurmctld",
                           "data_parser": "data_parser/v0.0.40", "accounting_storage": ""},
                "client": {"source": "fake", "user": "root", "group": "root"},
                "command": [],
                "slurm": {"version": {"major": major, "micro": micro, "minor": minor},
                          "release": self.release, "cluster": "fake"},
            }
        return {
            "plugin": {"type": "openapi/v0.0.38", "name": "Slurm OpenAPI v0.0.38"},
            "Slurm": {"version": {"major": int(major), "micro": int(micro), "minor": int(minor)},
                      "release": self.release},
        }

    def dump(self, body: dict[str, Any]) -> str:
        doc: dict[str, Any] = {"meta": self.meta(), "errors": []}
        if self.modern:
            doc["warnings"] = []
        doc.update(body)
        return json.dumps(doc, indent=2)

    def tres(self, text: str) -> str:
        if not text:
            return ""
        if self.modern:
            return text.replace("gres:", "gres/", 1) if text.startswith("gres:") else text
        return text.replace("gres/", "gres:", 1) if text.startswith("gres/") else text

    def job(self, job: FakeJob) -> dict[str, Any]:
        record: dict[str, Any] = {
            "job_id": job.job_id,
            "name": job.name,
            "user_name": job.user,
            "state_reason": job.state_reason,
            "partition": job.partition,
            "nodes": job.nodes,
            "tres_per_node": self.tres(job.tres_per_node),
            "tres_per_job": self.tres(job.tres_per_job),
            "tres_per_task": self.tres(job.tres_per_task),
            "tres_per_socket": "",
            "gres_detail": list(job.gres_detail),
            "admin_comment": job.admin_comment,
            "comment": job.comment,
            "excluded_nodes": job.excluded_nodes,
            "required_nodes": job.required_nodes,
            "restart_cnt": job.restart_cnt,
            "batch_host": job.batch_host,
            "requeue": job.requeue,
            "qos": job.qos,
            "features": job.features,
            "resv_name": job.resv_name,
            "licenses": job.licenses,
            "some_future_field": {"ignored": True},
        }
        if self.modern:
            record.update(
                job_state=[job.state],
                priority=_nv(job.priority),
                submit_time=_nv(job.submit_time),
                start_time=_nv(job.start_time),
                end_time=_nv(job.end_time),
                exit_code={"status": ["SUCCESS" if job.exit_code == 0 else "ERROR"],
                           "return_code": _nv(job.exit_code), "signal": {"id": _nv(0, set_=False), "name": ""}},
                hold=job.priority == 0 and job.state == "PENDING",
                exclusive=["true"] if job.exclusive else [],
                shared=[],
                node_count=_nv(1),
                time_limit=_nv(0, set_=False) if job.time_limit_min is None else _nv(job.time_limit_min),
            )
        else:
            record.update(
                job_state=job.state,
                priority=job.priority,
                submit_time=job.submit_time,
                start_time=job.start_time,
                end_time=job.end_time,
                exit_code=job.exit_code << 8,
                shared="none" if job.exclusive else None,
                node_count=1,
                time_limit=job.time_limit_min,
            )
        return record

    def node(self, node: FakeNode) -> dict[str, Any]:
        record: dict[str, Any] = {"name": node.name, "gres": node.gres, "gres_used": node.gres_used,
                                  "partitions": list(node.partitions), "cpus": 8, "alloc_cpus": 0, "reason": "",
                                  "active_features": ([f for f in node.features.split(",") if f] if self.modern
                                                      else node.features)}
        if self.modern:
            record["state"] = node.state.upper().split("+")
        else:
            base, *flags = node.state.split("+")
            record["state"] = base.lower()
            record["state_flags"] = [f.upper() for f in flags]
        return record
