"""What the `gpupack simulate` commands share: click's context settings and the wrapper that
turns the library's errors into one ``Error:`` line."""
from __future__ import annotations

import functools

import click

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def library_errors(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from mig.errors import UnknownGpuModelError
        from simulator.workload import WorkloadError

        try:
            return fn(*args, **kwargs)
        except (WorkloadError, UnknownGpuModelError, ValueError, OSError) as exc:
            raise click.ClickException(str(exc)) from None

    return wrapper
