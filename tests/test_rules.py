"""The findings floor's two lists, and its border with the collectors: the cause rules
(``causes.RULES``, one :class:`~forensics.findings.verdicts.Rule` per cause) and the incident openers
(``openers.OPENERS``) that ``correlate`` iterates; the metrics Reading gives facts (rules, series,
last-seen) that findings judge; the packages Reading extends an append-only log's coverage to the
collection itself, so the correlator knows no host path."""
from __future__ import annotations

import ast
from datetime import datetime, timezone
from pathlib import Path

from collectors import packages
from forensics.bundle import Bundle, BundleWriter
from forensics.events import Coverage, Event, NodeFacts
from forensics.findings import alerts, causes, openers
from forensics.findings.headline import verdict_sentence
from forensics.findings.correlator import correlate
from forensics.findings.openers import Incident, Signs
from forensics.findings.verdicts import CONFIRMED, Cause, Evidence, Rule, Window
from forensics.source import CollectContext

PROJECT = Path(__file__).resolve().parent.parent
UTC = timezone.utc
T = lambda s: datetime.fromisoformat(s).replace(tzinfo=UTC)  # noqa: E731
PRE = {"assessed": True, "containers": [{"id": "6a1f0c2e9b7d", "namespace": "ml", "pod": "trainer-0",
                                          "gpu_injection": "hook", "cgroup_driver": "systemd",
                                          "cgroup_driver_basis": "evidence", "at_risk": True, "broken": False}]}
#: the seed case: trainer-0 lost its GPU at 04:05:27 after snapd's reload at 04:05:13 (node time KST)
MANIFEST = {"incidents": [{"start": "2026-09-02T04:04:58Z", "end": "2026-09-02T04:05:27Z", "label": "trainer-0"}],
            "collection": {"start": "2026-11-30T02:00:00Z"},
            "node_facts": {"boot_id": "8c2e4f6a-1b3d-4e5f-9a7c-6b5d4e3f2a10"}}
EVENTS = [
    Event(T("2026-09-02T04:05:11"), "dpkg", "package.dpkg-action", "upgrade nvidia-container-toolkit:amd64 1.14.6-1 1.17.8-1",
          {"action": "upgrade", "package": "nvidia-container-toolkit:amd64", "ships_units": False},
          {"artifact": "packages/dpkg/dpkg.log", "line": 2}),
    Event(T("2026-09-02T04:05:13"), "journal", "journal.reload", "Reloading.",
          {"wording": "Reloading.", "requester_pid": 48211, "requester_comm": "systemctl",
           "requester_unit": "snapd.service"}, {"artifact": "journal/entries.jsonl", "line": 7}),
]
COVERAGE = [Coverage("journal", T("2026-07-16T15:00:05"), T("2026-11-30T01:59:00"), "journal span"),
            Coverage("dpkg", T("2025-08-21T01:02:11"), T("2026-11-30T02:00:00"), "dpkg.log"),
            Coverage("boot", T("2025-12-25T00:12:44"), T("2026-11-30T02:00:00"), "btime 2025-12-25")]


def test_rules_registry_holds_every_cause_and_correlate_weighs_each():
    assert all(isinstance(r, Rule) and r.kind == k for k, r in causes.RULES.items())
    (inc,), _ = correlate(MANIFEST, EVENTS, COVERAGE, exposure=PRE)
    assert [c.kind for c in inc.causes] == list(causes.RULES)
    by = {c.kind: c for c in inc.causes}
    assert [(k, by[k].verdict) for k in ("daemon-reload", "package-transaction", "reboot")] == [
        ("daemon-reload", "confirmed"), ("package-transaction", "confirmed"), ("reboot", "excluded")]
    reload, pkg, boot = by["daemon-reload"], by["package-transaction"], by["reboot"]
    assert reload.requested_by["unit"] == "snapd.service" and reload.at == T("2026-09-02T04:05:13")
    assert pkg.at == T("2026-09-02T04:05:11") and "1 package log entries" in pkg.reason
    assert "single boot spans the window" in boot.reason
    assert reload.remedy and reload.remedy["commands"][0] == "kubectl delete pod -n ml trainer-0"


