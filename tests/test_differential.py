"""Issue 26's differential diagnosis end to end: nodes of the failures the issue lists, and of kinds it does
not (tests/scenes.py), collected and analysed through the real pipeline, each read like the incident:
the cause that fits is named at the top with its remedy, the others ruled out with their reason, and the
report never contradicts itself (forensics/findings/consistency.py).
"""
from __future__ import annotations

import json
import shutil

import pytest

import scenes
from forensics.bundle import Bundle
from forensics.findings.consistency import contradictions
from forensics.ops.pipeline import analyze, collect
from reports import render


def run_scene(base, name: str) -> dict:
    ids, t = scenes.build(base / "root", name)
    r = scenes.SCENES[name]
    incidents = []
    if r.get("incident"):
        s, e = t["window"]
        incidents = [{"start": s.isoformat(), "end": e.isoformat(), "label": "gpu-lost"}]
    path, _d, _a = collect(base / "root", base / "bundle", argv=["gpu-forensics", "collect"], incidents=incidents)
    a = analyze(Bundle.open(path), full_timeline=True)
    a["_ids"] = ids
    render.html(a), render.markdown(a)  # every report renders it
    return a


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    """``scene(name)``: the analysis of scene ``name`` (built and collected once per module)."""
    done: dict[str, dict] = {}

    def get(name: str) -> dict:
        if name not in done:
            base = tmp_path_factory.mktemp(name)
            done[name] = run_scene(base, name)
            shutil.rmtree(base / "root", ignore_errors=True)
        return done[name]
    return get


def causes(a: dict, cls: str | None = None) -> dict:
    """``{kind: cause}`` of the (one) incident of symptom class ``cls`` (or the only incident)."""
    incs = [i for i in a["incidents"] if cls is None or i["symptom_class"] == cls]
    assert len(incs) == 1, [(i["id"], i["symptom_class"]) for i in a["incidents"]]
    return {c["kind"]: c for c in incs[0]["causes"]}


@pytest.mark.parametrize("name", sorted(scenes.SCENES))
def test_every_scene_reads_without_contradiction(scene, name):
    a = scene(name)
    assert contradictions(a) == [] and not [p for p in a["problems"] if p["artifact"] == "analysis"]
    assert a["headline"]["verdict"] != "none" and a["incidents"], name  # every scene is a failure: no all-clear


def test_a_gpu_off_the_bus_is_the_headline_with_cordon_and_the_catalogs_action(scene):
    a = scene("xid79")
    c = causes(a, "gpu-lost")
    assert c["gpu-hardware-fault"]["verdict"] == "confirmed" and "Xid 79" in c["gpu-hardware-fault"]["reason"]
    assert c["daemon-reload"]["verdict"] == "excluded"
    h = a["headline"]
    assert (h["verdict"], h["cause"], h["severity"]) == ("confirmed", "gpu-hardware-fault", "node")
    assert h["remedy"]["commands"][0] == "kubectl cordon xid79-cdi-debian12" and "RESTART_BM" in h["remedy"]["what"]
    [gpu] = [g for g in a["host_gpu"]["gpus"] if g["pci"] == "0000:3b:00.0"]
    assert gpu["lost"] is True and [x["xid"] for x in gpu["xids"]] == [79] and gpu["uuid"] == scenes.UUID
    inc = [i for i in a["incidents"] if i["symptom_class"] == "gpu-lost"][0]
    assert any("Unable to determine the device handle for GPU 0000:3B:00.0: Unknown Error" in e["summary"]
               for e in inc["evidence"])


def test_a_driver_library_mismatch_is_named_and_the_coincident_reload_shown_ruled_out(scene):
    a = scene("mismatch")
    c = causes(a, "version-mismatch")
    assert c["driver-version-mismatch"]["verdict"] == "confirmed"
    assert "535.216.01" in c["driver-version-mismatch"]["reason"]
    assert c["daemon-reload"]["verdict"] == "excluded" and c["daemon-reload"]["at"]  # it happened
    assert a["headline"]["cause"] == "driver-version-mismatch"
    assert "ruled out though it happened: a systemd daemon-reload" in a["headline"]["text"]
    assert a["host_gpu"]["driver"]["match"] is False


def test_a_reexec_breaks_the_hook_pods_and_the_report_says_so_everywhere(scene):
    a = scene("reexec")
    c = causes(a)
    assert c["daemon-reload"]["verdict"] == "confirmed" and "daemon-reexec" in c["daemon-reload"]["reason"]
    assert c["daemon-reload"]["requested_by"]["unit"] == "apt-daily-upgrade.service"
    assert a["exposure"]["verdict"].startswith("Broken")
    assert a["headline"]["cause"] == "daemon-reload"


