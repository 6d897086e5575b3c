"""The levels of a workload's identity: edits of values keep the variant and the command,
real changes do not; the levels nest; every key holds the user."""
import pytest

from packer.fingerprint import fingerprint
from packer.workload_identity import (
    COMMAND, EXACT, VARIANT, WorkloadKeys, abstract_word, command_text, variant_text, workload_keys,
)

BASE = """#!/bin/bash
#SBATCH --gres=gpu:1
#SBATCH --output=/scratch/ann/run1/out.log
cd /scratch/ann
export SEED=1
srun python3 /home/ann/proj/train.py --lr 0.01 --epochs 10 --model vit --save=/scratch/ann/run1/ckpt_100.pt
"""


def keys(script, user="ann", name="train"):
    return workload_keys(user, name, script)


@pytest.mark.parametrize("edit", [
    ("--lr 0.01", "--lr 0.02"),
    ("--lr 0.01", "--lr 3e-4"),
    ("--epochs 10", "--epochs 200"),
    ("SEED=1", "SEED=42"),
    ("run1/ckpt_100.pt", "run7/ckpt_900.pt"),
    ("/scratch/ann/run1/out.log", "/other/place/out.log"),
    ("#SBATCH --gres=gpu:1", "#SBATCH --gres=gpu:1\n#SBATCH --time=10:00:00"),
    ("#SBATCH --gres=gpu:1", "#SBATCH --gres=gpu:1\n#SBATCH -t 60"),
    ("#SBATCH --gres=gpu:1", "#SBATCH --gres=gpu:1\n#SBATCH --mail-user=ann@example.org"),
    ("--model vit", "--model  'vit'"),
])
def test_an_edit_of_values_keeps_the_variant_and_the_command(edit):
    old, new = keys(BASE), keys(BASE.replace(*edit))
    assert old.exact != new.exact
    assert old.variant == new.variant and old.command == new.command


@pytest.mark.parametrize("change", [
    ("--model vit", "--model resnet"),  # a word value: another model
    ("--epochs 10", "--epochs 10 --fp16"),  # another option
    ("#SBATCH --gres=gpu:1", "#SBATCH --gres=gpu:1\n#SBATCH --mem=64G"),  # a directive that shapes the job
    ("python3", "python3 -u"),  # a flag of the interpreter
])
def test_a_real_change_is_another_variant_but_the_same_command(change):
    old, new = keys(BASE), keys(BASE.replace(*change))
    assert old.variant != new.variant
    assert old.command == new.command


@pytest.mark.parametrize("change", [
    ("train.py", "eval.py"),  # another script
    ("srun python3", "srun torchrun --nproc 1"),  # another program: torchrun train.py
    ("cd /scratch/ann", "cd /scratch/ann\npython3 prepare.py"),  # one more command
])
def test_another_command_matches_at_no_level(change):
    old, new = keys(BASE), keys(BASE.replace(*change))
    assert old.variant != new.variant and old.command != new.command


def test_setup_lines_are_not_commands_but_change_the_variant():
    old, new = keys(BASE), keys(BASE.replace("export SEED=1", "export SEED=1\nmodule load cuda\necho start"))
    assert old.variant != new.variant and old.command == new.command
    assert command_text(BASE.encode()) == b"srun python3 train.py"


def test_every_level_holds_the_user_and_the_name_up_to_its_digits():
    ann, bob = keys(BASE, "ann"), keys(BASE, "bob")
    assert ann.exact != bob.exact and ann.variant != bob.variant and ann.command != bob.command
    lr1, lr2 = keys(BASE, name="exp-lr0.01"), keys(BASE, name="exp-lr0.02")
    assert lr1.exact != lr2.exact and lr1.variant == lr2.variant and lr1.command == lr2.command
    other = keys(BASE, name="eval")
    assert other.variant != keys(BASE).variant and other.command != keys(BASE).command


def test_the_exact_level_is_the_fingerprint_and_the_levels_nest():
    k = keys(BASE)
    assert k.exact == fingerprint("ann", "train", BASE)
    assert keys(BASE + "\n# a comment\n") == k  # the fingerprint's own edits: equal at every level
    assert k.known() == ((EXACT, k.exact), (VARIANT, k.variant), (COMMAND, k.command))
    assert len({k.exact, k.variant, k.command}) == 3  # the levels' keys never collide


def test_scripts_without_a_looser_level():
    python = "#!/usr/bin/env python3\nimport torch\nlr = 0.01\n"
    k = keys(python)
    assert k.variant == keys(python.replace("0.01", "0.5")).variant and k.command is None
    big = BASE + "#" * (70 * 1024)
    assert keys(big).variant is None and keys(big).command is None
    assert keys("#!/bin/bash\ncd /tmp\necho hi\n").command is None  # nothing is run
    with pytest.raises(ValueError, match="unknown history level"):
        WorkloadKeys("a", None, None).key("fuzzy")


def test_words_abstracted():
    assert abstract_word("--lr=0.01") == "--lr=<n>"
    assert abstract_word("/data/set-3/shard_0042.tar") == "<path>/shard_<n>.tar"
    assert abstract_word("resnet50") == "resnet50"  # a name with letters stays
    assert abstract_word("2024-01-05") == "<n>-<n>-<n>"
    assert abstract_word('"vit"') == "vit"
    assert variant_text(b"#!/bin/bash\n#SBATCH --time=1:00\npython3 a.py 1\n") == b"#!<path>/bash\npython3 a.py <n>"
