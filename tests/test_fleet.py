"""``gpu-forensics fleet`` (forensics/ops/fleet.py) over bundles made by the real collector.

tests/fleetgen.py builds 50 host roots from the sample node (broken, exposed and safe nodes in three
pools; snapd's refresh requesting a daemon-reload on many nodes within 90 s, an unattended upgrade of
nvidia-container-toolkit on others within 4 minutes, one operator's reload) and collects each with
:func:`forensics.ops.pipeline.collect`, some as directories and some as ``.tar.gz``.
"""
from __future__ import annotations

import json
import tarfile
import tempfile
from collections import Counter
from datetime import timedelta

import pytest

import fleetgen
from forensics.ops import fleet
from reports import render

N = 50


@pytest.fixture(scope="module")
def fleet50(tmp_path_factory):
    out = tmp_path_factory.mktemp("fleet50")
    items = fleetgen.generate(out / "bundles", N)
    return out, items


@pytest.fixture(scope="module")
def report(fleet50, tmp_path_factory):
    out, items = fleet50
    tmp = tmp_path_factory.mktemp("tmp")
    saved, tempfile.tempdir = tempfile.tempdir, str(tmp)  # where .tar.gz bundles are unpacked
    try:
        rc = fleet.main([str(out / "bundles"), "--out", str(out / "report"), "--jobs", "2"])
    finally:
        tempfile.tempdir = saved
    assert rc == 0
    assert list(tmp.iterdir()) == []  # every unpacked bundle was removed once its node was done
    return json.loads((out / "report/fleet.json").read_text()), (out / "report/fleet.html").read_text()


def test_every_node_gets_the_class_it_was_built_with(fleet50, report):
    _, items = fleet50
    r, _ = report
    got = {n["node"]: n["class"] for n in r["nodes"]}
    want = {p["node"]: p["expected"] for p in items}
    assert got == want
    assert r["counts"] == {**Counter(want.values()), "unknown": 0}
    assert {"broken", "exposed", "safe"} == set(want.values())
    assert sum(p["path"].endswith(".tar.gz") for p in items) == N // 4  # both bundle forms were read
    by = {n["node"]: n for n in r["nodes"]}
    broken = [(by[p["node"]], p) for p in items if p["expected"] == "broken"]
    for n, p in broken:  # the trainer and the device plugin itself (GPUs by NVIDIA_VISIBLE_DEVICES=all)
        assert n["broken_pods"] == [f"kube-system/nvidia-device-plugin-daemonset-{p['i']:06x}"[:-6] + f"{p['i']:06x}"[-5:],
                                    f"ml/trainer-{p['i']}"]
    broken = [n for n, _ in broken]
    assert all(n["reason"].startswith("Broken:") for n in broken)
    exposed = [by[p["node"]] for p in items if p["expected"] == "exposed"]
    assert all("hook-injected under SystemdCgroup=true" in n["reason"] for n in exposed)
    safe = {p["kind"]: by[p["node"]]["reason"] for p in items if p["expected"] == "safe"}
    assert "(devices in the OCI spec)" in safe["safe-cdi"] and "(cgroupfs driver)" in safe["safe-cgroupfs"]


def test_the_shared_snapd_refresh_is_one_story(fleet50, report):
    _, items = fleet50
    r, _ = report
    snapd_broken = sorted(p["node"] for p in items if p["story"] == "snapd" and p["expected"] == "broken")
    snapd_other = sorted(p["node"] for p in items if p["story"] == "snapd" and p["expected"] != "broken")
    stories = [s for s in r["stories"] if s["key"] == "reload:snapd.service"]
    assert len(stories) == 1 and len(snapd_broken) >= 5
    s = stories[0]
    assert s["nodes"] == snapd_broken and s["label"] == "daemon-reload requested by snapd.service"
    assert s["span_s"] <= 90 and s["classes"] == {"broken": len(snapd_broken)}
    assert sorted(a["node"] for a in s["also_hit"]) == snapd_other   # saw the reload, lost no GPU
    # the unattended upgrade is one story too, named by the package versions it installed
    pkg = [s for s in r["stories"] if s["key"] == "reload:apt-daily-upgrade.service"]
    assert len(pkg) == 1 and pkg[0]["nodes"] == sorted(p["node"] for p in items if p["story"] == "package")
    assert "nvidia-container-toolkit 1.17.8-1 → 1.17.9-1" in pkg[0]["label"]
    # the operator's reload on one node stays its own story; nothing is left without one
    human = [s for s in r["stories"] if s["key"] == "reload:session-*.scope"]
    assert len(human) == 1 and len(human[0]["nodes"]) == 1
    assert len(r["stories"]) == 3
    assert all(t["story"] for t in r["timeline"]) and len(r["timeline"]) == r["counts"]["broken"]
    assert [t["at"] for t in r["timeline"]] == sorted(t["at"] for t in r["timeline"])


