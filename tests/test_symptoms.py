"""Neighbouring GPU failures (issue 14 item 7): each is kept at collection, classified as its own symptom
with its own remedy in analysis.json's ``symptoms``, and never read as the EPERM class ("Failed to
initialize NVML: Unknown Error" after a daemon-reload), nor that class as one of them. Also: a forged
``sudo`` line is a red flag, never the requester of a reload.

Journals are real .journal files built by systemd-journal-remote (samples/journalbuild.py); pod logs are
CRI log files under /var/log/pods; both go through collect and analyze like a node's. The wordings are
those of the public reports cited in forensics/neighbours.py.
"""
from __future__ import annotations

from datetime import timedelta

from journalbuild import build_journal
from test_forged import LOGGER
from test_hostile_inputs import MACHINE, node_root, run
from test_journal import T0, analyse, entry, kinds, pid1, service, stored

from reports import render

S = timedelta(seconds=1)
PODS = "/var/log/pods"
LSTAT = ("failed to generate container \\\"ee60f6fd6c2a\\\" spec: failed to generate spec: lstat "
         "/run/nvidia/driver/dev/nvidiactl: no such file or directory")
CONTAINERD_CREATE = (f'time="2026-07-17T12:00:00.777721875Z" level=error msg="CreateContainer within sandbox '
                     f'\\"88f2a9a776b8\\" for &ContainerMetadata{{Name:plugin-validation,Attempt:0,}} failed" '
                     f'error="{LSTAT}"')
KUBELET_CREATE = ('E0717 12:00:00.778063 2210 remote_runtime.go:416] "CreateContainer in sandbox from runtime '
                  f'service failed" err="rpc error: code = Unknown desc = {LSTAT}" podSandboxID="88f2a9a776b8"')
LIBCUDA = ('E0404 19:00:21.000000 1 main.go:132] error starting plugins: failed to create CDI spec: failed to '
           'get libraries for driver version: failed to locate libcuda.so.535.129.03: pattern '
           'libcuda.so.535.129.03 not found')
HAMI = "[HAMI-core ERROR (pid:1436 thread=139781782480704 libvgpu.c:874)]: cuInit failed:100"
BACK_OFF = ('E0717 12:00:00.000000 2210 pod_workers.go:1298] "Error syncing pod, skipping" err="failed to '
            '\\"StartContainer\\" for \\"nvidia-device-plugin-ctr\\" with CrashLoopBackOff: \\"back-off 40s '
            'restarting failed container=nvidia-device-plugin-ctr pod=nvidia-device-plugin-daemonset-x7k2p_'
            'kube-system(5c1b0d3e-0000-4000-8000-000000000001)\\"" pod="kube-system/nvidia-device-plugin-daemonset-x7k2p"')
WEB_BACK_OFF = BACK_OFF.replace("nvidia-device-plugin-ctr", "web").replace("nvidia-device-plugin-daemonset-x7k2p",
                                                                          "web-5d8f")
DRIVER_NOT_LOADED = ('time="2026-07-17T12:00:00Z" level=error msg="RunPodSandbox failed" error="failed to create '
                     'shim task: OCI runtime create failed: runc create failed: unable to start container process: '
                     'error during container init: error running hook #0: error running hook: exit status 1, '
                     'stdout: , stderr: nvidia-container-cli: initialization error: nvml error: driver not loaded: '
                     'unknown"')
ALLOCATE = ('E0717 12:00:00.000000 2210 kubelet.go:2300] "Allocate failed due to device plugin '
            'GetPreferredAllocation rpc failed with err: rpc error: code = Unknown desc = error getting list of '
            'preferred allocation devices: unable to get device link information: error calling nvml.Init: '
            'Unknown Error, which is unexpected"')
