"""The embedded sample node's container and runtime evidence (issue 3, "Done when"): the demo's
exposure section shows the device plugin and dcgm-exporter hook-injected, broken and at risk, a CDI
probe pod healthy, the node settings behind it and the remedies; the planted credential never leaves
the sample; and the container evidence lands in the story's two incidents."""
from __future__ import annotations

import html as htmllib
import json
import re
from pathlib import Path

import pytest

from forensics.ops.cli import SAMPLE_ROOT, main

#: the fake credential planted in ml/trainer-0's env (samples/build.py); it must never be copied
SECRET = "sample-not-a-secret-5e1a9c7b3d2f4e60"
PLUGIN = ("kube-system", "nvidia-device-plugin-daemonset-7xk2p")
DCGM = ("gpu-operator", "nvidia-dcgm-exporter-x7k9q")
TRAINER = ("ml", "trainer-0")
PROBE = ("gpu-ops", "gpu-probe")


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo-exposure")
    assert main(["demo", "--out", str(out)]) == 0
    return out, json.loads((out / "analysis.json").read_text())


def _rows(a) -> dict[tuple[str, str], dict]:
    return {(c["namespace"], c["pod"]): c for c in a["exposure"]["containers"]}


def test_node_settings_behind_the_failure(demo):
    _, a = demo
    e = a["exposure"]
    assert e["assessed"] is True
    assert e["systemd_cgroup"] is True
    assert e["enable_cdi"] is False
    assert e["nvidia_runtime_mode"] == "legacy" and e["nvidia_runtime_mode_resolved"] == "legacy"
    assert e["device_list_strategy"] in ("envvar", ["envvar"])
    assert e["pass_device_specs"] is False
    assert e["driver_root"] == "/"
    assert e["gpu_outside_spec"] is True


def test_hook_injected_containers_are_broken_and_at_risk(demo):
    _, a = demo
    rows = _rows(a)
    for key, name in ((PLUGIN, "nvidia-device-plugin-ctr"), (DCGM, "nvidia-dcgm-exporter"), (TRAINER, "trainer")):
        c = rows[key]
        assert c["container_name"] == name
        assert (c["gpu_injection"], c["at_risk"], c["broken"]) == ("hook", True, True), c
        assert c["cgroup_driver"] == "systemd"
        # nvidiactl and nvidia-uvm (dynamic major 508 from /proc/devices) are neither in the drop-in
        # systemd re-applies nor in the kernel's current devices.list
        assert "/dev/nvidiactl (195:255)" in c["not_reapplied"] and "/dev/nvidia-uvm (508:0)" in c["not_reapplied"]
        assert c["probe"] == "not-run"  # the demo runs without --probe
    assert rows[TRAINER]["id"].startswith("6a1f0c2e9b7d")  # containerd's "StartContainer" line in the journal


def test_cdi_probe_pod_is_healthy(demo):
    _, a = demo
    c = _rows(a)[PROBE]
    assert c["container_name"] == "probe"
    assert (c["gpu_injection"], c["at_risk"], c["broken"]) == ("cdi", False, False), c
    assert c["not_reapplied"] == []
    assert "/dev/nvidia1 (195:1)" in c["devices"] and "/dev/nvidiactl (195:255)" in c["devices"]


def test_remedies_name_cdi_and_pass_device_specs(demo):
    _, a = demo
    text = "\n".join(f"{r['what']} {r['change']} {r['why']}" for r in a["exposure"]["remedies"])
    assert "nvidia-ctk runtime configure --runtime=containerd --cdi.enabled" in text  # a command (issue 14), not TOML
    assert "nvidia-container-runtime.mode=cdi" in text
    assert "cdi-cri" in text
    assert "PASS_DEVICE_SPECS=true" in text
    # /etc/cdi/nvidia.yaml is a valid nvidia.com/gpu spec, so generating one is not asked for
    assert not any(r["what"].startswith("Generate a CDI spec") for r in a["exposure"]["remedies"])
    recreate = [r for r in a["exposure"]["remedies"] if r["what"].startswith("Recreate")]
    assert recreate and all(p in recreate[0]["change"] for _, p in (PLUGIN, DCGM, TRAINER))
    assert PROBE[1] not in recreate[0]["change"]