def test_settings_that_differ_inside_a_pool(fleet50, report):
    _, items = fleet50
    r, _ = report
    pools = {p["pool"]: p for p in r["pools"]}
    assert set(pools) == set(fleetgen.POOLS) and sum(p["nodes"] for p in pools.values()) == N
    for p in pools.values():
        diffs = {d["setting"]: d["values"] for d in p["differences"]}
        assert {"SystemdCgroup", "enable_cdi", "nvidia-container-runtime.mode", "DEVICE_LIST_STRATEGY"} <= set(diffs)
        assert {v["value"] for v in diffs["SystemdCgroup"]} == {True, False}
        assert p["basis"] == "host name without its number"
        assert "containerd" not in diffs  # the same everywhere
    odd = sorted(p["node"] for p in items if p["i"] % 17 == 4)
    kernels = [v for p in pools.values() for d in p["differences"] if d["setting"] == "kernel" for v in d["values"]]
    assert sorted(n for v in kernels if v["value"] == "6.8.0-79-generic" for n in v["nodes"]) == odd


def test_html_is_one_self_contained_page(report):
    r, html = report
    assert html.startswith("<!DOCTYPE html>") and "<script" not in html and "http://" not in html
    assert "https://" not in html and 'src="' not in html
    for n in r["nodes"]:
        assert n["node"] in html
    assert "daemon-reload requested by snapd.service" in html and "SystemdCgroup" in html


def test_summaries_stay_small(report):
    r, _ = report
    assert max(len(json.dumps(n)) for n in r["nodes"]) < 8000


def test_a_bad_bundle_is_listed_escaped_and_fails_the_exit_code(fleet50, tmp_path, capsys):
    out, items = fleet50
    hostile = tmp_path / "<img src=x onerror=alert(1)>.tar.gz"
    with tarfile.open(hostile, "w:gz") as tf:
        tf.add(fleetgen.SAMPLE / "etc/hostname", arcname="x/etc/hostname")  # an archive, but no manifest
    good = [p["path"] for p in items[:3]]
    rc = fleet.main([*good, str(hostile), "--out", str(tmp_path / "r"), "--jobs", "1"])
    assert rc == 3
    r = json.loads((tmp_path / "r/fleet.json").read_text())
    assert len(r["nodes"]) == 3 and len(r["errors"]) == 1 and "no manifest.json" in r["errors"][0]["error"]
    html = (tmp_path / "r/fleet.html").read_text()
    assert "<img" not in html and "&lt;img src=x onerror=alert(1)&gt;.tar.gz" in html
    assert fleet.main([str(tmp_path / "missing")]) == 2
    empty = tmp_path / "empty"
    empty.mkdir()
    assert fleet.main([str(empty)]) == 2


def test_a_changed_or_interrupted_bundle_is_flagged(fleet50, tmp_path):
    import shutil
    out, items = fleet50
    src = next(p["path"] for p in items if not p["path"].endswith(".tar.gz"))
    folder = tmp_path / "bundles"
    shutil.copytree(src, folder / "changed")
    rec = next((folder / "changed/containers").rglob("record.json"))
    rec.write_text(rec.read_text().replace('"ENXIO"', '"ok"') + " ")
    (folder / "cut.incomplete").mkdir()
    (folder / "cut.incomplete/INCOMPLETE").write_text("collection did not finish\n")
    rc = fleet.main([str(folder), "--out", str(tmp_path / "r"), "--jobs", "1"])
    r = json.loads((tmp_path / "r/fleet.json").read_text())
    assert rc == 3
    assert r["nodes"][0]["integrity"] == [f"changed: {rec.relative_to(folder / 'changed')}"]
    assert "bundle does not match its manifest" in (tmp_path / "r/fleet.html").read_text()
    assert [e["bundle"] for e in r["errors"]] == [str(folder / "cut.incomplete")]
    assert "INCOMPLETE" in r["errors"][0]["error"]


def test_one_process_and_two_agree(fleet50, report):
    out, items = fleet50
    r1 = fleet.run(fleet.find_bundles([out / "bundles"]), jobs=1)
    r2, _ = report
    strip = lambda r: ([(n["node"], n["class"], n["pool"]) for n in r["nodes"]],  # noqa: E731
                       [(s["key"], s["nodes"]) for s in r["stories"]])
    assert strip(r1) == strip(r2)