def test_a_rule_added_to_the_registry_is_weighed_and_named_by_its_title(monkeypatch):
    seen = []

    def disk_full(window: Window, ev: Evidence) -> Cause:
        """confirmed when the journal says the disk filled inside the window (the test's only verdict)."""
        seen.append((window, [e.kind for e in ev.events], sorted(ev.coverage), ev.exposure, ev.node, ev.scope))
        return Cause("disk-full", CONFIRMED, "kubelet logged 'no space left on device'.", at=window.end)

    rule = Rule("disk-full", "a full disk", frozenset({"unknown"}), ("journal",), disk_full)
    monkeypatch.setitem(causes.RULES, "disk-full", rule)
    monkeypatch.setitem(causes.TITLES, "disk-full", rule.title)
    (inc,), _ = correlate(MANIFEST, EVENTS, COVERAGE, exposure=PRE)
    assert [c.kind for c in inc.causes][-1] == "disk-full"
    (window, kinds, sources, exposure, node, scope), = seen
    assert window == Window(T("2026-09-02T04:04:58"), T("2026-09-02T04:05:27"))
    assert kinds == ["package.dpkg-action", "journal.reload"] and sources == ["boot", "dpkg", "journal"]
    assert exposure is PRE and node["boot_id"] == MANIFEST["node_facts"]["boot_id"] and scope.symptom == "unknown"
    assert verdict_sentence(inc, inc.causes[-1], UTC) == (
        "Incident I1 (trainer-0): a full disk is CONFIRMED at 2026-09-02 04:05:27 +00:00 (04:05:27 UTC). "
        "kubelet logged 'no space left on device'.")


def test_the_openers_list_runs_in_order_and_an_added_opener_opens_an_incident(monkeypatch):
    assert openers.OPENERS == [openers.from_given, openers.from_metrics, openers.from_journal,
                               openers.from_containers, openers.from_kernel, openers.from_oom]

    def from_kernel_xid(out: list[Incident], signs: Signs) -> None:
        """An Xid 79 ('GPU has fallen off the bus') line opens an incident from the window given before it."""
        out.append(Incident("I?", "NVRM: Xid 79, GPU has fallen off the bus", T("2026-09-03T00:00:00"),
                            T("2026-09-03T00:10:00"), "kernel", evidence=[{"artifact": "node/dmesg", "line": 3}]))

    monkeypatch.setattr(openers, "OPENERS", openers.OPENERS + [from_kernel_xid])
    incs, _ = correlate(MANIFEST, EVENTS, COVERAGE, exposure=PRE)
    assert [(i.id, i.origin, i.label) for i in incs] == [("I1", "--incident", "trainer-0"), ("I2", "kernel", None)]
    assert [c.kind for c in incs[1].causes] == list(causes.RULES)
    assert {c.kind: c.verdict for c in incs[1].causes}["daemon-reload"] == "excluded"  # journal covers it


#: what the metrics Reading gives (collectors/metrics/ read()): facts, no incidents, no audit
METRICS = {
    "resource": "nvidia_com_gpu",
    "retention": {"oldest_sample": "2026-07-03T00:00:00Z"},
    "dcgm_targets": [{"job": "dcgm-exporter", "instance": "10.0.0.5:9400", "last_seen": "2026-07-11T03:34:00Z",
                      "up_after": [["2026-07-11T03:34:30Z", 0], ["2026-07-11T03:35:00Z", 1]],
                      "gpus": [{"uuid": "GPU-aaaa", "gpu": "0", "hostname": "node3-gpu"}],
                      "evidence": [{"artifact": "metrics/0007.json"}]}],
    "capacity_history": {"capacity": {"first_sample": {"at": "2026-07-03T00:00:30Z", "value": 4, "evidence": None},
                                      "last_sample": None},
                         "allocatable": {"first_sample": None, "last_sample": None}},
    "capacity_changes": [{"at": "2026-08-01T15:00:00Z", "last_old_at": "2026-08-01T14:59:30Z", "old": 4, "new": 0,
                          "series": "capacity", "resource": "nvidia_com_gpu",
                          "evidence": {"artifact": "metrics/0012.json"}}],
    "alert_rules": {"answered": True, "data": {"groups": [{"name": "gpu", "file": "gpu.yml", "rules": [
        {"type": "alerting", "name": "GPUHot", "query": "DCGM_FI_DEV_GPU_TEMP > 85"}]}]}},
}


