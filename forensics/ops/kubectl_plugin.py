"""``kubectl gpu-forensics NODE [options] [collect options]``: the bundle of one node, back on this machine.

A kubectl plugin (the executable ``kubectl-gpu_forensics`` on ``PATH``; kubectl passes every argument
through). In order:

1. ``GET /api/v1/nodes/NODE``: a node that does not exist is refused before anything is created;
2. ``POST /apis/batch/v1/namespaces/NS/jobs``: the Job of the packaged template
   (forensics/ops/jobs/job-node.yaml, :func:`kubectl_api.render_job`) pinned to NODE with
   ``nodeName``, the image of ``--image``, the collect options passed through;
3. ``GET /api/v1/namespaces/NS/pods?labelSelector=job-name=JOB`` every ``--poll`` seconds, progress
   printed when the pod's phase or container state changes, and the pod's log
   (``GET .../pods/POD/log?container=collect&tailLines=20``) read until its ``bundle-ready`` line
   (forensics/ops/kubectl_pod.py); an image pull error, a pod the node refuses, a pod that fails or
   ``--timeout`` ends it with one line and its exit code;
4. the copy through ``pods/exec`` in bounded chunks (:func:`kubectl_api.fetch`), checked against the
   size and SHA-256 the pod printed; then :func:`forensics.bundle.verify` (a bundle that does not
   verify is refused, exit 3); then ``done`` through exec, which ends the pod's wait;
5. ``gpu-forensics analyze`` of the copy (reports in ``<bundle>-report/``), its verdict lines printed;
6. ``DELETE`` of the Job with ``propagationPolicy: Background`` (its pod goes too), in a ``finally``:
   on errors, Ctrl-C, SIGTERM and SIGHUP as well (a CI job cancelled, ``timeout``), unless ``--keep-job``.

Every answer is bounded: a JSON or log answer to :data:`kubectl_api.MAX_ANSWER` bytes and
:data:`kubectl_api.ANSWER_S` seconds, each exec to the bytes it asked for (more is refused) and its
deadline, every read to ``kubectl_api.TIMEOUT``; no redirect is followed.

Why exec and not the pod's log: a log is cut by the kubelet's rotation (``containerLogMaxSize``,
10 MiB by default) and is text; ``pods/exec`` is how ``kubectl cp`` copies, binary and unbounded,
and chunks keep the memory of both sides to one chunk.

Exit codes: 0 done; 1 done but evidence missing or unreadable (analyze's 1); 2 usage (also a bundle
over ``--max-bytes``); 3 the bundle does not verify (or the pod sent more than it announced); 4 RBAC forbidden (or 401); 5 the bundle could
not be written here; 6 node (or namespace) not found; 7 image pull error; 8 the pod cannot be placed
(unschedulable, refused by the kubelet); 9 timeout; 10 the pod failed; 11 other API error or the API
server unreachable (or an answer over its bounds); 130 interrupted (Ctrl-C), 143 SIGTERM, 129 SIGHUP.
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.util
import io
import os
import re
import signal
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

from .. import __version__
from ..bundle import Bundle, BundleError, verify
from ..words import count_of
from . import kubectl_api as ka
from .kubectl_pod import parse_ready

PROG = "kubectl-gpu_forensics"
REFUSED = ("--root", "--out", "--node")        #: collect options the plugin sets itself


def job_name(node: str, now: datetime | None = None) -> str:
    """``gpu-forensics-<node>-<MMDDhhmmss UTC>``, a DNS-1123 label of at most 49 characters (the Job
    controller appends ``-xxxxx`` for the pod and the name is also a label value, at most 63)."""
    stamp = (now or datetime.now(timezone.utc)).strftime("%m%d%H%M%S")
    base = re.sub(r"[^a-z0-9-]+", "-", node.lower())[:24].strip("-") or "node"
    return f"gpu-forensics-{base}-{stamp}"


def build_parser() -> argparse.ArgumentParser:
    """The plugin's own options; what it does not know are collect options (after ``--`` as well)."""
    p = argparse.ArgumentParser(
        prog="kubectl gpu-forensics", allow_abbrev=False, usage="kubectl gpu-forensics NODE [options] [-- collect options]",
        description="Collect a GPU node's evidence with a Job pinned to NODE, copy the bundle back, verify it, "
                    "analyze it here and delete the Job.",
        epilog="example: kubectl gpu-forensics gpu-a100-007 --image registry.example/gpu-forensics:0.1.0 -- --since 2h")
    p.add_argument("node", metavar="NODE", help="the Kubernetes node name")
    p.add_argument("-n", "--namespace", default="gpu-forensics", help="namespace of the Job (with the ServiceAccount "
                   "and RBAC of deploy/base; default gpu-forensics)")
    p.add_argument("--image", default=os.environ.get("GPU_FORENSICS_IMAGE") or f"gpu-forensics:{__version__}",
                   help="collector image (default: $GPU_FORENSICS_IMAGE, else %(default)s)")
    p.add_argument("--image-pull-policy", choices=("Always", "IfNotPresent", "Never"), help="default: the template's")
    p.add_argument("--kubeconfig", help="kubeconfig file (default $KUBECONFIG, ~/.kube/config)")
    p.add_argument("--context", help="kubeconfig context")
    p.add_argument("--out-dir", default=".", help="where the bundle and its reports go here (default .)")
    p.add_argument("--timeout", type=float, default=900, metavar="SECONDS",
                   help="how long to wait for the pod's bundle (default 900)")
    p.add_argument("--wait-copy", type=float, default=600, metavar="SECONDS",
                   help="how long the pod waits for the copy after collecting (default 600)")
    p.add_argument("--max-bytes", type=int, default=4 << 30, help="largest bundle copied (default 4 GiB)")
    p.add_argument("--poll", type=float, default=2.0, metavar="SECONDS", help="seconds between pod checks (default 2)")
    p.add_argument("--job-name", help="name of the Job (default gpu-forensics-<node>-<MMDDhhmmss>)")
    p.add_argument("--keep-job", action="store_true", help="leave the Job (and its pod) in place at the end")
    p.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    return p