EPERM = 'E0717 12:00:00.000000 2210 manager.go:123] "Failed to initialize NVML" err="Unknown Error" pod="ml/trainer-0"'
SUDO_RELOAD = "  ops : TTY=pts/0 ; PWD=/root ; USER=root ; COMMAND=/usr/bin/systemctl daemon-reload"
PLUGIN_DIR = f"{PODS}/kube-system_nvidia-device-plugin-daemonset-x7k2p_5c1b0d3e/nvidia-device-plugin-ctr"
INCIDENT = [{"start": (T0 - 60 * S).isoformat(), "end": (T0 + 60 * S).isoformat()}]


def cri(at, msg: str, stream: str = "stderr") -> str:
    """One CRI log line (kubelet pkg/kubelet/kuberuntime/logs)."""
    return f"{at.isoformat().replace('+00:00', 'Z')} {stream} F {msg}\n"


def kubelet(at, msg: str) -> bytes:
    return service(at, 2210, "kubelet.service", "kubelet", msg)


def containerd(at, msg: str) -> bytes:
    return service(at, 1811, "containerd.service", "containerd", msg)


def node(tmp_path, name: str, entries=(), logs: dict[str, str] | None = None):
    """A node root with a real journal of ``entries`` and the pod log files ``logs`` (host path -> text)."""
    root = node_root(tmp_path / name, logs or {})
    build_journal(b"".join([pid1(T0 - 600 * S, "Started kubelet.service.", UNIT="kubelet.service"), *entries]),
                  root / "var/log/journal" / MACHINE / "system.journal")
    return root


def symptoms(a: dict) -> dict[str, dict]:
    return {s["class"]: s for s in a["symptoms"]}


def not_eperm(a: dict, *classes: str) -> None:
    """Nothing of the analysis reads a neighbour as the EPERM class: no NVML error line, no log error, no
    incident of that class; the incidents the neighbour's lines open (issue 26: each its own failure) are of
    ``classes`` only (none when not given), and the report does not contradict itself."""
    assert not [e for e in a["timeline"] if e["kind"] in ("journal.nvml-error", "container.log-error")]
    assert sorted({i["symptom_class"] for i in a["incidents"]}) == sorted(classes)
    assert not [p for p in a["problems"] if p["artifact"] == "analysis"]


def test_a_missing_driver_device_at_create_is_its_own_class(tmp_path):
    bundle, a = run(tmp_path, node(tmp_path, "n", [containerd(T0, CONTAINERD_CREATE), kubelet(T0 + S / 1000, KUBELET_CREATE),
                                                    containerd(T0 + 30 * S, CONTAINERD_CREATE)]))
    s = symptoms(a)["driver-not-ready"]
    assert (s["count"], s["first"], s["last"]) == (3, "2026-07-17T12:00:00Z", "2026-07-17T12:00:30Z")
    assert s["signatures"] == {"spec-device-missing": 3}
    kept = {e["__CURSOR"]: e for e in stored(bundle)}
    assert [kept[e["cursor"]]["_GF_SELECTED_BY"][0] for e in s["evidence"]] == ["symptom"] * 3  # the last ends the journal too
    assert s["evidence"][0]["artifact"] == "journal/entries.jsonl" and s["evidence"][0]["line"] >= 1
    assert s["remedy"]["check"][0] == "ls -l /run/nvidia/driver/dev/nvidiactl"
    assert "kubectl get pods -A -o wide --field-selector spec.nodeName=gpu-node-7 | grep -i -E " \
           "'driver|toolkit|validator'" in s["remedy"]["check"]
    assert "https://github.com/NVIDIA/gpu-operator/issues/377" in s["remedy"]["sources"]
    not_eperm(a, "create-failed")
    # issue 26: the create error opens its incident, cited whole, and the driver not ready is its cause
    for inc in a["incidents"]:
        assert {c["kind"]: c["verdict"] for c in inc["causes"]}["driver-not-ready"] == "confirmed"
        assert any("lstat /run/nvidia/driver/dev/nvidiactl: no such file or directory" in e["summary"]
                   for e in inc["evidence"])
    assert a["headline"]["cause"] == "driver-not-ready" and a["headline"]["verdict"] == "confirmed"
    md, html = render.markdown(a), render.html(a)
    assert "### Other GPU failures seen" in md and "A GPU device node was missing" in md
    assert 'id="other-failures"' in html and "ls -l /run/nvidia/driver/dev/nvidiactl" in html


