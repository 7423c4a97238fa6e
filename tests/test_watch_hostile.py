"""``gpu-forensics watch`` under attack (issue 27, "Hostile round two"): its listener flooded from the pod network,
its state file written by someone else, its ``--out`` full. Real parts only: the agent as a real process on
a real socket (a generated node root, tests/nodegen.py), real descriptor limits (RLIMIT_NOFILE set on the
running agent with prlimit(2)), real files, links and FIFOs, a real tmpfs, and for losses the container lab's
real containerd, runc and cgroup v1 device rules (tests/lab.py).

1. the listener: hundreds of idle connections that sent half a request hold neither threads nor descriptors,
   a scrape from another address still answers within a second or two, sweeps go on; EMFILE backs off
   instead of spinning; odd requests (long, slow, other methods) get one short answer;
2. the state file: a ``pending`` name that leaves ``--out``, wrong-typed values, a link, a FIFO, a directory,
   a huge file: each is set aside (``watch-state.json.bad-<stamp>``, same bytes), said in one line, and the
   agent starts afresh; any JSON and any bytes (Hypothesis) load or are set aside, never raise; a directory at
   a pending bundle's name that does not verify is kept as it is; a loop that dies ends the process with 1;
3. ``--out`` full (a real tmpfs, filled): the probe runs all the same, the loss is in the metrics and in ``watch-losses.txt``;
   ``--keep-bytes`` holds for the newest bundle too.
"""
from __future__ import annotations

import json
import os
import re
import resource
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs
from prometheus_client.parser import text_string_to_metric_families

import nodegen as N
from forensics.bundle import verify
from forensics.ops.watch import listener as L
from forensics.ops.watch import state as st
from forensics.ops.watch.agent import Agent
from test_faults import small_tmpfs  # noqa: F401 - a fixture: a real tmpfs of 200 KiB

