"""Head-of-queue requeues under priority/multifactor with fair-share.

The session's cluster is brought up again with slurmdbd and MariaDB (`--accounting`),
priority/multifactor weighing fair-share only, and Slurm's default cred_expire, for this
module; the suite's cluster is put back afterwards. Two accounts: `fair-a` has run every job
so far (its usage is high), `fair-b` none. A job of fair-a that the suite restarts for its memory is lifted to the head:
its priority (the order Slurm starts jobs in) is above fair-b's waiting job's, although
fair-share ranks its account last; once it runs its own nice is back, and the two jobs left
start in fair-share's order (fair-b's first, although fair-a's was submitted before it).

Node1 holds the test: GPU0 a filler (its 5 shares), GPU1 a sleeper of 1 share and the growing
job (1 share), so that the job restarts beside the sleeper and neither waiting job (5 shares
each) fits anywhere until a whole GPU is freed; node2 and node3 hold one whole-GPU filler per
GPU. (The requeued job does not compete for its own freed GPU here: while Slurm's requeue
delay runs, any eligible job could take it.)
"""
from __future__ import annotations

import dataclasses

import pytest

from conftest import start_cluster
from slurm_plugin.devcluster.errors import DevClusterError
from e2e_support import SLEEP, events, simgpu_script, wait_for

pytestmark = pytest.mark.integration

ACCOUNTS = ("fair-a", "fair-b")


@pytest.fixture(scope="module")
def fair_cluster(cluster):
    """The session's cluster with accounting and fair-share; put back as it was after."""
    base = cluster.dev.spec
    cluster.cancel_all()
    # and Slurm's default cred_expire (121 s of requeue delay), as on a real site
    try:
        fair = start_cluster(dataclasses.replace(base, accounting=True, priority="multifactor", cred_expire_s=None),
                             cluster.workdir)
    except DevClusterError:
        start_cluster(base, cluster.workdir)  # the suite's cluster for the tests after this one
        raise
    try:
        for account in ACCOUNTS:
            fair.run("sacctmgr", "-i", "add", "account", account, check=False)  # kept from an earlier run
        fair.run("sacctmgr", "-i", "add", "user", "root", f"account={','.join(ACCOUNTS)}", check=False)
        listed = fair.run("sacctmgr", "-nP", "show", "assoc", "user=root", "format=account").stdout.decode().split()
        assert set(ACCOUNTS) <= set(listed), listed
        yield fair
    finally:
        fair.cancel_all()
        start_cluster(base, cluster.workdir)  # slurmdbd and MariaDB stop: the suite's cluster again


def priority(cluster, job_id: int) -> int:
    return int(cluster.run("squeue", "-h", "-j", str(job_id), "-o", "%Q").stdout.decode().strip() or 0)


def usage(cluster, account: str) -> float:
    out = cluster.run("sshare", "-nP", "-A", account, "-o", "Account,User,RawUsage").stdout.decode()
    return sum(float(line.split("|")[2] or 0) for line in out.splitlines() if line.count("|") == 2)


def test_the_requeued_job_goes_first_once_then_fair_share_orders_the_rest(fair_cluster):
    c = fair_cluster
    a = ["-A", "fair-a"]
    gpu0 = c.submit([*a, "-J", "fair-fill", "-w", "node1", "--gres=shard:5"], SLEEP)
    c.wait(gpu0, "RUNNING", 30)
    sleeper = c.submit([*a, "-J", "fair-fill", "-w", "node1", "--gres=shard:1"], SLEEP)
    others = [c.submit([*a, "-J", "fair-fill", "-w", node, "--gres=gpu:1"], SLEEP)
              for node in ("node2", "node2", "node3", "node3")]
    for job in (sleeper, *others):
        c.wait(job, "RUNNING", 30)
    # fair-a's usage is recorded on slurmctld's next priority pass (PriorityCalcPeriod, 1 min)
    wait_for(lambda: usage(c, "fair-a") > 0 and usage(c, "fair-b") == 0, 150, "fair-a's usage recorded")

    waiting_a = c.submit([*a, "-J", "fair-wait-a", "--gres=shard:5"], SLEEP)  # the older one
    waiting_b = c.submit(["-A", "fair-b", "-J", "fair-wait-b", "--gres=shard:5"], SLEEP)
    wait_for(lambda: priority(c, waiting_b) > priority(c, waiting_a) > 0, 30, "fair-share ranks fair-b first")
    grower = c.submit([*a, "-J", "fair-grow", "-w", "node1", "-t", "1", "--gres=shard:1"],
                      simgpu_script("--oom-report --mem-start 2GiB --mem-growth 30MiB --iters 400 --iter-ms 50"))
    c.wait(grower, "RUNNING", 30)

    # restarted for its memory: before it runs out (the forecast), or when it runs out in its
    # share. Both lift it to the head. On a loaded machine the simulated job's growth slows
    # unevenly, the forecaster reads that as a deceleration and does not extrapolate, and the
    # share fills first (22.05, 2 of 3 validation rounds with three releases at once). The
    # forecast's own live test is test_e2e_helper_monitor's.
    (restart,) = wait_for(lambda: events(c, "restart-memory", grower) or events(c, "restart-oom", grower), 60,
                          "the grower's restart")
    lifted = restart.data["priority"]  # what the lift gave it, above every pending job
    assert lifted > priority(c, waiting_b) > priority(c, waiting_a), (lifted, priority(c, waiting_b))
    # well before Slurm's requeue delay (cred_expire + 1 s = 121 s): the watcher sets its
    # StartTime to now once the old run is gone
    c.wait(grower, "RUNNING", 60)
    assert c.state(waiting_a) == c.state(waiting_b) == "PENDING"
    # once: running, it has its own nice back and Slurm's own priority
    wait_for(lambda: c.job(grower)["Nice"] == "0", 20, "the lift ended")

    # then fair-share: a whole GPU freed starts fair-b's job, not the older one of fair-a
    c.run("scancel", str(gpu0))
    first = wait_for(lambda: [j for j in (waiting_a, waiting_b) if c.state(j) == "RUNNING"], 40,
                     "a waiting job started")
    assert first == [waiting_b], f"fair-share should start fair-b's job first, started {first}"
    assert c.state(waiting_a) == "PENDING"
    c.run("scancel", str(others[0]))
    c.wait(waiting_a, "RUNNING", 40)
    assert int(restart.data["from_shards"]) == 1