def test_cdi_spec_generation_without_libcuda_is_a_wrong_driver_root(tmp_path):
    logs = {f"{PLUGIN_DIR}/0.log": cri(T0 - 5 * S, "Starting FS watcher.") + cri(T0, LIBCUDA)
            + cri(T0 + 2 * S, LIBCUDA)}
    _b, a = run(tmp_path, node(tmp_path, "n", logs=logs))
    s = symptoms(a)["cdi-driver-root"]
    assert (s["count"], s["first"], s["last"]) == (2, "2026-07-17T12:00:00Z", "2026-07-17T12:00:02Z")
    ev = s["evidence"][0]
    assert (ev["artifact"], ev["line"]) == (
        "podlogs/kube-system_nvidia-device-plugin-daemonset-x7k2p_5c1b0d3e/nvidia-device-plugin-ctr/0.log", 2)
    assert "/home/kubernetes/bin/nvidia" in s["remedy"]["what"] and "nvidiaDriverRoot" in s["remedy"]["what"]
    assert list(symptoms(a)) == ["cdi-driver-root"]  # one registration-less run: no crash loop either
    not_eperm(a, "create-failed")
    assert a["headline"]["cause"] == "cdi-spec-failure"


def test_hami_cuinit_100_is_cuda_no_device_not_eperm(tmp_path):
    # a pod nobody knew was a GPU one: its tail holds the HAMi-core line, so it is taken
    logs = {f"{PODS}/ml_trainer-0_0b7e-11/main/0.log": cri(T0 - 9 * S, "epoch 1", "stdout") + cri(T0, HAMI)
            + cri(T0 + 4 * S, HAMI), f"{PODS}/default_web_33bb/web/0.log": cri(T0, "GET / 200", "stdout")}
    bundle, a = run(tmp_path, node(tmp_path, "n", logs=logs))
    s = symptoms(a)["cuda-no-device"]
    assert (s["count"], s["first"], s["last"]) == (2, "2026-07-17T12:00:00Z", "2026-07-17T12:00:04Z")
    assert [(e["artifact"], e["line"]) for e in s["evidence"]] == [
        ("podlogs/ml_trainer-0_0b7e-11/main/0.log", 2), ("podlogs/ml_trainer-0_0b7e-11/main/0.log", 3)]
    assert "kubectl exec -n ml trainer-0 -- printenv CUDA_VISIBLE_DEVICES NVIDIA_VISIBLE_DEVICES" in s["remedy"]["check"]
    assert not any("default_web" in (x.path or "") for x in bundle.artifacts())
    not_eperm(a, "no-device")


def test_a_device_plugin_back_off_is_a_crash_loop_and_another_pods_is_not(tmp_path):
    _b, a = run(tmp_path, node(tmp_path, "n", [kubelet(T0 + i * 40 * S, BACK_OFF) for i in range(3)]
                               + [kubelet(T0 + 5 * S, WEB_BACK_OFF)]))
    s = symptoms(a)["device-plugin-crashloop"]
    assert (s["count"], s["first"], s["last"]) == (3, "2026-07-17T12:00:00Z", "2026-07-17T12:01:20Z")
    assert s["signatures"] == {"back-off": 3}
    assert "web-5d8f" not in str(s)
    assert ("kubectl logs -n kube-system nvidia-device-plugin-daemonset-x7k2p --all-containers --previous --tail=50"
            in s["remedy"]["check"])
    not_eperm(a)