def test_pool_names():
    assert fleet.pool_of("gpu-a100-007", None) == ("gpu-a100", "host name without its number")
    assert fleet.pool_of("ip-10-0-14-23.ec2.internal", {"eks.amazonaws.com/nodegroup": "a100-spot"}) == \
        ("a100-spot", "label eks.amazonaws.com/nodegroup")
    assert fleet.pool_of("gke-ml-a100-pool-3f9c2b1d-xk2p", {"cloud.google.com/gke-nodepool": "a100-pool"})[0] == "a100-pool"
    assert fleet.pool_of("node3-gpu", None) == ("node3", "host name before its last '-'")
    assert fleet.pool_of("trainer12", None)[0] == "trainer"


def _node(name, cls, key, at, pool="p"):
    inc = {"id": "I1", "symptom": "s", "window": {"end": at}, "at": at, "key": key, "label": "l", "verdict": "confirmed",
           "packages": []}
    return {"node": name, "class": cls, "pool": pool, "pool_basis": "b", "settings": {}, "incidents": [inc],
            "triggers": [{"at": at, "key": key}] if key else []}


def test_stories_merge_within_the_window_and_not_beyond():
    nodes = [_node("a", "broken", "reload:snapd.service", "2026-09-02T04:00:00Z"),
             _node("b", "broken", "reload:snapd.service", "2026-09-02T04:09:00Z"),
             _node("c", "broken", "reload:snapd.service", "2026-09-02T04:18:30Z"),   # 9.5 min after b: chained
             _node("d", "broken", "reload:snapd.service", "2026-09-02T05:00:00Z"),   # 41 min later: a new story
             _node("e", "broken", "reload:apt-daily-upgrade.service", "2026-09-02T04:01:00Z"),
             _node("f", "broken", None, "2026-09-02T04:02:00Z"),
             _node("g", "broken", None, "2026-09-02T04:02:00Z")]
    stories = fleet._stories(nodes, timedelta(minutes=10))
    assert [(s["key"], s["nodes"]) for s in stories] == [
        ("reload:snapd.service", ["a", "b", "c"]), ("reload:apt-daily-upgrade.service", ["e"]),
        (None, ["f"]), (None, ["g"]), ("reload:snapd.service", ["d"])]


# -- the analysis JSON is the fleet's only input ----------------------------------------------------
def _analysis_files(paths, folder):
    """``gpu-forensics analyze BUNDLE --json`` of each bundle (what a ticket carries), one file each."""
    from forensics.ops.cli import main
    out = []
    for i, p in enumerate(paths):
        js = folder / f"{i:02d}-analysis.json"
        assert main(["analyze", str(p), "--json", str(js)]) in (0, 1)
        out.append(js)
    return out


def test_a_fleet_of_analysis_json_files_is_the_fleet_of_their_bundles(fleet50, tmp_path):
    out, items = fleet50
    picked = {}
    for p in items:  # every kind of node, both bundle forms, a few of each story
        picked.setdefault((p["kind"], p["path"].endswith(".tar.gz"), p["story"]), p)
    picked = sorted(picked.values(), key=lambda p: p["i"])
    assert {p["expected"] for p in picked} == {"broken", "exposed", "safe"} and len(picked) >= 6
    from_bundles = fleet.run([p["path"] for p in picked], jobs=1)
    files = _analysis_files([p["path"] for p in picked], tmp_path)
    rc = fleet.main([*map(str, files), "--out", str(tmp_path / "r"), "--jobs", "1"])
    from_json = json.loads((tmp_path / "r/fleet.json").read_text())
    assert rc == 0 and from_json["errors"] == [] and from_json["schema"] == "gpu-forensics/fleet/v1"
    by_b, by_j = ({n["node"]: n for n in r["nodes"]} for r in (from_bundles, from_json))
    assert sorted(by_j) == sorted(by_b) == sorted(p["node"] for p in picked)
    for name, n in by_j.items():
        assert n["bundle"].endswith("-analysis.json") and by_b[name]["bundle"] in {p["path"] for p in picked}
        assert {k: v for k, v in n.items() if k != "bundle"} == {k: v for k, v in by_b[name].items() if k != "bundle"}
    for key in ("counts", "pools", "stories", "timeline"):
        assert from_json[key] == from_bundles[key]
    # issue 26: each node's report agrees with itself (exposure, verdicts, causes checked, headline)
    from forensics.findings.consistency import contradictions
    for f in files:
        a = json.loads(f.read_text())
        assert contradictions(a) == [] and not [x for x in a["problems"] if x["artifact"] == "analysis"], f
    # the real settings of fleetgen's device plugin (tests/fleetgen.py containers()), per node
    for p in picked:
        s = by_j[p["node"]]["settings"]
        assert s["device plugin image"] == "nvcr.io/nvidia/k8s-device-plugin:v0.17.1"
        assert s["DEVICE_LIST_STRATEGY"] == ("cdi-cri" if p["kind"] == "safe-cdi" else "envvar")
        assert (s["PASS_DEVICE_SPECS"], s["NVIDIA_DRIVER_ROOT"]) == (False, "/")
        assert by_j[p["node"]]["class"] == p["expected"]