class UsageError(Exception):
    """A usage error found before anything is asked of the cluster."""


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """``(plugin options, collect options)``. Collect options are those after ``--`` and those the
    plugin does not know; they are checked with ``gpu-forensics collect``'s own parser here (and
    ``--incident`` parsed), before anything is created; what depends on the node (``--journal-dir``
    exists, ``--since`` parses) is checked by the collector in the pod, whose failure ends the run
    with its log's last lines. Raises :class:`UsageError` (``--root``, ``--out``, ``--node``: set by the plugin)."""
    if "--" in argv:
        i = argv.index("--")
        args, extra = build_parser().parse_known_args(argv[:i])
        extra += argv[i + 1:]
    else:
        args, extra = build_parser().parse_known_args(argv)
    for a in extra:
        if a.split("=", 1)[0] in REFUSED:
            raise UsageError(f"{a.split('=', 1)[0]} is set by the plugin (the Job collects the node's /host into "
                             "/bundles; --out-dir says where the copy goes here)")
    from . import cli
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            ns = cli.build_parser().parse_args(["collect", "--root", "/", *extra])
        for text in ns.incident:
            cli.parse_incident(text)
    except SystemExit:
        why = (said.getvalue().strip().splitlines() or ["refused"])[-1].split("error: ", 1)[-1]
        raise UsageError(f"collect options: {why}") from None
    except cli.UsageError as e:
        raise UsageError(str(e)) from None
    return args, extra


def _say(msg: str) -> None:
    print(f"{PROG}: {msg}", file=sys.stderr, flush=True)