def test_planted_secret_never_leaves_the_sample(demo):
    out, _ = demo
    planted = [p for p in Path(SAMPLE_ROOT).rglob("config.json") if SECRET in p.read_text()]
    assert len(planted) == 1, "the sample must hold the planted credential, or this test proves nothing"
    bundles = [p for p in out.iterdir() if p.name.startswith("bundle-") and p.is_dir()]
    assert len(bundles) == 1
    files = [p for p in bundles[0].rglob("*") if p.is_file()]
    files += [out / "report.html", out / "report.md", out / "analysis.json"]
    for f in files:
        assert SECRET.encode() not in f.read_bytes(), f
    stored = bundles[0] / "containers" / "k8s.io" / planted[0].parent.name / "config.json"
    assert "AWS_SECRET_ACCESS_KEY=<redacted hmac:" in stored.read_text()


def test_report_html_lists_the_containers_in_the_exposure_section(demo):
    out, _ = demo
    html = (out / "report.html").read_text()
    start = html.index('<h2 id="exposure">Is this node still exposed?</h2>')
    end = html.find("<h2", start + 1)
    section = htmllib.unescape(html[start:end if end > 0 else None])
    rows = {}
    for tr in re.findall(r"<tr>(.*?)</tr>", section, re.S):
        cells = [re.sub(r"<[^>]+>", "", td).strip() for td in re.findall(r"<td(?: [^>]*)?>(.*?)</td>", tr, re.S)]
        if cells and "/" in cells[0]:
            rows[cells[0]] = cells
    listed = "yes (devices.list)"  # the sample's cgroup v1 devices.list shows the loss
    for (ns, pod), inj, risk, broken in ((PLUGIN, "hook", "yes", listed), (DCGM, "hook", "yes", listed),
                                         (TRAINER, "hook", "yes", listed), (PROBE, "cdi", "no", "no")):
        cells = rows[f"{ns}/{pod}"]
        assert [cells[2], *cells[4:6]] == [inj, risk, broken], cells
        assert cells[3].startswith("systemd (evidence: "), cells
    assert "--cdi.enabled" in section and "PASS_DEVICE_SPECS=true" in section


def test_container_evidence_lands_in_the_two_incidents(demo):
    _, a = demo
    assert len(a["incidents"]) == 2
    july = next(i for i in a["incidents"] if i["origin"] == "metrics")
    sept = next(i for i in a["incidents"] if i["window"]["end"].startswith("2026-09-02"))
    rows = _rows(a)
    cited = {e.get("artifact") for e in july["evidence"]}
    assert {f"containers/{rows[PLUGIN]['id']}", f"containers/{rows[DCGM]['id']}"} <= cited
    logs = [e for e in sept["evidence"] if str(e.get("artifact", "")).endswith("/trainer/0.log")]
    assert {e["kind"] for e in logs} == {"container.log-error", "container.log-healthy"}
    # the trainer's nvidia-smi loop: OK just before PID 1's reload (04:05:13.211Z), NVML error 10 s later
    events = {e["kind"]: e for e in a["timeline"] if e["source"] == "podlogs"
              and e["attrs"].get("pod") == "trainer-0"}
    assert events["container.log-healthy"]["at"].startswith("2026-09-02T04:05:13.0")
    assert events["container.log-error"]["at"].startswith("2026-09-02T04:05:23")
    assert events["container.log-error"]["attrs"]["signature"] == "nvml-unknown-error"
    for inc in (july, sept):
        c = {x["kind"]: x["verdict"] for x in inc["causes"]}
        assert c["package-transaction"] == "excluded" and c["reboot"] == "excluded"
    assert {x["kind"]: x["verdict"] for x in july["causes"]}["daemon-reload"] == "inferred"
    assert {x["kind"]: x["verdict"] for x in sept["causes"]}["daemon-reload"] == "confirmed"


