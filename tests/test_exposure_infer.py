"""Issue 14 items 1 and 3, and the unreadable spec: the cgroup driver of each container from its own
evidence, then its engine's config, then the engine's default (never a fact); a hook-injected container
under the systemd driver that PID 1 reloaded after its creation is broken (inferred) without a probe;
a container whose config.json could not be read is unknown, and the node's answer says so.

Container records are in collectors/containers' record.json shape with the keys of the issue-14
contract (``engine``, ``config``, ``cgroup.driver_source``); the runtime facts come from the real
runtime_config collector (tests/test_exposure.py ``node``), the journals are real .journal files
(samples/journalbuild.py) collected and read by the real pipeline.
"""
from __future__ import annotations

from datetime import timedelta

from journalbuild import build_journal
from test_exposure import BASE_DROPIN, GPU, LEGACY_HOOK, container, node
from test_forged import LOGGER
from test_hostile_inputs import MACHINE, node_root
from test_journal import T0, entry, pid1

from forensics.bundle import Bundle
from forensics.findings.analysis import build
from forensics.findings.exposure import assess
from forensics.timeutil import iso_z
from forensics.ops.pipeline import collect, read_all
from reports import render

S = timedelta(seconds=1)
NOT_RUN = {p: "not-run" for p, _, _ in GPU}
CREATED = "2026-07-17T11:00:00Z"  # an hour before T0, the reload
RUNC_STATE = "runc state.json cgroup path kubepods-besteffort.slice:cri-containerd:{cid}"


def record(cid, *, pod="trainer-0", engine="containerd", namespace="k8s.io", driver="systemd", source=None, version=2,
           created=CREATED, probe=None, bpf=None, config=("collected", None), **kw):
    """A hook-injected GPU container's record with the issue-14 keys (``driver=None``: not shown by it)."""
    c = container(cid, pod=pod, hooks={"prestart": [LEGACY_HOOK]}, drop_in=BASE_DROPIN,
                  probe=NOT_RUN if probe is None else probe, driver=driver, **kw)
    c["engine"], c["namespace"], c["created"] = engine, namespace, created
    c["config"] = {"status": config[0], "detail": config[1]}
    c["cgroup"].update(version=version, bpf=bpf,
                       driver_source=(source or RUNC_STATE.format(cid=cid)) if driver else None)
    if config[0] != "collected":  # the contract: the spec's lists are unknown, not empty
        c.update(linux_devices=None, resources_devices=None, hooks=None, env=None)
    return c


def reload_at(at: str, **extra) -> dict:
    """A trusted reload as forensics.findings.broken.trusted_reloads cites it."""
    return {"at": at, "source": "journal", "kind": "journal.reload", "summary": "daemon-reload",
            "artifact": "journal/entries.jsonl", "line": 7, **extra}


# -- 1. the cgroup driver, with its basis and source --------------------------------------------------
def test_the_containers_own_evidence_beats_the_engine_config_and_the_disagreement_is_a_note(tmp_path):
    engines = {"containerd": {"value": "cgroupfs", "source": "/etc/containerd/config.toml SystemdCgroup=false"}}
    exp = assess(node(tmp_path), [record("e1")], None, engines)
    [r] = exp["containers"]
    assert (r["cgroup_driver"], r["cgroup_driver_basis"], r["cgroup_driver_source"]) == (
        "systemd", "evidence", "runc state.json cgroup path kubepods-besteffort.slice:cri-containerd:e1")
    assert r["at_risk"] is True and r["broken"] is False
    assert ("e1: the sources disagree on the cgroup driver: the container's own evidence says systemd (runc "
            "state.json cgroup path kubepods-besteffort.slice:cri-containerd:e1), but /etc/containerd/config.toml "
            "SystemdCgroup=false says cgroupfs") in exp["notes"]


def test_the_engine_config_decides_when_the_container_shows_nothing(tmp_path):
    daemon = "/etc/docker/daemon.json exec-opts native.cgroupdriver=cgroupfs"
    c = record("d1", pod=None, engine="docker", driver=None, namespace="moby")
    exp = assess(node(tmp_path), [c], None, {"docker": {"value": "cgroupfs", "source": daemon}})
    [r] = exp["containers"]
    assert (r["cgroup_driver"], r["cgroup_driver_basis"], r["cgroup_driver_source"]) == (
        "cgroupfs", "engine config", daemon)
    assert r["at_risk"] is False and "the cgroupfs driver: a daemon-reload does not rewrite" in r["reason"]
    assert exp["verdict"].startswith("Not exposed: all 1 GPU container keep")


