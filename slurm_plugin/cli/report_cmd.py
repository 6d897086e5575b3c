"""`gpupack report`: a job tells the node agent its own progress (optional)."""
from __future__ import annotations

import click


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--throughput", type=click.FloatRange(0), default=None,
              help="Progress per second (samples, tokens, iterations): what contention is judged on.")
@click.option("--iterations", type=click.IntRange(0), default=0, show_default=True,
              help="Iterations done so far (must never go backwards).")
@click.option("--util", "util_pct", type=click.FloatRange(0, 100), default=None, help="GPU utilisation in percent.")
@click.option("--workload", default=None, help="Model name in the co-location traces (e.g. ResNet18).")
@click.option("--checkpoint", is_flag=True, help="The job has just written a checkpoint.")
@click.option("--checkpoint-every", "checkpoint_every_s", type=click.FloatRange(0.1, 7 * 86400), default=None,
              help="Seconds between the job's checkpoints (a regroup move waits for the next one).")
def report(throughput: float | None, iterations: int, util_pct: float | None, workload: str | None,
           checkpoint: bool, checkpoint_every_s: float | None) -> None:
    """Report this job's progress to the node agent (run inside the job).

    Optional: a job that says nothing is watched through the GPU's utilisation counters;
    when it reports its throughput, the helper judges contention on that instead."""
    from slurm_plugin.report import ReportError, report as send

    try:
        send(throughput, iterations=iterations, util_pct=util_pct, workload=workload, checkpoint=checkpoint,
             checkpoint_every_s=checkpoint_every_s)
    except ReportError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo("reported")