def test_device_plugin_restarts_in_its_logs_are_a_crash_loop(tmp_path):
    reg = "I0717 12:00:00.000000 1 server.go:165] Registered device plugin for 'nvidia.com/gpu' with Kubelet"
    logs = {f"{PLUGIN_DIR}/{n}.log": cri(T0 + n * 60 * S, "Starting FS watcher.") + cri(T0 + n * 60 * S + S, reg)
            for n in range(3)}
    logs[f"{PLUGIN_DIR}/2.log"] += cri(T0 + 150 * S, reg)  # the kubelet's socket came back: it registered again
    _b, a = run(tmp_path, node(tmp_path, "n", logs=logs))
    s = symptoms(a)["device-plugin-crashloop"]
    # runs 1 and 2 are restarts (their first lines); a run's first registration is its start, not a symptom
    assert (s["count"], s["first"], s["last"]) == (3, "2026-07-17T12:01:00Z", "2026-07-17T12:02:30Z")
    assert s["signatures"] == {"plugin-restart": 2, "plugin-registered": 1}
    one = {f"{PLUGIN_DIR}/{n}.log": logs[f"{PLUGIN_DIR}/{n}.log"] for n in range(2)}
    _b, a1 = run(tmp_path, node(tmp_path, "m", logs=one))
    assert "device-plugin-crashloop" not in symptoms(a1)  # a single restart is no loop
    assert [(e["attrs"]["signature"], e["at"]) for e in a1["timeline"] if e["kind"] == "container.log-symptom"] == [
        ("plugin-restart", "2026-07-17T12:01:00Z")]


def test_driver_not_loaded_and_allocate_failed_are_their_own_classes(tmp_path):
    _b, a = run(tmp_path, node(tmp_path, "n", [containerd(T0, DRIVER_NOT_LOADED), kubelet(T0 + 7 * S, ALLOCATE),
                                                kubelet(T0 + 9 * S, ALLOCATE)]))
    s = symptoms(a)
    assert (s["driver-not-loaded"]["count"], s["driver-not-loaded"]["first"]) == (1, "2026-07-17T12:00:00Z")
    assert (s["allocate-failed"]["count"], s["allocate-failed"]["first"], s["allocate-failed"]["last"]) == (
        2, "2026-07-17T12:00:07Z", "2026-07-17T12:00:09Z")
    assert "lsmod | grep nvidia" in s["driver-not-loaded"]["remedy"]["check"]
    not_eperm(a, "create-failed", "no-driver")


def test_an_eperm_line_is_not_a_neighbour_and_a_neighbour_is_not_eperm(tmp_path):
    logs = {f"{PODS}/ml_infer-1_55dd/server/0.log": cri(T0 + 3 * S, HAMI)}
    _b, a = run(tmp_path, node(tmp_path, "n", [kubelet(T0, EPERM), kubelet(T0 + S, "cuInit failed: CUDA_ERROR_NO_DEVICE")],
                               logs))
    nvml = [e for e in a["timeline"] if e["kind"] == "journal.nvml-error"]
    assert [(e["at"], e["attrs"]["pod"]) for e in nvml] == [("2026-07-17T12:00:00Z", "ml/trainer-0")]
    assert not [e for e in a["timeline"] if e["kind"] == "container.log-error"]
    [inc] = [i for i in a["incidents"] if i["symptom_class"] == "nvml-unknown"]  # opened by the EPERM line alone
    assert inc["window"]["end"] == "2026-07-17T12:00:00Z" and "Unknown Error" in inc["symptom"]
    assert list(symptoms(a)) == ["cuda-no-device"]
    s = symptoms(a)["cuda-no-device"]
    assert (s["count"], s["first"], s["last"]) == (2, "2026-07-17T12:00:01Z", "2026-07-17T12:00:03Z")
    assert "Failed to initialize NVML" not in str(s["evidence"])


