"""The matrix (issue 14 item 8): one generated node root per GPU stack (tests/nodegen.py), each run
through the real pipeline (``gpu-forensics collect --root`` into a bundle, then ``analyze``), with the
answer a careful SRE would write for that node, by hand, in :data:`EXPECTED`.

What each root is asserted on, from the contracts only (keys and verdict names, never sentences):
- the daemon-reload cause: confirmed / inferred / excluded, never ``excluded`` where the journal shows
  PID 1's reload inside the window; no incident on a node nobody reported;
- the headline: confirmed / inferred / undetermined / none, never ``none`` (green) on a broken node;
- each container: the engine that runs it (record.json ``engine``), its injection, ``at_risk``,
  ``broken`` with ``broken_basis``, the cgroup driver with ``cgroup_driver_basis``; no unknown spec;
- the stack recognised (``exposure.stack``: engine, device plugin, driver root; its engine says ``k3s``
  where the record's says ``containerd``) and the remedies: every one names that stack (or is stack-neutral), and none advises what breaks this node (containerd's CRI snippet on CRI-O or
  Docker, the toolkit's CDI mode while containers of CRI-O's hooks.d or Docker's ``--gpus`` use the
  standalone hook, another chart's values, Helm on Bottlerocket, ``/etc/containerd`` on k3s);
- the systemd version the node facts give (the RHEL 8 banner included).

Each root's story happens in the seconds before it is collected (nodegen.story_times): the device nodes the
generator makes are then not later than the containers' ``created``, as on a node, so none reads as made inside.

``device_plugin`` names are matched by a keyword (``nvidia``, ``operator``, ``hami``, ``bottlerocket``;
None: no device plugin), since the contract fixes the key and not the spelling.
"""
from __future__ import annotations

import json
import os
import shutil

import pytest

import nodegen as N
from collectors import containers as containers_collector
from forensics.bundle import Bundle
from forensics.events import NodeFacts
from forensics.ops.cli import main

CRI_SNIPPET = ("io.containerd.grpc.v1.cri", "enable_cdi", "restart containerd")
CDI_MODE = "nvidia-container-runtime.mode=cdi"
NVDP_VALUES = ("nvdp/nvidia-device-plugin", "compatWithCPUManager")


def _row(inj, at_risk, broken, basis, driver="systemd", driver_basis="evidence", engine="containerd"):
    return {"gpu_injection": inj, "at_risk": at_risk, "broken": broken, "broken_basis": basis,
            "cgroup_driver": driver, "cgroup_driver_basis": driver_basis, "engine": engine}


NOGPU = {"gpu_injection": "none", "at_risk": False, "broken": False, "broken_basis": None}

