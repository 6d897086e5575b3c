"""`gpupack predict`: forecast a job's peak memory from a series file; benchmark the forecaster.

Thin: reads files, calls :mod:`predictor`, prints. Library errors become one ``Error:`` line.
"""
from __future__ import annotations

import json
import logging

import click

log = logging.getLogger(__name__)

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
GIB = 1 << 30


def _sizes(partition_gib: tuple[float, ...]) -> tuple[int, ...]:
    from predictor.decision import H100_80GB_PARTITIONS_GIB, gib_sizes

    return gib_sizes(partition_gib or H100_80GB_PARTITIONS_GIB)


def _gib(v) -> str:
    return "-" if v is None else f"{v / GIB:.2f} GiB"


class PositiveFinite(click.ParamType):
    """A finite number above 0 (``inf``, ``nan``, 0 and negatives are refused, never coerced)."""

    name = "number"

    def convert(self, value, param, ctx):
        from predictor.checks import positive_finite

        try:
            return positive_finite(self.name, value)
        except ValueError:
            self.fail(f"must be a finite number above 0, got {value!r}", param, ctx)


POSITIVE = PositiveFinite()


def _decide(series_path: str, capacity_gib: float, horizon: float | None, partition_gib, priors=(), align="step"):
    """Read the files, decide; library errors become one ``Error:`` line."""
    from predictor.decision import decide
    from predictor.prior import HistoryPrior
    from predictor.series import SeriesFormatError, read_prior, read_series

    try:
        series = read_series(series_path)
        runs = [read_prior(path) for path in priors]
        return decide(series, capacity_gib * GIB, horizon, _sizes(partition_gib),
                      prior=HistoryPrior(runs, align) if runs else None)
    except FileNotFoundError as exc:
        raise click.ClickException(f"{exc.filename or series_path}: no such file") from None
    except (SeriesFormatError, ValueError, OSError) as exc:
        raise click.ClickException(str(exc)) from None


def _print_decision(series_path: str, decision, as_json: bool) -> None:
    d = decision.to_dict()
    if as_json:
        click.echo(json.dumps(d, sort_keys=True))
        return
    click.echo(f"series:          {series_path} ({d['samples']} samples, horizon step {d['horizon']})")
    click.echo(f"capacity:        {_gib(d['capacity_bytes'])}")
    click.echo(f"predicted peak:  {_gib(d['predicted_peak_bytes'])} (99 % bounds {_gib(d['lower_bytes'])} .. {_gib(d['upper_bytes'])})")
    click.echo(f"will exceed:     {decision.exceed_text}{'' if d['confident'] else ' (not converged)'}")
    click.echo(f"crossing step:   {'-' if d['crossing_step'] is None else d['crossing_step']}")
    click.echo(f"warning at step: {'-' if d['warn_step'] is None else d['warn_step']}")
    click.echo(f"next partition:  {_gib(d['next_partition'])}")


def _run_options(f):
    for option in reversed((
        click.option("--capacity-gib", type=POSITIVE, required=True, help="Memory the job has (its partition), GiB."),
        click.option("--horizon", type=POSITIVE, help="Step the job runs to (total iterations, else time limit). Default: last step."),
        click.option(
            "--partition-gib", type=POSITIVE, multiple=True,
            help="A partition size to choose the next one from, GiB (repeat). Default: 10 20 40 80 (H100 80GB MIG).",
        ),
        click.option("--json", "as_json", is_flag=True, help="Print one JSON object."),
    )):
        f = option(f)
    return f