def test_a_users_sudo_is_the_requester_by_its_capabilities_and_a_capless_sudo_is_a_red_flag(tmp_path):
    """journald's ``_UID`` of a sudo line is the invoking user's real uid, not 0: what sudo 1.9.13 (Debian 12)
    sends on /dev/log when uid 1001 runs it was captured here with SO_PASSCRED (SCM_CREDENTIALS uid=1001, its
    /proc status ``Uid: 1001 0 0 0``, ``CapEff: 000001fffeffffff``). Such a line is sudo's, by its effective
    capabilities; a user's own program named sudo (no capabilities) is a red flag; and a bundle whose collector
    took the genuine line for forged reads it as the requester's."""
    user = dict(_COMM="sudo", _EXE="/usr/bin/sudo", _TRANSPORT="syslog", _SYSTEMD_UNIT="session-12.scope", _UID=1001,
                _GID=1001, _CAP_EFFECTIVE="1fffeffffff")
    genuine = entry(T0 - 5 * S, 5120, "sudo", SUDO_RELOAD, **user)
    capless = entry(T0 - 5 * S, 5121, "sudo", SUDO_RELOAD, **{**user, "_EXE": "/home/ops/bin/sudo",
                                                              "_CAP_EFFECTIVE": "0"})
    reload = pid1(T0, "Reloading.")
    bundle, real = run(tmp_path, node(tmp_path, "u", [genuine, reload]), incidents=INCIDENT)
    _b, fake = run(tmp_path, node(tmp_path, "c", [capless, reload]), incidents=INCIDENT)

    def cause(x):
        return next(c for c in x["incidents"][0]["causes"] if c["kind"] == "daemon-reload")
    assert (cause(real)["requested_by"]["comm"], cause(real)["requested_by"]["pid"]) == ("sudo", 5120)
    assert "red_flags" not in real
    assert [(f["claim"], f["pid"], f["uid"]) for f in fake["red_flags"]] == [("sudo", 5121, 1001)]
    assert cause(fake)["requested_by"]["comm"] != "sudo"
    p = bundle.path("journal/entries.jsonl")  # as an older collector kept it
    p.write_text(p.read_text().replace('"_GF_SELECTED_BY": ["requester"]', '"_GF_SELECTED_BY": ["forged"]'))
    reading = analyse(bundle)
    assert not kinds(reading, "journal.forged") and [e.attrs["pid"] for e in kinds(reading, "journal.requester")] == [5120]


def test_a_sudo_line_whose_writer_had_exited_is_unverified_neither_requester_nor_red_flag(tmp_path):
    """journald reads ``_COMM``, ``_EXE``, ``_CMDLINE`` and ``_CAP_EFFECTIVE`` from /proc/PID when a line arrives;
    a writer that has exited by then leaves only the socket's ``_PID``/``_UID`` (a real sudo that ended at once, or
    a user's short-lived ``logger -t sudo``: the two cannot be told apart). Such a line is no red flag and no
    requester: it is said (flag ``unverified``) and listed as the weakest candidate, the basis unknown."""
    gone = entry(T0 - 5 * S, 5122, "sudo", SUDO_RELOAD, _TRANSPORT="syslog", _UID=1001, _GID=1001)
    bundle, a = run(tmp_path, node(tmp_path, "x", [gone, pid1(T0, "Reloading.")]), incidents=INCIDENT)
    assert "red_flags" not in a and not [e for e in a["timeline"] if e["kind"] == "journal.forged"]
    [line] = [e for e in a["timeline"] if e["kind"] == "journal.requester"]
    assert (line["attrs"]["pid"], line["attrs"]["comm"], line["flags"]) == (5122, None, ["unverified"])
    assert "cannot be verified" in line["summary"]
    assert [e["_GF_SELECTED_BY"] for e in stored(bundle) if e.get("_PID") == "5122"] == [["requester"]]
    by = next(c for c in a["incidents"][0]["causes"] if c["kind"] == "daemon-reload")["requested_by"]
    assert (by["basis"], by["comm"], by["pid"]) == ("unknown", None, None)
    assert [(c["pid"], c["comm"], c["basis"]) for c in by["candidates"]] == [(5122, None, "inferred")]
    assert "cannot be verified" in by["candidates"][0]["why"]
    # journald's /proc fields are many (journald-context.c): any one of them read is a writer seen, so such a
    # line with no sudo behind it stays a red flag; a line with no writer process (the kernel's) is never unverified
    from collectors.journal.sudo import sudo_unverified
    fields = {"SYSLOG_IDENTIFIER": "sudo", "_TRANSPORT": "syslog", "_PID": "5122", "_UID": "1001"}
    assert sudo_unverified(fields) and not sudo_unverified({**fields, "_SYSTEMD_UNIT": "session-3.scope"})
    assert not sudo_unverified({**fields, "_AUDIT_LOGINUID": "1001"})
    assert not sudo_unverified({**fields, "_TRANSPORT": "kernel", "_PID": None})
    # one with journald's /proc fields and no privilege stays a red flag (the capless test above), and a
    # bundle whose older collector kept the unverifiable line as forged reads it the same way as this one
    p = bundle.path("journal/entries.jsonl")
    p.write_text(p.read_text().replace('"_GF_SELECTED_BY": ["requester"]', '"_GF_SELECTED_BY": ["forged"]'))
    reading = analyse(bundle)
    assert not kinds(reading, "journal.forged")
    assert [(e.attrs["pid"], e.flags) for e in kinds(reading, "journal.requester")] == [(5122, ("unverified",))]


