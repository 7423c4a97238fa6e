"""The tool the way a user runs it, on a real systemd (tests/syslab.py), on both cgroup layouts.

- ``collected``: in a fresh lab ``gpu-forensics run --probe`` runs inside the namespace as the
  DaemonSet would (the checkout is visible through the overlay's lower layer; bundles go under the lab
  folder), once before any reload and once after a transient unit named like a requester
  (``nvidia-driver-upgrade.service``) ran ``systemctl daemon-reload``: the reload confirmed at PID 1's
  journal time, the requester inferred, the hook container broken and the spec one safe, and the
  evidence systemd gives kept (``systemctl show`` of each scope: NeedDaemonReload yes before, no after,
  with the runc#4568 note only before; DevicePolicy/DeviceAllow; runc's drop-ins; ``devices.list`` on v1,
  the device programs on v2).
- ``no_dev_char``: without ``/dev/char/195:*`` links runc logs ``skipping device /dev/char/195:M for
  systemd`` to the bundle's log.json; the tool reads it: the spec container at risk before the reload
  (the reason cites the line; the remedy ``nvidia-ctk system create-dev-char-symlinks --create-all``),
  broken after.
- ``drilled``: ``gpu-forensics drill --yes-reload-systemd``, its live ``systemctl daemon-reload``
  path: "still exposed" (exit 4) for the hook container, "fixed" (exit 0) for the spec one, refused
  (exit 2) for a container that already lost its GPU; and a fresh probe container the drill starts
  itself through the lab's legacy-mode nvidia-container-runtime, removed afterwards (still exposed;
  refused with runc's reason in the v2 lab on a hybrid host, whose cgroup2 has no cpu controller).

- ``engines``: the Docker-like shape (namespace ``moby`` of a containerd run as dockerd runs its own)
  and a plain ``runc --root /run/custom-runc`` container, both hook-injected under the systemd driver,
  after a real reload: found with engine ``docker`` / ``runc`` and broken by the probe (EPERM).

The requester's sentence is not asserted (its wording is the correlator's), only its unit and basis.
Fixtures, watchdog and teardown checks are those of tests/test_syslab.py.
"""
from __future__ import annotations

import json
import os
import shlex
import sys
from datetime import datetime, timezone

import pytest

import syslab as S
from collectors import containers
from forensics.bundle import Bundle, verify
from forensics.events import NodeFacts
from test_syslab import LAYOUTS, PROJECT, _close, _lab

GPU_ALLOW = ["/dev/char/195:255 rw", "/dev/char/195:0 rw"]
REMEDY = "nvidia-ctk system create-dev-char-symlinks --create-all"


def _tool(lab, *args, timeout: float = 90):
    """``python -m forensics.ops.cli ARGS`` inside the lab, from the checkout (CompletedProcess)."""
    cmd = shlex.join([sys.executable, "-m", "forensics.ops.cli", *args])
    return lab.sh("/bin/sh", "-c", f"cd {shlex.quote(str(PROJECT))} && {cmd}", timeout=timeout, check=False)


def _run(lab, tag: str) -> dict:
    """``gpu-forensics run --probe`` inside: ``{"analysis", "bundle" (path), "records" {lab name: record},
    "events"}`` (records and events read back from the bundle on the host)."""
    out = lab.folder / f"out-{tag}"
    p = _tool(lab, "run", "--root", "/", "--probe", "--out", str(out), "--time-budget", "60")
    assert p.returncode == 0, p.stderr[-2000:]
    reading = containers.read(Bundle.open(out), NodeFacts())
    names = {S.cid(n): n for n in S.CONTAINERS}
    return {"analysis": json.loads((lab.folder / f"out-{tag}-report" / "analysis.json").read_text()), "bundle": out,
            "records": {names[r["id"]]: r for r in reading.facts["containers"]}, "events": reading.events}


def _rows(run: dict) -> dict:
    return {c["container_name"]: c for c in run["analysis"]["exposure"]["containers"]}


def _stored(run: dict, name: str, rel: str) -> str:
    return (run["bundle"] / "containers" / S.NS / S.cid(name) / rel).read_text()


