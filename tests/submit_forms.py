"""The request forms of docs/request-forms.md: every GPU request form a user writes, each with
every option the table combines it with, and what the suite does with it.

Used by the recorder (`tests/data/job_desc/record.py`, job_desc tables from a live cluster),
the fast tests through the real Lua shim, the docs check and the live tests.
"""
from __future__ import annotations

from dataclasses import dataclass

GPU_TYPE = "h100"  # the dev cluster's GRES type

#: (id, options) of the ways to ask for one GPU; each also typed.
BASES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("gres", ("--gres=gpu:1",)),
    ("gpus", ("--gpus=1",)),
    ("gpus-per-node", ("--gpus-per-node=1",)),
    ("gpus-per-task", ("--gpus-per-task=1", "-n1")),
    ("gpus-per-socket", ("--gpus-per-socket=1", "--sockets-per-node=1")),
)

#: (id, options, launcher) of what each base is combined with.
MODIFIERS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("plain", (), "sbatch"),
    ("mem-per-gpu", ("--mem-per-gpu=2G",), "sbatch"),
    ("cpus-per-gpu", ("--cpus-per-gpu=2",), "sbatch"),
    ("gpu-bind", ("--gpu-bind=closest",), "sbatch"),
    ("gpu-freq", ("--gpu-freq=high",), "sbatch"),
    ("two-nodes", ("-N2",), "sbatch"),
    ("one-node-two-tasks", ("-N1", "-n2"), "sbatch"),
    ("two-tasks", ("-n2",), "sbatch"),
    ("spread", ("-n2", "--ntasks-per-node=1"), "sbatch"),
    ("exclusive", ("--exclusive",), "sbatch"),
    ("no-requeue", ("--no-requeue",), "sbatch"),
    ("dependency", ("--dependency=singleton",), "sbatch"),
    ("array", ("--array=0-3",), "sbatch"),
    ("hetjob", (), "sbatch-het"),
    ("test-only", ("--test-only",), "sbatch"),
    ("salloc", (), "salloc"),
    ("srun", (), "srun"),
)

REWRITE, UNTOUCHED = "rewrite", "untouched"


@dataclass(frozen=True)
class Form:
    base: str
    typed: bool
    modifier: str
    options: tuple[str, ...]
    launcher: str

    @property
    def id(self) -> str:
        return f"{self.base}{'-typed' if self.typed else ''}+{self.modifier}"

    def command(self) -> list[str]:
        """The command line that submits it (the script comes on stdin for sbatch)."""
        opts = ["-J", self.id, *self.options]
        if self.launcher == "sbatch-het":
            return ["sbatch", "-o", "/dev/null", *opts, ":", *opts]
        if self.launcher == "sbatch":
            return ["sbatch", "-o", "/dev/null", *opts]
        return [self.launcher, *opts, "true"]


