"""The Kubernetes API calls of ``kubectl gpu-forensics`` (forensics/ops/kubectl_plugin.py).

Requests go through the official Python client (the ``kube`` extra): JSON calls through its
``ApiClient`` (answers kept as the API's JSON, not the generated models), the copy through
``kubernetes.stream.stream`` on the ``pods/exec`` subresource (the websocket channel protocol
``v4.channel.k8s.io``/``v5.channel.k8s.io``: one byte of channel, 1 stdout, 2 stderr, 3 the exec's
``Status``), as ``kubectl cp`` does. Error answers are ``Status`` objects (``kind: Status``,
``reason``, ``message``, ``code``; Kubernetes API reference, meta/v1 Status); each becomes one
:class:`PluginError` line with the verb and resource that was refused.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
from contextlib import contextmanager
from pathlib import Path

import yaml

EXIT_OK, EXIT_MISSING, EXIT_USAGE, EXIT_INVALID, EXIT_FORBIDDEN, EXIT_WRITE = 0, 1, 2, 3, 4, 5
EXIT_NOT_FOUND, EXIT_IMAGE, EXIT_UNSCHEDULABLE, EXIT_TIMEOUT, EXIT_POD_FAILED, EXIT_API = 6, 7, 8, 9, 10, 11
EXIT_INTERRUPTED = 130
TEMPLATE = Path(__file__).resolve().parent / "jobs" / "job-node.yaml"
TIMEOUT = (5.0, 30.0)               #: (connect, read) seconds per JSON request, and per read of an exec
ANSWER_S = 60.0                     #: seconds one JSON or log answer may take in all (a server that trickles)
MAX_ANSWER = 16 << 20               #: bytes of one JSON or log answer (a PodList of one Job: a few KiB)
CHUNK = 32 << 20                    #: bytes per exec of the copy (kubectl_pod.MAX_CHUNK is the pod's bound)
EXEC_SLACK = 64 << 10               #: bytes an exec may send beyond the stdout asked for (framing, Status, stderr)
STDERR_TAIL = 4 << 10               #: bytes of an exec's stderr kept: its end
PULL_ERRORS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull")
CONFIG_ERRORS = ("CreateContainerConfigError", "CreateContainerError", "RunContainerError")


class PluginError(Exception):
    """One line for the user and the plugin's exit code (the ``EXIT_*`` constants)."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


def client(kubeconfig: str | None, context: str | None):
    """An ``ApiClient`` from ``kubeconfig`` (else ``$KUBECONFIG`` / ``~/.kube/config``, as kubectl),
    ``context`` selecting a kubeconfig context; in a pod without a kubeconfig, the ServiceAccount.
    Redirects are not followed. Raises :class:`PluginError` (usage) when none loads."""
    from kubernetes import client as kc, config
    cfg = kc.Configuration()
    try:
        config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=cfg)
    except (config.ConfigException, OSError, TypeError) as e:
        if kubeconfig or context:
            raise PluginError(EXIT_USAGE, f"kubeconfig: {e}") from None
        try:
            config.load_incluster_config(client_configuration=cfg)
        except config.ConfigException:
            raise PluginError(EXIT_USAGE, f"no kubeconfig ({e}) and not in a pod") from None
    from urllib3 import Retry
    # one more try of a connection that failed; no redirect followed: an answer of 3xx is the API
    # server's answer (urllib3 would follow up to 3, to any host, with the request's body)
    cfg.retries = Retry(total=1, redirect=0, raise_on_redirect=False)
    return kc.ApiClient(cfg)


def status_error(status: int, body: bytes, verb: str, resource: str, where: str) -> PluginError:
    """The :class:`PluginError` for an answer that is not 2xx. ``body`` is the API's ``Status``
    (``message`` kept, cut to 300 characters); ``where`` says the object (``node gpu-7``)."""
    try:
        st = json.loads(body)
        msg = st.get("message") if isinstance(st, dict) else None
    except ValueError:
        msg = None
    msg = (msg or body[:300].decode("utf-8", "replace") or "no message").strip().replace("\n", " ")[:300]
    if status == 403:
        return PluginError(EXIT_FORBIDDEN, f"RBAC: forbidden to {verb} {resource} ({where}): {msg}; ask for a Role "
                                           f"granting {verb} on {resource} (docs/usage.md: kubectl gpu-forensics)")
    if status == 401:
        return PluginError(EXIT_FORBIDDEN, f"unauthorized (HTTP 401) to {verb} {resource}: {msg}; log in again "
                                           "(kubeconfig credentials expired?)")
    if status == 404:
        return PluginError(EXIT_NOT_FOUND, f"{where} not found: {msg}")
    return PluginError(EXIT_API, f"{verb} {resource} ({where}): HTTP {status}: {msg}")