def test_the_demo_analysis_json_carries_its_device_plugin_settings(tmp_path):
    from forensics.ops.cli import main
    assert main(["demo", "--out", str(tmp_path)]) == 0
    a = json.loads((tmp_path / "analysis.json").read_text())
    # the sample's device plugin container, as containerd's OCI config holds it
    cid = "bc00548a5d0b852699602ab524e911dcaa2f1981c0538ac469491b00e8b32b2b"
    oci = json.loads((fleetgen.SAMPLE / f"run/containerd/io.containerd.runtime.v2.task/k8s.io/{cid}/config.json")
                     .read_text())
    env = dict(e.split("=", 1) for e in oci["process"]["env"])
    dp = a["exposure"]["device_plugin"]
    assert (dp["id"], dp["pod"], dp["image"], dp["socket_mount"]) == (
        cid, oci["annotations"]["io.kubernetes.cri.sandbox-name"], oci["annotations"]["io.kubernetes.cri.image-name"],
        True)
    assert (dp["device_list_strategy"], dp["pass_device_specs"], dp["driver_root"], dp["device_id_strategy"]) == (
        [env["DEVICE_LIST_STRATEGY"]], env["PASS_DEVICE_SPECS"] == "true", env["NVIDIA_DRIVER_ROOT"],
        env["DEVICE_ID_STRATEGY"])
    assert (dp["device_list_strategy"], dp["pass_device_specs"], dp["driver_root"]) == (["envvar"], False, "/")
    assert dp["basis"]["PASS_DEVICE_SPECS"] == "PASS_DEVICE_SPECS=false in the container's env"
    assert dp["basis"]["device_plugin"].startswith("kube-system/nvidia-device-plugin-daemonset-7xk2p "
                                                   "(nvidia-device-plugin-ctr) mounts /var/lib/kubelet/device-plugins")
    assert a["kube"] == {"collected": False}  # the sample was collected without --kube
    # the fleet of the demo's bundle and of its analysis.json agree
    bundle = next(tmp_path.glob("bundle-*"))
    r1, r2 = fleet.run([bundle], jobs=1), fleet.run([tmp_path / "analysis.json"], jobs=1)
    n1, n2 = r1["nodes"][0], r2["nodes"][0]
    assert {**n1, "bundle": None} == {**n2, "bundle": None} and n1["class"] == "broken"
    assert n2["settings"]["device plugin image"] == "nvcr.io/nvidia/k8s-device-plugin:v0.17.2"
    assert (n2["settings"]["DEVICE_LIST_STRATEGY"], n2["settings"]["PASS_DEVICE_SPECS"]) == ("envvar", False)


def test_kube_labels_name_the_pool_through_the_analysis_json(tmp_path):
    from test_kube import ANSWERS, NODE_NAME, _bundle
    from forensics.bundle import Bundle
    from forensics.ops.pipeline import analyze
    b = _bundle(tmp_path, ANSWERS)
    a = analyze(Bundle.open(b.root))
    assert a["kube"] == {"collected": True, "node": NODE_NAME,
                         "labels": ANSWERS["kube/node.json"]["metadata"]["labels"],
                         "device_plugin_images": ["nvcr.io/nvidia/k8s-device-plugin:v0.17.1"]}
    assert a["node"] is None  # no manifest node name nor node facts: the Node object's name is the node's
    js = tmp_path / "analysis.json"
    js.write_text(render.to_json(a))
    for path in (b.root, js):
        n = fleet.summarize(path)
        assert (n["node"], n["pool"], n["pool_basis"]) == (NODE_NAME, "gpu-a100", "label eks.amazonaws.com/nodegroup")
        assert n["settings"]["device plugin image"] == ["nvcr.io/nvidia/k8s-device-plugin:v0.17.1"]


def test_a_json_that_is_not_an_analysis_is_listed(tmp_path):
    (tmp_path / "fleet.json").write_text(json.dumps({"schema": "gpu-forensics/fleet/v1"}))
    (tmp_path / "broken.json").write_text("{")
    rc = fleet.main([str(tmp_path / "fleet.json"), str(tmp_path / "broken.json"), "--out", str(tmp_path / "r")])
    r = json.loads((tmp_path / "r/fleet.json").read_text())
    assert rc == 3 and r["nodes"] == []
    assert [e["error"] for e in r["errors"]] == [
        "not a gpu-forensics/analysis/v1 JSON (schema 'gpu-forensics/fleet/v1')",
        r["errors"][1]["error"]] and r["errors"][1]["error"].startswith("cannot read the analysis JSON: ")
