"""The one place that runs Slurm commands.

Everything else in the project asks `SlurmRunner` (or a fake with the same executor
signature) and gets dataclasses back; the command lines come from `build`, the
parsing from `parse`. Only `subprocess_executor` touches `subprocess`.

Errors: `SlurmCommandError` (command, exit code, stderr and a hint), its subclass
`SlurmTimeoutError`, `JobNotFoundError` for an unknown job id, `SlurmParseError` for
output of a shape the adapter does not know.
"""
from __future__ import annotations

import logging
import os
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

from slurm_plugin.slurm.build import (
    active_jobs_args, batch_script_args, formatted_jobs_args, job_states_args, hold_args, jobs_by_id_args, nice_args, node_jobs_args,
    release_args, requeue_args, sacct_args, show_job_args, show_nodes_args, signal_args, squeue_args,
    top_args, update_job_args, version_args,
)
from slurm_plugin.slurm.errors import (
    JobNotFoundError,
    SlurmCommandError,
    SlurmTimeoutError,
)
from slurm_plugin.slurm.formatted import (FormattedListing, Markers, RecordMemo, fields_for, format_spec,
                                         parse_formatted)
from slurm_plugin.slurm.model import Job, JobsDocument, NodesDocument, SlurmVersion
from slurm_plugin.slurm.parse import loads, parse_jobs_document, parse_nodes_document, parse_version_output
from slurm_plugin.slurm.round_nodes import RoundNodes

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 30.0

_UNREACHABLE = (
    "Unable to contact slurm controller",
    "Unable to process configuration file",
    "Could not establish a configuration source",
    "s_p_parse_file: cannot stat file",
    "Failed while looking for jobs",
    "Unexpected message received",
    "Socket timed out",
    "Zero Bytes were transmitted",
)
_INVALID_JOB = ("Invalid job id specified",)
_Document = TypeVar("_Document", JobsDocument, NodesDocument)
#: commands that change jobs (`SlurmRunner.changes` counts them: a cached view is then out of date)
_CHANGING = {("scontrol", "update"), ("scontrol", "requeue"), ("scontrol", "requeuehold"), ("scontrol", "hold"),
             ("scontrol", "release"), ("scontrol", "top"), ("scancel", None)}


def _says_invalid_job(stderr: str) -> bool:
    """Whether Slurm's `stderr` says it knows no such job."""
    return any(text in stderr for text in _INVALID_JOB)


@dataclass(frozen=True)
class CommandResult:
    """What one finished command printed."""

    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


#: Runs argv with env and a timeout (seconds); raises SlurmCommandError when it cannot.
Executor = Callable[[Sequence[str], Mapping[str, str], float], CommandResult]