@click.group(
    invoke_without_command=True,
    context_settings=CONTEXT_SETTINGS,
    short_help="Forecast a job's peak memory; warn before it outgrows its partition.",
)
@click.option("--series", "series_path", type=click.Path(dir_okay=False), help="CSV with header step,bytes[,reuse_ratio] (same as `run CSV`).")
@click.option("--capacity-gib", type=POSITIVE, help="Memory the job has (its partition), GiB.")
@click.option("--horizon", type=POSITIVE, help="Step the job runs to (total iterations, else time limit). Default: last step.")
@click.option(
    "--partition-gib", type=POSITIVE, multiple=True,
    help="A partition size to choose the next one from, GiB (repeat). Default: 10 20 40 80 (H100 80GB MIG).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.pass_context
def predict(ctx, series_path, capacity_gib, horizon, partition_gib, as_json):
    """Forecast the peak memory of a job from its memory series.

    Replays FILE sample by sample. `warn_step` is the first step at which, from the samples
    up to it, the forecaster was 99 % certain the job exceeds the capacity before the horizon;
    `next_partition` is the smallest partition that holds the 99 % upper bound.

    \b
    gpupack predict run job.csv --capacity-gib 20 --horizon 4096 --json
    gpupack predict run job.csv --capacity-gib 20 --prior run1.csv --prior run2.csv
    gpupack predict bench DIR --json
    """
    if ctx.invoked_subcommand is not None:
        return
    if not series_path or capacity_gib is None:
        raise click.UsageError("give --series FILE and --capacity-gib C (or a sub-command, e.g. `run FILE`, `bench DIR`)")
    _print_decision(series_path, _decide(series_path, capacity_gib, horizon, partition_gib), as_json)


@predict.command("run", context_settings=CONTEXT_SETTINGS)
@click.argument("series_path", metavar="CSV", type=click.Path(dir_okay=False))
@_run_options
@click.option(
    "--prior", "priors", type=click.Path(dir_okay=False), multiple=True,
    help="An earlier run's curve of this workload, CSV step,bytes (repeat): it says how high this run will go.",
)
@click.option(
    "--prior-align", type=click.Choice(["step", "progress"]), default="step", show_default=True,
    help="Align earlier runs by step, or by progress (fraction of their duration; this run's is its horizon).",
)
def run(series_path, capacity_gib, horizon, partition_gib, as_json, priors, prior_align):
    """Forecast the peak memory of the job whose memory series is CSV.

    With --prior, the workload's earlier runs are a prior: a run whose earlier runs all went
    past its capacity is warned at its first sample; one that rises above them is warned as
    soon as that carries all of them past it.
    """
    _print_decision(series_path, _decide(series_path, capacity_gib, horizon, partition_gib, priors, prior_align),
                    as_json)


@predict.command("bench", context_settings=CONTEXT_SETTINGS)
@click.argument("directory", type=click.Path(file_okay=False))
@click.option("--capacity-gib", type=POSITIVE, help="Capacity for series without a NAME.json sidecar, GiB.")
@click.option("--no-prior", is_flag=True, help="Ignore the earlier runs named in the sidecars (compare with and without).")
@click.option("--partition-gib", type=POSITIVE, multiple=True, help="Partition size, GiB (repeat). Default: 10 20 40 80.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (summary, per-series results).")
def bench(directory, capacity_gib, no_prior, partition_gib, as_json):
    """Benchmark the forecaster on every DIR/*.csv series.

    Reports per series the warning's lead before the real crossing, the error of the peak
    forecast made at 10 % of the steps, false alarms on series that never cross, and the
    time of one forecast update. Capacity and horizon come from a NAME.json beside each
    NAME.csv: {"capacity_gib": C, "horizon": N, "prior": ["earlier-run.csv", ...],
    "prior_align": "step"}; prior paths are relative to DIR (keep them in a sub-folder).
    """
    from predictor.bench import run_bench
    from predictor.series import SeriesFormatError

    try:
        report = run_bench(directory, None if capacity_gib is None else capacity_gib * GIB, _sizes(partition_gib),
                           priors=not no_prior)
    except (FileNotFoundError, SeriesFormatError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        click.echo(json.dumps(report.to_dict(), sort_keys=True))
        return
    click.echo(
        f"{'series':44s} {'N':>7s} {'warn':>7s} {'lead':>7s} {'warn/N':>7s} {'by10%':>6s} {'err10%':>7s} {'ms/upd':>7s}"
    )
    for r in report.series:
        cross = "-" if r.crossing_step is None else f"{r.crossing_step:g}"
        warn = "-" if r.warn_step is None else f"{r.warn_step:g}"
        lead = "-" if r.lead_steps is None else f"{r.lead_steps:g}"
        frac = "-" if r.warn_fraction is None else f"{r.warn_fraction:.3f}"
        by10 = "FALSE" if r.false_alarm else ("-" if r.warned_by_10pct is None else ("yes" if r.warned_by_10pct else "no"))
        click.echo(
            f"{r.name[:44]:44s} {cross:>7s} {warn:>7s} {lead:>7s} {frac:>7s} {by10:>6s} "
            f"{100 * r.peak_error_at_10pct:6.1f}% {r.update_ms_mean:7.3f}"
        )
    for note in report.skipped:
        click.echo(f"skipped: {note}")
    s = report.summary()
    err = s["mean_peak_error_at_10pct"]
    err_text = "-" if err is None else f"{100 * err:.1f}%"
    click.echo(
        f"warned by 10 % of N: {s['warned_by_10pct']}/{s['crossing']}, missed: {s['missed']}, "
        f"false alarms: {s['false_alarms']}/{s['never_crossing']}, mean peak error at 10 %: {err_text}, "
        f"update: mean {s['update_ms_mean'] or 0:.3f} ms, p99 {s['update_ms_p99']:.3f} ms, max {s['update_ms_max']:.3f} ms "
        f"(CPU time p99 {s['update_cpu_ms_p99']:.3f} ms)"
    )
