"""`gpupack mig`: MIG catalogues, full configurations, placement plans, replays, node GPUs.

Thin over the :mod:`mig` library: parse options, call it, print text or JSON, and turn a
library error into one ``Error:`` line that names the object and the fix.
"""
from __future__ import annotations

import functools
import json
import os
import socket
import sys
from typing import Any, Callable

import click

CTX = {"help_option_names": ["-h", "--help"]}


def _emit(obj: Any) -> None:
    click.echo(json.dumps(obj, indent=2, sort_keys=False))


def _errors(fn: Callable) -> Callable:
    """Turn library errors into `Error: ...` and exit status 1."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from mig.errors import MigError

        try:
            return fn(*args, **kwargs)
        except (MigError, ValueError, OSError) as exc:
            raise click.ClickException(str(exc)) from exc

    return wrapper


def _profiles(text: str | None) -> tuple[str, ...] | None:
    if not text:
        return None
    return tuple(p.strip() for p in text.split(",") if p.strip())


def _space(gpu: str, profiles: str | None):
    from mig.catalog import load_catalog
    from mig.fsm import get_space

    return get_space(load_catalog(gpu), _profiles(profiles))


def _demand(text: str | None) -> dict[str, float] | None:
    if not text:
        return None
    out: dict[str, float] = {}
    for part in text.split(","):
        name, sep, weight = part.strip().partition("=")
        if not sep:
            raise ValueError(f"cannot read demand {part!r}: write PROFILE=WEIGHT, e.g. 1g.10gb=3")
        out[name.strip()] = float(weight)
    return out


gpu_option = click.option("--gpu", "gpu", metavar="MODEL", required=True,
                          help="GPU model, e.g. H100-80GB (see `gpupack mig catalog`).")
profiles_option = click.option("--profiles", metavar="P1,P2,…", default=None,
                               help="Restrict the catalogue to these profiles (e.g. without +me).")
json_option = click.option("--json", "as_json", is_flag=True, help="JSON on stdout.")


@click.group(context_settings=CTX)
def mig() -> None:
    """MIG partition manager: catalogues, state machine, placement plans, node GPUs."""


# -- catalogue and state machine --------------------------------------------------------

@mig.command(context_settings=CTX)
@click.option("--gpu", "gpu", metavar="MODEL", default=None,
              help="One GPU model (default: list every model).")
@json_option
@_errors
def catalog(gpu: str | None, as_json: bool) -> None:
    """Show the MIG profiles and placements of a GPU model (or list the models)."""
    from mig.catalog import list_models, load_catalog

    if gpu is None:
        cats = [load_catalog(m) for m in list_models()]
        if as_json:
            _emit({"models": [c.to_dict() for c in cats]})
            return
        for c in cats:
            click.echo(f"{c.model:16} {c.memory_slices} memory slices, {c.compute_slices} compute "
                       f"slices, profiles: {', '.join(c.profile_names)}")
        return
    cat = load_catalog(gpu)
    if as_json:
        _emit(cat.to_dict())
        return
    click.echo(f"{cat.model}: {cat.memory_slices} memory slices, {cat.compute_slices} compute "
               f"slices, {cat.memory_mib} MiB, {cat.sm_count} SMs")
    click.echo(f"{'profile':12} {'id':>3} {'idx':>3} {'MiB':>7} {'SMs':>4} {'max':>3}  placements")
    for p in cat.profiles:
        starts = ",".join(map(str, p.placement_starts))
        click.echo(f"{p.name:12} {p.profile_id:>3} {p.nvml_profile_index:>3} {p.memory_mib:>7} "
                   f"{p.sm_count:>4} {p.max_instances:>3}  {{{starts}}}:{p.memory_slices}")
    click.echo(f"source: {cat.source}")


@mig.command(context_settings=CTX)
@click.option("--gpu", "gpu", metavar="MODEL", default=None, help="One GPU model (default: every model).")
@click.option("--shares", type=click.IntRange(1, 64), default=None,
              help="Shares per GPU (default: the model's own: the safe ladder with the most share counts).")
@json_option
@_errors
def ladder(gpu: str | None, shares: int | None, as_json: bool) -> None:
    """Shares per GPU and the share counts a packed job may hold, per model, such that every
    combination Slurm can give is placeable as MIG instances ([packer] shares_per_gpu, gres.conf
    shard Count=)."""
    from mig.catalog import list_models
    from mig.share_ladder import model_ladder

    found = [model_ladder(m, shares) for m in ([gpu] if gpu else list_models())]
    if as_json:
        _emit({"ladders": [{"model": x.model, "shares_per_gpu": x.shares_per_gpu, "rungs": list(x.rungs),
                            "profiles": list(x.profiles), "memory_mib": list(x.memory_mib)} for x in found]})
        return
    for x in found:
        rungs = ", ".join(f"{k} ({p})" for k, p in zip(x.rungs, x.profiles))
        click.echo(f"{x.model:16} shares_per_gpu = {x.shares_per_gpu}; share counts: {rungs}")


@mig.command(context_settings=CTX)
@gpu_option
@profiles_option
@json_option
@_errors
def configs(gpu: str, profiles: str | None, as_json: bool) -> None:
    """List every full configuration (maximal set of placements) of a GPU model."""
    space = _space(gpu, profiles)
    full = space.full_configurations()
    if as_json:
        _emit({"gpu": space.catalog.model,
               "configs": [[p.to_dict() for p in cfg] for cfg in full]})
        return
    click.echo(f"{space.catalog.model}: {len(full)} full configurations, "
               f"{space.n_states} valid states")
    for cfg in full:
        click.echo("  " + ",".join(str(p) for p in cfg))


@mig.command(context_settings=CTX)
@gpu_option
@profiles_option
@click.option("--state", "state_text", default="", metavar="P@S,…",
              help='Current instances, e.g. "3g.40gb@4,1g.10gb@0" (default: empty GPU).')
@click.option("--request", "request", required=True, metavar="PROFILE",
              help="Profile of the new GPU instance.")
@click.option("--policy", type=click.Choice(["fsm", "first-fit", "random", "demand"]),
              default="fsm", show_default=True, help="Placement policy.")
@click.option("--demand", "demand_text", default=None, metavar="P=W,…",
              help="Pending requests' size mix for --policy demand, e.g. 1g.10gb=3,3g.40gb=1.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of --policy random.")
@click.option("--busy", "busy_text", default="", metavar="P@S,…",
              help="Instances of --state that are in use (for --merge-split).")
@click.option("--merge-split", is_flag=True,
              help="When the request does not fit, add the merge/split plan (idle instances only).")
@json_option
@_errors
def plan(gpu: str, profiles: str | None, state_text: str, request: str, policy: str,
         demand_text: str | None, seed: int, busy_text: str, merge_split: bool,
         as_json: bool) -> None:
    """Choose where a new GPU instance goes, with every alternative's reachability."""
    import random

    from mig.fsm import PartitionState, parse_placements
    from mig.planner import plan_merge_split
    from mig.policies import choose

    space = _space(gpu, profiles)
    state = PartitionState.parse(space, state_text)
    demand = _demand(demand_text)
    if policy == "demand" and not demand:
        demand = {request: 1.0}
    choice = choose(state, request, policy, demand, random.Random(seed))
    out = choice.to_dict()
    if merge_split:
        out["merge_split"] = plan_merge_split(state, request, parse_placements(busy_text)).to_dict()
    if as_json:
        _emit(out)
        return
    if choice.start is None:
        click.echo(f"{request} does not fit beside {state_text or 'nothing'}")
    else:
        click.echo(f"{request}@{choice.start}: {choice.reachable_full_configs} full "
                   f"configurations stay reachable ({policy})")
    for alt in choice.alternatives:
        click.echo(f"  start {alt.start}: {alt.reachable_full_configs}")
    if merge_split:
        ms = out["merge_split"]
        click.echo("merge/split: " + ("; ".join(ms["steps"]) if ms["feasible"] else ms["reason"]))


