"""``kubectl gpu-forensics NODE``, end to end against a loopback API server (tests/kubeapi_replay.py).

There is no cluster here, and the plugin was never run against a live one. The answers are in the
Kubernetes API's own shapes (v1.29-v1.31: Node, Job batch/v1 as the API server returns it after
``POST``, PodList with the Job controller's labels, pod log as text/plain, meta/v1 ``Status`` for
403/404 and ``DELETE``; tests/fixtures/kubectl/), the exec copy in the websocket channel protocol
``v4.channel.k8s.io`` the official client's ``stream()`` speaks. In the happy path the "pod" is
real: the container command the plugin put in the Job it POSTed is run here (``/host`` replaced by
the sample node, no ``--kube``), so the bundle the plugin copies, verifies and analyses is the one
forensics/ops/kubectl_pod.py collected and serves through ``send``; ``done`` ends its wait.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from forensics.bundle import Bundle, verify
from forensics.ops import kubectl_api as ka
from forensics.ops import kubectl_plugin as kp
from forensics.ops.cli import SAMPLE_ROOT
from forensics.ops.kubectl_pod import parse_ready
from kubeapi_replay import Replay, fixture, free_port_closed, kubeconfig
from loopback import RawServer, request_line

PROJECT = Path(__file__).resolve().parent.parent
NODE, NS, IMAGE = "gpu-a100-007", "gpu-forensics", "registry.example/gpu-forensics:0.1.0"
JOB = "gpu-forensics-gpu-a100-007-1201031500"
POD = JOB + "-x7q2k"
JOBS = f"/apis/batch/v1/namespaces/{NS}/jobs"
PODS = f"/api/v1/namespaces/{NS}/pods"
READY = ("gpu-forensics-pod: bundle-ready path=/bundles/b.tar.gz size=51093 sha256=" + "a" * 64
         + " manifest_sha256=" + "b" * 64 + " rc=0\n").encode()


def _base_routes(pods: list, log=(200, b"collecting\n")) -> dict:
    return {f"GET /api/v1/nodes/{NODE}": [(200, "node.json")],
            f"POST {JOBS}": [(201, "job-created.json")],
            f"GET {JOBS}/{JOB}": [(200, "job-created.json")],
            f"GET {PODS}": [(200, p) for p in pods],
            f"GET {PODS}/{POD}/log": [log],
            f"DELETE {JOBS}/{JOB}": [(200, "status-delete-job.json")]}


def _run(srv: Replay, tmp_path: Path, *extra: str, node: str = NODE) -> int:
    kc = kubeconfig(tmp_path / "kubeconfig", srv.url)
    out = tmp_path / "here"
    out.mkdir(exist_ok=True)
    return kp.main([node, "--kubeconfig", str(kc), "--image", IMAGE, "--job-name", JOB, "--out-dir", str(out),
                    "--poll", "0.05", *extra])


def _one_error(capsys) -> str:
    err = [x for x in capsys.readouterr().err.splitlines() if ": error: " in x]
    assert len(err) == 1 and "Traceback" not in err[0]
    return err[0]


def _deleted(srv: Replay) -> list:
    return [r["body"]["propagationPolicy"] for r in srv.seen("DELETE", f"{JOBS}/{JOB}")]


# -- the happy path ----------------------------------------------------------------------------------
class _Pod:
    """The container the plugin's Job asked for, run here over the sample node."""

    def __init__(self, tmp_path: Path):
        self.bundles, self.log, self.proc = tmp_path / "node-bundles", tmp_path / "pod.log", None
        self.bundles.mkdir()
        self.execs = []

    def create(self, req):
        c = next(c for c in req["body"]["spec"]["template"]["spec"]["containers"] if c["name"] == "collect")
        args = [str(SAMPLE_ROOT) if a == "/host" else NODE if a == "$(NODE_NAME)" else a for a in c["args"] if a != "--kube"]
        assert c["command"][0] == "python3"
        self.proc = subprocess.Popen([sys.executable, *c["command"][1:], "--bundles", str(self.bundles), *args],
                                     stdout=self.log.open("wb"), stderr=subprocess.STDOUT, cwd=PROJECT,
                                     env={**os.environ, "NODE_NAME": NODE})  # the Job's Downward API env
        return 201, "job-created.json"

    def logs(self, req):
        assert req["query"]["container"] == ["collect"]
        return 200, self.log.read_bytes()

    def exec(self, command):
        assert command[:3] == ["python3", "-m", "forensics.ops.kubectl_pod"], command
        self.execs.append(command[3:])
        r = subprocess.run([sys.executable, *command[1:]], capture_output=True, cwd=PROJECT, timeout=60)
        return r.stdout, r.stderr, r.returncode