def wait_for_bundle(api: ka.Api, ns: str, job: str, timeout: float, poll: float) -> tuple[str, dict]:
    """Poll the Job's pod until its log has the ``bundle-ready`` line: ``(pod name, parse_ready)``.
    Raises :class:`kubectl_api.PluginError` for what :func:`kubectl_api.pod_state` finds, a failed
    Job without a pod, a pod that ended without a bundle, and ``timeout`` (``EXIT_TIMEOUT``)."""
    deadline, last, pod = time.monotonic() + timeout, None, None
    where = f"namespace {ns}"
    while True:
        pods = api.json("GET", f"/api/v1/namespaces/{ns}/pods", "list", "pods", where,
                        query={"labelSelector": f"job-name={job}"})
        items = sorted(pods.get("items") or [], key=lambda p: (p.get("metadata") or {}).get("creationTimestamp") or "")
        if not items:
            state = "no pod yet"
            j = api.json("GET", f"/apis/batch/v1/namespaces/{ns}/jobs/{job}", "get", "jobs.batch", f"job {ns}/{job}")
            failed = [c for c in (j.get("status") or {}).get("conditions") or []
                      if c.get("type") == "Failed" and c.get("status") == "True"]
            if failed:
                raise ka.PluginError(ka.EXIT_POD_FAILED, f"job {ns}/{job} failed without a pod ({failed[0].get('reason')}): "
                                                         f"{failed[0].get('message')}")
        else:
            p = items[-1]
            pod = p["metadata"]["name"]
            state, err = ka.pod_state(p)
            if err and err.code == ka.EXIT_POD_FAILED:
                raise ka.PluginError(err.code, f"{err}; its log ends: {_log_tail(api, ns, pod)}")
            if err:
                raise err
            phase = (p.get("status") or {}).get("phase")
            if phase in ("Running", "Succeeded"):
                status, data = api.call("GET", f"/api/v1/namespaces/{ns}/pods/{pod}/log",
                                        {"container": "collect", "tailLines": "20"}, accept="text/plain")
                if not 200 <= status < 300:
                    raise ka.status_error(status, data, "get", "pods/log", f"pod {ns}/{pod}")
                ready = parse_ready(data.decode("utf-8", "replace"))
                if ready:
                    return pod, ready
                if phase == "Succeeded":
                    raise ka.PluginError(ka.EXIT_POD_FAILED, f"pod {ns}/{pod} ended without a bundle-ready line; "
                                                             f"see kubectl logs -n {ns} {pod}")
                state = "Running: collecting"
        if state != last:
            _say(f"pod {pod or '-'}: {state}")
            last = state
        if time.monotonic() >= deadline:
            raise ka.PluginError(ka.EXIT_TIMEOUT, f"timed out after {timeout:g} s waiting for the bundle of job {ns}/{job} "
                                                  f"(pod {pod or 'not created'}: {state}); see kubectl describe -n {ns} job/{job}")
        time.sleep(max(0.0, min(poll, deadline - time.monotonic())))


def _log_tail(api: ka.Api, ns: str, pod: str, lines: int = 3) -> str:
    try:
        status, data = api.call("GET", f"/api/v1/namespaces/{ns}/pods/{pod}/log",
                                {"container": "collect", "tailLines": str(lines)}, accept="text/plain")
    except ka.PluginError as e:
        return f"(log not read: {e})"
    text = " | ".join(x.strip() for x in data.decode("utf-8", "replace").splitlines()[-lines:] if x.strip())
    return text[:400] if 200 <= status < 300 else f"(log not read: HTTP {status})"


def delete_job(api: ka.Api, ns: str, job: str) -> None:
    """``DELETE`` the Job with ``propagationPolicy: Background`` (the garbage collector deletes its pod);
    a failure is printed, never raised (this runs in a ``finally``)."""
    body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
    try:
        status, data = api.call("DELETE", f"/apis/batch/v1/namespaces/{ns}/jobs/{job}", body=body)
    except ka.PluginError as e:
        _say(f"warning: job {ns}/{job} not deleted: {e}; delete it with kubectl delete -n {ns} job/{job}")
        return
    if 200 <= status < 300 or status == 404:
        _say(f"deleted job {ns}/{job} (its pod goes too)")
    else:
        _say(f"warning: job {ns}/{job} not deleted: {ka.status_error(status, data, 'delete', 'jobs.batch', job)}")


def run(args: argparse.Namespace, collect_args: list[str], api_client=None) -> int:
    """Steps 1-6 of the module docstring; returns the exit code, raises :class:`kubectl_api.PluginError`."""
    api = ka.Api(api_client or ka.client(args.kubeconfig, args.context))
    ns, node = args.namespace, args.node
    out_dir = Path(args.out_dir)
    if not out_dir.is_dir():
        raise ka.PluginError(ka.EXIT_USAGE, f"--out-dir {out_dir}: not a directory")
    api.json("GET", f"/api/v1/nodes/{node}", "get", "nodes", f"node {node}")
    name = args.job_name or job_name(node)
    job = ka.render_job(node, name, ns, args.image, collect_args, args.wait_copy, args.image_pull_policy)
    created = False
    try:
        api.json("POST", f"/apis/batch/v1/namespaces/{ns}/jobs", "create", "jobs.batch", f"namespace {ns}", body=job)
        created = True
        _say(f"created job {ns}/{name} on node {node} (image {args.image})")
        pod, ready = wait_for_bundle(api, ns, name, args.timeout, args.poll)
        _say(f"bundle ready in pod {pod}: {ready['path']} ({ready['size']} bytes, collect exit {ready['rc']})")
        dest = out_dir / Path(ready["path"]).name
        if dest.exists():
            raise ka.PluginError(ka.EXIT_USAGE, f"{dest} exists; give another --out-dir")
        try:
            ka.fetch(api.client, ns, pod, "collect", ready, dest, args.max_bytes, max(60.0, args.wait_copy),
                     progress=lambda done, size: _say(f"copied {done} of {size} bytes"))
        except OSError as e:
            raise ka.PluginError(ka.EXIT_WRITE, f"cannot write the bundle under {out_dir}: {e.strerror}") from None
        check(dest, ready)
        _mark_fetched(api, ns, pod, ready)
        rc = analyze(dest, ready)
        return max(rc, 1 if ready["rc"] == 1 else 0)
    finally:
        if created and not args.keep_job:
            with _deferred_signals():
                delete_job(api, ns, name)
        elif created:
            _say(f"job {ns}/{name} kept (--keep-job); delete it with kubectl delete -n {ns} job/{name}")


