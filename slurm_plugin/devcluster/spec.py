"""What the dev cluster looks like, and the config files that say so (pure builders)."""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path

from gpus.sim.dcgmi import STAND_IN as DCGMI_STAND_IN
from gpus.sim.mps_control import STAND_IN as MPS_STAND_IN
from slurm_plugin.devcluster import topology as topo

DEFAULT_STATE_DIR = Path(os.environ.get("GPUPACK_DEVCLUSTER_DIR", "/var/lib/gpupack/devcluster"))
DEFAULT_PORT = int(os.environ.get("GPUPACK_DEVCLUSTER_PORT", "16817"))
#: Slurm's priority plugins the dev cluster runs; multifactor weighs fair-share only (no age,
#: size, partition or QOS factor), recomputed every minute (its shortest period)
PRIORITY_TYPES = ("basic", "multifactor")
MULTIFACTOR_LINES = ["PriorityType=priority/multifactor", "PriorityWeightFairshare=100000", "PriorityWeightAge=0",
                     "PriorityWeightJobSize=0", "PriorityWeightPartition=0", "PriorityWeightQOS=0",
                     "PriorityCalcPeriod=1", "PriorityDecayHalfLife=7-0"]
CRED_EXPIRE_S = 10  # how long a requeued job waits before it may start again
WEB_PORT_OFFSET = 80  # the web view listens on the cluster's port + 80 (nodes use port + 101...)
AGENT_PORT_OFFSET = 400  # one-host: node i's agent link listens on port + 400 + i (metrics: + 300 + i)
DBD_PORT_OFFSET = 90  # slurmdbd listens on the cluster's port + 90 (`accounting`)
DB_PORT_OFFSET = 91  # MariaDB on 127.0.0.1, port + 91


