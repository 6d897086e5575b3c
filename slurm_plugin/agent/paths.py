"""Where a node agent keeps its files: its socket, its state, the jobs' finals, MPS directories."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


class AgentError(RuntimeError):
    """An isolation request that cannot be met; the message goes to the SPANK plugin's log."""


class StepRefused(AgentError):
    """Refused because of what the step itself says (a variable its user could set disagrees with
    Slurm's record): the plugin fails the step but leaves no record, so the helper neither requeues
    nor lifts it (the job's own doing earns no place at the head of the queue)."""


@dataclass(frozen=True)
class AgentPaths:
    state_dir: Path
    node: str

    @property
    def socket(self) -> Path:
        return socket_path(self.state_dir, self.node)

    @property
    def home(self) -> Path:
        return self.state_dir / "agent" / self.node

    @property
    def finals(self) -> Path:
        return self.home / "final"

    @property
    def mps(self) -> Path:
        return self.state_dir / "mps" / self.node

    @property
    def kept_finals(self) -> Path:
        """Finished runs' summaries the helper has not acknowledged yet."""
        return self.home / "unacked"

    @property
    def mps_plan(self) -> Path:
        """The helper's MPS percentages for this node's jobs, as sent over the link
        (``{"generation": g, "plan": {gpu: {job: percent}}}``)."""
        return self.home / "mps-plan.json"

    @property
    def unisolated(self) -> Path:
        """Records of packed steps the SPANK plugin did not let start, written by root (the
        plugstack ``spool=`` argument), until the helper acknowledges them (:mod:`.unisolated`)."""
        return self.home / "unisolated"

    @property
    def mig_desired(self) -> Path:
        """Each GPU's desired MIG layout as the agent last decided it (``gpupack mig assert``)."""
        return self.home / "mig-desired.json"

    @property
    def generations(self) -> Path:
        """The newest generation of each per-node plan the helper sent (``{kind: generation}``)."""
        return self.home / "generations.json"


def socket_path(state_dir: Path, node: str) -> Path:
    return Path(state_dir) / "run" / f"agent-{node}.sock"


def final_path(state_dir: Path, node: str, job_id: int) -> Path:
    return Path(state_dir) / "agent" / node / "final" / f"{int(job_id)}.json"