class Api:
    """JSON requests against the API server; every request is appended to ``log`` as
    ``(method, path, status)``."""

    def __init__(self, api_client):
        self.client, self.log = api_client, []

    def call(self, method: str, path: str, query: dict | None = None, body=None, accept="application/json"):
        """``(status, raw bytes)``; an unreachable server is a :class:`PluginError` (``EXIT_API``)."""
        where = f"{method} {self.client.configuration.host}{path}"
        try:
            m, url, headers, b, _ = self.client.param_serialize(
                method, path, query_params=list((query or {}).items()),
                header_params={"Accept": accept, **({"Content-Type": "application/json"} if body is not None else {})},
                body=body, auth_settings=["BearerToken"])
            resp = self.client.call_api(m, url, header_params=headers, body=b, _request_timeout=TIMEOUT)
        except Exception as e:  # noqa: BLE001 - urllib3's errors and ApiException alike: not reached
            raise PluginError(EXIT_API, f"{where}: the API server was not reached: {type(e).__name__}: "
                                        f"{str(e)[:200]}") from None
        data = read_answer(resp.response, where)
        self.log.append((method, path, resp.status))
        return resp.status, data

    def json(self, method: str, path: str, verb: str, resource: str, where: str, query=None, body=None) -> dict:
        """The parsed 2xx answer, else :func:`status_error`'s error raised."""
        status, data = self.call(method, path, query, body)
        if not 200 <= status < 300:
            raise status_error(status, data, verb, resource, where)
        try:
            return json.loads(data)
        except ValueError:
            raise PluginError(EXIT_API, f"{method} {path}: the answer is not JSON: {data[:120]!r}") from None


def read_answer(raw, where: str, limit: int | None = None, seconds: float | None = None) -> bytes:
    """The body of the urllib3 response ``raw`` (not yet read: the client's ``preload_content=False``),
    read as it comes (``read1``) until its end, at most ``limit`` bytes and ``seconds`` in all (by default
    :data:`MAX_ANSWER` and :data:`ANSWER_S`; each read
    waits ``TIMEOUT[1]`` at most: urllib3's read timeout); the connection released. Raises
    :class:`PluginError` (``EXIT_API``) for an answer over either bound or a read that fails."""
    import time
    limit, seconds = limit or MAX_ANSWER, seconds or ANSWER_S
    end, size, chunks = time.monotonic() + seconds, 0, []
    try:
        while True:
            try:
                piece = raw.read1(1 << 16)
            except Exception as e:  # noqa: BLE001 - urllib3's ReadTimeoutError, ProtocolError
                raise PluginError(EXIT_API, f"{where}: the answer was cut: {type(e).__name__}: {str(e)[:200]}") from None
            if not piece:
                end = None
                return b"".join(chunks)
            size += len(piece)
            if size > limit:
                raise PluginError(EXIT_API, f"{where}: the answer is over {limit} bytes; refused (an API server's "
                                            "answer to this is a few KiB)")
            if time.monotonic() > end:
                raise PluginError(EXIT_API, f"{where}: the answer took over {seconds:g} s ({size} bytes); given up")
            chunks.append(piece)
    finally:
        if end is not None:  # given up midway: this connection is not for another request
            raw.close()
        raw.release_conn()


