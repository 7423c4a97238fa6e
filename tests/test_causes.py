"""The cause rules of issue 26, one test per rule per verdict it can reach, read like the incident.

Each rule is judged for one incident: its window, its symptom class and its pods (``Scope``), the events
near it and the coverage of each source, the collectors' facts and the exposure rows. The events carry
the wordings of the public reports the rules cite (forensics/neighbours.py, docs/sources.md); end-to-end
tests with real journals are in tests/test_differential.py.
"""
from __future__ import annotations

from datetime import datetime, timezone

import pytest

from forensics.events import Coverage, Event
from forensics.findings.causes import RULES
from forensics.findings.verdicts import Evidence, Scope, Window

UTC = timezone.utc
T = lambda s: datetime.fromisoformat(s).replace(tzinfo=UTC)  # noqa: E731
W = Window(T("2026-09-02T04:00:00"), T("2026-09-02T04:10:00"))
IN = "2026-09-02T04:05:13"
JOURNAL = {"journal": ("2026-07-16T15:00:05", "2026-11-29T23:00:00")}
KERNEL = {"kernel": ("2026-07-16T15:00:05", "2026-11-29T23:00:00")}
XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
XID13 = ("NVRM: Xid (PCI:0000:3b:00): 13, pid=48211, name=python3, Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): "
         "Out Of Range Address")


def ev(kind: str, at: str = IN, source: str = "journal", **attrs) -> Event:
    return Event(T(at), source, kind, attrs.get("message") or kind, attrs, {"artifact": "journal/entries.jsonl", "line": 7})


def cov(**spans) -> dict:
    return {k: Coverage(k, T(a), T(b), f"{k} span") for k, (a, b) in spans.items()}


def row(pod: str, inj: str = "hook", driver: str = "systemd", basis: str = "evidence", **more) -> dict:
    ns, name = pod.split("/")
    return {"id": f"{name}-0123456789abcdef", "namespace": ns, "pod": name, "gpu_injection": inj,
            "cgroup_driver": driver, "cgroup_driver_basis": basis, "cgroup_driver_source": f"{driver} ({basis})",
            "at_risk": inj == "hook" and driver == "systemd", "broken": False, "dev_char_missing": [],
            "runc_skipped": [], **more}


def judge(kind: str, events=(), coverage=None, symptom="nvml-unknown", pods=("ml/train-0",), rows=None, facts=None,
          node=None, boots=()) -> object:
    exposure = {"assessed": True, "containers": rows if rows is not None else [row("ml/train-0")]}
    e = Evidence(list(events), coverage or {}, node or {}, list(boots), facts or {}, exposure,
                 Scope(symptom, frozenset(pods)), list(events), W)
    return RULES[kind].judge(W, e)


# -- the registry -----------------------------------------------------------------------------------
def test_the_registry_holds_every_cause_the_issue_lists_each_a_whole_rule():
    assert set(RULES) >= {"daemon-reload", "package-transaction", "reboot", "gpu-hardware-fault", "application-fault",
                          "driver-version-mismatch", "cpu-manager", "oom-kill", "runtime-restart", "device-unhealthy",
                          "fabric-manager", "driver-not-ready", "cdi-spec-failure", "mig-reconfiguration"}
    for kind, r in RULES.items():
        assert r.kind == kind and r.title and r.explains and r.needs and callable(r.judge) and callable(r.remedy)
        assert r.severity in ("node", "pod", "config")


def test_a_rule_without_any_evidence_is_undetermined_never_excluded():
    for kind in RULES:
        c = judge(kind, symptom="unknown", pods=(), rows=[])
        assert c.verdict == "undetermined", (kind, c.reason)


# -- daemon-reload ----------------------------------------------------------------------------------
RELOAD = ev("journal.reload", requester_pid=48211, requester_comm="systemctl", requester_unit="snapd.service",
            wording="Reloading requested from client PID 48211 ('systemctl') (unit snapd.service)...")
REEXEC = ev("journal.reexec", requester_pid=3301, requester_comm="systemctl", requester_unit="needrestart.service",
            wording="Reexecution requested from client PID 3301 ('systemctl') (unit needrestart.service)...")