def test_happy_path_the_bundle_comes_back_verified_and_analysed(tmp_path, capsys, monkeypatch):
    sys.path.insert(0, str(PROJECT / "samples"))
    import build
    build.ensure_journal()
    monkeypatch.setattr(ka, "CHUNK", 16 << 10)  # a ~50 KB bundle in 4 execs
    pod = _Pod(tmp_path)
    routes = {**_base_routes(["pods-creating.json", "pods-running.json"], log=(0, pod.logs)),
              f"POST {JOBS}": [(0, pod.create)]}
    with Replay(routes, pod.exec) as srv:
        rc = _run(srv, tmp_path, "--timeout", "120", "--wait-copy", "60", "--", "--time-budget", "120")
        pod_rc = pod.proc.wait(timeout=30)
    out = capsys.readouterr()
    assert rc == 0, out.err
    # the Job: pinned to the node, the image asked for, the collect options passed through
    posted = srv.seen("POST", JOBS)[0]["body"]
    spec = posted["spec"]["template"]["spec"]
    assert (posted["metadata"]["name"], posted["metadata"]["namespace"], spec["nodeName"]) == (JOB, NS, NODE)
    c = spec["containers"][0]
    assert c["image"] == IMAGE and c["args"][-2:] == ["--time-budget", "120"] and c["args"][:2] == ["--wait-copy", "60"]
    # the copy: what the pod announced, in chunks, then the marker that ends the pod's wait
    ready = parse_ready(pod.log.read_text())
    sends = [e for e in pod.execs if e[0] == "send"]
    assert [int(e[2]) for e in sends] == list(range(0, ready["size"], 16 << 10))
    assert pod.execs[-1] == ["done", ready["path"]] and pod_rc == 0
    assert "gpu-forensics-pod: copy confirmed" in pod.log.read_text()
    dest = tmp_path / "here" / Path(ready["path"]).name
    assert dest.name.startswith(f"gpu-forensics-{NODE}-2") and dest.name.endswith("Z.tar.gz")
    assert verify(dest) == []
    b = Bundle.open(dest)
    b.close()
    assert b.manifest_sha256 == ready["manifest"] and b.manifest["node"] == NODE
    # analysed here: the verdict read from analysis.json, printed, and the paths
    a = json.loads((dest.with_name(dest.name[:-len(".tar.gz")] + "-report") / "analysis.json").read_text())
    assert a["headline"]["verdict"] == "confirmed"
    assert "requested by snapd.service (PID 48211, systemctl)" in a["verdicts"][0]
    assert a["verdicts"][0] in out.out.splitlines()
    assert f"bundle: {dest}" in out.out and f"manifest.json sha256: {ready['manifest']}" in out.out
    # and the Job is gone, its pod with it
    assert _deleted(srv) == ["Background"] and srv.requests[-1]["method"] == "DELETE"


# -- errors: one line, an exit code, the Job deleted when it was created ------------------------------
def test_node_not_found_before_anything_is_created(tmp_path, capsys):
    routes = {"GET /api/v1/nodes/gpu-a100-999": [(404, "status-404-node.json")]}
    with Replay(routes) as srv:
        rc = _run(srv, tmp_path, node="gpu-a100-999")
    assert rc == ka.EXIT_NOT_FOUND == 6
    assert _one_error(capsys) == ('kubectl-gpu_forensics: error: node gpu-a100-999 not found: '
                                  'nodes "gpu-a100-999" not found')
    assert [r["method"] for r in srv.requests] == ["GET"]