def render_job(node: str, name: str, namespace: str, image: str, collect_args: list[str], wait_copy: float,
               pull_policy: str | None = None, template: Path = TEMPLATE) -> dict:
    """The Job of ``template`` for ``node``: ``metadata.name``/``namespace``, a ``gpu-forensics.io/node``
    label, ``spec.template.spec.nodeName``, the ``collect`` container's image (and pull policy) and its
    arguments (``--wait-copy`` and the collect options appended after the template's own);
    ``activeDeadlineSeconds`` at least ``wait_copy`` + 1200 s (collect's default time budget is 600 s)."""
    job = yaml.safe_load(template.read_text())
    md = job["metadata"]
    md["name"], md["namespace"] = name, namespace
    md.setdefault("labels", {})["gpu-forensics.io/node"] = node[:63]
    job["spec"]["activeDeadlineSeconds"] = max(job["spec"].get("activeDeadlineSeconds") or 0, int(wait_copy) + 1200)
    spec = job["spec"]["template"]["spec"]
    spec["nodeName"] = node
    c = next(c for c in spec["containers"] if c["name"] == "collect")
    c["image"] = image
    if pull_policy:
        c["imagePullPolicy"] = pull_policy
    args = c["args"]
    args[args.index("--wait-copy") + 1] = f"{wait_copy:g}"
    c["args"] = args + list(collect_args)
    return job


def _waiting(pod: dict) -> list[tuple[str, dict, dict]]:
    """``(container name, state.waiting, container spec)`` of each waiting container."""
    specs = {c.get("name"): c for c in (pod.get("spec") or {}).get("containers") or []}
    out = []
    for s in ((pod.get("status") or {}).get("initContainerStatuses") or []) + \
            ((pod.get("status") or {}).get("containerStatuses") or []):
        w = (s.get("state") or {}).get("waiting")
        if w:
            out.append((s.get("name"), w, {**specs.get(s.get("name"), {}), "image": s.get("image") or
                                           specs.get(s.get("name"), {}).get("image")}))
    return out


def pod_state(pod: dict) -> tuple[str, PluginError | None]:
    """A one-line summary of a Pod (``Pending: ContainerCreating``, ``Running``, ...) and the error it
    shows, if any: an image that cannot be pulled (``ErrImagePull``, ``ImagePullBackOff``, the image
    named), a container that cannot start, a pod the scheduler or the node refused (``PodScheduled``
    False / ``Unschedulable``; phase ``Failed`` with a ``status.reason`` such as ``OutOfcpu`` from
    the kubelet's admission), a container that ended before the bundle was ready."""
    st = pod.get("status") or {}
    phase = st.get("phase") or "Unknown"
    name = (pod.get("metadata") or {}).get("name")
    node = (pod.get("spec") or {}).get("nodeName")
    for cname, w, spec in _waiting(pod):
        reason, msg = w.get("reason") or "", (w.get("message") or "").replace("\n", " ")[:300]
        if reason in PULL_ERRORS:
            return f"{phase}: {reason}", PluginError(
                EXIT_IMAGE, f"image pull failed for {spec.get('image')} on node {node} ({reason}): {msg or 'no message'}; "
                            "give a reachable image with --image (and --image-pull-policy)")
        if reason in CONFIG_ERRORS:
            return f"{phase}: {reason}", PluginError(EXIT_POD_FAILED, f"container {cname} of pod {name} cannot start "
                                                                      f"({reason}): {msg}")
    for c in st.get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            return f"{phase}: {c.get('reason')}", PluginError(
                EXIT_UNSCHEDULABLE, f"pod {name} cannot be placed on node {node} ({c.get('reason')}): {c.get('message')}")
    if phase == "Failed":
        conts = st.get("containerStatuses") or []
        term = next(((s.get("state") or {}).get("terminated") for s in conts
                     if (s.get("state") or {}).get("terminated")), None)
        if not term:  # rejected before any container ran: kubelet admission (OutOfcpu, NodeAffinity, Evicted)
            return f"Failed: {st.get('reason')}", PluginError(
                EXIT_UNSCHEDULABLE, f"pod {name} refused by node {node} ({st.get('reason')}): {st.get('message')}")
        return f"Failed: exit {term.get('exitCode')}", PluginError(
            EXIT_POD_FAILED, f"pod {name} failed: container exited {term.get('exitCode')} ({term.get('reason')}) "
                             f"before the bundle was ready: {(term.get('message') or '').strip()[:200]}")
    waiting = [w.get("reason") for _, w, _ in _waiting(pod) if w.get("reason")]
    return phase + (f": {', '.join(waiting)}" if waiting else ""), None