def test_reload_inside_the_window_of_a_hook_injected_pod_under_systemd_is_confirmed_with_its_caller():
    c = judge("daemon-reload", [RELOAD], cov(**JOURNAL))
    assert (c.verdict, c.mechanism, c.requested_by["unit"]) == ("confirmed", "shown", "snapd.service")
    assert "injected outside the OCI spec (hook) under the systemd driver" in c.reason


def test_a_daemon_reexec_counts_as_a_reload():
    c = judge("daemon-reload", [REEXEC], cov(**JOURNAL))
    assert c.verdict == "confirmed" and "daemon-reexec" in c.reason and c.requested_by["unit"] == "needrestart.service"


def test_reload_on_a_cdi_pod_is_excluded_though_it_happened_and_says_both():
    c = judge("daemon-reload", [RELOAD], cov(**JOURNAL), rows=[row("ml/train-0", inj="cdi")])
    assert (c.verdict, c.mechanism) == ("excluded", "ruled-out")
    assert "PID 1 logged the daemon-reload" in c.reason and "OCI spec (cdi)" in c.reason


def test_reload_under_a_cgroupfs_driver_read_from_the_engine_config_is_excluded():
    # Docker with native.cgroupdriver=cgroupfs: NVIDIA's documented workaround (issue 26)
    c = judge("daemon-reload", [RELOAD], cov(**JOURNAL),
              rows=[row("ml/train-0", driver="cgroupfs", basis="engine config")])
    assert c.verdict == "excluded" and "cgroupfs driver" in c.reason and c.contradictions == []


def test_reload_is_judged_for_the_incidents_pods_not_a_hook_container_elsewhere_on_the_node():
    rows = [row("ml/train-0", inj="cdi"), row("other/legacy-0")]  # the hook pod is not the incident's
    assert judge("daemon-reload", [RELOAD], cov(**JOURNAL), rows=rows).verdict == "excluded"


def test_reload_with_the_sources_disagreeing_on_the_driver_is_inferred_with_the_contradiction():
    r = row("ml/train-0", cgroup_driver_conflict="runc state says systemd, daemon.json says cgroupfs")
    c = judge("daemon-reload", [RELOAD], cov(**JOURNAL), rows=[r])
    assert c.verdict == "inferred" and c.contradictions and "daemon.json says cgroupfs" in c.contradictions[0]


def test_reload_with_a_driver_only_assumed_from_a_default_is_confirmed_not_excluded():
    c = judge("daemon-reload", [RELOAD], cov(**JOURNAL), rows=[row("ml/train-0", driver="cgroupfs", basis="default")])
    assert (c.verdict, c.mechanism) == ("confirmed", "fits")


def test_no_reload_in_a_window_the_journal_covers_is_excluded():
    assert judge("daemon-reload", [], cov(**JOURNAL)).verdict == "excluded"


def test_a_window_before_the_journal_with_the_mechanism_shown_is_inferred_naming_the_gap():
    c = judge("daemon-reload", [], cov(journal=("2026-10-01T00:00:00", "2026-11-29T23:00:00")))
    assert c.verdict == "inferred" and "journal holds data from 2026-10-01T00:00:00Z only" in c.gaps[0]


def test_a_reload_cannot_explain_a_version_mismatch():
    c = judge("daemon-reload", [RELOAD], cov(**JOURNAL), symptom="version-mismatch")
    assert c.verdict == "excluded" and "Driver/library version mismatch" in c.reason


def test_no_journal_at_all_leaves_the_reload_undetermined():
    assert judge("daemon-reload", [], {"journal": Coverage("journal", None, None, "absent")}).verdict == "undetermined"


# -- GPU hardware fault and the application's own fault -----------------------------------------------
def xid(n: int, message: str, at: str = IN) -> Event:
    return ev("kernel.xid", at, xid=n, pci="0000:3b:00", gpu_instance=None, pid=None, process=None,
              detail=message.split(", ")[-1], message=message)


ONE_GPU = {"host_gpu": {"pci": [{"address": "0000:3b:00.0", "class": "0x030200"}]}}