def test_the_cpu_manager_rewriting_a_hook_pods_devices_is_named_with_no_reload(scene):
    a = scene("cpu-manager")
    c = causes(a, "nvml-unknown")
    assert c["cpu-manager"]["verdict"] == "confirmed" and "UpdateContainerResources" in c["cpu-manager"]["reason"]
    assert c["daemon-reload"]["verdict"] == "excluded"
    assert a["headline"]["cause"] == "cpu-manager" and "compatWithCPUManager" in a["headline"]["remedy"]["what"]


def test_an_oom_kill_after_a_harmless_reload_on_a_cdi_node_is_the_oom(scene):
    a = scene("oom")
    c = causes(a, "oom")
    assert c["oom-kill"]["verdict"] == "confirmed" and "python3" in c["oom-kill"]["reason"]
    assert c["daemon-reload"]["verdict"] == "excluded"
    assert a["headline"]["cause"] == "oom-kill"


def test_docker_under_cgroupfs_excludes_the_reload_it_logged(scene):
    a = scene("docker-cgroupfs")
    c = causes(a)
    assert c["daemon-reload"]["verdict"] == "excluded" and "cgroupfs" in c["daemon-reload"]["reason"]
    assert c["daemon-reload"]["contradictions"] == []
    assert a["exposure"]["verdict"].startswith("Not exposed")
    assert a["headline"]["verdict"] == "undetermined"


def test_an_applications_xid_13_is_the_applications_fault_and_the_manual_reload_is_excluded(scene):
    a = scene("app-xid")
    c = causes(a, "app-fault")
    assert c["application-fault"]["verdict"] == "confirmed" and "Xid 13" in c["application-fault"]["reason"]
    assert "python3 (PID 48211)" in c["application-fault"]["reason"]
    assert c["gpu-hardware-fault"]["verdict"] == "excluded" and c["daemon-reload"]["verdict"] == "excluded"
    h = a["headline"]
    assert (h["cause"], h["severity"]) == ("application-fault", "pod") and "RESTART_APP" in h["remedy"]["what"]


def test_a_create_time_lstat_is_the_driver_not_ready_and_the_package_upgrade_is_excluded(scene):
    a = scene("lstat")
    c = causes(a, "create-failed")
    assert c["driver-not-ready"]["verdict"] == "confirmed"
    assert c["package-transaction"]["verdict"] == "excluded"
    assert a["headline"]["cause"] == "driver-not-ready"
    inc = [i for i in a["incidents"] if i["symptom_class"] == "create-failed"][0]
    assert "lstat /run/nvidia/driver/dev/nvidiactl: no such file or directory" in inc["symptom"]


def test_uncorrectable_ecc_is_a_hardware_fault_with_a_gpu_reset(scene):
    a = scene("ecc")
    c = causes(a, "ecc")
    assert c["gpu-hardware-fault"]["verdict"] == "confirmed" and "Xid 95" in c["gpu-hardware-fault"]["reason"]
    cmds = a["headline"]["remedy"]["commands"]
    assert any(x.startswith("sudo nvidia-smi -r -i 0000:3b:00") for x in cmds)


def test_a_failed_fabric_manager_on_an_nvswitch_node_is_the_802_and_not_the_admins_reload(scene):
    a = scene("fabric")
    c = causes(a, "system-not-ready")
    assert c["fabric-manager"]["verdict"] == "confirmed" and c["daemon-reload"]["verdict"] == "excluded"
    assert a["headline"]["cause"] == "fabric-manager" and a["host_gpu"]["nvswitch"] is True


def test_a_dead_nodes_disk_still_opens_the_incident_and_reads_exposure_as_unknown(scene):
    a = scene("dead")
    assert a["exposure"]["assessed"] is False and "/proc/stat" in a["exposure"]["reason"]
    assert [i["symptom_class"] for i in a["incidents"]] == ["nvml-unknown"]
    assert "Not exposed" not in json.dumps(a["headline"]) and "exposure unknown" in a["headline"]["text"]


def test_a_rhel_node_with_the_xid_only_in_var_log_messages(scene):
    a = scene("rhel-messages")
    c = causes(a, "ecc")
    assert c["gpu-hardware-fault"]["verdict"] == "confirmed" and "kern.log" in c["gpu-hardware-fault"]["reason"]


def test_a_reload_and_an_applications_xid_at_once_on_k3s_v2_each_read_for_what_it_can_do(scene):
    a = scene("k3s-two-at-once")
    c = causes(a, "nvml-unknown")
    assert c["daemon-reload"]["verdict"] == "confirmed" and c["daemon-reload"]["mechanism"] == "shown"
    assert c["application-fault"]["verdict"] == "excluded" and c["application-fault"]["at"]  # it happened
    assert "does not produce this incident's symptom" in c["application-fault"]["reason"]
    assert a["headline"]["cause"] == "daemon-reload"
    assert "ruled out though it happened: a fault of the application's own GPU code" in a["headline"]["text"]
    [gpu] = [g for g in a["host_gpu"]["gpus"] if g["pci"] == "0000:3b:00.0"]
    assert [(x["xid"], x["scope"]) for x in gpu["xids"]] == [(31, "application")]
