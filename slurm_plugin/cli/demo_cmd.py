"""`gpupack demo`: a job profiled on its first run and packed on its second, on the dev cluster."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import click

from slurm_plugin.cli.slurm_choice import slurm_option
from slurm_plugin.devcluster.spec import DEFAULT_STATE_DIR

CTX = {"help_option_names": ["-h", "--help"]}
FINISHED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL")


def _train_script(python: str) -> str:
    return (
        "#!/bin/sh\n"
        "# A training job on a (simulated) GPU: 2 GiB at start, growing to ~4.3 GiB in its first\n"
        "# 60 iterations, then training at that peak (the node agent samples it through NVML).\n"
        "echo \"node=$SLURMD_NODENAME CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES "
        "MPS=$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE\"\n"
        f"exec {python} -m slurm_plugin simgpu run --mem-start 2GiB --mem-growth 40MiB "
        "--grow-iters 60 --iters 120 --iter-ms 50 --workload ResNet18\n"
    )


class _Demo:
    def __init__(self, state_dir: Path):
        from slurm_plugin.cli.devcluster_cmd import _cluster

        self.cluster = _cluster(state_dir)
        self.env = {**os.environ, **self.cluster.env()}
        self.workdir = Path(tempfile.mkdtemp(prefix="gpupack-demo-"))
        os.chmod(self.workdir, 0o755)

    def sh(self, *args: str) -> str:
        result = subprocess.run(list(args), env=self.env, capture_output=True, text=True, cwd=self.workdir)
        if result.returncode != 0:
            raise click.ClickException(f"{' '.join(args)}: {result.stderr.strip()}")
        return result.stdout

    def submit(self, script: Path, name: str, *extra: str) -> int:
        out = self.sh("sbatch", "--parsable", "-J", name, "--gres=gpu:1", "-o", f"{self.workdir}/%x-%j.out", *extra, str(script))
        return int(out.strip().split(";")[0])

    def state(self, job_id: int) -> str:
        from slurm_plugin.slurm.runner import SlurmRunner

        return SlurmRunner(env=self.env).job(job_id).base_state or "?"

    def comment(self, job_id: int) -> str:
        from slurm_plugin.slurm.runner import SlurmRunner

        return SlurmRunner(env=self.env).job(job_id).admin_comment or ""

    def wait(self, job_ids: list[int], timeout: float = 240) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if all(self.state(j) in FINISHED for j in job_ids):
                return
            time.sleep(1)
        raise click.ClickException(f"jobs {job_ids} did not finish in {timeout:.0f}s (squeue shows why)")

    def wait_recorded(self, job_id: int, timeout: float = 60) -> None:
        """Until the helper has the job's run in its history (moments after the job ends)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            runs = json.loads(self.sh(sys.executable, "-m", "slurm_plugin", "history", "show", "--json"))
            if any(r.get("job_id") == job_id for r in runs):
                return
            time.sleep(1)


@click.command(context_settings=CTX)
@slurm_option
@click.option("--state-dir", type=click.Path(path_type=Path), default=DEFAULT_STATE_DIR, show_default=True,
              help="The dev cluster to run on (`gpupack devcluster up` first).")
@click.option("--scenario", type=click.Choice(["pack", "grow", "regroup"]), default="pack", show_default=True,
              help="pack: profiled, then packed; grow: a packed job that must grow evicts its younger neighbour; "
                   "regroup: a movable packed job is moved so that a waiting 2-GPU job starts.")
