"""NVML free memory (gleaner.runtime_agent.nvml) against a fake libnvidia-ml.so.1
(tests/runtime-agent/fake_nvml.c).

pynvml opens ``libnvidia-ml.so.1`` by name, so each test runs its Python in a subprocess whose
``LD_LIBRARY_PATH`` holds the fake (the dynamic loader reads it at process start). The fake
reads its devices and their free memory from a state file at every call, so a test changes
free memory while the agent runs.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gleaner.api.nodetrace import gpu_uuid
from gleaner.protocol import wire as p
from gleaner.testing.agent import agent_process
from gleaner.testing.kube import wait_for

MIB = 1 << 20
GIB = 1 << 30
HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def fake_nvml(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding the fake ``libnvidia-ml.so.1``, built with gcc."""
    if shutil.which("gcc") is None:
        pytest.fail("the NVML tests need gcc (scripts/bootstrap.sh installs it)")
    out = tmp_path_factory.mktemp("fake-nvml")
    subprocess.run(
        ["gcc", "-O1", "-Wall", "-Werror", "-shared", "-fPIC", "-o", str(out / "libnvidia-ml.so.1"),
         str(HERE / "fake_nvml.c")],
        check=True,
    )  # fmt: skip
    return out


def _env(lib_dir: Path, state: Path, log: Path | None = None) -> dict[str, str]:
    env = {**os.environ, "LD_LIBRARY_PATH": str(lib_dir), "GLEANER_FAKE_NVML_STATE": str(state)}
    if log is not None:
        env["GLEANER_FAKE_NVML_LOG"] = str(log)
    return env


def _write_state(state: Path, rows: Sequence[tuple[str, int, int | None]], pids: str = "-") -> None:
    """One device per row; ``pids``: every device's processes ("1,2"; "-" none; "!" fails)."""
    tmp = state.with_suffix(".tmp")
    tmp.write_text("".join(f"{u} {t} {'-' if f is None else f} {pids}\n" for u, t, f in rows))
    tmp.replace(state)  # atomic: the fake never reads half a file


PROBE = textwrap.dedent(
    """
    import json, logging, sys
    from gleaner.runtime_agent.nvml import NvmlFreeMemory
    from gleaner.api import GpuInfo

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(message)s")
    now = [0.0]
    inventory = [GpuInfo(index=i, uuid=u, product="x", memory_gi_b=80) for i, u in
                 enumerate(json.loads(sys.argv[1]))]
    nvml = NvmlFreeMemory.open(inventory, ttl_s=0.5, clock=lambda: now[0])
    out = {"opened": nvml is not None, "reads": []}
    if nvml is not None:
        for line in sys.stdin:  # one command per line: "t <seconds>" or "read <gpu>"
            cmd, arg = line.split()
            if cmd == "t":
                now[0] = float(arg)
            else:
                out["reads"].append(nvml.free_bytes(int(arg)))
            print("ok", flush=True)
        nvml.close()
    print(json.dumps(out), flush=True)
    """
)


