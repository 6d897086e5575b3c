"""The one `gpupack` command line.

Sub-commands live in their own modules and are imported only when used, so that
`gpupack -h` and the commands on hot paths start fast.
"""
from __future__ import annotations

import importlib
import importlib.util
import logging
import os

import click

from slurm_plugin.cli.slurm_choice import slurm_option

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}

# name -> "module:attribute" of a click command or group
SUBCOMMANDS: dict[str, str] = {
    "devcluster": "slurm_plugin.cli.devcluster_cmd:devcluster",
    "demo": "slurm_plugin.cli.demo_cmd:demo",
    "helper": "slurm_plugin.cli.helper_cmd:helper",
    "jobs": "slurm_plugin.cli.jobs_cmd:jobs",
    "history": "slurm_plugin.cli.history_cmd:history",
    "bench": "slurm_plugin.cli.bench_cmd:bench",
    "mig": "slurm_plugin.cli.mig_cmd:mig",
    "predict": "slurm_plugin.cli.predict_cmd:predict",
    "agent": "slurm_plugin.cli.agent_cmd:agent",
    "simgpu": "slurm_plugin.cli.simgpu_cmd:simgpu",
    "report": "slurm_plugin.cli.report_cmd:report",
    "events": "slurm_plugin.cli.events_cmd:events",
    "actions": "slurm_plugin.cli.actions_cmd:actions",
    "simulate": "slurm_plugin.cli.simulate_cmd:simulate",
    "epilog": "slurm_plugin.cli.epilog_cmd:epilog",
    "ctld-epilog": "slurm_plugin.cli.epilog_cmd:ctld_epilog",
    "root": "slurm_plugin.cli.root_cmd:root",
    "web": "slurm_plugin.cli.web_cmd:web",
    "config": "slurm_plugin.cli.config_cmd:config",
}


class LazyGroup(click.Group):
    """A click group whose sub-commands are imported on first use."""

    def __init__(self, *args, lazy: dict[str, str] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.lazy = lazy or {}

    def _available(self) -> list[str]:
        names = []
        for name, target in self.lazy.items():
            module = target.split(":", 1)[0]
            if importlib.util.find_spec(module) is not None:
                names.append(name)
        return names

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(self._available()))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy:
            module_name, attr = self.lazy[cmd_name].split(":", 1)
            if importlib.util.find_spec(module_name) is None:
                return None
            return getattr(importlib.import_module(module_name), attr)
        return super().get_command(ctx, cmd_name)


def configure_logging(verbose: int) -> None:
    level = logging.WARNING - 10 * verbose
    logging.basicConfig(
        level=max(level, logging.DEBUG),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


@click.group(cls=LazyGroup, lazy=SUBCOMMANDS, context_settings=CONTEXT_SETTINGS)
@click.option("-v", "--verbose", count=True, help="More log output (-v info, -vv debug).")
@click.version_option(package_name="slurm-gpu-packer")
@slurm_option
def main(verbose: int) -> None:
    """Pack several Slurm GPU jobs onto one GPU, safely, with no change for users.

    Users keep typing `sbatch --gres=gpu:1 job.sh`; the submit shim asks the packer,
    the node agent isolates jobs on the GPU, the controller helper watches them.
    """
    configure_logging(verbose or int(os.environ.get("GPUPACK_VERBOSE", "0") or 0))