def test_unreachable_container_dev_is_recorded_not_a_crash(demo):
    """The sample's /proc has no container init pids: each one is a manifest record, and no collector failed."""
    out, a = demo
    bundle = next(p for p in out.iterdir() if p.name.startswith("bundle-"))
    manifest = json.loads((bundle / "manifest.json").read_text())
    records = {r.get("source"): r for r in manifest["artifacts"]}
    assert not [r for r in manifest["artifacts"] if str(r.get("source", "")).startswith(("collector:", "container:"))]
    for rel in (bundle / "containers" / "k8s.io").glob("*/record.json"):
        rec = json.loads(rel.read_text())
        assert not rec["dev_entries"] and isinstance(rec["pid"], int)  # not read: [] today, None would be clearer
        rec_proc = [r for s, r in records.items() if str(s).startswith(f"/proc/{rec['pid']}/")]
        assert rec_proc and all(r["status"] == "absent" for r in rec_proc), rec["pid"]


def test_report_md_gives_the_stack_and_remedies_as_bare_commands(demo, monkeypatch):
    """Issue 14: each remedy names its stack, needs and breaks; its code block holds commands only (rendered
    without the ticket cut, which would keep only the first ones)."""
    from reports import render
    out, a = demo
    monkeypatch.setattr(render, "MD_LIMIT", 100_000)
    md = render.markdown(a)
    assert "Stack: engine containerd, device plugin nvidia-device-plugin, driver root /." in md
    first = a["exposure"]["remedies"][0]
    assert first["stack"] == "containerd + nvidia-device-plugin" and first["order"] == 1
    assert f"1. **{first['what']}** (for containerd + nvidia-device-plugin). Needs: " in md
    blocks = re.findall(r"```sh\n(.*?)\n```", md, re.S)[1:]  # the first is what to do first (the headline's)
    commands = {line for r in a["exposure"]["remedies"] for line in r["change"].splitlines()}
    plan = a["exposure"]["remedy_plan"]  # issue 28: the fix for this node and its follow-up with code, the others listed
    assert blocks == [r["change"] for r in [plan["fix"]] + plan["then"]] + ["sudo gpu-forensics drill --yes-reload-systemd"]
    assert all(line in commands for b in blocks[:-1] for line in b.splitlines())
    assert "- **Enable CDI in containerd's CRI plugin**: applies if the node has: containerd \\>= 1.7" in md
    assert "pauses pod starts" in render.html(a)  # its breaks: in report.html's fold
    cut = (out / "report.md").read_text()
    assert cut.count("```") % 2 == 0  # a ticket cut never leaves a code block open


def test_the_first_commands_keep_each_next_steps_gate_and_breakage_beside_its_commands():
    """The copy-paste block of "What to do first" runs the fix and the steps that follow it: a next step's needs
    (a version gate the node fails) and what it breaks (a dockerd restart stops every container) are comment
    lines above its commands, each on one line whatever the value holds (a newline never ends a comment)."""
    from reports import ticket
    fix = {"what": "Generate a CDI spec for the GPUs", "stack": "docker + none", "change": "nvidia-ctk cdi generate",
           "needs": None, "breaks": None}
    enable = {"what": "Enable CDI in dockerd", "follows": True, "change": "nvidia-ctk runtime configure --runtime="
              "docker --cdi.enabled\nsystemctl restart docker", "needs": "Docker >= 25.0 (this node: 24.0.7, from "
              "dockerd --version: below it, upgrade Docker first)", "breaks": "restarting dockerd stops every\nrunning "
              "container"}
    other = {"what": "Recreate the containers", "change": "docker rm -f x", "needs": None, "breaks": None}
    a = {"headline": {"cause": "daemon-reload", "remedy": {"commands": ["gpu-forensics drill"]}},
         "exposure": {"assessed": True, "assesses": "daemon-reload",
                      "remedy_plan": {"fix": fix, "then": [enable, other], "others": []}}}
    got_fix, cmds = ticket.first_commands(a)
    assert got_fix is fix
    assert cmds == ["nvidia-ctk cdi generate", "# then: Enable CDI in dockerd",
                    "# needs: Docker >= 25.0 (this node: 24.0.7, from dockerd --version: below it, upgrade Docker first)",
                    "# breaks: restarting dockerd stops every running container",
                    "nvidia-ctk runtime configure --runtime=docker --cdi.enabled", "systemctl restart docker",
                    "gpu-forensics drill"]