def test_dockers_default_on_cgroup_v2_is_assumed_at_risk_and_never_broken_even_after_a_reload(tmp_path):
    c = record("d2", engine="docker", driver=None)
    exp = assess(node(tmp_path), [c], None, {}, [reload_at("2026-07-17T12:00:00Z")])
    [r] = exp["containers"]
    assert (r["cgroup_driver"], r["cgroup_driver_basis"]) == ("systemd", "default")
    assert r["cgroup_driver_source"].startswith("assumed: Docker's default on cgroup v2 (systemd when "
                                                "native.cgroupdriver is unset")
    assert r["cgroup_driver_source"].endswith("; Docker's config was not seen")
    assert (r["at_risk"], r["broken"], r["broken_basis"]) == (True, False, None)
    assert "at risk inferred from the engine's default" in r["reason"]
    assert ("PID 1 logged a daemon-reload at 2026-07-17T12:00:00Z (journal/entries.jsonl line 7), after the "
            "container was created (2026-07-17T11:00:00Z): if the driver is systemd as assumed") in r["reason"]
    assert exp["verdict"] == ("Exposed: 1 container is hook-injected under the systemd cgroup driver (assumed from the "
                              "engine's default, not shown by the node); one daemon-reload away from losing its GPU.")


def test_defaults_per_engine_and_cgroup_version_and_what_stays_unknown(tmp_path):
    rt = node(tmp_path)
    crio = record("c1", engine="crio", driver=None, namespace="runc")
    docker_v1 = record("d3", engine="docker", driver=None, version=1, rules=None)
    docker_v1["cgroup"]["version"] = 1
    docker_unknown = record("d4", engine="docker", driver=None, version=None)
    nerdctl = record("n1", engine="containerd", driver=None, namespace="default")
    plain = record("r1", engine="runc", driver=None, namespace="runc")
    engines = {"crio": {"value": None, "source": "/etc/crio/crio.conf"}}
    rows = {r["id"]: r for r in assess(rt, [crio, docker_v1, docker_unknown, nerdctl, plain], None, engines)["containers"]}
    got = {k: (r["cgroup_driver"], r["cgroup_driver_basis"]) for k, r in rows.items()}
    assert got == {"c1": ("systemd", "default"), "d3": ("cgroupfs", "default"), "d4": (None, "unknown"),
                   "n1": (None, "unknown"), "r1": ("cgroupfs", "default")}
    assert rows["c1"]["cgroup_driver_source"].startswith("assumed: CRI-O's default (cgroup_manager = \"systemd\"")
    assert rows["c1"]["cgroup_driver_source"].endswith("; /etc/crio/crio.conf does not set it")
    assert rows["d4"]["cgroup_driver_source"] == ("unknown: Docker's default depends on the cgroup version, "
                                                  "which is unknown")
    assert "containerd namespace default is not the CRI's (k8s.io)" in rows["n1"]["cgroup_driver_source"]
    assert rows["r1"]["cgroup_driver_source"].startswith("assumed: runc's default (cgroupfs unless runc runs with "
                                                         "--systemd-cgroup")
    assert "the cgroup driver is unknown (unknown: Docker's default depends" in rows["d4"]["reason"]


def test_an_older_bundle_takes_containerds_global_setting_and_a_disabled_cri_is_unknown_not_false(tmp_path):
    rt = node(tmp_path)  # SystemdCgroup = true in the config the collector read
    old = record("o1", driver=None)
    del old["engine"]
    [r] = assess(rt, [old], None, None)["containers"]
    assert (r["cgroup_driver"], r["cgroup_driver_basis"]) == ("systemd", "engine config")
    assert r["cgroup_driver_source"] == ("containerd's SystemdCgroup=true (config (runtime nvidia); read from "
                                         "/etc/containerd/config.toml)")
    dockerd = {**rt, "systemd_cgroup": None, "containerd": {**rt["containerd"], "cri_disabled": True},
               "systemd_cgroup_basis": "unknown: disabled_plugins lists cri"}
    [r] = assess(dockerd, [old], None, None)["containers"]
    assert (r["cgroup_driver"], r["cgroup_driver_basis"], r["cgroup_driver_source"]) == (
        None, "unknown", "unknown: disabled_plugins lists cri")