def subprocess_executor(args: Sequence[str], env: Mapping[str, str], timeout: float) -> CommandResult:
    """Run one command without a shell; the only use of subprocess for Slurm."""
    try:
        completed = subprocess.run(
            list(args),
            env=dict(env),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr
        raise SlurmTimeoutError(
            args,
            None,
            stderr or "",
            hint=f"It ran past {timeout:g}s; slurmctld may be busy or unreachable "
            f"(SLURM_CONF={env.get('SLURM_CONF', '<unset>')})",
        ) from exc
    except FileNotFoundError as exc:
        raise SlurmCommandError(
            args, 127, str(exc), hint=f"`{args[0]}` is not on PATH; install slurm-client"
        ) from exc
    except OSError as exc:
        raise SlurmCommandError(args, 126, str(exc), hint=f"`{args[0]}` could not be started") from exc
    return CommandResult(tuple(args), completed.returncode, completed.stdout, completed.stderr)


def _hint(stderr: str, env: Mapping[str, str]) -> str | None:
    if any(text in stderr for text in _UNREACHABLE):
        return (
            f"Check that slurmctld is running and SLURM_CONF points at its slurm.conf "
            f"(SLURM_CONF={env.get('SLURM_CONF', '<unset>')})"
        )
    if "accounting storage is disabled" in stderr:
        return "sacct needs slurmdbd (AccountingStorageType=accounting_storage/slurmdbd)"
    if "Access/permission denied" in stderr or "Permission denied" in stderr:
        return "Run as root or as the SlurmUser"
    return None


class SlurmRunner(RoundNodes):
    """Runs squeue, sinfo, sacct and scontrol and returns parsed results.

    `env` and `slurm_conf` are laid over the current environment (SLURM_CONF passes
    through); `executor` replaces the real commands, e.g. with `FakeSlurm` in tests.
    """

    def __init__(
        self,
        *,
        env: Mapping[str, str] | None = None,
        slurm_conf: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        executor: Executor | None = None,
        version: SlurmVersion | None = None,
    ) -> None:
        merged = dict(os.environ)
        merged.update(env or {})
        if slurm_conf is not None:
            merged["SLURM_CONF"] = slurm_conf
        self.env: dict[str, str] = merged
        self.timeout = timeout
        self.executor: Executor = executor or subprocess_executor
        self._version = version
        self.changes = 0  # commands run that change jobs (`_CHANGING`)
        self.query_s = 0.0  # seconds spent in commands, all told (the watcher reads the growth per round)
        self.formatted_memo = RecordMemo()  # the last whole formatted listing's records (parse_formatted)

    # ---------------------------------------------------------------- running

    def run(self, args: Sequence[str], *, timeout: float | None = None,
            env: Mapping[str, str] | None = None) -> CommandResult:
        """Run one command (``env`` laid over the runner's); SlurmCommandError when it fails or
        does not finish."""
        limit = self.timeout if timeout is None else timeout
        started = time.monotonic()
        if (args[0], args[1] if len(args) > 1 else None) in _CHANGING or (args[0], None) in _CHANGING:
            self.changes += 1
        try:
            result = self.executor(args, {**self.env, **env} if env else self.env, limit)
        finally:
            self.query_s += time.monotonic() - started
        log.debug(
            "%s -> exit %s in %.3fs", " ".join(args), result.returncode, time.monotonic() - started
        )
        if result.returncode != 0:
            raise SlurmCommandError(
                args,
                result.returncode,
                result.stderr,
                stdout=result.stdout,
                hint=_hint(result.stderr, self.env),
            )
        return result

    def _run_for_job(self, args: Sequence[str], job_id: int) -> CommandResult:
        try:
            return self.run(args)
        except SlurmCommandError as exc:
            if _says_invalid_job(exc.stderr):
                raise JobNotFoundError(job_id) from exc
            raise

    # ---------------------------------------------------------------- reading

    def version(self) -> SlurmVersion:
        """The Slurm release of the client commands (`scontrol --version`), cached."""
        if self._version is None:
            self._version = parse_version_output(self.run(version_args()).stdout)
        return self._version

    def _document(self, args: Sequence[str], parse_document: Callable[[Mapping], _Document],
                  records: Callable[[_Document], tuple]) -> _Document:
        """The JSON document `args` print, parsed; errors it reports fail it when it has no
        `records`, else they are logged."""
        result = self.run(args)
        document = parse_document(loads(result.stdout, source=args[0]))
        if document.errors:
            text = "; ".join(document.errors)
            if not records(document):
                raise SlurmCommandError(args, 0, text, hint=_hint(text, self.env))
            log.warning("%s reported: %s", args[0], text)
        return document

    def _jobs_from(self, args: Sequence[str]) -> JobsDocument:
        return self._document(args, parse_jobs_document, lambda d: d.jobs)

    def job_ids_on_node(self, node: str) -> set[int]:
        """Ids of the jobs holding ``node`` now (running, completing, ...): a cheap text query."""
        result = self.run(node_jobs_args(node))
        ids: set[int] = set()
        for line in result.stdout.splitlines():
            line = line.strip()
            if line.isdigit():
                ids.add(int(line))
            elif line:
                raise SlurmCommandError(node_jobs_args(node), 0, f"unexpected squeue line {line!r}")
        return ids

    def jobs_document(self) -> JobsDocument:
        """Every job slurmctld knows (finished ones until MinJobAge), with the dialect."""
        return self._jobs_from(squeue_args())

    def jobs(self, job_ids: Iterable[int] | None = None) -> list[Job]:
        """Every job slurmctld knows, or only those in `job_ids`."""
        jobs = self.jobs_document().jobs
        if job_ids is None:
            return list(jobs)
        wanted = set(job_ids)
        return [job for job in jobs if job.job_id in wanted]

    def jobs_in_play(self, also: Iterable[int] = ()) -> list[Job]:
        """Every job not finished yet, plus the jobs in ``also`` whatever their state.

        This is what a watcher needs each round: the queue and the running jobs, and how the
        jobs it follows ended. Where `squeue --json` honours filters (23.11+) finished jobs
        are not listed at all (they stay `MinJobAge` in the controller, thousands on a busy
        site); on 22.05, which ignores them, it is the whole listing, a superset."""
        if not self.version().filters_json:
            return self.jobs()
        listing = list(self._jobs_from(active_jobs_args()).jobs)
        seen = {job.job_id for job in listing}
        missing = sorted(set(also) - seen)
        if missing:
            try:
                listing += [j for j in self._jobs_from(jobs_by_id_args(missing)).jobs if j.job_id not in seen]
            except SlurmCommandError as exc:  # every one of them gone from the controller
                if not _says_invalid_job(exc.stderr):
                    raise
        return listing

    def formatted_jobs(self, job_ids: Iterable[int] | None = None) -> FormattedListing:
        """The jobs not finished yet (or those in ``job_ids``, whatever their state) from
        formatted `squeue` output: every field `formatted.FIELDS` names, not `gres_detail`."""
        markers = Markers.new()
        fields = fields_for(self.version())
        ids = None if job_ids is None else sorted(set(job_ids))
        if ids == []:
            return FormattedListing(())
        args = formatted_jobs_args(format_spec(fields, markers), ids)
        try:
            result = self.run(args, env={"TZ": "UTC"})
        except SlurmCommandError as exc:
            if ids is not None and _says_invalid_job(exc.stderr):  # every one gone from the controller
                return FormattedListing(())
            raise
        memo = self.formatted_memo if ids is None else None  # a listing by id would leave it only its few
        listing = parse_formatted(result.stdout, markers, fields, memo)
        for why in listing.skipped[:3]:  # counted and said once per change by the watcher (round_load)
            log.debug("squeue: a record refused: %s", why)
        return listing

    def job_states(self) -> dict[int, str]:
        """Every job's state, from slurmctld's job-state cache (`squeue --only-job-state`,
        23.11+): the cheap "did anything change" read."""
        args = job_states_args()
        states: dict[int, str] = {}
        for line in self.run(args).stdout.splitlines():
            job, _, state = line.strip().partition(" ")
            if not job:
                continue
            if not (job.isascii() and job.isdigit()) or not state.strip().isalpha():
                raise SlurmCommandError(args, 0, f"unexpected squeue line {line!r}")
            states[int(job)] = state.strip()
        return states

    def jobs_json(self, job_ids: Iterable[int]) -> list[Job]:
        """These jobs as JSON (with `gres_detail`): only those where `squeue --json` honours
        filters (23.11+), every job slurmctld knows on older releases (22.05 ignores them)."""
        ids = sorted(set(job_ids))
        if not ids:
            return []
        if not self.version().filters_json:
            return list(self.jobs())
        try:
            return list(self._jobs_from(jobs_by_id_args(ids)).jobs)
        except SlurmCommandError as exc:
            if _says_invalid_job(exc.stderr):
                return []
            raise

    def job(self, job_id: int) -> Job:
        """One job; JobNotFoundError when slurmctld does not know it."""
        args = show_job_args(job_id, self.version())
        try:
            document = self._jobs_from(args)
        except SlurmCommandError as exc:
            if _says_invalid_job(exc.stderr):
                raise JobNotFoundError(job_id) from exc
            raise
        for job in document.jobs:
            if job.job_id == job_id:
                return job
        raise JobNotFoundError(job_id)

    def nice(self, job_id: int) -> int:
        """The job's nice (what Slurm subtracts from the priority it computes)."""
        args = nice_args(job_id)
        text = self._run_for_job(args, job_id).stdout.strip()
        try:
            return int(text)
        except ValueError:
            raise SlurmCommandError(args, 0, f"expected one nice value, got {text!r}") from None

    def nodes_document(self) -> NodesDocument:
        return self._document(show_nodes_args(self.version()), parse_nodes_document, lambda d: d.nodes)

    def accounting(
        self, job_ids: Iterable[int] | None = None, *, since: datetime | str | None = None
    ) -> list[Job]:
        """Finished and running jobs from slurmdbd (`sacct --json`)."""
        return list(self._jobs_from(sacct_args(job_ids, since=since)).jobs)

    def batch_script(self, job_id: int) -> str:
        """The job's batch script. 22.05 exits 0 even when it fails, so stderr is read."""
        args = batch_script_args(job_id)
        result = self._run_for_job(args, job_id)
        if result.stderr.strip() and not result.stdout:
            if _says_invalid_job(result.stderr):
                raise JobNotFoundError(job_id) from SlurmCommandError(args, 0, result.stderr)
            raise SlurmCommandError(args, 0, result.stderr, hint=_hint(result.stderr, self.env))
        return result.stdout

    # ---------------------------------------------------------------- changing

    def update_job(self, job_id: int, **fields: object) -> None:
        """`scontrol update JobId=ID Key=Value...`, e.g. update_job(7, AdminComment="...")."""
        self._run_for_job(update_job_args(job_id, fields), job_id)

    def requeue(self, job_id: int, *, hold: bool = False) -> None:
        """Put a running or finished job back in the queue (held with hold=True)."""
        self._run_for_job(requeue_args(job_id, hold=hold), job_id)

    def signal(self, job_id: int, signal: str, *, batch: bool = True) -> None:
        """Send `signal` to a running job (its batch shell with `batch`); never cancels it."""
        self._run_for_job(signal_args(job_id, signal, batch=batch), job_id)

    def hold(self, job_id: int) -> None:
        self._run_for_job(hold_args(job_id), job_id)

    def release(self, job_id: int) -> None:
        self._run_for_job(release_args(job_id), job_id)

    def top(self, job_id: int) -> None:
        """Move a pending job before its owner's other pending jobs."""
        self._run_for_job(top_args(job_id), job_id)