@mig.command(context_settings=CTX)
@gpu_option
@profiles_option
@click.option("--events", "events_file", required=True,
              type=click.Path(exists=True, dir_okay=False, allow_dash=True),
              help="File of lines `alloc ID PROFILE` and `free ID` (- for stdin).")
@click.option("--policy", type=click.Choice(["fsm", "first-fit", "random", "demand"]),
              default="fsm", show_default=True, help="Placement policy.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of --policy random.")
@click.option("--demand-window", type=click.IntRange(min=0), default=0, show_default=True,
              help="--policy demand: also count this many upcoming allocs as the pending "
                   "queue (default: only the sizes seen so far, recent ones weighing most).")
@json_option
@_errors
def simulate(gpu: str, profiles: str | None, events_file: str, policy: str, seed: int,
             demand_window: int, as_json: bool) -> None:
    """Replay alloc/free events on one GPU and count rejections."""
    from mig.simulate import parse_events, run_events

    with click.open_file(events_file, encoding="utf-8") as fh:
        events = parse_events(fh.read())
    res = run_events(_space(gpu, profiles), events, policy, seed=seed, demand_window=demand_window)
    if as_json:
        _emit(res.to_dict())
        return
    click.echo(f"{res.requests} requests, {res.rejected} rejected, "
               f"{res.rejected_fragmentation} of them by fragmentation ({policy})")


# -- node GPUs --------------------------------------------------------------------------