def test_rbac_forbidden_to_create_the_job(tmp_path, capsys):
    routes = {**_base_routes([]), f"POST {JOBS}": [(403, "status-403-create-jobs.json")]}
    with Replay(routes) as srv:
        rc = _run(srv, tmp_path)
    assert rc == ka.EXIT_FORBIDDEN == 4
    line = _one_error(capsys)
    assert line.startswith("kubectl-gpu_forensics: error: RBAC: forbidden to create jobs.batch (namespace gpu-forensics): ")
    assert 'User "alice@example.com" cannot create resource "jobs" in API group "batch"' in line
    assert _deleted(srv) == []  # nothing was created


@pytest.mark.parametrize("answer,reason", [("pods-errimagepull.json", "ErrImagePull"),
                                           ("pods-imagepullbackoff.json", "ImagePullBackOff")])
def test_image_pull_error_names_the_image(tmp_path, capsys, answer, reason):
    with Replay(_base_routes(["pods-creating.json", answer])) as srv:
        rc = _run(srv, tmp_path)
    assert rc == ka.EXIT_IMAGE == 7
    line = _one_error(capsys)
    assert line.startswith(f"kubectl-gpu_forensics: error: image pull failed for {IMAGE} on node {NODE} ({reason}): ")
    assert _deleted(srv) == ["Background"]


def test_pod_refused_by_the_node(tmp_path, capsys):
    with Replay(_base_routes(["pods-creating.json", "pods-outofcpu.json"])) as srv:
        rc = _run(srv, tmp_path)
    assert rc == ka.EXIT_UNSCHEDULABLE == 8
    assert _one_error(capsys) == (f"kubectl-gpu_forensics: error: pod {POD} refused by node {NODE} (OutOfcpu): Pod was "
                                  "rejected: Node didn't have enough resource: cpu, requested: 50, used: 95680, capacity: 95690")
    assert _deleted(srv) == ["Background"]


def test_timeout_while_the_container_is_created(tmp_path, capsys):
    with Replay(_base_routes(["pods-creating.json"])) as srv:
        rc = _run(srv, tmp_path, "--timeout", "0.5")
    assert rc == ka.EXIT_TIMEOUT == 9
    assert _one_error(capsys) == (f"kubectl-gpu_forensics: error: timed out after 0.5 s waiting for the bundle of job "
                                  f"{NS}/{JOB} (pod {POD}: Pending: ContainerCreating); see kubectl describe -n {NS} job/{JOB}")
    assert _deleted(srv) == ["Background"]


def test_exec_forbidden_is_rbac_on_pods_exec(tmp_path, capsys):
    routes = {**_base_routes(["pods-running.json"], log=(200, READY)),
              f"GET {PODS}/{POD}/exec": [(403, "status-403-pods-exec.json")]}
    with Replay(routes) as srv:
        rc = _run(srv, tmp_path)
    assert rc == ka.EXIT_FORBIDDEN
    line = _one_error(capsys)
    assert line.startswith(f"kubectl-gpu_forensics: error: RBAC: forbidden to create pods/exec (pod {NS}/{POD}): ")
    assert _deleted(srv) == ["Background"]
    assert not list((tmp_path / "here").iterdir())  # nothing half-copied left as a bundle


def test_a_bundle_that_does_not_verify_is_refused(tmp_path, capsys):
    """The pod serves a bundle whose file was changed after collection (its SHA-256 announced right);
    the exec answered in ``v5.channel.k8s.io`` (API servers 1.30+)."""
    sys.path.insert(0, str(PROJECT / "samples"))
    from forensics.ops.cli import main
    import tarfile
    src = tmp_path / "b"
    assert main(["collect", "--root", str(SAMPLE_ROOT), "--out", str(src)]) == 0
    (src / "node" / "os-release").write_text("ID=forged\n")
    tgz = tmp_path / "b.tar.gz"
    with tarfile.open(tgz, "w:gz") as t:
        t.add(src, arcname="b")
    import hashlib
    data = tgz.read_bytes()
    manifest = Bundle.open(src).manifest_sha256
    log = (f"gpu-forensics-pod: bundle-ready path=/bundles/b.tar.gz size={len(data)} "
           f"sha256={hashlib.sha256(data).hexdigest()} manifest_sha256={manifest} rc=0\n").encode()

    def serve(command):
        return (data[int(command[5]):int(command[5]) + int(command[6])], b"", 0) if command[3] == "send" else (b"", b"", 0)
    capsys.readouterr()
    with Replay(_base_routes(["pods-running.json"], log=(200, log)), serve, protocol="v5.channel.k8s.io") as srv:
        rc = _run(srv, tmp_path)
    assert rc == ka.EXIT_INVALID == 3
    line = _one_error(capsys)
    assert "the copied bundle does NOT verify (1 problem, first: changed: node/os-release); not analysed" in line
    assert not (tmp_path / "here" / "b-report").exists()
    assert _deleted(srv) == ["Background"]


