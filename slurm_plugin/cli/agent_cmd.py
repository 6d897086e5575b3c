"""`gpupack agent`: the node agent daemon, and tools to ask it."""
from __future__ import annotations

import json
import os
import pwd
import signal
import threading
from pathlib import Path

import click

DEFAULT_STATE_DIR = Path("/var/lib/gpupack")
#: the opt-in out-of-memory observer for Python jobs ([agent] python_oom_observer): this folder goes in
#: front of packed steps' PYTHONPATH (it must be readable by every job user where the suite is installed)
PYTHON_SITE = Path(__file__).resolve().parents[1] / "python_site"


def _slurm_user_uid(explicit: str | None) -> int | None:
    name = explicit
    if name is None:
        conf = os.environ.get("SLURM_CONF", "/etc/slurm/slurm.conf")
        try:
            for line in Path(conf).read_text().splitlines():
                if line.strip().lower().startswith("slurmuser="):
                    name = line.split("=", 1)[1].split()[0]
        except OSError:
            pass
    if not name:
        return None
    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        raise click.ClickException(f"SlurmUser {name!r} is not a user on this host; pass --slurm-user")


@click.group(invoke_without_command=True, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--node", default=None, help="The Slurm node name this agent serves (slurmd -N). Required.")
@click.option("--state-dir", type=click.Path(path_type=Path), default=DEFAULT_STATE_DIR, show_default=True,
              help="Holds run/agent-<node>.sock, agent/<node>/state.json and final/<job>.json.")
@click.option("--backend", type=click.Choice(["auto", "nvml", "sim"]), default="auto", show_default=True,
              help="The GPU backend: auto = NVML where libnvidia-ml loads, refusing to start otherwise; "
                   "nvml; sim = the simulated-GPU backend (unit tests, offline simulator).")
@click.option("--nvml-library", default=None, envvar="GPUPACK_NVML_LIBRARY", metavar="PATH|simulated:DIR",
              help="The libnvidia-ml NVML calls: a path, or simulated:DIR for this node's simulated GPU "
                   "kept in DIR (the dev cluster) [env GPUPACK_NVML_LIBRARY; default: the driver's].")
@click.option("--sim-dir", type=click.Path(path_type=Path), default=None,
              help="State directory of --backend sim [default: STATE_DIR/simgpu].")
@click.option("--gpus", default=2, show_default=True, help="Simulated GPUs to create when the node has none yet.")
@click.option("--gpu-model", default="H100-80GB", show_default=True, help="Catalogue model of the simulated GPUs.")
@click.option("--isolation", "isolation_mode", type=click.Choice(["mig", "mps"]), default="mig", show_default=True,
              help="How packed jobs are isolated on this node.")
@click.option("--shares-per-gpu", type=int, default=None,
              help="Slurm shards per GPU (gres.conf Count=) [default: the GPU model's share ladder, "
                   "`gpupack mig ladder`].")
@click.option("--mps-in-mig-shares", type=click.IntRange(0, 64), default=0, show_default=True,
              help="MIG nodes: packed jobs of fewer shares than this share a MIG instance sized for "
                   "this many shares through MPS, one user per instance (0: every job its own slice).")
@click.option("--policy", default="fsm", show_default=True, help="MIG placement policy (mig.policies).")
@click.option("--slurm-user", default=None, help="Also answer this user [default: SlurmUser of slurm.conf].")
@click.option("--sample-interval", default=1.0, show_default=True, help="Seconds between samples.")
@click.option("--gres-conf", type=click.Path(path_type=Path), default=None,
              help="The node's gres.conf, whose shard counts and GPU types the helper checks against "
                   "gpupack.toml [default: beside slurm.conf (SLURM_CONF), else /run/slurm/conf/gres.conf].")
@click.option("--metrics-address", default=None, metavar="IP",
              help="Bind the Prometheus endpoint here [default: gpupack.toml [metrics] agent_address, "
                   "else 127.0.0.1].")
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=None,
              help="Prometheus port, 0 for none [default: [metrics] agent_port, else the node's slurmd "
                   "port + 200, from slurm.conf].")
@click.option("--link-address", default=None, metavar="HOST",
              help="Bind the MUNGE-authenticated command endpoint here [default: gpupack.toml [agents] "
                   "entry of the node, else its NodeAddr in slurm.conf].")
@click.option("--link-port", type=click.IntRange(0, 65535), default=None,
              help="Its port, 0 for none [default: [agents] entry, else [agent] port, 6820].")