def test_metrics_facts_open_incidents_in_findings_and_feed_the_audit():
    assert openers.metric_incidents(METRICS) == [
        {"start": "2026-07-11T03:34:00Z", "end": "2026-07-11T03:35:00Z", "detector": "dcgm-vanished",
         "symptom": "DCGM metrics of GPU 0 (GPU-aaaa) on node3-gpu stopped while dcgm-exporter target dcgm-exporter "
                    "10.0.0.5:9400 stayed up (up=1)", "evidence": [{"artifact": "metrics/0007.json"}]},
        {"start": "2026-08-01T14:59:30Z", "end": "2026-08-01T15:00:00Z", "detector": "capacity-zero",
         "symptom": "nvidia_com_gpu capacity fell from 4 to 0", "evidence": [{"artifact": "metrics/0012.json"}]}]
    incs, _ = correlate({"collection": {"start": "2026-11-30T02:00:00Z"}}, [], [], exposure=PRE, metrics=METRICS)
    assert [(i.origin, i.label, i.start, i.end) for i in incs] == [
        ("metrics", "dcgm-vanished", T("2026-07-11T03:34:00"), T("2026-07-11T03:35:00")),
        ("metrics", "capacity-zero", T("2026-08-01T14:59:30"), T("2026-08-01T15:00:00"))]
    audit = alerts.audit_of(METRICS)
    assert audit["silent_when_dcgm_absent"] == ["GPUHot"] and audit["gap"]["dcgm_absent"] is True
    assert alerts.audit_of({**METRICS, "alert_rules": {"answered": False, "data": None}}) == {
        "audited": False, "reason": "the rules answer is missing"}
    assert alerts.audit_of({"dcgm_exporter_now": {"answered": True}}) is None


def _packages_bundle(tmp_path: Path, files: dict[str, str], name: str) -> Bundle:
    root = tmp_path / name / "host"
    for path, text in files.items():
        p = root / path.lstrip("/")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    w = BundleWriter(tmp_path / name / "bundle")
    packages.acquire(CollectContext(root=root, writer=w))
    w.meta["collection"] = {"start": "2026-11-30T02:00:00Z", "end": "2026-11-30T02:00:09Z"}
    w.finish()
    return Bundle.open(tmp_path / name / "bundle")


def test_the_packages_reading_covers_an_append_only_log_up_to_collection(tmp_path):
    """dpkg.log's last line is in June; its current file was collected in November, so it would hold any
    later transaction: the packages Reading covers to the collection. Rotations alone prove nothing after them."""
    june = "2026-06-10 21:32:09 upgrade hello:amd64 2.10-2 2.10-3\n"
    b = _packages_bundle(tmp_path, {"/var/log/dpkg.log": june}, "current")
    dpkg = next(c for c in packages.read(b, NodeFacts()).coverage if c.source == "dpkg")
    assert (dpkg.start, dpkg.end) == (T("2026-06-10T21:32:09"), T("2026-11-30T02:00:00"))
    assert dpkg.reason.endswith("; the log was still being written at collection")
    b = _packages_bundle(tmp_path, {"/var/log/dpkg.log.1": june}, "rotated")
    dpkg = next(c for c in packages.read(b, NodeFacts()).coverage if c.source == "dpkg")
    assert (dpkg.start, dpkg.end) == (T("2026-06-10T21:32:09"), T("2026-06-10T21:32:09"))
    assert "still being written" not in dpkg.reason


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against the module's package
                pkg = ".".join(path.relative_to(PROJECT).with_suffix("").parts[:-node.level])
                base = f"{pkg}.{base}" if base else pkg
            out.add(base)
    return out


def test_findings_import_no_collector_and_collectors_no_findings():
    for p in sorted((PROJECT / "forensics" / "findings").rglob("*.py")):
        bad = {m for m in _imports(p) if m.split(".")[0] == "collectors" or m.startswith("forensics.ops")}
        assert not bad, f"{p.name} imports {bad}"
        assert len(p.read_text().splitlines()) < 450, p.name
    for p in sorted((PROJECT / "collectors").rglob("*.py")):
        assert not {m for m in _imports(p) if m.startswith("forensics.findings")}, p