@dataclass(frozen=True)
class ClusterSpec:
    state_dir: Path = DEFAULT_STATE_DIR
    nodes: int = 3
    gpus_per_node: int = 2
    gpu_model: str = "H100-80GB"
    mode: str = "enforce"
    cpus_per_node: int = 16
    memory_mb_per_node: int = 16000
    cluster_name: str = "gpupack"
    port: int = DEFAULT_PORT  # slurmctld; node i listens on port + 100 + i (multi-host: all on port + 101)
    # multi-host: each node a host of its own (docs/multi-host.md); one-host here, as a
    # spec.json written before there was a choice means (`devcluster up` says which)
    topology: str = topo.ONE_HOST
    # slurmdbd with MariaDB on the controller's host (`sacct`, `sacctmgr`, fair-share;
    # `devcluster/accounting.py`), and Slurm's priority plugin: basic (submit order) or
    # multifactor (fair-share first: docs/accounting.md)
    accounting: bool = False
    priority: str = "basic"
    # how long a requeued job waits before it may start again (slurm.conf's cred_expire);
    # None: Slurm's default (120 s, so 121 s), as on a real site
    cred_expire_s: int | None = CRED_EXPIRE_S
    # slurm.conf lines of a benchmark's own (`gpupack bench scale`): a `Key=value` replaces the
    # written line of that key (SchedulerParameters, MaxJobCount), a NodeName= line adds nodes
    # that run no slurmd (State=FUTURE); the partition takes them all
    extra_slurm_conf: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "extra_slurm_conf", tuple(self.extra_slurm_conf))  # spec.json holds a list
        topo.check_topology(self.topology)
        if self.priority not in PRIORITY_TYPES:
            raise ValueError(f"--priority must be one of {', '.join(PRIORITY_TYPES)}, got {self.priority!r}")
        if not 1 <= self.nodes <= 64:
            raise ValueError(f"--nodes must be between 1 and 64, got {self.nodes}")
        if not 1 <= self.gpus_per_node <= 16:
            raise ValueError(f"--gpus-per-node must be between 1 and 16, got {self.gpus_per_node}")

    @property
    def node_names(self) -> list[str]:
        return [f"node{i}" for i in range(1, self.nodes + 1)]

    @property
    def multi_host(self) -> bool:
        return self.topology == topo.MULTI_HOST

    def node_port(self, index: int) -> int:
        """Node ``index``'s slurmd port: one per node on one host, the same on every host."""
        return self.port + 101 if self.multi_host else self.port + 100 + index

    @property
    def network(self) -> topo.Network:
        return topo.Network(self.port)

    @property
    def controller_address(self) -> str:
        """SlurmctldHost's address: on the cluster's bridge (multi-host), else loopback."""
        return self.network.controller_address if self.multi_host else topo.LOOPBACK

    def node_address(self, node: str) -> str:
        """A node's NodeAddr: its own on the bridge (multi-host), else loopback."""
        if not self.multi_host:
            return topo.LOOPBACK
        return self.network.node_address(self.node_names.index(node) + 1)

    def agent_port(self, index: int) -> int:
        """The command port of node ``index``'s agent (1-based): one each on one host (all share
        127.0.0.1), the same on every node on many (each on its own address)."""
        return self.port + AGENT_PORT_OFFSET + (1 if self.multi_host else index)

    def agent_address(self, node: str) -> str:
        """"host:port" of ``node``'s agent, as gpupack.toml's [agents] names it."""
        return f"{self.node_address(node)}:{self.agent_port(self.node_names.index(node) + 1)}"

    @property
    def web_port(self) -> int:
        """The web view's port: derived from the cluster's, so clusters side by side differ."""
        return self.port + WEB_PORT_OFFSET

    @property
    def web_url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}/"

    @property
    def gres_type(self) -> str:
        return self.gpu_model.split("-")[0].lower()

    # -- paths --------------------------------------------------------------------------
    @property
    def etc(self) -> Path:
        return self.state_dir / "etc"

    @property
    def slurm_conf(self) -> Path:
        return self.etc / "slurm.conf"

    @property
    def run(self) -> Path:
        return self.state_dir / "run"

    @property
    def log(self) -> Path:
        return self.state_dir / "log"

    @property
    def munge_socket(self) -> Path:
        return self.run / "munge" / "munge.socket"

    @property
    def helper_socket(self) -> Path:
        return self.run / "helper.sock"

    @property
    def gpupack_toml(self) -> Path:
        return self.etc / "gpupack.toml"

    @property
    def database(self) -> Path:
        return self.state_dir / "gpupack.db"

    @property
    def kill_switch(self) -> Path:
        return self.etc / "gpupack.disable"

    @property
    def simgpu_dir(self) -> Path:
        return self.state_dir / "simgpu"

    def device_dir(self, node: str) -> Path:
        return self.state_dir / "dev" / node

    def to_json(self) -> dict:
        data = asdict(self)
        data["state_dir"] = str(self.state_dir)
        return data