# -- 2. broken without a probe (assess with the cited reloads) -----------------------------------------
def test_v2_programs_loaded_after_the_reload_make_the_basis_bpf_and_none_after_it_keeps_it_at_risk(tmp_path):
    rt = node(tmp_path)
    fresh = record("b1", bpf=[{"id": 453, "name": "nvidia_gpu", "loaded_at": "2026-07-17T11:00:01Z"},
                              {"id": 470, "name": "sd_devices", "loaded_at": "2026-07-17T12:00:00Z"}])
    stale = record("b2", pod="trainer-1", bpf=[{"id": 453, "name": "nvidia_gpu", "loaded_at": "2026-07-17T11:00:01Z"}])
    a, b = assess(rt, [fresh, stale], None, None, [reload_at("2026-07-17T12:00:00.412Z")])["containers"]
    assert (a["broken"], a["broken_basis"], a["broken_evidence"][0]["at"]) == (True, "bpf", "2026-07-17T12:00:00.412Z")
    assert ("the device program sd_devices (id 470, loaded 2026-07-17T12:00:00Z) attached to its scope was loaded "
            "after it (cgroup v2, bpftool): consistent with systemd's allowlist rebuilt from DeviceAllow=") in a["reason"]
    assert (b["broken"], b["broken_basis"], b["at_risk"]) == (False, None, True)
    assert "yet no device program of its scope was loaded after it (bpftool lists: nvidia_gpu (id 453" in b["reason"]


def test_a_probe_that_ran_or_a_devices_list_that_was_read_beats_the_inference(tmp_path):
    rt = node(tmp_path)
    probed = record("p1", probe={p: "ok" for p, _, _ in GPU})
    [r] = assess(rt, [probed], None, None, [reload_at("2026-07-17T12:00:00Z")])["containers"]
    assert (r["broken"], r["broken_basis"], r["probe"]) == (False, None, "ok")
    eperm = record("p2", probe={p: "EPERM" for p, _, _ in GPU})
    [r] = assess(rt, [eperm], None, None, [reload_at("2026-07-17T12:00:00Z")])["containers"]
    assert (r["broken"], r["broken_basis"], r["broken_evidence"]) == (True, "probe", [])


# -- 2. end to end: a real journal, its trusted or forged reload, the headline and the reports ---------
def analysed(tmp_path, name, entries, containers):
    """Collect a node root with ``entries`` as its journal through the real pipeline, then analyse the
    bundle with ``containers`` (issue-14 records) and the real runtime facts in place of the containers'."""
    root = node_root(tmp_path / name)
    build_journal(b"".join(entries), root / "var/log/journal" / MACHINE / "system.journal")
    path, _d, _a = collect(root, tmp_path / name / "bundle", argv=["gpu-forensics", "collect"])
    bundle = Bundle.open(path)
    readings = read_all(bundle)
    (tmp_path / name / "rt").mkdir()
    readings.facts["runtime"] = node(tmp_path / name / "rt")
    readings.facts["containers"] = containers
    a = build(readings, bundle, full_timeline=True)
    return a, render.html(a), render.markdown(a)


def test_v2_hook_container_reloaded_by_pid1_after_its_creation_is_broken_inferred_and_the_answer_is_not_green(tmp_path):
    a, html, md = analysed(tmp_path, "trusted", [pid1(T0 - 600 * S, "Started kubelet.service.", UNIT="kubelet.service"),
                                                  pid1(T0, "Reloading.")], [record("i1")])
    [r] = a["exposure"]["containers"]
    assert (r["broken"], r["broken_basis"], r["cgroup_driver_basis"]) == (True, "inferred", "evidence")
    [ev] = r["broken_evidence"]
    assert (ev["at"], ev["kind"], ev["artifact"]) == ("2026-07-17T12:00:00Z", "journal.reload", "journal/entries.jsonl")
    assert ("broken (inferred, no probe ran): PID 1 logged a daemon-reload at 2026-07-17T12:00:00Z "
            "(journal/entries.jsonl line") in r["reason"]
    assert "the scope's device programs were not listed (cgroup v2: bpftool absent)" in r["reason"]
    assert "`gpu-forensics collect --probe` settles it" in r["reason"]
    verdict = a["exposure"]["verdict"]
    assert verdict == ("Broken: 1 container already lost GPU access (1 of them inferred from a daemon-reload after its "
                       "creation, no probe ran: --probe would settle it); recreate them and apply the remedies.")
    assert "one daemon-reload away" not in verdict
    assert a["incidents"] == []  # the inference opens no incident: the reload would then confirm itself
    assert a["headline"]["verdict"] == "inferred"
    assert a["headline"]["text"] == (
        "inferred: a systemd daemon-reload (its journal line at 2026-07-17T12:00:00Z, after the containers were "
        "created) most likely took the GPU of ml/trainer-0; 1 container lost GPU access (1 inferred from a systemd "
        "daemon-reload, no probe ran); --probe would settle it")
    assert 'id="headline" class="v headline inferred"' in html
    assert "<td data-label=\"Broken\">yes (inferred)</td>" in html and "systemd <span class=\"meta\">(evidence: runc state.json" in html
    assert "cgroup driver systemd (evidence), at risk: yes, broken: yes (inferred)" in md


