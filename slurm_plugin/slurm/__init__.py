"""The Slurm adapter: Slurm's commands in, dataclasses out.

Pure parts (no subprocess)::

    model   Job, Node, SlurmVersion, Dialect, JobsDocument, NodesDocument
    gres    parse_gres_list(text, per) / parse_gres_request(fields) / parse_gres_item(text)
            format_gres(items), expand_hostlist(text), shard_usage(jobs)
    parse   loads(text, source), detect_dialect(doc), parse_version_output(text)
            parse_jobs(doc) / parse_jobs_document(doc)   squeue, scontrol, sacct JSON
            parse_nodes(doc) / parse_nodes_document(doc) sinfo (22.05), scontrol (23.02+)
    build   squeue_args(), show_job_args(id, version), show_nodes_args(version),
            sacct_args(ids, since), update_job_args(id, fields), requeue_args(id, hold),
            hold_args(id), release_args(id), top_args(id), batch_script_args(id),
            signal_args(id, signal, batch)

The one impure part::

    runner  SlurmRunner(env=, slurm_conf=, timeout=, executor=): version(), jobs(),
            job(id), nodes(), accounting(ids, since), batch_script(id),
            update_job(id, **fields), requeue(id, hold=), hold(id), release(id), top(id),
            signal(id, signal, batch=)

Both JSON dialects are understood: Slurm 22.05 (openapi v0.0.38) and 23.11+
(data_parser v0.0.40 and later), told apart by `meta` and by each field's shape.
Errors: SlurmCommandError (.command, .returncode, .stderr, .hint), SlurmTimeoutError,
JobNotFoundError (.job_id), SlurmParseError (.field). Tests use `fake.FakeSlurm`, a
stateful executor that answers like either release.
"""
from slurm_plugin.slurm.errors import (
    JobNotFoundError,
    SlurmCommandError,
    SlurmError,
    SlurmParseError,
    SlurmTimeoutError,
)
from slurm_plugin.slurm.model import (
    Dialect,
    Job,
    JobsDocument,
    Node,
    NodesDocument,
    SlurmVersion,
)
from slurm_plugin.slurm.runner import CommandResult, SlurmRunner

__all__ = [
    "CommandResult",
    "Dialect",
    "Job",
    "JobNotFoundError",
    "JobsDocument",
    "Node",
    "NodesDocument",
    "SlurmCommandError",
    "SlurmError",
    "SlurmParseError",
    "SlurmRunner",
    "SlurmTimeoutError",
    "SlurmVersion",
]