#: root id -> what the SRE writes. ``reload``: the daemon-reload verdict (None: no incident at all);
#: ``containers``: name (nodegen.containers) -> expected row fields (a None value is not asserted);
#: ``forbid`` / ``require``: strings no remedy's ``change`` may hold / some remedy's ``change`` must hold.
EXPECTED = {
    "cri-v1-nvdp-ubuntu2204": {
        "reload": "confirmed", "headline": "confirmed", "systemd_version": "249.11-0ubuntu3.12",
        "stack": {"engine": "containerd", "device_plugin": "nvidia", "driver_root": "/"},
        "containers": {"plugin": _row("hook", True, True, "devices.list"), "trainer": _row("hook", True, True, "devices.list"),
                       "sidecar": NOGPU},
        "forbid": (), "require": ()},
    "cri-v2-operator-ubuntu2404": {   # v2, no --probe: broken inferred from the confirmed reload (issue item 3)
        "reload": "confirmed", "headline": "confirmed", "systemd_version": "255.4-1ubuntu8.6",
        "stack": {"engine": "containerd", "device_plugin": "operator", "driver_root": "/run/nvidia/driver"},
        "containers": {"plugin": _row("hook", True, True, "inferred"), "trainer": _row("hook", True, True, "inferred"),
                       "sidecar": NOGPU},
        "forbid": ("nvidiaDriverRoot",) + NVDP_VALUES, "require": ()},
    "k3s-v2-nvdp-debian12": {
        "reload": "confirmed", "headline": "confirmed", "systemd_version": "252.30-1~deb12u2",
        "stack": {"engine": "k3s", "device_plugin": "nvidia", "driver_root": "/"},   # record engine: containerd
        "containers": {"plugin": _row("hook", True, True, "inferred"), "trainer": _row("hook", True, True, "inferred"),
                       "sidecar": NOGPU},
        "forbid": (" /etc/containerd/config.toml", "=/etc/containerd/config.toml"),   # the host path, not k3s's
        "require": ("config.toml.tmpl",)},
    "docker-v1-rhel8-gpus": {          # dockerd's containerd disables CRI: the reload must not be excluded
        "reload": "confirmed", "headline": "confirmed", "systemd_version": "239-58.el8",
        "stack": {"engine": "docker", "device_plugin": None, "driver_root": "/"},
        "containers": {"trainer": _row("hook", True, True, "devices.list", engine="docker"),
                       "sidecar": {**NOGPU, "engine": "docker"}},
        "forbid": CRI_SNIPPET + (CDI_MODE, "kubectl", "helm"), "require": ()},
    "docker-v2-ubuntu2404-system-containerd": {
        "reload": "confirmed", "headline": "confirmed", "systemd_version": "255.4-1ubuntu8.6",
        "stack": {"engine": "docker", "device_plugin": None, "driver_root": "/"},
        "containers": {"trainer": _row("hook", True, True, "inferred", engine="docker"),
                       "sidecar": {**NOGPU, "engine": "docker"}},
        "forbid": CRI_SNIPPET + (CDI_MODE, "kubectl", "helm"), "require": ()},
    "crio-v1-operator-rhel8": {        # GPUs in the spec too, but systemd 239 < 240 and no /dev/char links
        "reload": "confirmed", "headline": "confirmed", "systemd_version": "239-58.el8",
        "stack": {"engine": "crio", "device_plugin": "operator", "driver_root": "/run/nvidia/driver"},
        "containers": {"plugin": _row(None, True, True, "devices.list", engine="crio"),
                       "trainer": _row(None, True, True, "devices.list", engine="crio"),
                       "sidecar": {**NOGPU, "engine": "crio"}},
        "forbid": CRI_SNIPPET + (CDI_MODE, "nvidiaDriverRoot") + NVDP_VALUES, "require": ()},
    "hami-v1-cri-ubuntu2204": {
        "reload": "confirmed", "headline": "confirmed", "systemd_version": "249.11-0ubuntu3.12",
        "stack": {"engine": "containerd", "device_plugin": "hami", "driver_root": "/"},
        "containers": {"plugin": _row("hook", True, True, "devices.list"), "trainer": _row("hook", True, True, "devices.list"),
                       "sidecar": NOGPU},
        "forbid": NVDP_VALUES, "require": ()},
    "bottlerocket-v2-host-plugin": {
        "reload": "confirmed", "headline": "confirmed", "systemd_version": "252.22",
        "stack": {"engine": "containerd", "device_plugin": "bottlerocket", "driver_root": "/"},
        "containers": {"trainer": _row("hook", True, True, "inferred"), "sidecar": NOGPU},
        "forbid": ("helm", "nvidia-ctk config"), "require": ("apiclient",)},
    "runc-v2-custom-root-ubuntu2204": {
        "reload": "confirmed", "headline": "confirmed", "systemd_version": "249.11-0ubuntu3.12",
        "stack": {"engine": "runc", "device_plugin": None, "driver_root": "/"},
        "containers": {"train": _row("hook", True, True, "inferred", engine="runc")},
        "forbid": CRI_SNIPPET + ("kubectl", "helm"), "require": (CDI_MODE,)},
    "cri-v1-nvdp-cdi-debian12": {      # safe: GPUs through CDI into the spec; nobody reported an incident
        "reload": None, "headline": "none", "systemd_version": "252.30-1~deb12u2",
        "stack": {"engine": "containerd", "device_plugin": "nvidia", "driver_root": "/"},
        "containers": {"plugin": _row("cdi", False, False, None), "trainer": _row("cdi", False, False, None),
                       "sidecar": NOGPU},
        "forbid": (CDI_MODE,), "require": ()},
    "cri-v1-cgroupfs-ubuntu2204": {    # hook-injected, but the cgroupfs driver: a reload rewrites nothing
        "reload": None, "headline": "none", "systemd_version": "249.11-0ubuntu3.12",
        "stack": {"engine": "containerd", "device_plugin": "nvidia", "driver_root": "/"},
        "containers": {"plugin": _row("hook", False, False, None, driver="cgroupfs"),
                       "trainer": _row("hook", False, False, None, driver="cgroupfs"), "sidecar": NOGPU},
        "forbid": (), "require": ()},
    "cri-v1-nvdp-debian12-no-reload": {  # broken, the journal covers the window and holds no reload
        "reload": "excluded", "headline": "undetermined", "systemd_version": "252.30-1~deb12u2",
        "stack": {"engine": "containerd", "device_plugin": "nvidia", "driver_root": "/"},
        "containers": {"plugin": _row("hook", True, True, "devices.list"), "trainer": _row("hook", True, True, "devices.list"),
                       "sidecar": NOGPU},
        "forbid": (), "require": ()},
}
IDS = [r["id"] for r in N.ROOTS]