def test_xid_79_on_the_nodes_only_gpu_confirms_a_hardware_fault_with_cordon_and_reboot():
    c = judge("gpu-hardware-fault", [xid(79, XID79)], cov(**KERNEL), symptom="gpu-lost", facts=ONE_GPU)
    assert (c.verdict, c.mechanism) == ("confirmed", "shown")
    assert "Xid 79" in c.reason and c.detail["faults"][0]["immediate"] == "RESTART_BM"
    r = RULES["gpu-hardware-fault"].remedy(c, Evidence(node={"hostname": "gpu-7"}))
    assert r["commands"][:2] == ["kubectl cordon gpu-7", "kubectl drain gpu-7 --ignore-daemonsets --delete-emptydir-data"]
    assert any("reboot" in x for x in r["commands"])


def test_an_xid_on_a_gpu_the_pod_does_not_hold_is_excluded():
    facts = {"kubelet": {"device_checkpoint": {"entries": [{"namespace": "ml", "pod": "train-0",
                                                            "device_ids": ["GPU-aaaaaaaa-1111"]}]}}}
    uuid = ev("kernel.nvrm", "2026-09-01T00:00:00", what="gpu-uuid", pci="0000:3b:00", uuid="GPU-bbbbbbbb-2222",
              version=None, message="NVRM: GPU at PCI:0000:3b:00: GPU-bbbbbbbb-2222")
    c = judge("gpu-hardware-fault", [uuid, xid(79, XID79)], cov(**KERNEL), symptom="gpu-lost", facts=facts)
    assert c.verdict == "excluded" and "another GPU" in c.reason


def test_no_node_level_xid_in_a_window_the_kernel_log_covers_excludes_hardware():
    assert judge("gpu-hardware-fault", [], cov(**KERNEL), symptom="gpu-lost").verdict == "excluded"


def test_an_application_xid_is_not_a_hardware_fault_and_explains_no_eperm():
    hw = judge("gpu-hardware-fault", [xid(13, XID13)], cov(**KERNEL), symptom="nvml-unknown")
    app = judge("application-fault", [xid(13, XID13)], cov(**KERNEL), symptom="nvml-unknown")
    assert hw.verdict == "excluded" and app.verdict == "excluded" and "does not produce" in app.reason


def test_an_application_xid_confirms_the_applications_fault_for_an_illegal_address():
    c = judge("application-fault", [xid(13, XID13)], cov(**KERNEL), symptom="app-fault", facts=ONE_GPU)
    assert c.verdict == "confirmed" and "Xid 13" in c.reason
    assert "RESTART_APP" in RULES["application-fault"].remedy(c, Evidence())["what"]


def test_the_plugins_xid_line_counts_when_the_kernel_log_rotated_away():
    line = ev("container.log-symptom", source="podlogs", signature="device-unhealthy", pod="nvidia-device-plugin-x",
              namespace="kube-system", message="I0902 04:05:13.000000 1 health.go:151] XidCriticalError: Xid=48 on "
              "Device=GPU-0b6f4a2c-1d2e-3f40-8a9b-c0d1e2f3a4b5; marking device as unhealthy.")
    c = judge("gpu-hardware-fault", [line], {}, symptom="ecc")
    assert c.verdict == "confirmed" and "Xid 48" in c.reason


# -- driver/library version mismatch ------------------------------------------------------------------
MISMATCH_FACTS = {"host_gpu": {"module": {"loaded": True, "version": "535.183.01", "source": "/proc/driver/nvidia/version"},
                               "userspace": {"versions": ["550.54.15"], "source": "/usr/lib/x86_64-linux-gnu"}}}
API = ev("kernel.api-mismatch", client="nvidia-smi", client_pid=4242, client_version="550.54.15",
         kernel_version="535.183.01", message="NVRM: API mismatch: the client 'nvidia-smi' (pid 4242) has the version "
         "550.54.15, but this kernel module has the version 535.183.01.  Please make sure that this kernel module and "
         "all NVIDIA driver components have the same version.")


def test_the_kernels_api_mismatch_line_confirms_the_mismatch_with_reboot_as_remedy():
    c = judge("driver-version-mismatch", [API], cov(**KERNEL), symptom="version-mismatch", facts=MISMATCH_FACTS)
    assert (c.verdict, c.mechanism) == ("confirmed", "shown") and "550.54.15" in c.reason
    assert any("reboot" in x for x in RULES["driver-version-mismatch"].remedy(c, Evidence())["commands"])


