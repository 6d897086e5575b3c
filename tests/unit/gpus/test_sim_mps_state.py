"""The stand-in MPS control daemon's answers (pure): what it sets, and what it refuses."""
import pytest

from gpus.sim.mps_state import MpsRefused, MpsState, env_limit, parse_limit


def test_defaults_reach_servers_started_later_only():
    s = MpsState()
    s.answer("set_default_active_thread_percentage 30")
    s.answer("set_default_device_pinned_mem_limit 0 2G")
    server, pct, pinned = s.answer("sim_connect_client 1000 11").split()
    assert (pct, pinned) == ("30", str(2 << 30))
    s.answer("set_default_active_thread_percentage 70")
    assert s.answer(f"get_active_thread_percentage {server}") == "30"  # the running server keeps its own
    s.answer(f"set_active_thread_percentage {server} 50")
    s.answer(f"set_device_pinned_mem_limit {server} 0 512M")
    assert s.answer(f"get_device_pinned_mem_limit {server} 0") == "512M"
    assert s.answer("sim_connect_client 1000 12").split()[1:] == ["50", str(512 << 20)]
    assert s.answer(f"get_client_list {server}").split() == ["11", "12"]


def test_one_users_server_at_a_time():
    s = MpsState()
    s.answer("sim_connect_client 1000 11")
    with pytest.raises(MpsRefused, match="uid 1000 has clients"):
        s.answer("start_server -uid 1001")
    with pytest.raises(MpsRefused, match="uid 1000 has clients"):
        s.answer("sim_connect_client 1001 12")
    # the first user's clients gone (dead pids are dropped): the second user's server starts
    s.answer("sim_connect_client 1001 12", alive=lambda pid: pid != 11)
    assert [srv.uid for srv in s.servers] == [1001]


@pytest.mark.parametrize("line,why", [
    ("set_default_active_thread_percentage 0", "1 to 100"),
    ("set_default_active_thread_percentage 101", "1 to 100"),
    ("set_default_device_pinned_mem_limit 0 lots", "Invalid memory limit"),
    ("set_default_device_pinned_mem_limit GPU-x 2G", "Invalid device"),
    ("set_active_thread_percentage 42 50", "Server 42 not found"),
    ("make_coffee", "Unknown command"),
    ("start_server 1000", "Wrong arguments"),
])
def test_refusals(line, why):
    with pytest.raises(MpsRefused, match=why):
        MpsState().answer(line)


def test_sizes():
    assert parse_limit("2G") == 2 << 30 and parse_limit("500M") == 500 << 20 and parse_limit("4096") == 4096
    assert env_limit("0=1G,1=2G", 1) == 2 << 30 and env_limit("3G") == 3 << 30
    assert env_limit("1=2G") is None and env_limit("0=junk") is None and env_limit(None) is None


class _Device:
    def __init__(self, busy: bool = False):
        self.busy, self.held = busy, []

    def open(self, server: int, uid: int) -> None:
        if self.busy:
            raise MpsRefused("all CUDA-capable devices are busy or unavailable")
        self.held.append(server)

    def close(self, server: int) -> None:
        self.held.remove(server)


def test_a_server_opens_its_context_at_start_server_and_closes_it_when_it_ends():
    device = _Device()
    s = MpsState(contexts=device)
    s.answer("start_server -uid 1000")
    (server,) = s.servers
    assert device.held == [server.pid] and "contexts" not in s.to_dict()
    s.answer("sim_connect_client 1000 11", alive=lambda pid: True)
    assert device.held == [server.pid]  # the client joins it
    s.answer("start_server -uid 1001", alive=lambda pid: False)  # the idle server of 1000 ends
    assert device.held == [s.servers[0].pid] and s.servers[0].uid == 1001
    s.answer("quit")
    assert device.held == []
    busy = MpsState(contexts=_Device(busy=True))
    with pytest.raises(MpsRefused, match="busy"):
        busy.answer("start_server -uid 1000")
    assert busy.servers == []