@click.option("--json", "as_json", is_flag=True, help="(grow, regroup) print what happened as JSON.")
def demo(state_dir: Path, scenario: str, as_json: bool) -> None:
    """Profile a job on its first run, pack it on its second, and show it with `gpupack jobs`
    (`--scenario grow`: grow by preemption, live; `--scenario regroup`: regrouping, live)."""
    from slurm_plugin.devcluster.roots import describe

    if scenario == "grow":
        _grow(_Demo(state_dir), as_json)
        return
    if scenario == "regroup":
        _regroup(_Demo(state_dir), as_json)
        return

    click.echo(f"Running on {describe()}.")
    d = _Demo(state_dir)
    script = d.workdir / "train.sh"
    script.write_text(_train_script(sys.executable))
    script.chmod(0o755)
    filler = d.workdir / "other-team.sh"  # another team's job that keeps a whole GPU busy for a while
    filler.write_text("#!/bin/sh\nsleep 75\n")
    filler.chmod(0o755)
    short = d.workdir / "other-team-short.sh"  # ... and one that ends soon
    short.write_text("#!/bin/sh\nsleep 20\n")
    short.chmod(0o755)
    click.echo(f"Demo jobs in {d.workdir}; the cluster is `eval \"$(gpupack devcluster env --state-dir {state_dir})\"`.\n")

    click.echo("1. First run of train.sh: nothing is known about it, so it gets a whole GPU and is profiled.")
    first = d.submit(script, "train")
    click.echo(f"   job {first}: {d.comment(first)}")
    d.wait([first])
    d.wait_recorded(first)
    click.echo(f"   job {first} {d.state(first)}; the controller helper recorded what it used:")
    click.echo("   " + d.sh(sys.executable, "-m", "slurm_plugin", "history", "show").replace("\n", "\n   ").rstrip())
    own = [line for line in _output(d.workdir, first).splitlines() if line.startswith("simgpu: done")]
    if own:
        click.echo(f"   what the job counted itself: {own[-1][len('simgpu: '):]}")

    gpus = d.cluster.spec.nodes * d.cluster.spec.gpus_per_node
    click.echo(f"\n2. Other teams take all {gpus} GPUs (unknown jobs, so exclusive); one of them ends in 20 s.")
    fillers = [d.submit(short if i == 0 else filler, f"other-team-{i}") for i in range(gpus)]
    deadline = time.time() + 60
    while time.time() < deadline and not all(d.state(j) == "RUNNING" for j in fillers):
        time.sleep(0.5)
    time.sleep(3)  # one poll of the controller helper

    click.echo("\n3. train.sh again, three times: no GPU is idle and its history says it fits in a share.\n"
               "   When the short job ends, the three share its GPU (one idle GPU for three packed jobs:\n"
               "   none gets it whole at dispatch) instead of waiting for a GPU each.")
    second = [d.submit(script, "train") for _ in range(3)]
    for job_id in second:
        click.echo(f"   job {job_id}: {d.comment(job_id)}")
    d.wait(fillers + second)

    click.echo("\n4. gpupack jobs:")
    click.echo(d.sh(sys.executable, "-m", "slurm_plugin", "jobs"))
    click.echo("   The same view from Slurm itself:")
    click.echo("   squeue --state=all -O JobID,Name:12,State:10,tres-per-node:16,admin_comment:80")
    click.echo(d.sh("squeue", "--state=all", "-j", ",".join(str(j) for j in [first, *second]),
                    "-O", "JobID,Name:12,State:10,tres-per-node:16,admin_comment:80"))
    out = _output(d.workdir, second[0])
    if out:
        click.echo(f"   Step environment and output of packed job {second[0]}:")
        click.echo("   " + out.strip().replace("\n", "\n   ")[-1500:])
    packed = [j for j in second if "packed" in d.comment(j)]
    click.echo(f"\n{len(packed)} of 3 second runs were packed; all jobs finished: "
               + json.dumps({j: d.state(j) for j in [first, *fillers, *second]}))


def _output(workdir: Path, job_id: int) -> str:
    """What a demo job printed ("" before it wrote anything)."""
    try:
        return (workdir / f"train-{job_id}.out").read_text(errors="replace")
    except OSError:
        return ""


def _grow(d: "_Demo", as_json: bool) -> None:
    from slurm_plugin.cli.demo_grow import run_grow
    from slurm_plugin.cli.demo_steps import echo_outcome

    out = run_grow(d.env, d.workdir, d.cluster.spec.database, sys.executable)
    echo_outcome(out, as_json,
                 header=f"older job {out.grower} grows, younger job {out.neighbour} on the same GPU:",
                 summary=f"job {out.grower}: restarted {out.grower_restarts}x with {out.grower_gres} on "
                         f"{out.grower_node or '-'} (excluded {','.join(out.grower_excluded) or '-'}); "
                         f"job {out.neighbour} {out.neighbour_state}",
                 failure="the grower was not restarted in place after evicting its neighbour")


def _regroup(d: "_Demo", as_json: bool) -> None:
    from slurm_plugin.cli.demo_regroup import run_regroup
    from slurm_plugin.cli.demo_steps import echo_outcome

    out = run_regroup(d.env, d.workdir, d.cluster.spec.database)
    echo_outcome(out, as_json,
                 header=f"2-GPU job {out.head} waits; packed job {out.movable} on {out.freed_node} declared it "
                        f"can be moved, jobs {out.others} did not:",
                 summary=f"job {out.head} {out.head_state} on {out.head_node or '-'}; job {out.movable} "
                         f"{out.movable_state} on {out.movable_node or '-'} (restarted {out.movable_restarts}x, "
                         f"excluded {','.join(out.movable_excluded) or '-'})",
                 failure="the 2-GPU job did not start on the GPUs freed by moving the movable job")