def _pid1_reloads(lab) -> list[dict]:
    """PID 1's ``Reloading.`` entries in the lab's journal: ``{"realtime", "source"}`` as UTC ISO times
    (journald's receive stamp ``__REALTIME_TIMESTAMP``, PID 1's own ``_SOURCE_REALTIME_TIMESTAMP``)."""
    out = lab.sh("journalctl", "-q", "--no-pager", "-o", "json", "_PID=1", "MESSAGE=Reloading.").stdout
    iso = lambda us: datetime.fromtimestamp(int(us) / 1e6, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")  # noqa
    return [{"realtime": iso(e["__REALTIME_TIMESTAMP"]), "source": iso(e["_SOURCE_REALTIME_TIMESTAMP"])}
            for e in map(json.loads, out.splitlines())]


# -- the end-to-end run ----------------------------------------------------------------------------
@pytest.fixture(scope="module", params=LAYOUTS)
def collected(request, tmp_path_factory):
    """``(lab, before, after, show)``: the tool's runs (:func:`_run`) in a fresh lab before any reload and
    after a requester unit's reload; ``show``: the lab's own ``systemctl show`` of the GPU scopes after."""
    lab, dog = _lab(tmp_path_factory, request.param, "e2e")
    try:
        lab.up()
        before = _run(lab, "before")
        lab.reload(via_unit="nvidia-driver-upgrade")
        after = _run(lab, "after")
        show = {n: lab.show(n, "NeedDaemonReload", "DevicePolicy", "DeviceAllow") for n in ("hook", "spec")}
        yield lab, before, after, show
    finally:
        _close(lab, dog)


def test_the_collector_lists_the_containers_and_their_exposure(collected):
    _, before, after, _ = collected
    for run in (before, after):
        assert run["analysis"]["exposure"]["systemd_cgroup"] is True
        assert sorted(_rows(run)) == ["hook", "nogpu", "pause", "spec"]
        assert {c["id"] for c in _rows(run).values()} == {S.cid(n) for n in _rows(run)}
    hook, spec = _rows(before)["hook"], _rows(before)["spec"]
    assert (hook["gpu_injection"], hook["at_risk"], hook["broken"], hook["probe"]) == ("hook", True, False, "ENXIO")
    assert (spec["gpu_injection"], spec["at_risk"], spec["broken"], spec["probe"]) == ("spec", False, False, "ENXIO")
    assert before["analysis"]["exposure"]["verdict"].startswith("Exposed: 1 container is hook-injected")
    hook, spec = _rows(after)["hook"], _rows(after)["spec"]
    assert (hook["gpu_injection"], hook["at_risk"], hook["broken"], hook["probe"]) == ("hook", True, True, "EPERM")
    assert (spec["gpu_injection"], spec["at_risk"], spec["broken"], spec["probe"]) == ("spec", False, False, "ENXIO")
    assert hook["not_reapplied"] == ["/dev/nvidia0 (195:0)", "/dev/nvidiactl (195:255)"]
    assert hook["cgroup_driver"] == spec["cgroup_driver"] == "systemd"
    assert after["analysis"]["exposure"]["verdict"].startswith("Broken: 1 container already lost GPU access")


def test_the_collector_confirms_the_reload_at_pid1s_time(collected):
    lab, before, after, _ = collected
    assert not [c for i in before["analysis"]["incidents"] for c in i["causes"] if c["kind"] == "daemon-reload"]
    reloads = [c for i in after["analysis"]["incidents"] for c in i["causes"] if c["kind"] == "daemon-reload"]
    assert [c["verdict"] for c in reloads] == ["confirmed"]
    (logged,) = _pid1_reloads(lab)
    assert reloads[0]["at"] == logged["realtime"]       # journald's stamp; PID 1's own is a few µs earlier
    assert reloads[0]["requested_by"]["unit"] == "nvidia-driver-upgrade.service"
    assert reloads[0]["requested_by"]["basis"] == "inferred"


def test_need_daemon_reload_yes_before_the_reload_no_after_with_the_runc_4568_note(collected):
    _, before, after, show = collected
    for n in ("hook", "spec"):
        assert before["records"][n]["systemd_unit"]["NeedDaemonReload"] is True, n     # every new runc scope
        assert after["records"][n]["systemd_unit"]["NeedDaemonReload"] is False, n
        assert _rows(before)[n]["systemd_unit"]["NeedDaemonReload"] is True
        assert "NeedDaemonReload=yes" in _stored(before, n, "systemctl-show.txt").splitlines()
        assert "NeedDaemonReload=no" in _stored(after, n, "systemctl-show.txt").splitlines()
        assert show[n]["NeedDaemonReload"] == "no"
    for n in ("pause", "nogpu"):       # systemctl show runs for GPU containers only
        assert before["records"][n]["systemd_unit"] is None
    (note,) = [t for t in before["analysis"]["exposure"]["notes"] if "NeedDaemonReload" in t]
    assert "2 GPU containers" in note and "runc#4568" in note and "not a cause" in note
    assert not [t for t in after["analysis"]["exposure"]["notes"] if "NeedDaemonReload" in t]


def test_the_collector_keeps_device_policy_and_allow_of_each_scope(collected):
    _, before, after, show = collected
    for run in (before, after):
        for n in ("hook", "spec"):
            unit = run["records"][n]["systemd_unit"]
            assert (unit["DevicePolicy"], unit["LoadState"]) == ("strict", "loaded")
            allow = show[n]["DeviceAllow"].split("; ")                       # as systemd says it after the reload
            # (before it, in the order runc sent them over D-Bus; after, in the drop-in's order)
            assert unit["DeviceAllow"] == allow if run is after else sorted(unit["DeviceAllow"]) == sorted(allow)
            assert unit["ControlGroup"] == "/" + S.SLICE_DIR + "/" + S.unit(n)
    for run in (before, after):
        spec, hook = run["records"]["spec"]["systemd_unit"], run["records"]["hook"]["systemd_unit"]
        assert sorted(a for a in spec["DeviceAllow"] if "195" in a) == sorted(GPU_ALLOW)
        assert "/dev/char/1:3 rwm" in spec["DeviceAllow"]
        assert not [a for a in hook["DeviceAllow"] if "195" in a] and "/dev/char/1:3 rwm" in hook["DeviceAllow"]


def test_the_bundle_keeps_runcs_drop_ins(collected):
    lab, before, after, _ = collected
    for run in (before, after):
        for n in ("hook", "spec"):
            d = f"systemd/{S.unit(n)}.d"
            assert sorted(os.listdir(run["bundle"] / "containers" / S.NS / S.cid(n) / d)) == \
                ["50-DeviceAllow.conf", "50-DevicePolicy.conf"]
            for f in ("50-DeviceAllow.conf", "50-DevicePolicy.conf"):
                assert _stored(run, n, f"{d}/{f}") == lab.read(f"/run/systemd/transient/{S.unit(n)}.d/{f}")
            assert "DevicePolicy=strict" in _stored(run, n, f"{d}/50-DevicePolicy.conf")
            drop_in = run["records"][n]["cgroup"]["systemd_drop_in"]
            assert drop_in["policy"] == "strict" and "/dev/char/1:3 rwm" in drop_in["allow"]
        assert [a for a in run["records"]["spec"]["cgroup"]["systemd_drop_in"]["allow"] if "195" in a] == GPU_ALLOW
        assert not [a for a in run["records"]["hook"]["cgroup"]["systemd_drop_in"]["allow"] if "195" in a]
    assert verify(before["bundle"]) == [] and verify(after["bundle"]) == []


def test_the_bundle_keeps_the_device_rules_before_and_after(collected):
    lab, before, after, _ = collected
    gpu = [{"allow": True, "type": "c", "major": 195, "minor": m, "access": "rw"} for m in (0, 255)]
    for run in (before, after):
        cg = run["records"]["hook"]["cgroup"]
        assert (cg["driver"], cg["version"], cg["path"]) == ("systemd", 1 if lab.layout == "v1" else 2,
                                                             lab.cgroup_dir("hook"))
    if lab.layout == "v1":
        for n in ("hook", "spec"):
            assert all(r in before["records"][n]["cgroup"]["rules"] for r in gpu), n
        assert [r for r in after["records"]["hook"]["cgroup"]["rules"] if r["major"] == 195] == []
        assert {"major": 1, "minor": 3, "type": "c", "access": "rwm", "allow": True} in \
            after["records"]["hook"]["cgroup"]["rules"]
        assert all(r in after["records"]["spec"]["cgroup"]["rules"] for r in gpu)
        assert "195:" in _stored(before, "hook", "devices.list")
        assert "195:" not in _stored(after, "hook", "devices.list")
        assert "c 195:0 rw" in _stored(after, "spec", "devices.list").splitlines()
    else:
        names = lambda run, n: [p["name"] for p in run["records"][n]["cgroup"]["bpf"]]  # noqa: E731
        assert (names(before, "hook"), names(before, "spec")) == (["lab_gpu_repl"], [""])
        assert (names(after, "hook"), names(after, "spec")) == (["lab_gpu_repl", "sd_devices"], ["", "sd_devices"])
        assert "sd_devices" not in _stored(before, "hook", "bpftool-cgroup.json")
        applied = {e.attrs["id"]: e.attrs["prog_name"] for e in after["events"]
                   if e.kind == "container.device-rules-applied" and e.attrs["prog_name"] == "sd_devices"}
        assert set(applied) >= {S.cid("hook"), S.cid("spec")}


def test_the_probe_in_the_bundle(collected):
    _, before, after, _ = collected
    for run, hook in ((before, "ENXIO"), (after, "EPERM")):
        probes = {(e.attrs["id"], e.attrs["path"]): e.attrs["result"] for e in run["events"]
                  if e.kind == "container.probe"}
        for path in ("/dev/nvidia0", "/dev/nvidiactl"):
            assert probes[(S.cid("hook"), path)] == hook
            assert probes[(S.cid("spec"), path)] == "ENXIO"
        for n in ("hook", "spec"):
            report = json.loads(_stored(run, n, "probe.json"))
            assert report["timed_out"] is False and report["exit"] == 0


# -- the /dev/char trap ----------------------------------------------------------------------------
@pytest.fixture(scope="module", params=LAYOUTS)
def no_dev_char(request, tmp_path_factory):
    """A lab without /dev/char/195:* links and with a persistent journal: ``(lab, before, after)``, the
    lab's own probe of the spec container and the tool's run (:func:`_run`) on each side of one reload."""
    lab, dog = _lab(tmp_path_factory, request.param, "nochar", dev_char=False, persistent_journal=True)
    try:
        lab.up(containers=("pause", "spec"))
        before = {"probe": lab.probe("spec"), "run": _run(lab, "before")}
        lab.reload()
        yield lab, before, {"probe": lab.probe("spec"), "run": _run(lab, "after")}
    finally:
        _close(lab, dog)


def test_without_dev_char_links_the_spec_container_loses_the_gpu_too(no_dev_char):
    lab, before, after = no_dev_char
    assert (before["probe"], after["probe"]) == ("ENXIO", "EPERM")
    log = lab.read(f"/run/containerd/io.containerd.runtime.v2.task/{S.NS}/{S.cid('spec')}/log.json")
    assert "skipping device /dev/char/195:255 for systemd" in log
    assert "195" not in lab.show("spec", "DeviceAllow")["DeviceAllow"]


def test_the_tool_reads_runcs_skipping_device_line(no_dev_char):
    _, before, after = no_dev_char
    for side in (before, after):
        rec = side["run"]["records"]["spec"]
        assert rec["skipped_devices"] == ["/dev/char/195:0", "/dev/char/195:255"]
        assert [(e["level"], e["device"]) for e in rec["runc_log"]] == \
            [("warning", "/dev/char/195:0"), ("warning", "/dev/char/195:255")]
        assert rec["runc_log"][1]["msg"].startswith("skipping device /dev/char/195:255 for systemd")
        assert "skipping device /dev/char/195:255 for systemd" in _stored(side["run"], "spec", "log.json")
        warned = [e.attrs["device"] for e in side["run"]["events"] if e.kind == "container.runc-warning"]
        assert warned == ["/dev/char/195:0", "/dev/char/195:255"]
        assert not [a for a in rec["systemd_unit"]["DeviceAllow"] if "195" in a]
    rec, row = before["run"]["records"]["spec"], _rows(before["run"])["spec"]
    assert (row["gpu_injection"], row["at_risk"], row["broken"], row["probe"]) == ("spec", True, False, "ENXIO")
    assert row["runc_skipped"] == row["dev_char_missing"] == ["/dev/char/195:0", "/dev/char/195:255"]
    assert row["not_reapplied"] == ["/dev/nvidia0 (195:0)", "/dev/nvidiactl (195:255)"]
    assert f'runc logged "{rec["runc_log"][0]["msg"]}" (log.json, {rec["runc_log"][0]["time"]})' in row["reason"]
    assert before["run"]["analysis"]["exposure"]["verdict"].startswith(
        "Exposed: 1 container is caught by the /dev/char trap under SystemdCgroup=true")
    row = _rows(after["run"])["spec"]
    assert (row["gpu_injection"], row["at_risk"], row["broken"], row["probe"]) == ("spec", True, True, "EPERM")
    assert after["run"]["analysis"]["exposure"]["verdict"].startswith("Broken: 1 container already lost GPU access")
    for side in (before, after):
        (fix,) = [r for r in side["run"]["analysis"]["exposure"]["remedies"] if r["change"] == REMEDY]
        assert "runc logged 'skipping device /dev/char/195:0 for systemd' (log.json of default/gpu-pod)" in fix["why"]


def test_persistent_journal_in_var_log_journal(no_dev_char):
    lab = no_dev_char[0]
    mid = lab.read("/etc/machine-id").strip()
    assert os.path.exists(f"/proc/{lab.pid1()}/root/var/log/journal/{mid}/system.journal")
    assert len(_pid1_reloads(lab)) == 1


def test_the_reload_is_confirmed_where_only_the_dev_char_trap_exposes_a_gpu(no_dev_char):
    """No hook-injected GPU here (gpu_outside_spec is False): the spec GPU runc left out of DeviceAllow=
    still makes the reload a cause, not one excluded as unable to revoke anything."""
    lab, _, after = no_dev_char
    assert after["run"]["analysis"]["exposure"]["gpu_outside_spec"] is False
    reloads = [c for i in after["run"]["analysis"]["incidents"] for c in i["causes"] if c["kind"] == "daemon-reload"]
    assert [(c["verdict"], c["at"]) for c in reloads] == [("confirmed", _pid1_reloads(lab)[0]["realtime"])]


# -- the drill's live path -------------------------------------------------------------------------
def _cpu_controller(lab) -> bool:
    """Whether the lab's containers can have a cpu controller: ``ctr run`` (the drill's fresh probe
    container) always sets cpu shares (1024), which runc cannot write into a cgroup2 without one, as
    on a hybrid host, whose controllers are all on v1."""
    return lab.layout == "v1" or "cpu" in (S.host_v2() / "cgroup.controllers").read_text().split()


@pytest.fixture(scope="module", params=LAYOUTS)
def drilled(request, tmp_path_factory):
    """``(lab, runs)``: ``runs[tag] = (exit code, drill.json or None, stderr)`` of ``drill
    --yes-reload-systemd`` inside a fresh lab: "both" (every usable GPU container), then "spec" and
    "hook" (``--container``), each a real ``systemctl daemon-reload`` when not refused."""
    lab, dog = _lab(tmp_path_factory, request.param, "drill")
    try:
        lab.up(containers=("pause", "hook", "spec"))
        runs = {}
        for tag, extra in (("both", []), ("spec", ["--container", "spec"]), ("hook", ["--container", "hook"])):
            out = lab.folder / f"drill-{tag}"
            p = _tool(lab, "drill", "--yes-reload-systemd", "--root", "/", "--out", str(out), *extra)
            rep = json.loads((out / "drill.json").read_text()) if (out / "drill.json").exists() else None
            runs[tag] = (p.returncode, rep, p.stderr)
        runs["reloads"] = len(_pid1_reloads(lab))
        out = lab.folder / "drill-fresh"
        p = _tool(lab, "drill", "--yes-reload-systemd", "--root", "/", "--out", str(out), "--fresh-rootfs",
                  str(lab.rootfs("fresh")), "--runtime-binary", str(lab.folder / "bin/nvidia-container-runtime"))
        runs["fresh"] = (p.returncode, json.loads((out / "drill.json").read_text()), p.stderr)
        yield lab, runs
    finally:
        _close(lab, dog)


def test_drill_live_reload_hook_container_still_exposed_spec_container_fixed(drilled):
    lab, runs = drilled
    rc, rep, err = runs["both"]
    assert (rc, rep["verdict"]) == (4, "still exposed"), err[-2000:]
    assert rep["live_systemd"] is True and rep["note"] == "the reload was systemd's own (systemctl daemon-reload)"
    assert (rep["reload"]["command"], rep["reload"]["exit"]) == ("systemctl daemon-reload", 0)
    rows = {r["container_name"]: r for r in rep["containers"]}
    assert sorted(rows) == ["hook", "spec"]
    hook, spec = rows["hook"], rows["spec"]
    assert (hook["verdict"], spec["verdict"]) == ("still exposed", "fixed")
    both = {"/dev/nvidia0": "ENXIO", "/dev/nvidiactl": "ENXIO"}
    assert hook["probe_before"] == spec["probe_before"] == spec["probe_after"] == both
    assert hook["probe_after"] == {"/dev/nvidia0": "EPERM", "/dev/nvidiactl": "EPERM"}
    assert hook["cgroup_driver"] == spec["cgroup_driver"] == "systemd"
    assert hook["prestart_hooks"] == [str(lab.folder / "bin/nvidia-container-runtime-hook")]
    assert hook["spec_gpu_devices"] == [] and spec["prestart_hooks"] == []
    assert sorted(spec["spec_gpu_devices"]) == ["/dev/nvidia0", "/dev/nvidiactl"]
    if lab.layout == "v1":
        assert {"c 195:0 rw", "c 195:255 rw"} <= set(hook["rules_before"]) and "c 195:0 rw" not in hook["rules_after"]
        assert {"c 195:0 rw", "c 195:255 rw"} <= set(spec["rules_after"])
        assert hook["programs_before"] is None
    else:
        assert (hook["programs_before"], hook["programs_after"]) == (["lab_gpu_repl"], ["lab_gpu_repl", "sd_devices"])
        assert (spec["programs_before"], spec["programs_after"]) == ([""], ["", "sd_devices"])
        assert hook["rules_before"] is None
    for side in ("before", "after"):
        assert verify(rep[side]) == []
        assert os.path.isfile(f"{rep[side]}/containers/{S.NS}/{S.cid('hook')}/config.json")
        assert os.path.isfile(f"{rep[side]}/containers/{S.NS}/{S.cid('hook')}/"
                              + ("devices.list" if lab.layout == "v1" else "bpftool-cgroup.json"))


def test_drill_live_reload_on_the_spec_container_is_fixed(drilled):
    lab, runs = drilled
    rc, rep, err = runs["spec"]
    assert (rc, rep["verdict"]) == (0, "fixed"), err[-2000:]
    assert [r["container_name"] for r in rep["containers"]] == ["spec"]
    assert rep["containers"][0]["probe_after"] == {"/dev/nvidia0": "ENXIO", "/dev/nvidiactl": "ENXIO"}
    assert (rep["reload"]["command"], rep["reload"]["exit"]) == ("systemctl daemon-reload", 0)


def test_drill_refuses_a_container_that_already_lost_its_gpu(drilled):
    lab, runs = drilled
    rc, rep, err = runs["hook"]
    assert rc == 2 and "has no GPU device node that could be opened before the reload" in err
    assert "reload" not in rep and not (lab.folder / "drill-hook" / "after").exists()
    assert runs["reloads"] == 2            # the two drills that ran reloaded; the refused one did not


def test_drill_live_reload_on_a_fresh_hook_injected_probe_container(drilled):
    lab, runs = drilled
    rc, rep, err = runs["fresh"]
    fresh = rep["fresh"]["id"]
    assert "--runc-systemd-cgroup" in rep["fresh"]["command"]       # from containerd's SystemdCgroup = true
    assert rep["fresh"]["cleanup_problems"] == []
    assert fresh not in lab.ctr("container", "ls", "-q").stdout
    assert lab.sh("systemctl", "list-units", "--all", "--no-legend", f"gpu-forensics-{fresh}.scope").stdout == ""
    if not _cpu_controller(lab):     # the v2 lab on a hybrid host: refused, with runc's reason, nothing left
        assert rc == 2 and "cannot start a fresh probe container" in err and "cpu.weight" in err
        assert "reload" not in rep and runs["reloads"] == len(_pid1_reloads(lab))
        return
    assert (rc, rep["verdict"]) == (4, "still exposed"), err[-2000:]
    (row,) = rep["containers"]
    assert (row["id"], row["cgroup_driver"], row["verdict"]) == (fresh, "systemd", "still exposed")
    assert row["probe_after"] == {"/dev/nvidia0": "EPERM", "/dev/nvidiactl": "EPERM"}
    assert row["prestart_hooks"] == [str(lab.folder / "bin/nvidia-container-runtime-hook")]


# -- the Docker-like and plain-runc shapes (issue 14 item 8) ----------------------------------------
#: lab container -> the engine the collector must name (record.json ``engine``)
SHAPES = {"dockergpu": "docker", "runcgpu": "runc"}


@pytest.fixture(scope="module", params=LAYOUTS)
def engines(request, tmp_path_factory):
    """A lab with no CRI container: a Docker-shaped one (namespace ``moby`` of a containerd run as dockerd
    runs its own, runc root /run/docker/runtime-runc, ``docker-<id>.scope``) and a plain runc one
    (``runc --root /run/custom-runc``, ``runc-<id>.scope``), both hook-injected under the systemd driver;
    the lab's own probe before and after a real ``systemctl daemon-reload`` from a requester unit, then
    ``gpu-forensics run --probe`` inside: ``{"lab", "before", "after", "analysis", "records" {name: record}}``."""
    lab, dog = _lab(tmp_path_factory, request.param, "engines")
    try:
        lab.up(containers=())
        lab.start_dockerd_containerd()
        lab.start_docker("dockergpu")
        lab.start_runc("runcgpu")
        before = {n: lab.probe_engine(n, e) for n, e in SHAPES.items()}
        lab.reload(via_unit="nvidia-driver-upgrade")
        after = {n: lab.probe_engine(n, e) for n, e in SHAPES.items()}
        out = lab.folder / "out-engines"
        p = _tool(lab, "run", "--root", "/", "--probe", "--out", str(out), "--time-budget", "60")
        assert p.returncode == 0, p.stderr[-2000:]
        names = {S.cid(n): n for n in SHAPES}
        reading = containers.read(Bundle.open(out), NodeFacts())
        yield {"lab": lab, "before": before, "after": after,
               "analysis": json.loads((lab.folder / "out-engines-report" / "analysis.json").read_text()),
               "records": {names[r["id"]]: r for r in reading.facts.get("containers") or [] if r.get("id") in names}}
    finally:
        _close(lab, dog)


def test_the_shapes_lose_their_gpu_on_the_real_reload(engines):
    assert engines["before"] == {"dockergpu": "ENXIO", "runcgpu": "ENXIO"}   # allowed, no driver behind it
    assert engines["after"] == {"dockergpu": "EPERM", "runcgpu": "EPERM"}


def test_docker_and_plain_runc_containers_are_found_with_their_engine(engines):
    recs = engines["records"]
    assert sorted(recs) == ["dockergpu", "runcgpu"]
    assert {n: r.get("engine") for n, r in recs.items()} == SHAPES
    assert recs["dockergpu"]["namespace"] == "moby"
    assert recs["dockergpu"]["bundle"] == f"{S.DOCKER_STATE}/io.containerd.runtime.v2.task/moby/{S.cid('dockergpu')}"
    for n, r in recs.items():
        assert r["config"]["status"] == "collected", n
        assert r["cgroup"]["driver"] == "systemd", n
        assert r["cgroup"]["driver_source"], n          # runc's state.json / the scope's path
        assert r["cgroup"]["path"].endswith(f"system.slice/{'docker' if n == 'dockergpu' else 'runc'}-{S.cid(n)}.scope")
        assert [h["path"] for h in r["hooks"]["prestart"]] == [str(engines["lab"].folder / "bin/nvidia-container-runtime-hook")]


def test_both_are_broken_after_the_reload_by_the_probe(engines):
    rows = {S_name: r for r in engines["analysis"]["exposure"]["containers"]
            for S_name in SHAPES if r["id"] == S.cid(S_name)}
    assert sorted(rows) == ["dockergpu", "runcgpu"]
    for n, r in rows.items():
        assert (r["gpu_injection"], r["at_risk"], r["broken"], r["probe"]) == ("hook", True, True, "EPERM"), n
        assert (r["broken_basis"], r["cgroup_driver"], r["cgroup_driver_basis"]) == ("probe", "systemd", "evidence"), n
    reloads = [c for i in engines["analysis"]["incidents"] for c in i["causes"] if c["kind"] == "daemon-reload"]
    assert [c["verdict"] for c in reloads] == ["confirmed"]
    assert reloads[0]["requested_by"]["unit"] == "nvidia-driver-upgrade.service"
    assert engines["analysis"]["headline"]["verdict"] == "confirmed"