PROJECT = Path(__file__).resolve().parent.parent
ROOT = N.BY_ID["cri-v1-nvdp-ubuntu2204"]
SCRAPER = "127.0.0.2"  #: the kubelet's or Prometheus's address: not the flood's
FLOODERS = [f"127.0.0.{i}" for i in range(10, 30)]  #: the flood comes from 20 addresses (pods)
HALF = b"GET /metrics HTTP/1.1\r\nHost: x\r\n"  #: a request head that never ends


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    """A generated node root (two GPU containers, no live process: the probe gives no answer)."""
    root = tmp_path_factory.mktemp("hostile") / "root"
    N.make_root(root, ROOT)
    return root


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Watch:
    """``gpu-forensics watch`` as a real process on ``127.0.0.1:<free port>``, its stderr in ``log``."""

    def __init__(self, root: Path, out: Path, log: Path, interval: float, *extra: str):
        self.port, self.log = _free_port(), log
        argv = [sys.executable, "-m", "forensics.ops.cli", "watch", "--root", str(root), "--out", str(out),
                "--listen", f"127.0.0.1:{self.port}", "--interval", str(interval), *extra]
        with open(log, "ab") as f:
            self.p = subprocess.Popen(argv, cwd=PROJECT, env={**os.environ, "PYTHONPATH": str(PROJECT)},
                                      stdin=subprocess.DEVNULL, stdout=f, stderr=f)
        assert _until(lambda: self.sweeps() >= 1, 60), self.text()

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def sweeps(self) -> int:
        return len(re.findall(r" sweep \d+ \(", self.text()))

    def cpu_s(self) -> float:
        f = Path(f"/proc/{self.p.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime (proc(5) fields 14, 15)

    def threads(self) -> int:
        return int(re.search(r"^Threads:\s+(\d+)", Path(f"/proc/{self.p.pid}/status").read_text(), re.M)[1])

    def fds(self) -> list[int]:
        return sorted(int(n) for n in os.listdir(f"/proc/{self.p.pid}/fd"))

    def stop(self) -> int:
        self.p.terminate()
        return self.p.wait(30)


def _until(pred, timeout: float, step: float = 0.1):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = pred()
        if got:
            return got
        time.sleep(step)
    return pred()


def _get(port: int, path: str = "/metrics", src: str = SCRAPER, timeout: float = 5.0,
         request: bytes | None = None) -> tuple[int, bytes, float]:
    """``(status, body, seconds)`` of one request from ``src`` to the agent (the answer read to its end)."""
    t0 = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout, source_address=(src, 0)) as s:
        s.sendall(request or f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body, time.monotonic() - t0


def _flood(port: int, n: int) -> list[socket.socket]:
    """``n`` connections from :data:`FLOODERS`, each sending half a request and then nothing."""
    socks = []
    for i in range(n):
        s = socket.socket()
        s.setblocking(False)
        s.bind((FLOODERS[i % len(FLOODERS)], 0))
        try:
            s.connect(("127.0.0.1", port))
        except BlockingIOError:
            pass
        socks.append(s)
    time.sleep(0.3)
    for s in socks:
        try:
            s.send(HALF)
        except OSError:
            pass  # still in the SYN queue: it stays a half-open connection
    return socks


def _ended(s: socket.socket) -> bool:
    """Whether the agent closed (or answered and closed) this connection."""
    was = s.gettimeout()
    s.settimeout(0)
    try:
        return s.recv(4096, socket.MSG_PEEK) is not None
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        s.settimeout(was)


def _metrics(body: bytes) -> dict:
    return {(x.name, tuple(sorted(x.labels.items()))): x.value
            for fam in text_string_to_metric_families(body.decode()) for x in fam.samples}


# -- 1. the listener ------------------------------------------------------------------------------------------
def test_a_flood_of_idle_half_requests_holds_no_threads_and_stops_neither_scrapes_nor_sweeps(node, tmp_path):
    w = Watch(node, tmp_path / "out", tmp_path / "watch.log", 1)
    try:
        resource.prlimit(w.p.pid, resource.RLIMIT_NOFILE, (256, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        base_fds, sweeps0 = len(w.fds()), w.sweeps()
        socks = _flood(w.port, 600)  # 600 > 256: the old listener ran out of descriptors here
        threads, fds, scrapes = [], [], []
        for _ in range(6):
            code, body, took = _get(w.port)
            scrapes.append(took)
            assert code == 200 and _metrics(body)[("gpu_forensics_build_info", (("version", "0.1.0"),))] == 1
            threads.append(w.threads())
            fds.append(len(w.fds()))
            socks += _flood(w.port, 50)  # the flood goes on
            time.sleep(0.5)
        code, body, _ = _get(w.port, "/healthz")
        assert code == 200 and body.startswith(b"ok: last sweep ")
        assert max(scrapes) < 2.0, scrapes
        assert max(threads) <= 8, threads      # main, loop, listener, D-Bus, journal (+ a probe's child waiter)
        assert max(fds) <= base_fds + L.MAX_CONNECTIONS + 8, (base_fds, fds)
        assert w.sweeps() >= sweeps0 + 2, w.text()[-2000:]
        # the first ones (in the accept queue at once; later ones wait on SYN retries) are all gone within the
        # read deadline: evicted by the caps, or answered 408 and closed
        assert _until(lambda: all(_ended(s) for s in socks[:100]), L.READ_S + 3)
        assert w.p.poll() is None and w.stop() == 0
    finally:
        for s in locals().get("socks", []):
            s.close()
        if w.p.poll() is None:
            w.p.kill()
    text = w.text()
    assert f"listener: {L.MAX_CONNECTIONS} connections in all; the oldest waiting one closed" in text
    assert "Traceback" not in text
    assert len(re.findall(r"listener: ", text)) <= 4  # said once a minute, not per connection


def test_out_of_descriptors_the_listener_backs_off_instead_of_spinning(node, tmp_path):
    w = Watch(node, tmp_path / "out", tmp_path / "watch.log", 3600)
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    socks = []
    try:
        time.sleep(1)
        resource.prlimit(w.p.pid, resource.RLIMIT_NOFILE, (max(w.fds()) + 1, hard))  # no descriptor left
        socks = _flood(w.port, 200)
        assert _until(lambda: "EMFILE" in w.text(), 5), w.text()[-2000:]
        cpu0 = w.cpu_s()
        time.sleep(3)
        spent = w.cpu_s() - cpu0
        assert spent < 0.5, f"{spent:.2f} s of CPU in 3 s: accept() spins"  # a spin takes a whole core
        assert w.text().count("EMFILE") == 1  # one line, not one per failed accept
        resource.prlimit(w.p.pid, resource.RLIMIT_NOFILE, (1024, hard))
        for s in socks:
            s.close()
        code, body, took = _until(lambda: _try_get(w.port), 10)
        assert code == 200 and b"gpu_forensics_last_sweep_timestamp_seconds" in body
        assert w.stop() == 0
    finally:
        for s in socks:
            s.close()
        if w.p.poll() is None:
            w.p.kill()


def _try_get(port: int, path: str = "/metrics"):
    try:
        return _get(port, path, timeout=2)
    except OSError:
        return None


def test_odd_requests_get_one_short_answer(node, tmp_path):
    w = Watch(node, tmp_path / "out", tmp_path / "watch.log", 3600)
    try:
        assert _get(w.port, request=b"POST /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello")[0] == 405
        assert _get(w.port, request=b"DELETE / HTTP/1.1\r\n\r\n")[0] == 405
        assert _get(w.port, "/../../etc/passwd")[0] == 404
        assert _get(w.port, request=b"GET /metrics\r\n\r\n")[0] == 400  # HTTP/0.9
        assert _get(w.port, request=b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n")[0] == 400  # TLS hello
        code, body, _ = _get(w.port, request=b"GET /" + b"a" * 20_000 + b" HTTP/1.1\r\n\r\n")
        assert code == 431  # over the request bytes: answered once the bound is reached, the rest never read
        code, body, _ = _get(w.port, request=b"HEAD /metrics HTTP/1.0\r\n\r\n")
        assert code == 200 and body == b""
        # slowloris: a byte a second never completes the head; the read deadline ends it
        t0 = time.monotonic()
        with socket.create_connection(("127.0.0.1", w.port), timeout=15, source_address=(FLOODERS[0], 0)) as s:
            got = b""
            for b in HALF:
                try:
                    s.send(bytes([b]))
                except OSError:
                    break
                got = _peek(s)
                if got is not None:
                    break
                time.sleep(0.4)
            got = got or s.recv(4096)
        assert got.startswith(b"HTTP/1.1 408 ") and time.monotonic() - t0 < L.READ_S + 2
        # one address holds at most MAX_PER_PEER: its own oldest go, nobody else's
        mine = []
        for _ in range(40):
            c = socket.create_connection(("127.0.0.1", w.port), timeout=5, source_address=(FLOODERS[1], 0))
            c.sendall(HALF)
            mine.append(c)
        time.sleep(0.5)
        assert sum(not _ended(c) for c in mine) == L.MAX_PER_PEER and all(not _ended(c) for c in mine[-L.MAX_PER_PEER:])
        assert _get(w.port, "/healthz")[0] == 200 and w.p.poll() is None
        assert f"listener: {L.MAX_PER_PEER} connections from {FLOODERS[1]}; the oldest waiting one closed" in w.text()
        for c in mine:
            c.close()
    finally:
        w.stop()


def _peek(s: socket.socket):
    was = s.gettimeout()
    s.settimeout(0)
    try:
        return s.recv(4096)
    except BlockingIOError:
        return None
    finally:
        s.settimeout(was)


# -- 2. the state file ----------------------------------------------------------------------------------------
INCIDENT = {"start": "2026-12-02T10:00:00Z", "end": "2026-12-02T10:05:00Z", "label": "watch: GPU access lost (x)"}
CID = "a" * 64


def _valid() -> dict:
    """A state this agent could have written (one container, one loss, one pending)."""
    s = st.empty()
    s.update(access={CID: 1}, labels={CID: {"namespace": "ml", "pod": "p", "container": "c", "id": CID}},
             reloads_total=3, sweeps_total=9, last_sweep=1796141679.5,
             pending={"name": "loss-20261202T100500.000001Z", "ids": [CID], "incident": INCIDENT},
             losses=[{"name": "loss-20261201T000000.000000Z", "ids": [CID], "at": "2026-12-01T00:00:00Z",
                      "path": None, "verified": False, "problems": ["OSError: no room"]}])
    return s


def _bad_files(out: Path) -> list[Path]:
    return sorted(out.glob(st.STATE + ".bad-*"))


def _run_loop(agent: Agent, sweeps: int = 1, timeout: float = 120) -> None:
    """The agent's own loop in a thread until it has swept ``sweeps`` times, then stopped."""
    t = threading.Thread(target=agent.run, daemon=True)
    t.start()
    assert _until(lambda: agent.state["sweeps_total"] >= sweeps or agent.failure, timeout), agent.state
    agent.stop()
    t.join(60)
    assert not t.is_alive() and agent.failure is None


def test_a_pending_name_that_leaves_out_is_set_aside_and_nothing_is_written_outside(node, tmp_path):
    out, escaped = tmp_path / "out", tmp_path / "escaped"
    out.mkdir()
    escaped.mkdir()
    (escaped / "manifest.json").write_text("{}")  # a folder that is no verified bundle: deleted and replaced before
    data = _valid()
    data["pending"]["name"] = "../escaped"
    raw = json.dumps(data).encode()
    (out / st.STATE).write_bytes(raw)
    logs: list[str] = []
    a = Agent(str(node), out, 3600, 3, 1 << 30, logs.append)
    assert a.state == st.empty()
    (bad,) = _bad_files(out)
    assert bad.read_bytes() == raw
    assert logs == [f"state: {out / st.STATE} not used (pending is not a loss of this agent "
                    f"({{name {st.NAME.pattern}, ids, incident}})); kept as {bad.name}, starting afresh"]
    _run_loop(a)
    assert sorted(os.listdir(tmp_path)) == ["escaped", "out"] and os.listdir(escaped) == ["manifest.json"]
    assert (escaped / "manifest.json").read_text() == "{}"
    assert sorted(os.listdir(out)) == sorted([st.STATE, st.LOSSES, bad.name])
    assert st.check(json.loads((out / st.STATE).read_text())) is None
    assert not any(x.startswith("loss") for x in logs) and a.state["losses"] == []


def test_a_folder_at_the_pending_name_that_does_not_verify_is_kept_and_the_bundle_named_anew(node, tmp_path):
    out = tmp_path / "out"
    data = _valid()
    name = data["pending"]["name"]
    (out / name).mkdir(parents=True)
    (out / name / "manifest.json").write_text('{"not": "a bundle"}')
    (out / name / "precious").write_bytes(b"evidence")
    (out / st.STATE).write_text(json.dumps(data))
    logs: list[str] = []
    a = Agent(str(node), out, 3600, 5, 1 << 30, logs.append)
    assert a.state["pending"] == data["pending"]  # valid: kept
    _run_loop(a)
    assert (out / name / "precious").read_bytes() == b"evidence" and sorted(os.listdir(out / name)) == [
        "manifest.json", "precious"]
    loss = a.state["losses"][-1]
    assert loss["name"] != name and st.NAME.fullmatch(loss["name"]) and loss["verified"] is True
    assert verify(out / loss["name"]) == [] and a.state["pending"] is None
    assert any(f"{name} under {out} is not a verified bundle of this loss: kept as it is" in x for x in logs)
    assert any(x.startswith("loss: ") and f"bundle {out / loss['name']} verified" in x for x in logs)
    assert f"bundle {out / loss['name']} verified" in (out / st.LOSSES).read_text()
    assert (out / st.LOSSES).stat().st_size == st.RECORD_BYTES


BAD = {  # the reported ones first: each crashed the agent at every start, or killed its loop
    "negative counter": {"reloads_total": -1},
    "losses an object": {"losses": {}},
    "counter a string": {"sweeps_total": "9"},
    "counter a float": {"probe_errors_total": 1.5},
    "counter a bool": {"bundles_written_total": True},
    "counter huge": {"reloads_total": 1 << 70},
    "time a string": {"last_sweep": "yesterday"},
    "time infinite": {"last_reload": float("inf")},
    "time NaN": {"last_sweep": float("nan")},
    "access 2": {"access": {CID: 2}},
    "access a list": {"access": [CID]},
    "labels missing a key": {"labels": {CID: {"namespace": "ml", "pod": "p", "id": CID}}},
    "labels of another id": {"labels": {CID: {"namespace": "ml", "pod": "p", "container": "c", "id": "b" * 64}}},
    "a label too long": {"labels": {CID: {"namespace": "m" * 1025, "pod": "p", "container": "c", "id": CID}}},
    "an empty container id": {"access": {"": 1}},
    "pending absolute": {"pending": {"name": "/etc", "ids": [CID], "incident": INCIDENT}},
    "pending two components": {"pending": {"name": "loss-20261202T100500.000001Z/x", "ids": [CID], "incident": INCIDENT}},
    "pending no ids": {"pending": {"name": "loss-20261202T100500.000001Z", "ids": [], "incident": INCIDENT}},
    "pending bad time": {"pending": {"name": "loss-20261202T100500.000001Z", "ids": [CID],
                                     "incident": {**INCIDENT, "start": "not a time"}}},
    "pending a list": {"pending": []},
    "loss of wrong shape": {"losses": [{"name": "x"}]},
    "too many losses": {"losses": [_valid()["losses"][0]] * (st.MAX_LOSSES + 1)},
    "other schema": {"schema": "gpu-forensics/watch-state/v2"},
}


@pytest.mark.parametrize("change", BAD.values(), ids=BAD.keys())
def test_a_wrong_typed_state_is_set_aside_and_the_agent_sweeps_on(node, tmp_path, change):
    out = tmp_path / "out"
    out.mkdir()
    raw = json.dumps({**_valid(), **change}).encode()
    (out / st.STATE).write_bytes(raw)
    logs: list[str] = []
    a = Agent(str(node), out, 3600, 3, 1 << 30, logs.append)
    (bad,) = _bad_files(out)
    assert bad.read_bytes() == raw and a.state == st.empty() and len(logs) == 1 and "starting afresh" in logs[0]
    a.sweep_once("test")
    saved = json.loads((out / st.STATE).read_text())
    assert st.check(saved) is None and saved["sweeps_total"] == 1 and saved["probe_errors_total"] == 2


def test_the_real_process_restarts_cleanly_after_a_bad_state_and_exits_0_on_sigterm(node, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / st.STATE).write_text(json.dumps({**_valid(), "losses": {}}))
    w = Watch(node, out, tmp_path / "watch.log", 3600)
    assert w.stop() == 0
    text = w.text()
    assert "losses is not a list" in text and "starting afresh" in text and "Traceback" not in text
    assert st.check(json.loads((out / st.STATE).read_text())) is None and len(_bad_files(out)) == 1


def test_a_dead_loop_ends_the_process_with_1_and_one_line(node, tmp_path):
    """Fault injection (the loop's sweep replaced by one that raises): the guard, not a sweep, is under test."""
    code = ("import sys, forensics.ops.watch.agent as a\n"
            "def boom(self, reason):\n    raise RuntimeError('injected fault')\n"
            "a.Agent.sweep_once = boom\n"
            "from forensics.ops.cli import main\nsys.exit(main(sys.argv[1:]))\n")
    p = subprocess.run([sys.executable, "-c", code, "watch", "--root", str(node), "--out", str(tmp_path / "out"),
                        "--listen", f"127.0.0.1:{_free_port()}"], cwd=PROJECT, capture_output=True, text=True,
                       timeout=120, env={**os.environ, "PYTHONPATH": str(PROJECT)})
    assert p.returncode == 1, p.stderr
    assert "the sweep loop died: RuntimeError: injected fault" in p.stderr and "Traceback" not in p.stderr
    assert p.stderr.strip().splitlines()[-1] == ("gpu-forensics: error: the sweep loop died (RuntimeError: injected "
                                                 "fault); exiting so that it is restarted")


@pytest.mark.parametrize("kind", ["symlink", "fifo", "directory", "huge", "deep", "not utf-8"])
def test_a_state_file_that_is_no_plain_json_file_is_set_aside_unread_and_unfollowed(tmp_path, kind):
    out, outside = tmp_path / "out", tmp_path / "outside.json"
    out.mkdir()
    outside.write_text(json.dumps(_valid()))  # a valid state: a link to it must not be read through
    path = out / st.STATE
    if kind == "symlink":
        path.symlink_to(outside)
    elif kind == "fifo":
        os.mkfifo(path)  # no writer: a blocking open would hang the agent at start
    elif kind == "directory":
        path.mkdir()
        (path / "x").write_text("x")
    elif kind == "huge":
        with open(path, "wb") as f:
            f.truncate(st.MAX_STATE + 1 << 10)  # sparse: a big file costs nothing to make
    elif kind == "deep":
        path.write_text("[" * 100_000 + "]" * 100_000)
    else:
        path.write_bytes(b'{"schema": "\xff\xfe"}')
    logs: list[str] = []
    t0 = time.monotonic()
    assert st.load(out, logs.append) == st.empty() and time.monotonic() - t0 < 5
    (bad,) = _bad_files(out)
    assert not path.exists() and not path.is_symlink() and len(logs) == 1 and "starting afresh" in logs[0]
    if kind == "symlink":
        assert bad.is_symlink() and json.loads(outside.read_text()) == _valid()  # the link moved, its target untouched
    st.save(out, st.empty())
    assert st.load(out) == st.empty()


def test_save_never_writes_through_a_link_at_its_temporary_name(tmp_path):
    out, target = tmp_path / "out", tmp_path / "target"
    out.mkdir()
    target.write_text("precious")
    (out / (st.STATE + ".tmp")).symlink_to(target)
    s = _valid()
    st.save(out, s)
    assert target.read_text() == "precious" and st.load(out) == s
    assert not (out / (st.STATE + ".tmp")).exists() and not (out / (st.STATE + ".tmp")).is_symlink()


JSON = hs.recursive(hs.none() | hs.booleans() | hs.integers() | hs.floats() | hs.text(max_size=20),
                    lambda c: hs.lists(c, max_size=4) | hs.dictionaries(hs.text(max_size=12), c, max_size=4),
                    max_leaves=20)
KEYS = list(st.empty())


@hs.composite
def _states(draw):
    """A valid state with one key changed to any JSON value (most are then invalid), or dropped."""
    s = _valid()
    key = draw(hs.sampled_from(KEYS + ["extra"]))
    if draw(hs.booleans()):
        s.pop(key, None)
    else:
        s[key] = draw(JSON | hs.sampled_from([-1, 0, 1, 2, "loss-20261202T100500.000001Z", "../x", {}, []]))
    return json.dumps(s).encode()


@settings(max_examples=200, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=hs.one_of(_states(), JSON.map(lambda v: json.dumps(v).encode()), hs.binary(max_size=200)))
def test_any_json_or_bytes_loads_to_a_valid_state_or_is_set_aside(raw):
    with tempfile.TemporaryDirectory() as d:
        out = Path(d)
        (out / st.STATE).write_bytes(raw)
        logs: list[str] = []
        s = st.load(out, logs.append)  # never raises
        assert st.check(s) is None and set(s) == set(st.empty())
        bad = _bad_files(out)
        if bad:  # set aside: the same bytes, one line
            assert bad[0].read_bytes() == raw and len(logs) == 1 and not (out / st.STATE).exists()
        else:  # taken: what it said, the missing keys at their defaults
            assert logs == [] and s == {**st.empty(), **{k: v for k, v in json.loads(raw).items() if k in s}}
        a = Agent("/nonexistent", out, 60, 3, 1 << 30, logs.append)  # restores its counters without a crash
        assert a.state == s
        st.save(out, a.state)
        assert st.load(out) == s


# -- 3. a full --out, and --keep-bytes ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def lab():
    import lab as LAB
    with LAB.running("gfw-") as lb:
        yield lb


def _fill(d: Path) -> None:
    """Write ``d/filler`` until the file system says ENOSPC."""
    with open(d / "filler", "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"x" * 4096)
        except OSError as e:
            assert e.errno == 28  # ENOSPC
    assert os.statvfs(d).f_bavail == 0


def _loss_of(lab, agent: Agent, c, logs: list[str]) -> str:
    """Revoke the container's GPU nodes in its device cgroup (tests/lab.py ``reload``), tell the agent a reload
    happened, and return its ``loss:`` line."""
    lab.reload(c)
    now = time.time()
    agent.notify("reload-start", "test", now)
    agent.notify("reload-end", "test", now)
    line = _until(lambda: next((x for x in logs if x.startswith("loss: ")), None), 120)
    assert line, "\n".join(logs[-10:])
    return line


def _start(agent: Agent, c) -> threading.Thread:
    t = threading.Thread(target=agent.run, daemon=True)
    t.start()
    assert _until(lambda: agent.state["access"].get(c.id) == 1 and (agent.out / st.STATE).exists(), 60), agent.state
    return t


def _value(agent: Agent, name: str, cid: str | None = None):
    for fam in agent.metrics.registry.collect():
        for x in fam.samples:
            if x.name == name and (cid is None or x.labels.get("id") == cid):
                return x.value
    return None


def test_a_full_out_still_probes_and_records_the_loss(lab, small_tmpfs):
    tiny_out = small_tmpfs  # a real tmpfs of 200 KiB, filled below
    c = lab.run("gfw-full", legacy=True, env=["NVIDIA_VISIBLE_DEVICES=all"])
    logs: list[str] = []
    a = Agent("/", tiny_out, 3600, 3, 1 << 30, logs.append, state_dirs=(str(lab.state),))
    t = _start(a, c)
    assert _value(a, "gpu_forensics_container_gpu_access", c.id) == 1
    scratch_before = set(Path(tempfile.gettempdir()).glob("gpu-forensics-sweep-*"))
    _fill(tiny_out)
    line = _loss_of(lab, a, c, logs)
    a.stop()
    t.join(60)
    # the probe ran all the same: its scratch went to $TMPDIR, and the loss is in the metrics
    sweep2 = next(x for x in logs if x.startswith("sweep 2 "))
    assert "gfw-full=0" in sweep2 and f"scratch under {tempfile.gettempdir()}: {tiny_out} has under" in sweep2
    assert _value(a, "gpu_forensics_container_gpu_access", c.id) == 0
    assert _value(a, "gpu_forensics_losses_total") == 1 and _value(a, "gpu_forensics_bundles_failed_total") == 1
    assert _value(a, "gpu_forensics_bundles_written_total") == 0
    assert _value(a, "gpu_forensics_state_write_errors_total") >= 1
    assert "NOT written" in line and "No space left on device (ENOSPC)" in line and c.id[:12] in line
    # on disk: the fixed-size record took it; no empty partial bundle left taking room
    record = (tiny_out / st.LOSSES).read_text()
    assert c.id[:12] in record and "NOT written" in record and (tiny_out / st.LOSSES).stat().st_size == st.RECORD_BYTES
    assert sorted(os.listdir(tiny_out)) == ["filler", st.LOSSES, st.STATE]
    assert set(Path(tempfile.gettempdir()).glob("gpu-forensics-sweep-*")) == scratch_before
    assert a.failure is None and not t.is_alive()


def test_keep_bytes_is_a_hard_limit_the_newest_bundle_included(lab, tmp_path):
    c = lab.run("gfw-keep", legacy=True, env=["NVIDIA_VISIBLE_DEVICES=all"])
    out = tmp_path / "out"
    old = out / "loss-20261201T000000.000000Z"
    old.mkdir(parents=True)
    (old / "f").write_bytes(b"x" * 1000)
    logs: list[str] = []
    a = Agent("/", out, 3600, 5, 50_000, logs.append, state_dirs=(str(lab.state),))
    t = _start(a, c)
    line = _loss_of(lab, a, c, logs)
    a.stop()
    t.join(60)
    size = int(re.search(r"its (\d+) bytes alone are over --keep-bytes 50000", line)[1])
    assert size > 50_000
    assert [p.name for p in st.bundles(out)] == [old.name]  # the one that fits stays; the newest did not fit
    assert _value(a, "gpu_forensics_bundles_dropped_total") == 1 and _value(a, "gpu_forensics_bundles_written_total") == 1
    loss = a.state["losses"][-1]
    assert loss["path"] is None and loss["verified"] is False and "over --keep-bytes" in loss["problems"][-1]
    assert "over --keep-bytes 50000" in (out / st.LOSSES).read_text()


def test_prune_is_a_hard_limit(tmp_path):
    for i, n in enumerate((100, 200, 300, 5000)):
        d = tmp_path / f"{st.PREFIX}2026120{i}T000000.000000Z"
        d.mkdir()
        (d / "f").write_bytes(b"x" * n)
    (tmp_path / f"{st.PREFIX}link").symlink_to(tmp_path / f"{st.PREFIX}20261200T000000.000000Z")
    removed = st.prune(tmp_path, 3, 1000)  # the newest alone is over: it goes, the older ones fit
    assert [p.name for p in removed] == [f"{st.PREFIX}20261203T000000.000000Z"]
    assert [p.name for p in st.bundles(tmp_path)] == [f"{st.PREFIX}2026120{i}T000000.000000Z" for i in range(3)]
    removed = st.prune(tmp_path, 2, 1000)  # by count: the oldest
    assert [p.name for p in removed] == [f"{st.PREFIX}20261200T000000.000000Z"]
    assert (tmp_path / f"{st.PREFIX}link").is_symlink()  # never counted, never removed


def test_what_a_runtime_names_a_container_survives_a_restart(tmp_path):
    from forensics.ops.watch.sweep import Seen
    name = "evil\x1b]0;owned\x07\u202e\x00" + "x" * 1000  # escapes, a bidi override, a NUL: what a runtime may say
    logs: list[str] = []
    a = Agent("/nonexistent", tmp_path, 60, 3, 1 << 30, logs.append)
    a._publish_access({CID: Seen(CID, "ml", "p", name, 1, None)})
    st.save(tmp_path, a.state)
    b = Agent("/nonexistent", tmp_path, 60, 3, 1 << 30, logs.append)
    assert logs == [] and b.state["labels"][CID]["container"] == name and b.state["access"] == {CID: 1}


def test_an_incident_that_ends_before_it_starts_or_a_directory_at_the_temporary_name(tmp_path):
    s = _valid()
    s["pending"]["incident"] = {**INCIDENT, "start": INCIDENT["end"], "end": INCIDENT["start"]}
    assert st.check(s) == f"pending is not a loss of this agent ({{name {st.NAME.pattern}, ids, incident}})"
    (tmp_path / (st.STATE + ".tmp")).mkdir()
    st.save(tmp_path, _valid())  # the folder in the way is set aside, not removed, and the save goes through
    assert st.load(tmp_path) == _valid() and len(list(tmp_path.glob(st.STATE + ".tmp.bad-*"))) == 1


def test_the_loss_record_is_never_written_through_a_link(tmp_path):
    outside = tmp_path / "outside"
    outside.write_text("precious")
    out = tmp_path / "out"
    out.mkdir()
    (out / st.LOSSES).symlink_to(outside)
    st.make_record(out)
    st.record_loss(out, "2026-12-02T10:05:00Z watch: GPU access lost (c) [aaaaaaaaaaaa]: bundle x verified")
    assert outside.read_text() == "precious" and (out / st.LOSSES).stat().st_size == st.RECORD_BYTES
    assert len(list(out.glob(st.LOSSES + ".bad-*"))) == 1
    for i in range(40):  # the last lines that fit stay, in order
        st.record_loss(out, f"loss {i:02d} " + "y" * 300)
    lines = [x for x in (out / st.LOSSES).read_text().splitlines() if x]
    assert lines[-1].startswith("loss 39 ") and len(lines) == st.RECORD_BYTES // 310
    assert [int(x.split()[1]) for x in lines] == list(range(40 - len(lines), 40))
