"""`gpupack simgpu`: the simulated GPU workload."""
from __future__ import annotations

import click

from slurm_plugin.simgpu.workload import parse_size


class _Size(click.ParamType):
    name = "SIZE"

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            return value
        try:
            return parse_size(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def simgpu() -> None:
    """A simulated GPU workload for tests and the demo."""


@simgpu.command()
@click.option("--mem-start", type=_Size(), default="1GiB", show_default=True, help="Memory allocated at start.")
@click.option("--mem-growth", type=_Size(), default="0", show_default=True, help="Memory added per iteration.")
@click.option("--iters", type=click.IntRange(0, 10_000_000), default=100, show_default=True, help="Iterations to run.")
@click.option("--iter-ms", type=click.FloatRange(0, 60_000), default=50.0, show_default=True,
              help="Milliseconds per iteration when running alone.")
@click.option("--workload", default=None, help="Model name in the co-location traces (e.g. ResNet18, LSTM); "
              "sets the slowdown beside other workloads and the reported utilisation.")
@click.option("--report-every", default=0.5, show_default=True, help="Seconds between progress reports to the agent.")
@click.option("--report/--no-report", default=True, show_default=True,
              help="Report progress to the node agent; --no-report behaves like a job that says nothing "
              "(the helper then watches it through the GPU's utilisation counters).")
def run(mem_start: int, mem_growth: int, iters: int, iter_ms: float, workload: str | None, report_every: float,
        report: bool) -> None:
    """Run inside a job: allocate on the simulated GPU it was given, grow, report progress.

    Dies with `CUDA out of memory` (exit 1) when it outgrows its partition.
    """
    from slurm_plugin.simgpu.workload import run as run_workload

    raise SystemExit(run_workload(mem_start=mem_start, mem_growth=mem_growth, iters=iters, iter_ms=iter_ms,
                                  workload=workload, report_every_s=report_every, report=report))