@click.pass_context
def agent(ctx: click.Context, node: str, state_dir: Path, backend: str, nvml_library: str | None,
          sim_dir: Path | None, gpus: int,
          gpu_model: str, isolation_mode: str, shares_per_gpu: int | None, mps_in_mig_shares: int,
          gres_conf: Path | None, policy: str,
          slurm_user: str | None, sample_interval: float, metrics_address: str | None,
          metrics_port: int | None, link_address: str | None, link_port: int | None) -> None:
    """Run the node agent for one node (or ask a running one: `status`, `samples`)."""
    ctx.obj = {"node": node, "state_dir": state_dir}
    if ctx.invoked_subcommand is not None:
        return
    _need_node(node)
    metrics_at = _metrics_address(node, metrics_address, metrics_port)
    import logging

    from slurm_plugin.agent.backends import BackendChoiceError, open_backend
    from slurm_plugin.agent.daemon import NodeAgent, run_loops, socket_path
    from slurm_plugin.agent.server import AgentServer
    from slurm_plugin.agent.slurm_jobs import PushedJobs

    logging.getLogger().setLevel(min(logging.getLogger().level, logging.INFO))
    try:
        opened = open_backend(backend, nvml_library, node, sim_dir or state_dir / "simgpu",
                              [gpu_model] * gpus, mig_enabled=isolation_mode == "mig",
                              dcgmi=_agent_setting("dcgmi"))
    except BackendChoiceError as exc:
        raise click.ClickException(str(exc)) from exc
    gpu_backend, sim_dir = opened.backend, opened.sim_dir
    allowed = {0}
    uid = _slurm_user_uid(slurm_user)
    if uid is not None:
        allowed.add(uid)
    daemon = NodeAgent(node, state_dir, gpu_backend, isolation_mode=isolation_mode,
                       shares_per_gpu=shares_per_gpu, policy=policy,
                       list_running_jobs=PushedJobs(), sim_dir=sim_dir, gres_conf=gres_conf,
                       mps_control=_agent_setting("mps_control"), mps_in_mig_shares=mps_in_mig_shares,
                       python_site=PYTHON_SITE if _agent_setting("python_oom_observer") else None)
    for line in daemon.reconcile(at_start=True):
        click.echo(f"reconciled: {line}", err=True)
    server = AgentServer(socket_path(state_dir, node), daemon, allowed)
    server.serve_in_thread()
    link = _link_server(node, daemon, allowed, link_address, link_port)
    from slurm_plugin.metrics.agent import agent_registry
    from slurm_plugin.metrics.endpoint import serve

    endpoint = serve(metrics_at, agent_registry(daemon), f"agent of {node}")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    logging.getLogger(__name__).info("agent of %s serving %s and %s (backend %s, mode %s, uids %s)", node,
                                     server.socket_path, link.url if link else "no network link",
                                     opened.name, isolation_mode, sorted(allowed))
    try:
        run_loops(daemon, stop, sample_interval=sample_interval)
    finally:
        server.shutdown()
        server.server_close()
        if link is not None:
            link.shutdown()
            link.server_close()
        if endpoint is not None:
            endpoint.stop()
        close = getattr(gpu_backend, "close", None)
        if close is not None:  # NVML shut down, DCGM's monitor stopped
            close()


def _link_server(node: str, daemon, allowed: set[int], host: str | None, port: int | None):
    """The MUNGE-authenticated command endpoint for the helper (None with port 0)."""
    from packer.config import ConfigError
    from slurm_plugin.config.whole import load_agent_settings
    from slurm_plugin.agent.link_server import AgentLinkServer
    from slurm_plugin.helper.settings import DEFAULT_CONFIG
    from slurm_plugin.munge_auth import Munge, MungeError, RequestVerifier

    try:
        settings = load_agent_settings(DEFAULT_CONFIG)
        own = settings.own_address(node, None)
        munge = Munge(settings.munge_socket)
    except (ConfigError, MungeError) as exc:
        raise click.ClickException(str(exc)) from exc
    port = own.port if port is None else port
    if port == 0:
        return None
    verifier = RequestVerifier(munge, node, allowed, settings.max_age_s)
    try:
        server = AgentLinkServer((host or own.host, port), daemon, verifier)
    except OSError as exc:
        raise click.ClickException(f"cannot listen on {host or own.host}:{port} for the helper: {exc}") from exc
    server.serve_in_thread()
    return server