def test_the_same_reload_forged_by_logger_breaks_nothing(tmp_path):
    forged = [entry(T0, 31337, "systemd", "Reloading.", **LOGGER)]
    a, html, _md = analysed(tmp_path, "forged", [pid1(T0 - 600 * S, "Started kubelet.service.",
                                                      UNIT="kubelet.service"), *forged], [record("f1")])
    [r] = a["exposure"]["containers"]
    assert (r["broken"], r["broken_basis"], r["broken_evidence"], r["at_risk"]) == (False, None, [], True)
    assert [f["pid"] for f in a["red_flags"]] == [31337]
    assert a["exposure"]["verdict"].startswith("Exposed: 1 container is hook-injected under SystemdCgroup=true; "
                                               "one daemon-reload away")
    assert a["headline"] == {"verdict": "none", "text": "none: no incident was found"}
    assert "<td data-label=\"Broken\">yes (inferred)</td>" not in html


def test_a_container_created_after_the_reload_is_at_risk_not_broken(tmp_path):
    a, _html, _md = analysed(tmp_path, "later", [pid1(T0, "Reloading.")],
                             [record("l1", created="2026-07-17T12:30:00Z")])
    [r] = a["exposure"]["containers"]
    assert (r["at_risk"], r["broken"], r["broken_basis"]) == (True, False, None)
    assert a["exposure"]["verdict"].startswith("Exposed: 1 container is hook-injected")


# -- 3. an unreadable config.json ---------------------------------------------------------------------
def test_an_unreadable_config_is_unknown_and_the_nodes_answer_says_so(tmp_path):
    cpu = container("c0", pod="web-0", env={"NVIDIA_VISIBLE_DEVICES": "void"}, inside=False)
    cpu.update(engine="containerd", config={"status": "collected", "detail": None})
    locked = record("u1", pod="trainer-9", config=("unreadable", "EACCES"))
    a, html, md = analysed(tmp_path, "unread", [pid1(T0 - 600 * S, "Started kubelet.service.",
                                                     UNIT="kubelet.service")], [cpu, locked])
    exp = a["exposure"]
    rows = {r["id"]: r for r in exp["containers"]}
    assert (rows["u1"]["gpu_injection"], rows["u1"]["spec_status"], rows["u1"]["at_risk"], rows["u1"]["broken"]) == (
        "unknown", "unreadable", False, False)
    assert rows["u1"]["reason"] == ('config.json unreadable: EACCES: whether the runtime gave it a GPU, and how, '
                                    'cannot be assessed (unknown, not "no GPU").')
    assert rows["c0"]["gpu_injection"] == "none"
    assert [r["id"] for r in exp["unknown_containers"]] == ["u1"]
    assert exp["verdict"] == ("Undetermined: 1 container could not be assessed (config.json unreadable: EACCES); "
                              "no GPU container was found among the 1 other; new GPU pods would be, though: "
                              "SystemdCgroup=true with the toolkit in legacy mode and device specs not known to be "
                              "passed (the device plugin's PASS_DEVICE_SPECS is unknown).")
    assert exp["gpu_outside_spec"] is None  # not False: the unread spec may hold a hook-injected GPU
    assert a["headline"]["text"] == ("none: no incident was found; 1 container could not be assessed "
                                     "(config.json unreadable: EACCES)")
    for text in (html, md):
        assert "no GPU containers were found" not in text and "could not be assessed (config.json unreadable" in text
    assert "Undetermined: 1 container could not be assessed" in md