def _typed(options: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(o.replace("=gpu:1", f"=gpu:{GPU_TYPE}:1").replace("=1", f"={GPU_TYPE}:1")
                 if o.startswith("--g") else o for o in options)


def forms() -> list[Form]:
    out = []
    for base, options in BASES:
        for typed in (False, True):
            for modifier, extra, launcher in MODIFIERS:
                opts = (_typed(options) if typed else options) + extra
                out.append(Form(base, typed, modifier, opts, launcher))
    return out


#: What the suite does with a form, by modifier, before the base is considered: the reason a
#: form is left untouched (None: it is rewritten when the base allows it).
MODIFIER_REASON: dict[str, str | None] = {
    "plain": None, "mem-per-gpu": None, "cpus-per-gpu": None, "gpu-bind": None,
    "gpu-freq": "gpu-freq", "two-nodes": "multi-node", "one-node-two-tasks": None,
    "two-tasks": "multi-node", "spread": "multi-node", "exclusive": "exclusive",
    "no-requeue": "no-requeue", "dependency": None, "array": None, "hetjob": "heterogeneous",
    "test-only": None, "salloc": "interactive", "srun": "interactive",
}

#: The reasons in the order the suite checks them (packer.request.classify): a form with
#: several gets the first.
PRECEDENCE = ("heterogeneous", "interactive", "no-requeue", "gpu-freq", "multi-gpu", "per-socket",
              "multi-node", "exclusive")
#: Forms Slurm's own client refuses before any job_submit plugin sees them, on which releases
#: (as recorded: `sbatch: error: Invalid generic resource (gres) specification`).
REFUSED_BY_SLURM = {("gpus", "two-nodes"): ("22.05", "24.11", "26.05"),  # --gpus=1 cannot cover 2 nodes
                    ("gpus", "spread"): ("24.11", "26.05")}  # nor 2 tasks one per node (22.05 let it through)


@dataclass(frozen=True)
class Outcome:
    kind: str  # rewrite | untouched | refused
    reason: str = ""  # untouched: the AdminComment reason; refused: what Slurm said
    shard: str = ""  # rewrite: the shard request, e.g. shard:h100:1
    also: tuple[str, ...] = ()  # rewrite: what else changes

    def text(self) -> str:
        if self.kind == "rewrite":
            return " ".join((f"`{self.shard}`", *self.also))
        if self.kind == "untouched":
            return f"untouched: {self.reason}"
        return "refused by Slurm"

    def cell(self, others: "dict[str, Outcome]") -> str:
        """The table cell: this outcome, and where another release differs, that one too."""
        text = self.text()
        for release, other in others.items():
            if other != self:
                text += f" ({release}+: {other.text()})"
        return text


def expected(form: Form, release: str = "22.05") -> Outcome:
    """What the suite promises for a form on a release (docs/request-forms.md), from the rules,
    not the code."""
    if release in REFUSED_BY_SLURM.get((form.base, form.modifier), ()):
        return Outcome("refused", "Invalid generic resource (gres) specification")
    reasons = set()
    if MODIFIER_REASON[form.modifier]:
        reasons.add(MODIFIER_REASON[form.modifier])
    tasks = 2 if form.modifier in ("one-node-two-tasks", "two-tasks", "spread") else 1
    if form.base == "gpus-per-task" and tasks > 1:
        reasons.add("multi-gpu")  # one GPU per task, two tasks
    if form.base == "gpus-per-task" and form.modifier == "two-nodes":
        reasons.discard("multi-node")  # sbatch: "can't run 1 processes on 2 nodes, setting nnodes to 1"
    if form.base == "gpus-per-socket":
        reasons.add("per-socket")
    if reasons:
        return Outcome("untouched", min(reasons, key=PRECEDENCE.index))
    also = []
    if form.base in ("gpus", "gpus-per-task"):
        also.append("−" + form.base)  # the field that held the request is cleared
    if form.modifier == "mem-per-gpu":
        also.append("mem=2048M")  # --mem-per-gpu=2G for its one GPU
    if form.modifier == "cpus-per-gpu":
        also.append("cpus=2")  # --cpus-per-gpu=2 for its one GPU
    if form.modifier == "gpu-bind":
        also.append("−gpu-bind")
    return Outcome("rewrite", shard=f"shard:{GPU_TYPE}:1", also=tuple(also))


def render_table() -> str:
    """The table of docs/request-forms.md: one row per option combined, one column per form."""
    by_id = {f.id: f for f in forms()}
    columns = [(base, typed) for base, _ in BASES for typed in (False, True)]
    head = ["combined with"] + [" ".join(_typed(opts) if typed else opts) for (b, opts), typed
                                in ((next(x for x in BASES if x[0] == b), t) for b, t in columns)]
    lines = ["| " + " | ".join(f"`{h}`" if i else h for i, h in enumerate(head)) + " |",
             "|" + "---|" * len(head)]
    for modifier, options, launcher in MODIFIERS:
        label = {"sbatch": " ".join(options) or "(nothing)", "sbatch-het": "hetjob: `A : A`"}.get(launcher, launcher)
        if launcher == "sbatch" and options:
            label = f"`{label}`"
        cells = []
        for b, t in columns:
            form = by_id[f"{b}{'-typed' if t else ''}+{modifier}"]
            cells.append(expected(form).cell({"24.11": expected(form, "24.11")}))
        lines.append("| " + " | ".join([label, *cells]) + " |")
    return "\n".join(lines) + "\n"