def _agent_setting(name: str):
    """A setting of gpupack.toml [agent] (GPUPACK_CONFIG): mps_control (the MPS control
    program), dcgmi (DCGM's, for activity per MIG instance), python_oom_observer."""
    from packer.config import ConfigError
    from slurm_plugin.config.whole import load_agent_settings
    from slurm_plugin.helper.settings import DEFAULT_CONFIG

    try:
        return getattr(load_agent_settings(DEFAULT_CONFIG), name)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from exc


def _metrics_address(node: str, host: str | None, port: int | None):
    """Where the agent serves its metrics: the command line, over gpupack.toml [metrics]
    (GPUPACK_CONFIG), over a port derived from slurm.conf (SLURM_CONF)."""
    from packer.config import ConfigError
    from slurm_plugin.helper.settings import DEFAULT_CONFIG
    from slurm_plugin.metrics.settings import MetricsOverride

    try:
        return MetricsOverride(host, port).agent(DEFAULT_CONFIG, None, node)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from exc


def _need_node(node: str | None) -> None:
    if not node:
        raise click.UsageError("--node is required (the Slurm node name, as in `slurmd -N NODE`)")


@agent.command()
@click.pass_obj
def status(obj: dict) -> None:
    """What the running agent holds, per job (JSON)."""
    _need_node(obj["node"])
    from slurm_plugin.agent.client import AgentUnavailable, ask
    from slurm_plugin.agent.daemon import socket_path

    try:
        answer = ask(socket_path(obj["state_dir"], obj["node"]), {"op": "status"})
    except AgentUnavailable as exc:
        raise click.ClickException(f"{exc}; is `gpupack agent --node {obj['node']}` running?") from exc
    if answer.get("status") != "ok":
        raise click.ClickException(f"the agent refused: {answer.get('reason')}")
    click.echo(json.dumps(answer, indent=1))


@agent.command()
@click.option("--job", "job_id", type=int, default=None, help="Only this job.")
@click.option("--latest", is_flag=True, help="Only the newest sample of each job.")
@click.pass_obj
def samples(obj: dict, job_id: int | None, latest: bool) -> None:
    """The agent's samples (JSON lines, one JobSample each)."""
    _need_node(obj["node"])
    from slurm_plugin.agent.client import AgentUnavailable, ask
    from slurm_plugin.agent.daemon import socket_path

    req: dict = {"op": "samples", "latest": latest}
    if job_id is not None:
        req["job_id"] = job_id
    try:
        answer = ask(socket_path(obj["state_dir"], obj["node"]), req)
    except AgentUnavailable as exc:
        raise click.ClickException(str(exc)) from exc
    if answer.get("status") != "ok":
        raise click.ClickException(f"the agent refused: {answer.get('reason')}")
    for s in answer.get("samples", []):
        click.echo(json.dumps(s))


@agent.command("adopt-check")
@click.option("--user", default=None, envvar="PAM_USER",
              help="The user logging in [env PAM_USER, which pam_exec sets].")
@click.pass_obj
def adopt_check(obj: dict, user: str | None) -> None:
    """For pam_exec before pam_slurm_adopt: refuse (exit 1) a login of a user who holds a packed job on
    this node, whose adopted processes would run outside its isolation (docs/fence.md). Root may log in;
    an unknown user, or an agent that does not answer, is refused."""
    import socket
    import sys

    from slurm_plugin.agent.client import AgentUnavailable, ask
    from slurm_plugin.agent.daemon import socket_path

    node = obj["node"] or socket.gethostname().split(".")[0]  # slurmd's default NodeName
    if not user:
        raise click.UsageError("no user: pass --user, or run it from pam_exec (PAM_USER)")
    try:
        uid = pwd.getpwnam(user).pw_uid
    except KeyError:
        click.echo(f"gpupack: no such user {user!r}; login not adopted")
        sys.exit(1)
    if uid == 0:
        return
    try:
        answer = ask(socket_path(obj["state_dir"], node), {"op": "adoption", "uid": uid})
    except AgentUnavailable as exc:
        click.echo(f"gpupack: the node agent of {node} does not answer ({exc}); a login is not adopted while "
                   f"it cannot say whether {user} holds a packed job here")
        sys.exit(1)
    if answer.get("status") != "ok":
        click.echo(f"gpupack: the node agent of {node} refused the question: {answer.get('reason')}")
        sys.exit(1)
    if answer.get("refuse"):
        click.echo(f"gpupack: no login on {node}: {answer['refuse']}")
        sys.exit(1)