def slurm_conf(spec: ClusterSpec, hostname: str, slurm_user: str, epilog: Path, shares_per_gpu: int) -> str:
    s = spec
    shards = shares_per_gpu * s.gpus_per_node
    lines = [
        "# Written by `gpupack devcluster up`; edit the spec, not this file.",
        f"ClusterName={s.cluster_name}",
        f"SlurmctldHost={hostname}({s.controller_address})",
        f"SlurmctldPort={s.port}",
        f"SlurmUser={slurm_user}",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={s.munge_socket}" + ("" if s.cred_expire_s is None else f",cred_expire={s.cred_expire_s}"),
        f"StateSaveLocation={s.state_dir}/ctld",
        f"SlurmdSpoolDir={s.state_dir}/spool/%n",
        f"SlurmctldPidFile={s.run}/slurmctld.pid",
        f"SlurmdPidFile={s.run}/slurmd-%n.pid",
        f"SlurmctldLogFile={s.log}/slurmctld.log",
        f"SlurmdLogFile={s.log}/slurmd-%n.log",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "MpiDefault=none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "SchedulerType=sched/backfill",
        "SchedulerParameters=sched_interval=2,bf_interval=2",
        "GresTypes=gpu,shard",
        "JobSubmitPlugins=lua",
        f"PlugStackConfig={s.etc}/plugstack.conf",
        f"Epilog={epilog}",
        f"EpilogSlurmctld={s.etc}/ctld-epilog.sh",  # tells the helper a job ended (its history)
        "ReturnToService=2",
        # no RequeueExit: a packed step the agent could not isolate exits 117 and is recorded by root
        # on its node; the helper requeues it at the head on that record only (requeue-unisolated)
        "SlurmdParameters=config_overrides",
        "MinJobAge=600",
        "KillWait=5",
        "InactiveLimit=0",
        "SlurmdTimeout=30",
    ]
    lines += MULTIFACTOR_LINES if s.priority == "multifactor" else ["PriorityType=priority/basic"]
    if s.accounting:
        lines += accounting_lines(s)
    else:
        lines.append("JobAcctGatherType=jobacct_gather/none")
    lines += node_lines(s, hostname, shards)
    lines = with_extra_lines(lines, s.extra_slurm_conf)
    lines.append("PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"


def with_extra_lines(lines: list[str], extra: tuple[str, ...] | list[str]) -> list[str]:
    """``lines`` with each of ``extra``: a NodeName= line added, any other `Key=value` in place
    of the line of that key (added when there is none)."""
    out = list(lines)
    for line in extra:
        key = line.split("=", 1)[0]
        at = next((i for i, old in enumerate(out) if old.split("=", 1)[0] == key), None)
        if key == "NodeName" or at is None:
            out.append(line)
        else:
            out[at] = line
    return out


def node_lines(s: ClusterSpec, hostname: str, shards: int) -> list[str]:
    """slurm.conf's node lines: on one host every slurmd has its own port on 127.0.0.1 and
    the machine's name; on many hosts each node is its own host (its name, its bridge
    address), all on one SlurmdPort, and sruns on the controller listen on SrunPortRange."""
    lines = []
    if s.multi_host:
        lines += [f"SlurmdPort={s.node_port(1)}", f"SrunPortRange={s.port + topo.SRUN_PORT_OFFSETS[0]}-{s.port + topo.SRUN_PORT_OFFSETS[1]}"]
    for i, node in enumerate(s.node_names, start=1):
        where = (f"NodeHostname={node} NodeAddr={s.node_address(node)}" if s.multi_host
                 else f"NodeHostname={hostname} NodeAddr=127.0.0.1 Port={s.node_port(i)}")
        lines.append(f"NodeName={node} {where} CPUs={s.cpus_per_node} RealMemory={s.memory_mb_per_node} "
                     f"Gres=gpu:{s.gres_type}:{s.gpus_per_node},shard:{s.gres_type}:{shards}")
    return lines


def accounting_lines(s: ClusterSpec) -> list[str]:
    """slurm.conf's lines that send accounting to the cluster's slurmdbd (`accounting`)."""
    return ["AccountingStorageType=accounting_storage/slurmdbd", "AccountingStorageHost=127.0.0.1",
            f"AccountingStoragePort={s.port + DBD_PORT_OFFSET}",
            f"AccountingStoragePass={s.munge_socket}",  # with auth/munge: the munged slurmdbd's callers use
            "JobAcctGatherType=jobacct_gather/none"]


def cgroup_conf(release: tuple[int, int, int]) -> str:
    """cgroup.conf: no cgroup plugin at all (the dev cluster tracks processes by their parent).

    slurmd after 22.05 (24.11 and 26.05 seen) loads a cgroup plugin at start even with
    proctrack/linuxproc and task/none, and refuses to start where /sys/fs/cgroup is not its
    to use (a container, a systemd host without a delegated scope); `CgroupPlugin=disabled`
    is the setting for that. 22.05 knows no such value ("cannot find cgroup plugin for
    disabled"): it autodetects the host's cgroup file system, which a Debian root sees
    through its recursive bind of /sys, and needs no file."""
    head = "# Written by `gpupack devcluster up`.\n"
    if tuple(release[:2]) < (23, 2):
        return head + "# Slurm 22.05 autodetects the cgroup file system (it knows no CgroupPlugin=disabled).\n"
    return head + "CgroupPlugin=disabled\n"


def gres_conf(spec: ClusterSpec, shares_per_gpu: int) -> str:
    lines = ["# Written by `gpupack devcluster up`: fake GPU device files; shards per GPU: the model's share "
             "ladder (`gpupack mig ladder`)."]
    last = spec.gpus_per_node - 1
    for node in spec.node_names:
        dev = spec.device_dir(node)
        files = f"{dev}/nvidia[0-{last}]" if last else f"{dev}/nvidia0"
        lines.append(f"NodeName={node} AutoDetect=off Name=gpu Type={spec.gres_type} File={files}")
        for g in range(spec.gpus_per_node):
            lines.append(
                f"NodeName={node} AutoDetect=off Name=shard Type={spec.gres_type} Count={shares_per_gpu} File={dev}/nvidia{g}"
            )
    return "\n".join(lines) + "\n"


def shim_conf(spec: ClusterSpec, timeout_ms: int = 50) -> str:
    return (
        "# Read by job_submit.lua (key=value). Written by `gpupack devcluster up`.\n"
        f"socket={spec.helper_socket}\n"
        f"timeout_ms={timeout_ms}\n"
        f"kill_switch={spec.kill_switch}\n"
    )


def gpupack_toml(spec: ClusterSpec, shares_per_gpu: int, gpu_memory_gib: float) -> str:
    return (
        "# The packer's settings for the dev cluster (see etc/gpupack.toml for every key).\n"
        "[packer]\n"
        f'mode = "{spec.mode}"\n'
        f"shares_per_gpu = {shares_per_gpu}\n"
        f"gpu_memory_gib = {gpu_memory_gib:.2f}\n"
        f'gpu_model = "{spec.gpu_model}"\n'
        f'gpu_type = "{spec.gres_type}"\n'
        "\n[paths]\n"
        f'database = "{spec.database}"\n'
        f'socket = "{spec.helper_socket}"\n'
        f'kill_switch = "{spec.kill_switch}"\n'
        f'slurm_conf = "{spec.slurm_conf}"\n'
        f'simgpu_dir = "{spec.simgpu_dir}"\n'
        f'agent_dir = "{spec.state_dir}"\n'
        "\n[agent]\n"
        "# the helper reaches each node agent over HTTP, every request MUNGE-authenticated\n"
        f'munge_socket = "{spec.munge_socket}"\n'
        "# MPS nodes: the simulated GPU's stand-in for nvidia-cuda-mps-control\n"
        f'mps_control = "{MPS_STAND_IN}"\n'
        "# activity per MIG instance: the simulated GPU's stand-in for DCGM's dcgmi (each node its host name)\n"
        f'dcgmi = "{DCGMI_STAND_IN} --sim-dir {spec.simgpu_dir}"\n'
        "\n[agents]\n"
        "# every agent on its node's address (one host: all on 127.0.0.1, a port each);\n"
        "# a real cluster: NodeAddr + [agent] port\n"
        + "".join(f'{node} = "{spec.agent_address(node)}"\n' for node in spec.node_names)
        + "\n[web]\n"
        '# the read-only web view (`gpupack web`): localhost only, on the cluster\'s port + 80\n'
        'bind = "127.0.0.1"\n'
        f"port = {spec.web_port}\n"
        "refresh_s = 2.0\n"
        + ("\n[metrics]\n# each node agent's metrics on its node's address (the bridge), for the controller's Prometheus\n"
           'agent_address = "0.0.0.0"\n' if spec.multi_host else "")
    )