def test_versions_that_differ_now_with_nothing_dating_it_are_inferred():
    c = judge("driver-version-mismatch", [], cov(**KERNEL), symptom="version-mismatch", facts=MISMATCH_FACTS)
    assert c.verdict == "inferred" and "nothing dates" in c.reason


def test_a_mismatch_never_explains_nvml_unknown_error():
    c = judge("driver-version-mismatch", [API], cov(**KERNEL), symptom="nvml-unknown", facts=MISMATCH_FACTS)
    assert c.verdict == "excluded"


def test_matching_versions_and_a_covering_kernel_log_exclude_the_mismatch():
    facts = {"host_gpu": {**MISMATCH_FACTS["host_gpu"], "userspace": {"versions": ["535.183.01"], "source": "x"}}}
    assert judge("driver-version-mismatch", [], cov(**KERNEL), symptom="unknown", facts=facts).verdict == "excluded"


# -- CPU manager ---------------------------------------------------------------------------------------
STATIC = {"kubelet": {"config": {"cpuManagerPolicy": {"value": "static", "source": "/var/lib/kubelet/config.yaml"}}}}
UPDATE = ev("runtime.update-resources", id="train-0-0123456789abcdef", result="requested", unit="containerd.service",
            message='UpdateContainerResources for "train-0-0123456789abcdef" with Linux: &LinuxContainerResources{'
                    'CpuPeriod:100000,CpuQuota:0,CpusetCpus:2-3,} / Windows: nil')


def test_an_update_of_the_hook_injected_container_under_the_static_policy_is_confirmed():
    c = judge("cpu-manager", [UPDATE], cov(**JOURNAL), facts=STATIC)
    assert (c.verdict, c.mechanism) == ("confirmed", "shown") and "static" in c.reason


def test_an_update_of_a_container_whose_gpu_is_in_the_spec_is_excluded():
    c = judge("cpu-manager", [UPDATE], cov(**JOURNAL), facts=STATIC, rows=[row("ml/train-0", inj="spec")])
    assert c.verdict == "excluded" and "re-applies" in c.reason


def test_the_none_policy_without_any_update_excludes_the_cpu_manager():
    facts = {"kubelet": {"config": {"cpuManagerPolicy": {"value": "none", "source": "/var/lib/kubelet/config.yaml"}}}}
    assert judge("cpu-manager", [], {}, facts=facts).verdict == "excluded"


def test_the_static_policy_before_the_runtime_log_starts_is_inferred():
    c = judge("cpu-manager", [], cov(journal=("2026-10-01T00:00:00", "2026-11-29T23:00:00")), facts=STATIC)
    assert c.verdict == "inferred"


# -- OOM ---------------------------------------------------------------------------------------------
OOM = ev("kernel.oom-kill", pid=48211, process="python3", constraint="CONSTRAINT_MEMCG", oom_memcg=None,
         task_memcg="/kubepods.slice/kubepods-burstable.slice/cri-containerd-train-0-0123456789abcdef.scope",
         container_id="train-0-0123456789abcdef",
         message="Memory cgroup out of memory: Killed process 48211 (python3) total-vm:9047620kB, anon-rss:4194304kB")


def test_an_oom_kill_of_the_incidents_container_confirms_an_oom_incident():
    c = judge("oom-kill", [OOM], cov(**KERNEL), symptom="oom")
    assert c.verdict == "confirmed" and "python3" in c.reason


def test_an_oom_kill_ten_seconds_after_a_reload_does_not_explain_an_nvml_error():
    assert judge("oom-kill", [OOM], cov(**KERNEL), symptom="nvml-unknown").verdict == "excluded"


def test_an_oom_counted_by_the_cgroup_alone_is_inferred():
    facts = {"containers": [{"id": "train-0-0123456789abcdef", "pod_namespace": "ml", "pod": "train-0",
                             "memory": {"oom_kill": 2, "source": "memory.events"}}]}
    c = judge("oom-kill", [], cov(**KERNEL), symptom="oom", facts=facts)
    assert c.verdict == "inferred" and "oom_kill 2" in c.reason


