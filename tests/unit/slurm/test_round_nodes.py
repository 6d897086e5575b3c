"""One node listing per watcher round: the round's readers share it, a changing command or the
next round lists again, and a runner no round was begun on lists every time."""
from slurm_plugin.slurm.fake import FakeSlurm
from slurm_plugin.slurm.runner import SlurmRunner


def _node_listings(fake: FakeSlurm) -> int:
    return sum(1 for argv in fake.calls if "node" in " ".join(argv) or argv[0] == "sinfo")


def test_a_round_lists_the_nodes_once_for_all_its_readers():
    fake = FakeSlurm("22.05.8")
    runner = SlurmRunner(executor=fake)
    runner.version()
    runner.begin_round()
    first = runner.nodes()
    assert runner.nodes() == first and runner.nodes() == first
    assert _node_listings(fake) == 1
    fake.nodes["node1"].state = "DRAIN"
    assert "DRAIN" not in _state(runner, "node1")  # the round's listing stands within the round
    runner.begin_round()
    assert "DRAIN" in _state(runner, "node1")  # the next round sees the change
    assert _node_listings(fake) == 2


def _state(runner: SlurmRunner, name: str) -> tuple[str, ...]:
    return next(n.state for n in runner.nodes() if n.name == name)


def test_a_command_that_changes_a_job_lists_them_again_within_the_round():
    fake = FakeSlurm("22.05.8")
    job = fake.submit(gres="gres:gpu:1")
    runner = SlurmRunner(executor=fake)
    runner.version()
    runner.begin_round()
    runner.nodes()
    runner.hold(job)
    runner.nodes()
    assert _node_listings(fake) == 2


def test_without_a_round_every_call_lists():
    fake = FakeSlurm("22.05.8")
    runner = SlurmRunner(executor=fake)
    runner.nodes()
    runner.nodes()
    assert _node_listings(fake) == 2


def test_a_caller_changing_the_list_it_got_does_not_change_the_rounds():
    fake = FakeSlurm("22.05.8")
    runner = SlurmRunner(executor=fake)
    runner.begin_round()
    got = runner.nodes()
    got.clear()
    assert len(runner.nodes()) == 2