def check(dest: Path, ready: dict) -> None:
    """Verify the copy (:func:`forensics.bundle.verify`, and its manifest hash against the pod's).
    Raises ``EXIT_INVALID`` for a bundle that does not verify."""
    try:
        problems = verify(dest)
        b = Bundle.open(dest)
        b.close()
    except BundleError as e:
        raise ka.PluginError(ka.EXIT_INVALID, f"{dest}: not a bundle: {e}") from None
    if b.manifest_sha256 != ready["manifest"]:
        problems.insert(0, f"manifest: SHA-256 {b.manifest_sha256}, the pod printed {ready['manifest']}")
    if problems:
        raise ka.PluginError(ka.EXIT_INVALID, f"{dest}: the copied bundle does NOT verify ({count_of(len(problems), 'problem')}, "
                                              f"first: {problems[0]}); not analysed")
    _say(f"verified {dest} (manifest.json sha256 {b.manifest_sha256})")


def analyze(dest: Path, ready: dict) -> int:
    """``gpu-forensics analyze`` of the verified copy (reports in ``<bundle>-report/``, the verdict
    lines printed), then where the bundle is and its manifest hash; analyze's exit code."""
    from . import cli
    rc = cli.main(["analyze", str(dest), "--expect", ready["manifest"]])
    print(f"bundle: {dest}\nmanifest.json sha256: {ready['manifest']}")
    return rc


def _mark_fetched(api: ka.Api, ns: str, pod: str, ready: dict) -> None:
    """Tell the pod the copy is done (``kubectl_pod done``) so that it ends now; a failure is only noted."""
    cmd = ["python3", "-m", "forensics.ops.kubectl_pod", "done", ready["path"]]
    try:
        _got, err = ka.run_exec(api.client, ns, pod, "collect", cmd, io.BytesIO(), hashlib.sha256(), 0, 30)
    except ka.PluginError as e:
        err = {"message": str(e)}
    if err.get("status") != "Success":
        _say(f"note: could not tell pod {pod} the copy is done ({err.get('message')}); it ends after --wait-copy")


STOPPING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Stopped(BaseException):
    """SIGTERM or SIGHUP arrived (a CI job cancelled, ``timeout``, the terminal gone): the plugin stops
    as on Ctrl-C (``KeyboardInterrupt``), deleting the Job on its way out. Exit code 128 + the signal."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum, self.name = signum, signal.Signals(signum).name


@contextlib.contextmanager
def _stoppable():
    """SIGTERM and SIGHUP raise :class:`Stopped` meanwhile (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, _frame):
        raise Stopped(signum)
    old = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@contextlib.contextmanager
def _deferred_signals():
    """SIGINT, SIGTERM and SIGHUP held back meanwhile (pthread_sigmask(3)): the Job's deletion, bounded by
    the request's timeout, is not cut by a second Ctrl-C; one that came is answered right after."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, STOPPING)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``kubectl-gpu_forensics``; returns the exit code (module docstring)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args, collect_args = parse_args(argv)
        if importlib.util.find_spec("kubernetes") is None:
            raise UsageError("the kubernetes client is not installed: pip install 'gpu-forensics[kube,report]'")
        with _stoppable():
            return run(args, collect_args)
    except UsageError as e:
        _say(f"error: {e}")
        return ka.EXIT_USAGE
    except ka.PluginError as e:
        _say(f"error: {e}")
        return e.code
    except KeyboardInterrupt:
        _say("interrupted")
        return ka.EXIT_INTERRUPTED
    except Stopped as e:
        _say(f"interrupted by {e.name}")
        return 128 + e.signum


if __name__ == "__main__":
    sys.exit(main())
