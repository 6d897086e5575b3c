"""Exceptions of the Slurm adapter: each names what failed and what to do about it."""
from __future__ import annotations

import shlex
from collections.abc import Sequence


class SlurmError(Exception):
    """Base class of every error the Slurm adapter raises."""


class SlurmCommandError(SlurmError):
    """A Slurm command failed, timed out, could not start, or answered with an error.

    `returncode` is None when the command timed out or could not be started.
    """

    def __init__(
        self,
        command: Sequence[str],
        returncode: int | None,
        stderr: str = "",
        *,
        stdout: str = "",
        hint: str | None = None,
    ) -> None:
        self.command = list(command)
        self.returncode = returncode
        self.stderr = stderr or ""
        self.stdout = stdout or ""
        self.hint = hint
        super().__init__(self._message())

    @property
    def command_line(self) -> str:
        return shlex.join(self.command)

    def _message(self) -> str:
        status = "did not finish" if self.returncode is None else f"exit {self.returncode}"
        detail = " ".join(self.stderr.strip().split()) or "no error output"
        text = f"`{self.command_line}` failed ({status}): {detail}"
        if self.hint:
            text += f". {self.hint}"
        return text


class SlurmTimeoutError(SlurmCommandError):
    """A Slurm command ran past its time limit (slurmctld busy or unreachable)."""


class JobNotFoundError(SlurmError):
    """Slurm does not know this job (never existed, or finished longer ago than MinJobAge).

    When a command said so, that SlurmCommandError is this error's `__cause__`.
    """

    def __init__(self, job_id: int) -> None:
        self.job_id = job_id
        super().__init__(
            f"job {job_id} is not known to slurmctld: the id is wrong, or the job ended "
            f"more than MinJobAge ago (look in `sacct -j {job_id}`)"
        )


class SlurmParseError(SlurmError, ValueError):
    """Slurm output that does not have the shape the adapter expects.

    `field` is a path into the document, e.g. ``jobs[3].job_id``.
    """

    def __init__(self, field: str, message: str, value: object = None) -> None:
        self.field = field
        self.value = value
        shown = repr(value)
        if len(shown) > 80:
            shown = shown[:77] + "..."
        super().__init__(f"{field}: {message} (got {shown})")