def test_ctrl_c_while_waiting_still_deletes_the_job(tmp_path, capsys):
    # SIGINT once the plugin is in its wait (it has listed the pods twice), not after a fixed delay: on a
    # loaded machine a fixed 0.4 s can come before the plugin is running; Python's own handler, whatever an
    # earlier test left
    signal.signal(signal.SIGINT, signal.default_int_handler)
    stop = threading.Event()

    def interrupt_when_waiting(srv):
        while not stop.is_set():
            if len(srv.seen("GET", PODS)) >= 2:
                os.kill(os.getpid(), signal.SIGINT)
                return
            time.sleep(0.02)

    with Replay(_base_routes(["pods-creating.json"])) as srv:
        t = threading.Thread(target=interrupt_when_waiting, args=(srv,), daemon=True)
        t.start()
        try:
            rc = _run(srv, tmp_path, "--timeout", "60")
        finally:
            stop.set()
    assert rc == ka.EXIT_INTERRUPTED == 130
    assert "kubectl-gpu_forensics: interrupted" in capsys.readouterr().err
    assert _deleted(srv) == ["Background"]


def test_keep_job_leaves_it(tmp_path, capsys):
    with Replay(_base_routes(["pods-creating.json"])) as srv:
        rc = _run(srv, tmp_path, "--timeout", "0.2", "--keep-job")
    assert rc == ka.EXIT_TIMEOUT and _deleted(srv) == []
    assert f"job {NS}/{JOB} kept (--keep-job)" in capsys.readouterr().err


def test_api_server_unreachable(tmp_path, capsys):
    kc = kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{free_port_closed()}")
    rc = kp.main([NODE, "--kubeconfig", str(kc), "--out-dir", str(tmp_path)])
    assert rc == ka.EXIT_API == 11
    assert "the API server was not reached" in _one_error(capsys)


@pytest.mark.parametrize("extra", [["--", "--out", "/tmp/x"], ["--root", "/"], ["--", "--incident", "yesterday..today"]])
def test_usage_errors_before_any_request(tmp_path, capsys, extra):
    with Replay({}) as srv:
        rc = _run(srv, tmp_path, *extra)
    assert rc == ka.EXIT_USAGE and srv.requests == []
    assert _one_error(capsys).startswith("kubectl-gpu_forensics: error: ")


# -- the pieces --------------------------------------------------------------------------------------
def test_rendered_job_validates_and_keeps_the_template_contract():
    job = ka.render_job(NODE, JOB, "forensics", IMAGE, ["--since", "2h"], 300, "Always")
    kubernetes_validate.validate(job, "1.29", strict=True)
    spec = job["spec"]["template"]["spec"]
    c = spec["containers"][0]
    assert (job["metadata"]["namespace"], spec["nodeName"], c["image"], c["imagePullPolicy"]) == \
        ("forensics", NODE, IMAGE, "Always")
    assert c["command"] == ["python3", "-m", "forensics.ops.kubectl_pod"]
    assert c["args"] == ["--wait-copy", "300", "--", "collect", "--root", "/host", "--node", "$(NODE_NAME)", "--kube",
                         "--since", "2h"]
    assert job["spec"]["activeDeadlineSeconds"] == 1800  # the template's; a longer wait raises it
    assert ka.render_job(NODE, JOB, NS, IMAGE, [], 1000)["spec"]["activeDeadlineSeconds"] == 2200
    # the file deploy/jobs/job-node.yaml is the packaged template itself
    assert (PROJECT / "deploy" / "jobs" / "job-node.yaml").resolve() == ka.TEMPLATE
    assert yaml.safe_load(ka.TEMPLATE.read_text())["spec"]["template"]["spec"]["nodeName"] == "target-node"