def test_no_oom_in_a_covered_window_excludes_it():
    assert judge("oom-kill", [], cov(**KERNEL), symptom="oom").verdict == "excluded"


# -- runtime restart, device unhealthy, fabric manager, create-time causes, MIG -------------------------
def unit(name: str, action: str) -> Event:
    return ev("journal.unit", unit=name, action=action, message=f"{name}: {action}")


def test_a_containerd_restart_explains_create_failures_not_a_running_pods_nvml_error():
    e = [unit("containerd.service", "started")]
    assert judge("runtime-restart", e, cov(**JOURNAL), symptom="create-failed").verdict == "confirmed"
    assert judge("runtime-restart", e, cov(**JOURNAL), symptom="nvml-unknown").verdict == "excluded"
    assert judge("runtime-restart", [], cov(**JOURNAL), symptom="create-failed").verdict == "excluded"


def test_the_plugin_marking_a_gpu_unhealthy_is_confirmed_for_an_allocatable_drop_and_excluded_for_eperm():
    line = ev("container.log-symptom", source="podlogs", signature="device-unhealthy",
              message="'nvidia.com/gpu' device marked unhealthy: GPU-0b6f4a2c-1d2e-3f40-8a9b-c0d1e2f3a4b5")
    assert judge("device-unhealthy", [line], {}, symptom="device-unhealthy").verdict == "confirmed"
    assert judge("device-unhealthy", [line], {}, symptom="nvml-unknown").verdict == "excluded"


FM = {"host_gpu": {"nvswitch": True, "module": {"version": "570.158.01"},
                   "fabric_manager": {"version": "570.133.20", "unit": "/lib/systemd/system/nvidia-fabricmanager.service"}}}


def test_a_failed_fabric_manager_on_an_nvswitch_node_confirms_cuda_802():
    e = [unit("nvidia-fabricmanager.service", "failed")]
    assert judge("fabric-manager", e, cov(**JOURNAL), symptom="system-not-ready", facts=FM).verdict == "confirmed"


def test_a_fabric_manager_of_another_driver_version_is_inferred_and_no_nvswitch_excludes_it():
    assert judge("fabric-manager", [], {}, symptom="system-not-ready", facts=FM).verdict == "inferred"
    no = {"host_gpu": {"nvswitch": False}}
    assert judge("fabric-manager", [], {}, symptom="system-not-ready", facts=no).verdict == "excluded"


LSTAT = ('level=error msg="CreateContainer within sandbox failed" error="failed to generate container spec: failed '
         'to generate spec: lstat /run/nvidia/driver/dev/nvidiactl: no such file or directory"')


def test_an_lstat_at_create_confirms_the_driver_not_ready_and_not_a_package_transaction():
    line = ev("journal.symptom", signature="spec-device-missing", message=LSTAT)
    dpkg = ev("package.dpkg-action", source="dpkg", action="upgrade", package="vim:amd64", old_version="1", new_version="2")
    assert judge("driver-not-ready", [line], cov(**JOURNAL), symptom="create-failed").verdict == "confirmed"
    c = judge("package-transaction", [dpkg, line], cov(**JOURNAL, dpkg=JOURNAL["journal"]), symptom="create-failed")
    assert c.verdict == "excluded" and "changed no NVIDIA driver package" in c.reason


def test_cdi_generation_failure_is_confirmed_and_excluded_where_the_journal_shows_none():
    line = ev("journal.symptom", signature="cdi-libcuda-missing", message="failed to create CDI spec: failed to locate "
              "libcuda.so.535.129.03: pattern libcuda.so.535.129.03 not found")
    assert judge("cdi-spec-failure", [line], cov(**JOURNAL), symptom="create-failed").verdict == "confirmed"
    assert judge("cdi-spec-failure", [], cov(**JOURNAL), symptom="create-failed").verdict == "excluded"


