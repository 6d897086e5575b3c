"""`gpupack simgpu`: the simulated GPU workload."""
from __future__ import annotations

import click

from simjobs.workload import parse_size


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
@click.option("--grow-iters", type=click.IntRange(0), default=None,
              help="Grow only during the first N iterations, then run at that peak (as a training job "
                   "does once its allocator is warm) [default: every iteration].")
@click.option("--grow-after", type=click.IntRange(0), default=0, show_default=True,
              help="Start growing after N iterations (with --grow-iters N+1 and a large --mem-growth: "
                   "a one-step jump of memory at iteration N+1).")
@click.option("--iters", type=click.IntRange(0, 10_000_000), default=100, show_default=True, help="Iterations to run.")
@click.option("--iter-ms", type=click.FloatRange(0, 60_000), default=50.0, show_default=True,
              help="Milliseconds per iteration when running alone.")
@click.option("--workload", default=None, help="Model name in the co-location traces (e.g. ResNet18, LSTM); "
              "sets the slowdown beside other workloads and the reported utilisation.")
@click.option("--report-every", default=0.5, show_default=True, help="Seconds between progress reports to the agent.")
@click.option("--report/--no-report", default=True, show_default=True,
              help="Report progress to the node agent; --no-report behaves like a job that says nothing "
              "(the helper then watches it through the GPU's utilisation counters).")
@click.option("--checkpoint-every", type=click.IntRange(0), default=0, show_default=True,
              help="Checkpoint every N iterations and report it to the agent (0: never by itself); on "
              "SIGUSR1 it checkpoints at once, after the iteration it is in.")
@click.option("--framework", type=click.Choice(["pytorch", "jax", "tensorflow", "cuda"]), default="pytorch",
              show_default=True, help="Whose out-of-memory error it prints to stderr when an allocation fails.")
@click.option("--oom-report/--no-oom-report", default=False, show_default=True,
              help="Also tell the node agent of a failed allocation (alloc_failed: what it asked for and "
              "held), as a site's opt-in out-of-memory observer would; a real job tells nothing.")
@click.option("--allocator", type=click.Choice(["plain", "prealloc", "cache"]), default="plain", show_default=True,
              help="How its framework holds memory: plain (what it allocates), prealloc (JAX: 75 %% of the "
                   "device at start unless XLA_PYTHON_CLIENT_PREALLOCATE=false; TensorFlow: all of it unless "
                   "TF_FORCE_GPU_ALLOW_GROWTH=true), cache (PyTorch: --cache bytes kept reserved beyond what "
                   "it allocated).")
@click.option("--cache", "cache_bytes", type=_Size(), default="0", show_default=True,
              help="With --allocator cache: freed blocks the allocator keeps reserved.")
@click.option("--probe/--no-probe", default=False, show_default=True,
              help="Its reports carry its allocator's peak of allocated bytes, as a job running "
                   "TorchProbe.report does (a real job tells nothing unless it runs the probe).")
def run(mem_start: int, mem_growth: int, grow_iters: int | None, grow_after: int, iters: int, iter_ms: float,
        workload: str | None, report_every: float, report: bool, checkpoint_every: int, framework: str,
        oom_report: bool, allocator: str, cache_bytes: int, probe: bool) -> None:
    """Run inside a job: allocate on the simulated GPU it was given, grow, report progress.

    When it outgrows its partition (a MIG slice, or its MPS memory limit) it dies as a real
    framework's process does: its out-of-memory error on stderr (--framework), exit 1, and
    nothing told to the node agent unless --oom-report.
    """
    from simjobs.workload import run as run_workload
    from slurm_plugin.agent.client import ask

    if allocator == "prealloc" and framework not in ("jax", "tensorflow"):
        raise click.UsageError(f"--allocator prealloc is JAX's and TensorFlow's: add --framework jax or tensorflow "
                               f"(not {framework})")
    raise SystemExit(run_workload(mem_start=mem_start, mem_growth=mem_growth, grow_iters=grow_iters,
                                  grow_after=grow_after,
                                  iters=iters, iter_ms=iter_ms,
                                  workload=workload, report_every_s=report_every, report=report,
                                  checkpoint_every=checkpoint_every, ask=ask, framework=framework,
                                  oom_report=oom_report, allocator=allocator, cache_bytes=cache_bytes,
                                  probe=probe))


@simgpu.command("counters-bench")
@click.option("--seeds", type=click.IntRange(1, 100), default=3, show_default=True,
              help="Noise seeds per ordered pair of workloads.")
@click.option("--null-seeds", type=click.IntRange(1, 1000), default=10, show_default=True,
              help="Seeds per workload with a newcomer that slows nothing (the false-positive baseline).")
@click.option("--horizon", type=click.FloatRange(10, 3600), default=60.0, show_default=True,
              help="Seconds watched after the newcomer started.")
@click.option("--z", "zs", default="2,3,4,5", show_default=True, help="Noise standard errors a drop must exceed (list).")
@click.option("--mode", "modes", type=click.Choice(["whole", "mig"]), multiple=True,
              help="Whole GPU (NVML per-process samples) and/or MIG (DCGM per-instance activity); default both.")
@click.option("--min-samples", type=click.IntRange(2, 100), default=None,
              help="Rounds a side before judging (default: the helper's counter_min_samples).")
@click.option("--window", type=click.IntRange(2, 200), default=None,
              help="Rounds a side at most (default: the helper's counter_window).")
@click.option("--json", "as_json", is_flag=True, help="Rows as JSON.")
def counters_bench(seeds: int, null_seeds: int, horizon: float, zs: str, modes: tuple[str, ...],
                   min_samples: int | None, window: int | None, as_json: bool) -> None:
    """Detection delay and false positives of contention seen in the GPU's counters alone.

    Every ordered pair of the co-location traces on the simulated GPU with a simulated
    clock, the senior's utilisation read as the node agent reads it and judged by the
    helper's rule (jobs that report nothing)."""
    from slurm_plugin.helper.monitor_settings import MonitorSettings
    from slurm_plugin.bench.counters import bench, render

    defaults = MonitorSettings()

    try:
        z_values = tuple(float(z) for z in zs.split(",") if z.strip())
    except ValueError:
        raise click.BadParameter(f"--z takes numbers separated by commas, got {zs!r}") from None
    min_samples = min_samples or defaults.counter_min_samples
    window = max(window or defaults.counter_window, min_samples)
    rows = bench(zs=z_values, seeds=seeds, horizon_s=horizon, modes=modes or ("whole", "mig"),
                 null_seeds=null_seeds, min_samples=min_samples, window=window,
                 threshold=defaults.contention_threshold)
    click.echo(render(rows, as_json))