def _backend_options(fn: Callable) -> Callable:
    fn = click.option("--backend", type=click.Choice(["auto", "nvml", "sim"]), default="auto",
                      show_default=True,
                      help="GPU backend; auto is sim when a state dir is given, else nvml.")(fn)
    fn = click.option("--state-dir", type=click.Path(file_okay=False), default=None,
                      envvar="GPUPACK_SIM_DIR",
                      help="Simulated GPU state directory [env GPUPACK_SIM_DIR].")(fn)
    fn = click.option("--node", default=None, envvar="GPUPACK_NODE",
                      help="Node name of the simulated GPUs [env GPUPACK_NODE; default hostname].")(fn)
    fn = click.option("--sim-gpus", default=None, metavar="M1,M2,…",
                      help="Create the simulated node with these GPU models if it does not exist.")(fn)
    return fn


def _open_backend(backend: str, state_dir: str | None, node: str | None, sim_gpus: str | None):
    if backend == "auto":
        backend = "sim" if state_dir else "nvml"
    if backend == "nvml":
        from gpus.nvml.backend import NvmlBackend

        return NvmlBackend()
    from gpus.sim.backend import SimGpuBackend

    node = node or socket.gethostname().split(".")[0]
    gpus = [g.strip() for g in sim_gpus.split(",") if g.strip()] if sim_gpus else None
    return SimGpuBackend(state_dir or os.path.join(os.getcwd(), ".gpupack-sim"), node, gpus=gpus)


@mig.command(context_settings=CTX)
@_backend_options
@json_option
@_errors
def show(backend: str, state_dir: str | None, node: str | None, sim_gpus: str | None,
         as_json: bool) -> None:
    """Show this node's GPUs, MIG mode and MIG instances (NVML or simulated)."""
    be = _open_backend(backend, state_dir, node, sim_gpus)
    out = []
    for g in be.list_gpus():
        insts = be.list_instances(g.index) if g.mig_enabled else []
        out.append({**g.to_dict(), "instances": [i.to_dict() for i in insts]})
    if as_json:
        _emit({"gpus": out})
        return
    for g in out:
        click.echo(f"GPU {g['index']} {g['model']} {g['uuid']} MIG "
                   f"{'on' if g['mig_enabled'] else 'off'}")
        for i in g["instances"]:
            click.echo(f"  GI {i['gi_id']:>2} {i['profile']:12} @{i['start']} {i['uuid']} "
                       f"{'busy ' + (i['owner'] or '') if i['busy'] else 'idle'}")


@mig.command(context_settings=CTX)
@_backend_options
@click.option("--gpu-index", type=int, required=True, help="Index of the GPU to lay out.")
@click.option("--config", "config_text", required=True, metavar="P@S,…",
              help='Desired instances, e.g. "3g.40gb@4,2g.20gb@0,1g.10gb@2"; "" for none.')
@click.option("--dry-run", is_flag=True, help="Print the steps, change nothing.")
@json_option
@_errors
def apply(backend: str, state_dir: str | None, node: str | None, sim_gpus: str | None,
          gpu_index: int, config_text: str, dry_run: bool, as_json: bool) -> None:
    """Make one GPU's MIG instances equal to a layout (never destroys busy ones)."""
    from mig.apply import apply_layout
    from mig.fsm import parse_placements

    be = _open_backend(backend, state_dir, node, sim_gpus)
    res = apply_layout(be, gpu_index, parse_placements(config_text), dry_run=dry_run)
    if as_json:
        _emit(res.to_dict())
    else:
        click.echo(f"GPU {gpu_index}: {res.status}")
        for s in res.steps:
            click.echo(f"  {s.status:8} {s}" + (f": {s.error}" if s.error else ""))
    if res.status == "failed":
        sys.exit(1)


DEFAULT_NODE_STATE_DIR = "/var/lib/gpupack"


def _actual_layouts(be) -> dict:
    """Each GPU's (MIG on, placements) as the backend shows it now, or the error reading it."""
    from mig.errors import MigError
    from mig.fsm import Placement

    out: dict = {}
    for g in be.list_gpus():
        try:
            insts = be.list_instances(g.index) if g.mig_enabled else []
            out[g.index] = (g.mig_enabled, [Placement(i.profile, i.start) for i in insts])
        except MigError as exc:
            out[g.index] = str(exc)
    return out


def _cannot_tell(node: str, why: str, as_json: bool) -> None:
    if as_json:
        _emit({"node": node, "match": False, "verdict": "unknown", "problem": why, "gpus": []})
    else:
        click.echo(f"Error: cannot tell whether {node} matches its desired MIG layout: {why}", err=True)
    sys.exit(2)


@mig.command("assert", context_settings=CTX)
@_backend_options
@click.option("--node-state-dir", type=click.Path(file_okay=False), default=DEFAULT_NODE_STATE_DIR,
              show_default=True, help="The node agent's state folder (its agent/<node>/mig-desired.json).")