def test_job_name_is_a_dns_label():
    from datetime import datetime, timezone
    name = kp.job_name("ip-10-0-14-23.us-east-1.compute.internal", datetime(2026, 12, 1, 3, 15, tzinfo=timezone.utc))
    assert name == "gpu-forensics-ip-10-0-14-23-us-east-1-1201031500" and len(name) <= 49


def test_pod_state_reads_the_fixtures():
    assert ka.pod_state(fixture("pods-creating.json")["items"][0]) == ("Pending: ContainerCreating", None)
    assert ka.pod_state(fixture("pods-running.json")["items"][0]) == ("Running", None)
    state, err = ka.pod_state(fixture("pods-errimagepull.json")["items"][0])
    assert state == "Pending: ErrImagePull" and err.code == ka.EXIT_IMAGE and "no such host" in str(err)


def test_pod_that_fails_says_why_from_its_log(tmp_path, capsys):
    log = b"gpu-forensics: error: --journal-dir /var/log/jrnl: no such directory\ngpu-forensics-pod: collect exited 2; no bundle to copy\n"
    with Replay(_base_routes(["pods-running.json", "pods-failed.json"], log=(200, log))) as srv:
        rc = _run(srv, tmp_path)
    assert rc == ka.EXIT_POD_FAILED == 10
    line = _one_error(capsys)
    assert line.startswith(f"kubectl-gpu_forensics: error: pod {POD} failed: container exited 2 (Error) before the bundle")
    assert line.endswith("its log ends: gpu-forensics: error: --journal-dir /var/log/jrnl: no such directory | "
                         "gpu-forensics-pod: collect exited 2; no bundle to copy")
    assert srv.seen("GET", f"{PODS}/{POD}/log")[-1]["query"]["tailLines"] == ["3"]
    assert _deleted(srv) == ["Background"]


def test_unknown_collect_option_is_one_line(tmp_path, capsys):
    with Replay({}) as srv:
        assert _run(srv, tmp_path, "--", "--no-such-option") == ka.EXIT_USAGE and srv.requests == []
    assert capsys.readouterr().err.strip() == ("kubectl-gpu_forensics: error: collect options: unrecognized "
                                               "arguments: --no-such-option")