class Probe:
    """NvmlFreeMemory in a subprocess, driven a command at a time (so the test can change
    the fake's state between reads)."""

    def __init__(self, env: dict[str, str], uuids: list[str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", PROBE, json.dumps(uuids)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )

    def cmd(self, line: str) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline().strip() == "ok"

    def finish(self) -> tuple[dict[str, object], str]:
        out, err = self.proc.communicate(timeout=30)
        assert self.proc.returncode == 0, err
        return json.loads(out.strip().splitlines()[-1]), err


def test_free_memory_by_uuid_cached_for_its_ttl(fake_nvml: Path, tmp_path: Path) -> None:
    state, log = tmp_path / "state", tmp_path / "calls"
    a, b, c = "GPU-aaaa", "GPU-bbbb", "GPU-cccc"
    # NVML's order differs from the inventory's: the UUID decides, not the index.
    _write_state(state, [(b, 80 * GIB, 7 * GIB), (a, 80 * GIB, 3 * GIB)])
    probe = Probe(_env(fake_nvml, state, log), [a, b, c])
    probe.cmd("read 0")
    probe.cmd("read 1")
    probe.cmd("read 2")  # c: NVML does not know it
    _write_state(state, [(b, 80 * GIB, 1 * GIB), (a, 80 * GIB, 2 * GIB)])
    probe.cmd("t 0.4")
    probe.cmd("read 0")  # within the TTL: the cached reading, no query
    probe.cmd("t 0.6")
    probe.cmd("read 0")  # past it: queried again
    probe.cmd("read 1")
    _write_state(state, [(b, 80 * GIB, None), (a, 80 * GIB, 2 * GIB)])  # b's query fails
    probe.cmd("t 2.0")
    probe.cmd("read 1")
    probe.cmd("read 1")  # a failure is not cached: queried again, logged once
    _write_state(state, [(b, 80 * GIB, 5 * GIB), (a, 80 * GIB, 2 * GIB)])
    probe.cmd("read 1")
    out, err = probe.finish()
    assert out["opened"] is True
    assert out["reads"] == [3 * GIB, 7 * GIB, None, 3 * GIB, 2 * GIB, GIB, None, None, 5 * GIB]
    calls = log.read_text().split("\n")
    assert [line.split()[1] for line in calls if line] == [a, b, a, b, b, b, b]
    assert err.count("NVML does not know GPU 2") == 1
    assert err.count("NVML memory query for GPU 1 failed") == 1


@pytest.mark.parametrize("how", ["no driver", "no library"])
def test_without_nvml_free_memory_stays_unknown(fake_nvml: Path, tmp_path: Path, how: str) -> None:
    lib_dir = fake_nvml if how == "no driver" else tmp_path  # no libnvidia-ml.so.1 there
    probe = Probe(_env(lib_dir, tmp_path / "absent-state"), ["GPU-aaaa"])
    out, err = probe.finish()
    assert out == {"opened": False, "reads": []}
    assert err.count("free GPU memory stays unknown") == 1
    if how == "no driver":
        assert "Driver Not Loaded" in err


# -- the agent daemon with NVML ---------------------------------------------------------------

NODE = "nvml-node"
DAEMON = textwrap.dedent(
    """
    import asyncio, logging, sys
    from pathlib import Path
    from gleaner.runtime_agent.daemon import AgentDaemon, AgentOptions
    from gleaner.runtime_agent.policy import GateConfig, InstrumentationConfig, MemoryConfig

    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    sock_dir, port = Path(sys.argv[1]), int(sys.argv[2])
    options = AgentOptions(
        backend="nvidia", node=sys.argv[3], metrics_host="127.0.0.1", metrics_port=port,
        socket_dir=sock_dir, gpus=1, kube=False,
        gate=GateConfig(cool_floor_s=0.05, cool_ceiling_s=0.05),
        memory=MemoryConfig(initial_handles=4, min_handles=4, initial_interval_s=60.0,
                            max_interval_s=60.0),
        shim_source=sock_dir / "absent.so",
        # peer_pids off: the test plays several processes from one (their peer pid).
        instrumentation=InstrumentationConfig(
            silence_s=float(sys.argv[4]) if len(sys.argv) > 4 else 5.0, peer_pids=False
        ),
        instrumentation_poll_s=0.05,
    )
    asyncio.run(AgentDaemon(options).run())
    """
)


@pytest.fixture
def nvml_daemon(
    fake_nvml: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[tuple[Path, str, Path]]:
    """The nvidia-backend daemon in a subprocess on the fake NVML: (socket, metrics URL, state).

    ``@pytest.mark.parametrize("nvml_daemon", [SECONDS], indirect=True)`` sets the online
    silence limit (5 s otherwise)."""
    sock_dir = Path(tempfile.mkdtemp(prefix="glnv", dir="/tmp"))  # sun_path is short
    state = tmp_path / "state"
    _write_state(state, [(gpu_uuid(NODE, 0), 80 * GIB, GIB)])
    args = ["-c", DAEMON, str(sock_dir), "{port}", NODE]
    if getattr(request, "param", None) is not None:
        args.append(str(request.param))
    try:
        with agent_process(args, tmp_path / "agent.log", env=_env(fake_nvml, state)) as agent:
            yield sock_dir / "agent.sock", agent.base, state
    finally:
        shutil.rmtree(sock_dir, ignore_errors=True)


class Conn:
    def __init__(self, path: Path, hello: p.Hello) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(str(path))
        self.decoder = p.FrameDecoder()
        self.send(hello)

    def send(self, msg: p.Message) -> None:
        p.send_message(self.sock, msg)

    def frames(self, seconds: float) -> list[p.Message]:
        """Every frame that arrives within ``seconds``."""
        got: list[p.Message] = []
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            self.sock.settimeout(left)
            try:
                msgs = p.recv_messages(self.sock, self.decoder)
            except TimeoutError:
                break
            if msgs is None:
                break
            got.extend(msgs)
        return got

    def expect(self, kind: type[p.Message], timeout: float = 10.0) -> list[p.Message]:
        """Frames up to and including the first ``kind`` (which is last)."""
        got: list[p.Message] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                msgs = p.recv_messages(self.sock, self.decoder)
            except TimeoutError:
                break
            assert msgs is not None, "connection closed"
            for m in msgs:
                got.append(m)
                if isinstance(m, kind):
                    return got
        raise AssertionError(f"no {kind.__name__} within {timeout} s (got {got})")


def _metric(base: str, name: str) -> float:
    text = httpx.get(f"{base}/metrics", timeout=5).text
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == name and s.labels.get("gpu") == "0":
                return float(s.value)
    raise AssertionError(f"{name} not exported")


HB = 2 * MIB  # the agent's handle (and page) size


def test_pressure_reclaims_only_what_nvml_free_memory_cannot_cover(
    nvml_daemon: tuple[Path, str, Path],
) -> None:
    path, base, state = nvml_daemon
    uuid = gpu_uuid(NODE, 0)
    off = Conn(path, p.Hello(pid=100, role=p.Role.OFFLINE, gpu_uuids=(uuid,), job="ns/job"))
    ack = off.expect(p.HelloAck)[-1]
    assert isinstance(ack, p.HelloAck)
    if not ack.gate_open:  # the gate opens one cooldown after the agent's start
        gate = off.expect(p.Gate)[-1]
        assert isinstance(gate, p.Gate) and gate.enable
        off.send(p.GateAck(gate_seq=gate.gate_seq, enabled=True, ok=True))
    hook = Conn(path, p.Hello(pid=100, role=p.Role.FRAMEWORK, job="ns/job", gpu_indices=(0,)))
    entries = tuple(
        p.HandleSpan(0x7F0000000000 + i * HB, HB, f"req-{i}", tokens=10, block_ids=(i,))
        for i in range(12)
    )
    hook.send(p.OfflineHandles(gpu=0, entries=entries))
    on = Conn(path, p.Hello(pid=200, role=p.Role.ONLINE, gpu_uuids=(uuid,)))
    wait_for(lambda: _metric(base, "gleaner_gpu_harvestable_memory_bytes") > 0)

    # 1 GiB free: the growth 4 → 8 handles is covered; nothing is reclaimed, compute stays on.
    on.send(p.OnlineMemory(gpu=0, kv_used_bytes=4 * HB, kv_reserved_bytes=64 * HB))
    wait_for(lambda: _metric(base, "gleaner_memory_reservation_headroom_bytes") == 8 * HB)
    assert [m for m in off.frames(1.0) if isinstance(m, p.Gate | p.Reclaim)] == []
    assert _metric(base, "gleaner_memory_reclaim_events_total") == 0

    # 3 MiB free (one whole handle): the growth 8 → 16 reclaims the other 7 handles.
    _write_state(state, [(uuid, 80 * GIB, 3 * MIB)])
    time.sleep(0.3)  # past the NVML reading's 100 ms cache
    on.send(p.OnlineMemory(gpu=0, kv_used_bytes=8 * HB, kv_reserved_bytes=64 * HB))
    got = off.expect(p.Gate)
    off_gate = got[-1]
    assert isinstance(off_gate, p.Gate) and not off_gate.enable
    off.send(p.GateAck(gate_seq=off_gate.gate_seq, enabled=False, ok=True))
    rec = off.expect(p.Reclaim)[-1]
    assert isinstance(rec, p.Reclaim) and len(rec.handles) == 7
    off.send(p.ReclaimAck(reclaim_seq=rec.reclaim_seq, gpu=rec.gpu, released=7))
    wait_for(lambda: _metric(base, "gleaner_memory_reclaimed_bytes_total") == 7 * HB)
    assert _metric(base, "gleaner_memory_quarantined_bytes") == 7 * HB
    for c in (off, hook, on):
        c.sock.close()


# -- uninstrumented processes ----------------------------------------------------------------


def _gate(conn: Conn, enable: bool, timeout: float = 10.0) -> None:
    """Wait for a GATE of that direction to the offline ``conn`` and acknowledge it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = conn.expect(p.Gate, timeout=max(0.1, deadline - time.monotonic()))[-1]
        assert isinstance(got, p.Gate)
        conn.send(p.GateAck(gate_seq=got.gate_seq, enabled=got.enable, ok=True))
        if got.enable == enable:
            return
    raise AssertionError(f"no GATE enable={enable}")


def _health(base: str) -> dict[str, object]:
    data = httpx.get(f"{base}/healthz", timeout=5).json()
    assert isinstance(data, dict)
    found = data["uninstrumented"]
    assert isinstance(found, dict)
    return found


def test_the_gate_stays_closed_over_a_process_no_shim_accounts_for(
    nvml_daemon: tuple[Path, str, Path],
) -> None:
    path, base, state = nvml_daemon
    uuid = gpu_uuid(NODE, 0)
    row = [(uuid, 80 * GIB, GIB)]
    # pid 100 is the offline shim, 300 an online service without the shim.
    _write_state(state, row, "100,300")
    wait_for(lambda: _metric(base, "gleaner_gpu_uninstrumented_processes") == 2)
    off = Conn(path, p.Hello(pid=100, role=p.Role.OFFLINE, gpu_uuids=(uuid,), job="ns/job"))
    ack = off.expect(p.HelloAck)[-1]
    assert isinstance(ack, p.HelloAck) and not ack.gate_open
    wait_for(lambda: _metric(base, "gleaner_gpu_uninstrumented_processes") == 1)
    assert [m for m in off.frames(0.5) if isinstance(m, p.Gate) and m.enable] == []
    assert _health(base) == {"enforced": True, "gpus": {"0": [{"pid": 300, "why": "unknown",
                                                               "pod": ""}]}}  # fmt: skip

    # It ends: the gate opens by its usual rule.
    _write_state(state, row, "100")
    _gate(off, enable=True)
    assert _metric(base, "gleaner_gpu_uninstrumented_processes") == 0

    # An instrumented online process: the gate stays open while it is connected.
    # Its shim says hello before NVML lists the process (the shim connects when the process
    # opens the GPU, before its context exists). The other order is a process NVML lists
    # with no shim yet: uninstrumented until the hello, and the gate rightly closes.
    on = Conn(path, p.Hello(pid=200, role=p.Role.ONLINE, gpu_uuids=(uuid,)))
    on.expect(p.HelloAck)  # the agent has taken the hello in
    _write_state(state, row, "100,200")
    assert [m for m in off.frames(0.3) if isinstance(m, p.Gate)] == []
    # Its shim disconnects while the process runs on: closed at once, until it is gone.
    on.sock.close()
    _gate(off, enable=False, timeout=2.0)
    wait_for(lambda: _metric(base, "gleaner_gpu_uninstrumented_processes") == 1)
    gpus = _health(base)["gpus"]
    assert gpus == {"0": [{"pid": 200, "why": "disconnected", "pod": ""}]}
    assert [m for m in off.frames(0.3) if isinstance(m, p.Gate) and m.enable] == []
    _write_state(state, row, "100")  # it vanished
    _gate(off, enable=True)
    off.sock.close()


@pytest.mark.parametrize("nvml_daemon", [0.5], indirect=True)
def test_a_silent_online_shim_closes_the_gate_until_it_speaks(
    nvml_daemon: tuple[Path, str, Path],
) -> None:
    path, base, state = nvml_daemon
    uuid = gpu_uuid(NODE, 0)
    _write_state(state, [(uuid, 80 * GIB, GIB)], "!")  # NVML cannot list processes here
    off = Conn(path, p.Hello(pid=100, role=p.Role.OFFLINE, gpu_uuids=(uuid,), job="ns/job"))
    ack = off.expect(p.HelloAck)[-1]
    assert isinstance(ack, p.HelloAck)
    if not ack.gate_open:
        _gate(off, enable=True)
    on = Conn(path, p.Hello(pid=200, role=p.Role.ONLINE, gpu_uuids=(uuid,)))
    assert [m for m in off.frames(0.3) if isinstance(m, p.Gate)] == []
    _gate(off, enable=False, timeout=3.0)  # 0.5 s without a frame from the online shim
    assert _health(base)["gpus"] == {"0": [{"pid": 200, "why": "silent", "pod": ""}]}
    on.send(p.Heartbeat(mono_ns=1, pid=200))
    _gate(off, enable=True, timeout=3.0)
    for c in (off, on):
        c.sock.close()