@click.option("--nvml-library", default=None, envvar="GPUPACK_NVML_LIBRARY", metavar="PATH|simulated:DIR",
              help="The libnvidia-ml NVML calls, as the node agent's --nvml-library (implies --backend nvml).")
@json_option
def assert_(backend: str, state_dir: str | None, node: str | None, sim_gpus: str | None,
            node_state_dir: str, nvml_library: str | None, as_json: bool) -> None:
    """Say whether this node's GPUs match the MIG layout its agent last decided, changing
    nothing: exit 0 when every GPU matches, 1 when one differs (each difference printed), 2
    when it cannot tell (no desired layout recorded, the GPUs cannot be read)."""
    from pathlib import Path

    from mig.desired import UNKNOWN, compare, verdict
    from mig.errors import MigError
    from slurm_plugin.agent.mig_desired import desired_path, read_desired

    node = node or socket.gethostname().split(".")[0]
    path = desired_path(Path(node_state_dir), node)
    try:
        desired = read_desired(path)
    except FileNotFoundError:
        _cannot_tell(node, f"no desired layout at {path}; is the node agent of {node} running with "
                           f"--state-dir {node_state_dir}?", as_json)
        return
    except (OSError, ValueError) as exc:
        _cannot_tell(node, f"cannot read {path}: {exc}", as_json)
        return
    try:
        if nvml_library:
            from slurm_plugin.agent.backends import load_nvml_library

            load_nvml_library(nvml_library, node, [], mig_enabled=True)
            backend = "nvml"
        actual = _actual_layouts(_open_backend(backend, state_dir, node, sim_gpus))
    except (MigError, OSError, ImportError, RuntimeError) as exc:
        _cannot_tell(node, f"cannot read the GPUs: {exc}", as_json)
        return
    diffs = compare(desired, actual)
    status = verdict(diffs)
    if as_json:
        _emit({"node": node, "match": status == 0, "verdict": ("match", "differs", "unknown")[status],
               "desired_at": desired.written_at, "gpus": [d.to_dict() for d in diffs]})
    else:
        for d in diffs:
            click.echo(d.describe(), err=d.verdict == UNKNOWN)
    sys.exit(status)


@mig.command(context_settings=CTX)
@click.option("--gpu", "gpu", metavar="MODEL", default="H100-80GB", show_default=True,
              help="GPU model of the fragmentation and latency runs.")
@click.option("--allocs", type=int, default=2000, show_default=True,
              help="Alloc requests per stream.")
@click.option("--streams", type=int, default=3, show_default=True, help="Streams per size mix.")
@json_option
@_errors
def bench(gpu: str, allocs: int, streams: int, as_json: bool) -> None:
    """Fragmentation rejections per policy (ratio to first-fit), precompute and decision time."""
    from mig.bench import run_bench

    res = run_bench(gpu, allocs, streams)
    if as_json:
        _emit(res)
        return
    click.echo("precompute (cold, whole catalogue):")
    for model, r in res["precompute"].items():
        click.echo(f"  {model:16} {r['seconds'] * 1000:7.1f} ms  {r['states']} states, "
                   f"{r['full_configs']} full configurations")
    lat = res["decision_latency"]
    click.echo(f"fsm decision on {lat['model']}: mean {lat['mean_us']:.1f} us, p50 "
               f"{lat['p50_us']:.1f} us, p99 {lat['p99_us']:.1f} us ({lat['decisions']} decisions)")
    dl = res["demand_decision_latency"]
    click.echo(f"demand decision on {dl['model']}: mean {dl['mean_us']:.1f} us over "
               f"{dl['decisions']} decisions (value-table rebuilds included)")
    frag = res["fragmentation"]
    click.echo(f"fragmentation rejections on {frag['model']} ({frag['streams_per_mix']} x "
               f"{frag['allocs_per_stream']} allocs per mix), ratio to first-fit:")
    click.echo(f"  {'mix':12}" + "".join(f"{p:>18}" for p in ("fsm", "demand", "first-fit", "random")))
    for mix, per in frag["mixes"].items():
        cells = "".join(f"{per[p]['rejected_fragmentation']:>11} ({per[p]['ratio_to_first_fit']:.2f})"
                        for p in ("fsm", "demand", "first-fit", "random"))
        click.echo(f"  {mix:12}{cells}")
    click.echo(f"  {'mean ratio':12}" + "".join(
        f"{frag['mean_ratio_to_first_fit'][p]:>18.3f}" for p in ("fsm", "demand", "first-fit", "random")))
    click.echo(f"  {'worst ratio':12}" + "".join(
        f"{frag['worst_ratio_to_first_fit'][p]:>18.3f}" for p in ("fsm", "demand", "first-fit", "random")))