# -- hostile peers (issue 27): every answer bounded, every way out deletes the Job ------------------------
def _spawn(srv: Replay, tmp_path: Path, *extra: str) -> subprocess.Popen:
    """The plugin as kubectl runs it: its own process (the signals and the memory are its own)."""
    kc = kubeconfig(tmp_path / "kubeconfig", srv.url)
    (tmp_path / "here").mkdir(exist_ok=True)
    return subprocess.Popen([sys.executable, "-m", "forensics.ops.kubectl_plugin", NODE, "--kubeconfig", str(kc),
                             "--image", IMAGE, "--job-name", JOB, "--out-dir", str(tmp_path / "here"), "--poll", "0.05",
                             *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=PROJECT)


def _finish(p: subprocess.Popen, timeout: float = 120) -> tuple[int, str, int]:
    """``(exit code, stderr, peak resident memory in KiB)``. The peak is the largest ``VmHWM`` of
    /proc/PID/status seen while it runs (its own image's high-water mark, reset at exec), not wait4(2)'s
    ``ru_maxrss``, which keeps the forking pytest's resident size from before the exec (over 300 MiB late
    in a whole-suite run)."""
    err, peak = [], 0
    t = threading.Thread(target=lambda: err.append(p.stderr.read()), daemon=True)
    t.start()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            status_text = Path(f"/proc/{p.pid}/status").read_text()
            peak = max(peak, int(re.search(r"^VmHWM:\s+(\d+) kB", status_text, re.M).group(1)))
        except (OSError, AttributeError):  # gone, or a zombie without its memory lines
            pass
        pid, status, _usage = os.wait4(p.pid, os.WNOHANG)
        if pid:
            t.join(10)
            p.returncode = os.waitstatus_to_exitcode(status)
            return p.returncode, err[0] if err else "", peak
        time.sleep(0.02)
    p.kill()
    raise AssertionError("the plugin did not end")


def _flood(total: int, piece: int = 1 << 20):
    for _ in range(total // piece):
        yield b"\0" * piece


@pytest.mark.parametrize("channel", ["stdout", "stderr"])
def test_a_node_that_announces_1_byte_and_sends_256_mib_is_refused_and_nothing_is_kept(tmp_path, channel):
    """The pod says its bundle is 1 byte and its ``send`` answers with 256 MiB (on stdout, or on stderr
    after the byte): before, all of it was written (stdout) or held in memory (stderr, and the client's
    buffers of both). Now the plugin stops at the bytes it asked for plus a little framing, says so in one
    line, removes the partial copy and deletes the Job; its memory stays far below what was sent."""
    ready = ("gpu-forensics-pod: bundle-ready path=/bundles/b.tar.gz size=1 sha256=" + "a" * 64
             + " manifest_sha256=" + "b" * 64 + " rc=0\n").encode()

    def serve(command):
        if command[3] != "send":
            return b"", b"", 0
        return (_flood(256 << 20), b"", 0) if channel == "stdout" else (b"x", _flood(256 << 20), 1)
    with Replay(_base_routes(["pods-running.json"], log=(200, ready)), serve) as srv:
        rc, err, peak_kib = _finish(_spawn(srv, tmp_path))
        time.sleep(0.2)
    assert rc == ka.EXIT_INVALID, err
    [line] = [x for x in err.splitlines() if ": error: " in x]
    assert line.startswith("kubectl-gpu_forensics: error: copy of /bundles/b.tar.gz bytes 0+1: the pod sent more than "
                           "the 1 bytes asked for; refused; the partial copy is removed"), line
    assert "Traceback" not in err
    assert list((tmp_path / "here").iterdir()) == []  # no b.tar.gz, no b.tar.gz.part
    assert srv.cut and srv.cut[0][3] == "send"  # the server could not send it all: the plugin hung up
    assert 0 < peak_kib < 200 << 10, f"peak memory {peak_kib} KiB for 256 MiB sent"
    assert _deleted(srv) == ["Background"]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_while_waiting_deletes_the_job(tmp_path, sig):
    """A CI job cancelled (SIGTERM), ``timeout`` (SIGTERM), a closed terminal (SIGHUP) or Ctrl-C, sent to
    the plugin's own process while it waits for the pod: the DELETE of the Job reaches the API server
    (before: SIGTERM and SIGHUP ended the process at once, leaving the Job and its root hostPath pod for
    up to a day) and the plugin says so in one line."""
    with Replay(_base_routes(["pods-creating.json"])) as srv:
        p = _spawn(srv, tmp_path, "--timeout", "120")
        deadline = time.monotonic() + 60
        while len(srv.seen("GET", PODS)) < 2 and time.monotonic() < deadline and p.poll() is None:
            time.sleep(0.02)
        p.send_signal(sig)
        rc, err, _peak = _finish(p, 60)
        deleted = _deleted(srv)
    assert rc == 128 + sig, err
    assert deleted == ["Background"]
    expected = "interrupted" if sig == signal.SIGINT else f"interrupted by {sig.name}"
    assert err.splitlines()[-1] == f"kubectl-gpu_forensics: {expected}", err
    assert f"kubectl-gpu_forensics: deleted job {NS}/{JOB} (its pod goes too)" in err


@pytest.mark.parametrize("what", ["pod list", "pod log"])
def test_an_api_server_answer_over_the_bound_is_refused(tmp_path, capsys, what):
    """A pod list of 64 MiB (an API server that sends a huge or never-ending JSON), a pod log of 64 MiB
    for ``tailLines=20`` (a log stream that does not end): refused at ``MAX_ANSWER`` bytes, one line,
    the Job deleted."""
    huge = (b'{"kind": "PodList", "items": [' if what == "pod list" else b"collecting\n") + b" " * (64 << 20)
    path = PODS if what == "pod list" else f"{PODS}/{POD}/log"
    with Replay({**_base_routes(["pods-running.json"]), f"GET {path}": [(200, huge)]}) as srv:
        rc = _run(srv, tmp_path)
    assert rc == ka.EXIT_API
    line = _one_error(capsys)
    assert line.endswith(f"{path}: the answer is over {ka.MAX_ANSWER} bytes; refused (an API server's answer "
                         "to this is a few KiB)"), line
    assert _deleted(srv) == ["Background"]


def _answering(answer):
    """A talk for :class:`loopback.RawServer`: each request's path and Authorization kept in ``seen``,
    then ``answer(path)``'s pieces sent as they come."""
    def talk(srv, conn):
        path, auth = request_line(conn)
        srv.seen.append((path, auth))
        for piece in answer(path):
            if srv.stop.is_set():
                return
            conn.sendall(piece)
    return talk


def test_an_api_server_that_trickles_its_answer_is_given_up_at_the_deadline(tmp_path, capsys, monkeypatch):
    """The node's answer announced as 100 kB and sent a byte every 0.2 s: no read ever times out
    (30 s each), so only the answer's own deadline (``ANSWER_S``, 2 s here) ends it."""
    def trickle(_path):
        yield b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
        while True:
            time.sleep(0.2)
            yield b" "
    monkeypatch.setattr(ka, "ANSWER_S", 2.0)
    srv = RawServer(_answering(trickle))
    try:
        kc = kubeconfig(tmp_path / "kubeconfig", srv.url)
        t0 = time.monotonic()
        rc = kp.main([NODE, "--kubeconfig", str(kc), "--out-dir", str(tmp_path)])
        took = time.monotonic() - t0
    finally:
        srv.close()
    assert rc == ka.EXIT_API and took < 10
    line = _one_error(capsys)
    assert f"/api/v1/nodes/{NODE}: the answer took over 2 s (" in line and line.endswith(" bytes); given up"), line


def test_a_redirect_of_the_api_server_is_not_followed_and_the_token_stays(tmp_path, capsys):
    """``GET node`` answered with a 302 to another server, and with a 302 to itself (a loop): the plugin
    goes nowhere else, so the other server never sees the bearer token, and it ends in one line."""
    other = RawServer(_answering(lambda _path: [b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"]))
    srv = RawServer(_answering(lambda path: [f"HTTP/1.1 302 Found\r\nLocation: {other.url if 'loop' not in path else ''}"
                                               f"{path}\r\nContent-Length: 0\r\n\r\n".encode()]))
    try:
        kc = kubeconfig(tmp_path / "kubeconfig", srv.url)
        codes = [kp.main([node, "--kubeconfig", str(kc), "--out-dir", str(tmp_path)]) for node in (NODE, "loop")]
        err = capsys.readouterr().err
    finally:
        srv.close()
        other.close()
    assert other.seen == [] and len(srv.seen) == 2, (other.seen, srv.seen)
    assert {auth for _p, auth in srv.seen} == {"Bearer replay-token"}
    assert codes == [ka.EXIT_API, ka.EXIT_API]
    lines = [x for x in err.splitlines() if ": error: " in x]
    assert len(lines) == 2 and all("HTTP 302" in x for x in lines), err


def test_an_exec_that_never_ends_is_given_up_at_its_deadline(tmp_path):
    """A ``send`` whose stream stops without its Status or a close (a hung node, a proxy holding the
    socket): the copy's exec gives up at its deadline (2 s here) with what it got, not waiting forever."""
    import hashlib
    import io

    def serve(command):
        def stalled():
            yield b"0123456789"
            time.sleep(8)
        return stalled(), b"", 0
    with Replay({}, serve) as srv:
        api = ka.client(str(kubeconfig(tmp_path / "kubeconfig", srv.url)), None)
        out, t0 = io.BytesIO(), time.monotonic()
        got, status = ka.run_exec(api, NS, POD, "collect", ["python3", "-m", "forensics.ops.kubectl_pod", "send", "/b", "0",
                                                            "100"], out, hashlib.sha256(), 100, 2.0)
        took = time.monotonic() - t0
    assert (got, out.getvalue()) == (10, b"0123456789")
    assert status == {"status": "Failure", "message": "no end of the exec within 2 s"}
    assert took < 6