def test_a_forged_sudo_line_is_a_red_flag_never_the_requester(tmp_path):
    # systemd <= 252 logs only "Reloading.": the requester is inferred; a user's `logger -t sudo` must not be it
    forged = entry(T0 - 5 * S, 31339, "sudo", SUDO_RELOAD, **{**LOGGER, "SYSLOG_PID": 31339})
    genuine = entry(T0 - 5 * S, 5120, "sudo", SUDO_RELOAD, _COMM="sudo", _EXE="/usr/bin/sudo", _TRANSPORT="syslog",
                    _SYSTEMD_UNIT="session-12.scope")
    reload = pid1(T0, "Reloading.")
    bundle, a = run(tmp_path, node(tmp_path, "f", [forged, reload]), incidents=INCIDENT)
    _b, real = run(tmp_path, node(tmp_path, "g", [genuine, reload]), incidents=INCIDENT)

    def cause(x):
        return next(c for c in x["incidents"][0]["causes"] if c["kind"] == "daemon-reload")
    assert (cause(real)["requested_by"]["comm"], cause(real)["requested_by"]["unit"]) == ("sudo", "session-12.scope")
    by = cause(a)["requested_by"]
    assert by["comm"] != "sudo" and by["basis"] == "unknown" and "31339" not in str(cause(a))
    assert not [e for e in a["timeline"] if e["kind"] == "journal.requester"]
    [f] = a["red_flags"]
    assert (f["claim"], f["claimed_identifier"], f["pid"], f["comm"], f["uid"], f["at"]) == (
        "sudo", "sudo", 31339, "logger", 1000, "2026-07-17T11:59:55Z")
    assert [e["_GF_SELECTED_BY"] for e in stored(bundle) if e.get("_PID") == "31339"] == [["forged"]]
    assert "red_flags" not in real
    # a bundle whose older collector kept the forged line as a requester's is read the same way
    p = bundle.path("journal/entries.jsonl")
    p.write_text(p.read_text().replace('"_GF_SELECTED_BY": ["forged"]', '"_GF_SELECTED_BY": ["requester"]'))
    reading = analyse(bundle)
    assert [(e.attrs["claim"], e.attrs["uid"]) for e in kinds(reading, "journal.forged")] == [("sudo", 1000)]
    assert not kinds(reading, "journal.requester")