def fetch(api_client, namespace: str, pod: str, container: str, ready: dict, dest: Path, max_bytes: int,
          deadline_s: float, progress=None) -> Path:
    """Copy the bundle the pod announced (``ready``: kubectl_pod.parse_ready) to ``dest`` through
    ``pods/exec`` of ``python3 -m forensics.ops.kubectl_pod send PATH OFFSET LENGTH``, :data:`CHUNK`
    bytes per exec, so that neither the client's buffers nor one websocket hold more than a chunk;
    then check size and SHA-256 against ``ready``. Never more than the announced size is written, and
    never more than ``max_bytes``. Raises :class:`PluginError`: the size over ``max_bytes`` (before
    anything is copied), exec refused (403), a chunk that failed or came short, a pod that sent more
    than the chunk asked for (``EXIT_INVALID``), a file that differs. ``dest`` is written as
    ``dest.part``, renamed when it matches, removed otherwise."""
    size = ready["size"]
    if size > max_bytes:
        raise PluginError(EXIT_USAGE, f"the bundle is {size} bytes, over --max-bytes {max_bytes}; it stays on the node at "
                                      f"{ready['path']}")
    part = dest.with_name(dest.name + ".part")
    try:
        _copy(api_client, namespace, pod, container, ready, part, deadline_s, progress)
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    os.replace(part, dest)
    return dest


def _copy(api_client, namespace, pod, container, ready, part: Path, deadline_s, progress) -> None:
    size = ready["size"]
    h = hashlib.sha256()
    with open(part, "wb") as out:
        off = 0
        while off < size:
            n = min(CHUNK, size - off)
            cmd = ["python3", "-m", "forensics.ops.kubectl_pod", "send", ready["path"], str(off), str(n)]
            got, err = run_exec(api_client, namespace, pod, container, cmd, out, h, n, deadline_s)
            if err.get("refused"):
                raise PluginError(EXIT_INVALID, f"copy of {ready['path']} bytes {off}+{n}: {err['message']}; "
                                                "the partial copy is removed (the bundle stays on the node)")
            if err.get("status") != "Success" or got != n:
                raise PluginError(EXIT_POD_FAILED, f"copy of {ready['path']} bytes {off}+{n} failed: got {got} bytes; "
                                                   f"{err.get('message') or err}")
            off += n
            if progress:
                progress(off, size)
    if h.hexdigest() != ready["sha256"]:
        raise PluginError(EXIT_INVALID, f"copied bundle's SHA-256 {h.hexdigest()} is not the pod's {ready['sha256']}; "
                                        f"refused (the bundle stays on the node at {ready['path']})")


def run_exec(api_client, namespace: str, pod: str, container: str, command: list[str], out, h, want: int,
             deadline_s: float) -> tuple[int, dict]:
    """Run ``command`` in the pod's ``container`` through ``pods/exec`` (:func:`bounded_exec`: at most
    ``want`` + :data:`EXEC_SLACK` bytes over the socket, ``deadline_s`` seconds in all) and :func:`_drain`
    it: at most ``want`` bytes of its stdout written to ``out`` (and fed to the hash ``h``).
    ``(bytes written, the exec's Status)``. Raises :class:`PluginError` when the exec cannot start
    (``EXIT_FORBIDDEN`` for a 403, else ``EXIT_API``)."""
    from kubernetes.client import CoreV1Api
    from kubernetes.stream import stream
    try:
        with bounded_exec(want + EXEC_SLACK, deadline_s):
            ws = stream(CoreV1Api(api_client).connect_get_namespaced_pod_exec, pod, namespace, container=container,
                        command=command, stderr=True, stdin=False, stdout=True, tty=False, _preload_content=False,
                        binary=True)
    except Exception as e:  # noqa: BLE001 - ApiException(status=0) carries the handshake's answer
        text = str(e).replace("\n", " ")
        if "403" in text:
            raise PluginError(EXIT_FORBIDDEN, f"RBAC: forbidden to create pods/exec (pod {namespace}/{pod}): "
                                              f"{text[:200]}; the copy needs create on pods/exec") from None
        raise PluginError(EXIT_API, f"exec into pod {namespace}/{pod} failed: {text[:300]}") from None
    return _drain(ws, out, h, want, deadline_s)