def test_the_table_covers_every_root_and_every_value_of_each_axis():
    assert sorted(EXPECTED) == sorted(IDS)
    axes = {k: {r[k] for r in N.ROOTS} for k in ("engine", "cgroup", "plugin", "distro")}
    assert axes["engine"] >= {"containerd", "k3s", "docker", "docker-system", "crio", "runc"}
    assert axes["cgroup"] == {1, 2}
    assert axes["plugin"] >= {"nvdp", "operator", "hami", "bottlerocket", "gpus", "runc"}
    assert axes["distro"] == set(N.DISTROS)
    assert all(r["source"].startswith("https://github.com/") for r in N.ROOTS)


@pytest.fixture(scope="module", params=IDS)
def node(request, tmp_path_factory):
    """``(root id, analysis dict, records by nodegen name, {id: name})`` for one root, collected and
    analysed with the real CLI."""
    rid = request.param
    base = tmp_path_factory.mktemp(rid)
    names, times = N.make_root(base / "root", N.BY_ID[rid])
    argv = ["collect", "--root", str(base / "root"), "--out", str(base / "bundle")]
    if N.BY_ID[rid]["incident"]:
        argv += ["--incident", N.incident_arg(times)]
    assert main(argv) in (0, 1)
    assert main(["analyze", str(base / "bundle"), "--json", str(base / "analysis.json")]) in (0, 1)
    analysis = json.loads((base / "analysis.json").read_text())
    by_id = {v: k for k, v in names.items()}
    reading = containers_collector.read(Bundle.open(base / "bundle"), NodeFacts())
    records = {by_id[r["id"]]: r for r in reading.facts.get("containers") or [] if r.get("id") in by_id}
    yield rid, analysis, records, by_id
    if not os.environ.get("MATRIX_KEEP"):
        shutil.rmtree(base, ignore_errors=True)


def _reload_verdicts(a: dict) -> list[str]:
    return [c["verdict"] for i in a["incidents"] for c in i["causes"] if c["kind"] == "daemon-reload"]


def test_daemon_reload_verdict(node):
    rid, a, _, _ = node
    want = EXPECTED[rid]["reload"]
    if want is None:
        assert a["incidents"] == []
        return
    got = _reload_verdicts(a)
    assert got == [want], (rid, got)
    if N.BY_ID[rid]["reload"]:          # PID 1's reload line lies inside the window
        assert "excluded" not in got


def test_headline_never_green_on_a_broken_node(node):
    rid, a, _, _ = node
    assert a["headline"]["verdict"] == EXPECTED[rid]["headline"], (rid, a["headline"])
    if any(r.get("broken") for r in a["exposure"].get("containers") or []):
        assert a["headline"]["verdict"] in ("confirmed", "inferred", "undetermined")


def test_containers_found_with_engine_exposure_and_driver(node):
    rid, a, records, by_id = node
    want = EXPECTED[rid]["containers"]
    assert sorted(records) == sorted(want), (rid, sorted(records))
    rows = {by_id[r["id"]]: r for r in a["exposure"]["containers"] if r.get("id") in by_id}
    assert sorted(rows) == sorted(want)
    wrong = []      # every mismatch at once: (container, key, got, expected)
    for name, exp in want.items():
        got = {**rows[name], "engine": records[name].get("engine"),
               "config.status": (records[name].get("config") or {}).get("status")}
        exp = {**exp, "config.status": "collected", "spec_status": "collected", "made_inside": []}
        wrong += [(name, k, got.get(k), v) for k, v in exp.items()
                  if (v is not None or k == "broken_basis") and got.get(k) != v]
    unknown = a["exposure"].get("unknown_containers")
    if unknown is None or (len(unknown) if isinstance(unknown, list) else unknown) != 0:
        wrong.append(("exposure", "unknown_containers", unknown, 0))
    assert wrong == [], (rid, wrong)