def test_an_empty_cuda_visible_devices_in_the_spec_is_cited_and_hostile_names_make_no_command():
    from forensics.events import Event
    from forensics.findings.symptoms import classify
    line = Event(T0, "podlogs", "container.log-symptom", "ml/trainer-0 main: cuda-no-device",
                 {"pod": "trainer-0", "namespace": "ml", "container": "main", "restart": 0, "stream": "stderr",
                  "message": HAMI, "signature": "cuda-no-device", "path": None},
                 {"artifact": "podlogs/ml_trainer-0_0b7e-11/main/0.log", "line": 7})
    hostile = Event(T0 + S, "podlogs", "container.log-symptom", "x", {**line.attrs, "pod": "a;rm -rf /"},
                    {"artifact": "podlogs/x/main/0.log", "line": 1})
    created = Event(T0 - 60 * S, "containers", "container.created", "created",
                    {"id": "c0ffee", "pod": "trainer-0", "namespace": "ml", "container_name": "main", "gpu": True},
                    {"artifact": "containers/k8s.io/c0ffee/record.json"})
    facts = {"containers": [{"id": "c0ffee", "pod": "trainer-0", "pod_namespace": "ml",
                             "env": {"CUDA_VISIBLE_DEVICES": "", "NVIDIA_VISIBLE_DEVICES": "all"}},
                            {"id": "other", "pod": "web", "pod_namespace": "ml", "env": {"CUDA_VISIBLE_DEVICES": "0"}}]}
    [s] = classify([created, line, hostile], facts, "gpu-node-7")
    assert (s["class"], s["count"], s["first"], s["last"]) == ("cuda-no-device", 2, "2026-07-17T12:00:00Z",
                                                               "2026-07-17T12:00:01Z")
    spec = [e for e in s["evidence"] if e.get("source") == "containers"]
    assert spec == [{"at": "2026-07-17T11:59:00Z", "source": "containers", "kind": "container.created",
                     "summary": "created", "artifact": "containers/k8s.io/c0ffee/record.json", "container": "c0ffee",
                     "pod": "ml/trainer-0", "finding": 'CUDA_VISIBLE_DEVICES=""'}]
    assert not [c for c in s["remedy"]["check"] if "rm -rf" in c]
    assert s["remedy"]["check"][0] == "kubectl exec -n ml trainer-0 -- printenv CUDA_VISIBLE_DEVICES NVIDIA_VISIBLE_DEVICES"


def test_a_forged_kubelet_create_error_is_a_red_flag_not_a_symptom(tmp_path):
    forged = entry(T0, 31340, "kubelet", KUBELET_CREATE, **{**LOGGER, "SYSLOG_PID": 31340})
    bundle, a = run(tmp_path, node(tmp_path, "n", [forged]))
    assert a["symptoms"] == []
    [f] = a["red_flags"]
    assert (f["claim"], f["pid"], f["comm"], f["uid"], f["at"]) == ("kubelet", 31340, "logger", 1000,
                                                                   "2026-07-17T12:00:00Z")
    assert [e["_GF_SELECTED_BY"] for e in stored(bundle) if e.get("_PID") == "31340"] == [["forged", "boot", "coverage"]]


def test_a_plugin_pods_back_off_event_counts_its_repeats():
    from forensics.events import Event
    from forensics.findings.symptoms import classify

    def ev(name, container, count, at):
        return Event(at, "kube", "kube.event", "BackOff",
                     {"type": "Warning", "reason": "BackOff", "count": count, "object_kind": "Pod",
                      "namespace": "gpu-operator", "name": name,
                      "message": f"Back-off restarting failed container {container} in pod {name}_gpu-operator(0a1b)"},
                     {"artifact": f"kube/events/gpu-operator/{name}.json"})
    [s] = classify([ev("nvidia-device-plugin-daemonset-q2x", "nvidia-device-plugin", 14, T0),
                    ev("trainer-0", "main", 9, T0 + S)], {}, None)
    assert (s["class"], s["count"], s["first"], s["signatures"]) == (
        "device-plugin-crashloop", 14, "2026-07-17T12:00:00Z", {"back-off": 14})
    assert s["evidence"][0]["artifact"] == "kube/events/gpu-operator/nvidia-device-plugin-daemonset-q2x.json"
    assert ("kubectl logs -n gpu-operator nvidia-device-plugin-daemonset-q2x --all-containers --previous --tail=50"
            in s["remedy"]["check"]) and "kubectl get pods -A -o wide | grep -i device-plugin" in s["remedy"]["check"]
