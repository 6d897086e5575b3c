"""Session-wide: name the Slurm release the tests run on in pytest's header."""
from __future__ import annotations

import sys


def pytest_report_header(config) -> list[str]:
    from slurm_plugin.devcluster.roots import describe

    return [f"gpupack: {describe()}, python {sys.version.split()[0]}"]