def test_a_mig_manager_run_in_the_window_is_confirmed_and_a_pending_label_is_inferred():
    e = [unit("nvidia-mig-manager.service", "started")]
    assert judge("mig-reconfiguration", e, cov(**JOURNAL)).verdict == "confirmed"
    kube = {"kube": {"node": {"labels": {"nvidia.com/mig.config.state": "pending"}}}}
    assert judge("mig-reconfiguration", [], {}, facts=kube).verdict == "inferred"
    assert judge("mig-reconfiguration", [], cov(**JOURNAL)).verdict == "excluded"


# -- package transaction and reboot --------------------------------------------------------------------
def test_a_driver_package_upgrade_in_the_window_is_confirmed_for_a_version_mismatch():
    up = ev("package.dpkg-action", source="dpkg", action="upgrade", package="libnvidia-compute-535:amd64",
            old_version="535.183.01-0ubuntu1", new_version="535.216.01-0ubuntu1")
    c = judge("package-transaction", [up], cov(dpkg=JOURNAL["journal"]), symptom="version-mismatch")
    assert c.verdict == "confirmed" and "libnvidia-compute-535" in c.reason


def test_a_zone_less_transaction_near_the_window_of_a_node_without_zone_is_inferred_only_with_the_mechanism_shown():
    up = Event(T("2026-09-02T10:00:00"), "dpkg", "package.dpkg-action", "upgrade", {
        "action": "upgrade", "package": "libnvidia-compute-535:amd64", "old_version": "1", "new_version": "2"},
        {"artifact": "packages/dpkg/dpkg.log", "line": 3}, flags=("tz-unknown",))
    c = judge("package-transaction", [up], {}, symptom="version-mismatch")
    assert c.verdict == "inferred" and "±14 h" in c.reason


def test_a_boot_inside_the_window_confirms_a_reboot_and_one_boot_spanning_it_excludes_it():
    boot = cov(boot=("2026-09-02T04:06:00", "2026-11-30T00:00:00"))
    assert judge("reboot", [], boot, symptom="unknown").verdict == "confirmed"
    span = cov(boot=("2026-01-01T00:00:00", "2026-11-30T00:00:00"))
    assert judge("reboot", [], span, symptom="unknown").verdict == "excluded"


@pytest.mark.parametrize("kind", sorted(RULES))
def test_every_rule_names_the_gap_when_its_source_covers_nothing(kind):
    c = judge(kind, [], {}, symptom="unknown", pods=())
    assert c.verdict == "undetermined" and (c.gaps or "No " in c.reason or "not" in c.reason), (kind, c)


def test_no_driver_module_at_collection_infers_the_driver_not_ready_and_a_covered_window_excludes_it():
    gone = {"host_gpu": {"module": {"loaded": False, "source": "/proc/driver/nvidia/version"}}}
    c = judge("driver-not-ready", [], {}, symptom="no-driver", facts=gone)
    assert c.verdict == "inferred" and "No NVIDIA kernel module was loaded at collection" in c.reason
    assert judge("driver-not-ready", [], cov(**JOURNAL), symptom="create-failed").verdict == "excluded"


def test_a_plugin_log_kept_from_before_the_window_without_a_marking_excludes_device_unhealthy():
    logs = {"podlogs": [{"namespace": "kube-system", "pod": "nvidia-device-plugin-x", "container": "nvidia-device-plugin-ctr",
                         "truncated": False, "first_line": {"at": "2026-09-01T00:00:00Z"}}]}
    c = judge("device-unhealthy", [], {}, symptom="device-unhealthy", facts=logs)
    assert c.verdict == "excluded" and "kept whole from before the window" in c.reason



def test_a_pod_with_several_containers_is_named_once_with_their_count():
    """Bench L's verdict said "ml/trainer-8 and ml/trainer-8 and ml/trainer-8: caught by the /dev/char trap" for
    three containers of one pod: a pod is named once per clause, with how many of its containers share it."""
    from forensics.findings.causes.reload import _grouped
    rows = [{"namespace": "ml", "pod": "trainer-8", "id": f"c{i}"} for i in range(3)] + [{"namespace": "ml", "pod": "t-9"}]
    said = _grouped([(rows[0], "already revoked"), (rows[1], "trapped"), (rows[2], "trapped"), (rows[3], "trapped")])
    assert said == "ml/trainer-8: already revoked; ml/trainer-8 (2 containers) and ml/t-9: trapped"