class Flood(Exception):
    """More bytes came over an exec's websocket than :func:`bounded_exec` allows."""


@contextmanager
def bounded_exec(limit: int, seconds: float):
    """Meanwhile, each websocket ``kubernetes.stream.stream`` opens (``pods/exec``) is bounded: the
    handshake and each read wait ``TIMEOUT[1]`` seconds at most, no redirect is followed (the bearer
    token goes to the API server only), a watchdog shuts its socket down ``seconds`` (and
    ``TIMEOUT[0]``, after the reader's own deadline) after it was opened (a read blocked mid-frame
    or mid-handshake ends), and :class:`Flood` is raised once more
    than ``limit`` bytes came over it. The client makes websocket-client's ``WebSocket`` with no
    timeout, follows up to 3 redirects, and reads a frame whole whatever length its header announces:
    the class it makes is a subclass that sets these, for the ``stream`` calls made in this block."""
    import socket
    import threading
    from kubernetes.stream import ws_client
    base = ws_client.WebSocket

    class Bounded(base):
        def connect(self, url, **options):
            options.update(timeout=TIMEOUT[1], redirect_limit=0)
            self.watchdog = threading.Timer(seconds + TIMEOUT[0], self._expire)
            self.watchdog.daemon = True
            self.watchdog.start()
            try:
                super().connect(url, **options)
            except BaseException:
                self.watchdog.cancel()
                raise
            recv, seen = self.frame_buffer.recv, [0]

            def capped(n):
                data = recv(n)
                seen[0] += len(data)
                if seen[0] > limit:
                    raise Flood(f"the pod sent more than the {limit - EXEC_SLACK} bytes asked for; refused")
                return data
            self.frame_buffer.recv = capped

        def _expire(self):
            with contextlib.suppress(OSError, AttributeError):
                self.sock.shutdown(socket.SHUT_RDWR)

        def close(self, *a, **k):  # at once: a graceful close reads on (3 s) for the peer's close frame
            self.watchdog.cancel()
            self.shutdown()

    ws_client.WebSocket = Bounded
    try:
        yield
    finally:
        ws_client.WebSocket = base


def _drain(ws, out, h, want: int, deadline_s: float) -> tuple[int, dict]:
    """Read one exec to its end: at most ``want`` bytes of stdout written to ``out`` and hashed;
    ``(bytes, the error channel's Status)``. Stdout beyond ``want`` and a :class:`Flood` give a
    ``Failure`` Status with ``refused`` set; stderr's last :data:`STDERR_TAIL` bytes become the Status
    message when the exec failed without one."""
    import time
    got, stderr, over = 0, b"", 0
    end = time.monotonic() + deadline_s
    try:
        while True:
            live = ws.is_open() and time.monotonic() < end
            if live:
                ws.update(timeout=1)
            data = ws.read_channel(1, timeout=0)
            if data:
                keep = data[:max(0, want - got)]
                out.write(keep)
                h.update(keep)
                got += len(keep)
                over += len(data) - len(keep)
            stderr = (stderr + (ws.read_channel(2, timeout=0) or b""))[-STDERR_TAIL:]
            if over:
                return got, {"status": "Failure", "refused": True,
                             "message": f"the pod sent more than the {want} bytes asked for; refused"}
            if not live:
                break
        raw = ws.read_channel(3, timeout=0)
        timed_out = ws.is_open()
    except Flood as e:
        return got, {"status": "Failure", "refused": True, "message": str(e)}
    except Exception as e:  # noqa: BLE001 - websocket-client's errors: a read timed out, the watchdog's shutdown
        return got, {"status": "Failure", "message": f"the exec was cut: {type(e).__name__}: {str(e)[:200]}"}
    finally:
        ws.close()
    if timed_out:
        return got, {"status": "Failure", "message": f"no end of the exec within {deadline_s:g} s"}
    try:
        err = json.loads(raw) if raw else {}
    except ValueError:
        err = {}
    if not isinstance(err, dict) or not err:
        err = {"status": "Failure", "message": "the exec ended without a status"}
    if err.get("status") != "Success" and stderr:
        err = {**err, "message": f"{err.get('message')}: {stderr.decode('utf-8', 'replace').strip()[-200:]}"}
    return got, err