def test_an_unread_config_next_to_safe_gpu_containers_is_still_undetermined(tmp_path):
    spec = container("s1", pod="infer-0", spec_gpu=True, drop_in=BASE_DROPIN + [f"/dev/char/{M}:{m} rwm"
                                                                                 for _, M, m in GPU])
    spec.update(engine="containerd", config={"status": "collected", "detail": None})
    big = record("u2", config=("truncated", "over the 8 MiB bound"))
    exp = assess(node(tmp_path), [spec, big], None, None)
    assert exp["verdict"] == ("Undetermined: 1 container could not be assessed (config.json truncated: over the 8 MiB "
                              "bound); the 1 GPU container assessed keep their devices across a daemon-reload "
                              "(devices in the OCI spec); new GPU pods would be, though: SystemdCgroup=true with the "
                              "toolkit in legacy mode and device specs not known to be passed (the device plugin's "
                              "PASS_DEVICE_SPECS is unknown).")


def docker_host(tmp_path, RELOAD):
    """The issue's Docker host: containerd's own config reads SystemdCgroup=false (it says nothing of
    Docker's driver), the container's runc state shows the systemd driver and its probe EPERM, and PID 1
    logged a reload: the container's own evidence sets the precondition, so the reload is not EXCLUDED."""
    cid = "d0c4e5"
    eperm = {p: "EPERM" for p, _, _ in GPU}
    src = f"runc state.json cgroup path system.slice:docker:{cid}"
    root = node_root(tmp_path / "docker")
    build_journal(b"".join([pid1(T0 - 600 * S, "Started docker.service.", UNIT="docker.service"),
                            *RELOAD]), root / "var/log/journal" / MACHINE / "system.journal")
    window = [{"start": iso_z(T0 - 3600 * S), "end": iso_z(T0 + 3600 * S), "label": "pager"}]
    path, _d, _a = collect(root, tmp_path / "docker" / "bundle", argv=["gpu-forensics", "collect"], incidents=window)
    bundle = Bundle.open(path)
    readings = read_all(bundle)
    (tmp_path / "rt").mkdir()
    readings.facts["runtime"] = node(tmp_path / "rt", systemd_cgroup=False)
    assert readings.facts["runtime"]["systemd_cgroup"] is False
    readings.facts["containers"] = [record(cid, engine="docker", namespace="moby", source=src, probe=eperm)]
    a = build(readings, bundle, full_timeline=True)
    [r] = a["exposure"]["containers"]
    assert (r["broken"], r["broken_basis"], r["cgroup_driver"], r["cgroup_driver_basis"]) == (
        True, "probe", "systemd", "evidence")
    [inc] = a["incidents"]
    [reload] = [c for c in inc["causes"] if c["kind"] == "daemon-reload"]
    return reload, a


def test_a_docker_host_whose_containerd_config_says_cgroupfs_does_not_exclude_the_reload_its_journal_logs(tmp_path):
    reload, _a = docker_host(tmp_path, [pid1(T0, "Reloading.")])
    assert reload["verdict"] == "confirmed"


def test_a_docker_host_without_a_reload_line_is_not_excluded_by_containerds_setting(tmp_path):
    """No reload line (the journal rotated): the container's own systemd driver satisfies the precondition;
    containerd's SystemdCgroup=false (a Docker host's containerd says nothing of Docker) is not held against it."""
    reload, _a = docker_host(tmp_path, [])
    assert reload["verdict"] == "inferred"
    assert "under the systemd driver (runc state.json cgroup path system.slice:docker:d0c4e5)" in reload["reason"]
    assert "systemd_cgroup" not in reload["reason"] and reload["mechanism"] == "shown"


def test_the_reload_follows_the_gpu_containers_shown_drivers_and_ignores_assumed_ones():
    """Issue 14's precondition, now judged per container: a container shown under cgroupfs keeps its GPU,
    one only assumed under systemd may lose it (fits, never shown), and containerd's setting is no evidence."""
    from forensics.findings.causes.reload import _row
    shown = {"id": "a" * 64, "gpu_injection": "hook", "cgroup_driver": "cgroupfs", "cgroup_driver_basis": "evidence",
             "cgroup_driver_source": "cgroup path /kubepods/besteffort/pod1/aaaa"}
    assumed = {"id": "b" * 64, "gpu_injection": "hook", "cgroup_driver": "systemd", "cgroup_driver_basis": "default",
               "cgroup_driver_source": "assumed: CRI-O's default"}
    assert _row(shown) == ("ruled-out", "injected outside the OCI spec (hook), but under the cgroupfs driver (cgroup "
                           "path /kubepods/besteffort/pod1/aaaa): a reload does not rewrite its device rules")
    assert _row(assumed) == ("fits", "injected outside the OCI spec (hook) under the systemd driver (assumed: CRI-O's "
                             "default)")