def test_the_systemd_version_is_read_from_the_node(node):
    rid, a, _, _ = node
    assert a["node_facts"]["systemd_version"] == EXPECTED[rid]["systemd_version"]


def _names_stack(named, stack: dict) -> bool:
    """A remedy's ``stack`` names the recognised stack: equal to it, or naming its device plugin (else
    its engine) in a string; or it says it is the same on every stack (``"every stack"``:
    findings/remedies.py gives it to the /dev/char links and to recreating the containers, whose commands
    are still checked against the root's forbidden strings)."""
    if named == stack:
        return True
    text = json.dumps(named).lower() if not isinstance(named, str) else named.lower()
    if "every stack" in text:
        return True
    key = stack.get("device_plugin") or stack.get("engine")
    return bool(key) and str(key).lower() in text


def test_stack_recognised_and_remedies_written_for_it(node):
    rid, a, _, _ = node
    want = EXPECTED[rid]
    stack = a["exposure"].get("stack")
    assert isinstance(stack, dict), (rid, stack)
    assert stack["engine"] == want["stack"]["engine"]
    kw = want["stack"]["device_plugin"]
    if kw is None:
        assert stack["device_plugin"] in (None, "none"), (rid, stack["device_plugin"])
    else:
        assert kw in str(stack["device_plugin"]).lower(), (rid, stack["device_plugin"])
    assert stack["driver_root"] == want["stack"]["driver_root"]
    assert stack["evidence"]
    remedies = a["exposure"].get("remedies") or []
    broken = [r for r in a["exposure"]["containers"] if r.get("broken") or r.get("at_risk")]
    if broken:
        assert remedies, rid
    orders = [r["order"] for r in remedies]
    assert len(set(orders)) == len(orders) and all(isinstance(o, int) for o in orders)
    for r in remedies:
        assert set(r) >= {"what", "stack", "change", "needs", "breaks", "why", "order"}, (rid, sorted(r))
        assert _names_stack(r["stack"], stack), (rid, r["what"], r["stack"])
        for bad in want["forbid"]:
            assert bad not in r["change"], (rid, r["what"], bad)
    changes = "\n".join(r["change"] for r in remedies)
    for need in want["require"]:
        assert need in changes, (rid, need)
    if any(r.get("gpu_injection") == "hook" for r in broken) and N.BY_ID[rid]["hook_from"] in ("hooks.d", "gpus"):
        assert CDI_MODE not in changes   # the standalone hook refuses to run when the mode is not legacy


def test_a_copied_v2_root_lists_no_device_programs_and_says_why_instead_of_an_error(tmp_path):
    """bpftool can list a cgroup's device programs only on a live cgroup2 mount: on a copied root its
    failure is recorded as absent with that reason, and the collection has no error for it."""
    assert shutil.which("bpftool"), "bpftool is installed by scripts/lab-deps.sh"
    r = N.BY_ID["runc-v2-custom-root-ubuntu2204"]
    N.make_root(tmp_path / "root", r)
    main(["collect", "--root", str(tmp_path / "root"), "--out", str(tmp_path / "bundle")])
    arts = [a for a in Bundle.open(tmp_path / "bundle").artifacts() if "bpftool" in a.source]
    assert arts and {a.status.value for a in arts} == {"absent"}
    assert all("is not on a mounted cgroup2 file system (a copied or offline root)" in a.message for a in arts)


def test_the_report_never_contradicts_itself(node):
    """Issue 26 item 4: exposure, verdicts, causes-checked table and headline agree on every root."""
    from forensics.findings.consistency import contradictions
    rid, a, _, _ = node
    assert contradictions(a) == [], rid
    assert not [p for p in a["problems"] if p["artifact"] == "analysis"], rid
