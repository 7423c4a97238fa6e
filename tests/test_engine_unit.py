"""An engine is one unit (issue 29): an engine the tool has never heard of, declared as one ``Engine`` entry of the
registry (forensics/engines) with its settings, its discovery and its CDI steps, and nothing else changed, is
read by the runtime_config collector (its settings file and drop-in, its cgroup driver), found by container
discovery (its default root, the roots its settings file and its process name, a forged process refused) and
remedied by its own steps. The engine ("toyd") is made up; every reading goes through the real collectors."""
from __future__ import annotations

import os
from dataclasses import replace

import pytest

from collectors.containers import engines as discovery
from forensics import configdoc as cd
from forensics.engines import ENGINES
from forensics.engines.engine import Cdi, Discovery, Engine, Settings, flag
from forensics.findings import remedies, stack_remedies as sr
from test_stacks import node


def _settings(docs):
    merged = {}
    for d in docs:
        merged = cd.merge(merged, d, deep_plugins=False)
    return {"cgroup_manager": cd.text(cd.tab(merged.get("toy")).get("cgroup_manager")),
            "state": cd.text(cd.tab(merged.get("toy")).get("state"))}


def _driver(s):
    v = s["cgroup_manager"]
    return v, f"[toy] cgroup_manager = {v}" if v else "[toy] cgroup_manager not set: toyd's default (systemd) applies"


TOY = Engine(
    name="toy", title="Toyd", scope_prefix="toy",
    cgroup_default={None: ("systemd", "toyd's default")}, cgroup_setting="toy.toml [toy] cgroup_manager",
    settings=Settings(("/etc/toy/toy.toml",), "toml", "toy.toml", _settings, _driver, drop_ins="/etc/toy/toy.d",
                      suffixes=(".toml",)),
    discovery=Discovery(roots={"runc": ("/run/toy/runc",)}, commands={"toyd": ("toyd",)},
                        from_cmdline=lambda name, argv, cwd, where: [("runc", flag(argv, "state"), f"{where} toyd --state")],
                        from_settings=lambda path, doc: [("runc", cd.tab(doc.get("toy")).get("state"), f"{path} [toy] state")]),
    cdi=Cdi(lambda s: "toyd reads /etc/cdi", lambda s, hooks, version: [
        {"what": "Start GPU containers with toyd's CDI devices", "change": ["toy run --device nvidia.com/gpu=all x"],
         "needs": "the CDI spec above", "breaks": None, "why": "a CDI device enters linux.devices"}],
        "Start GPU containers with toyd's CDI devices"))


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setitem(ENGINES, "toy", TOY)
    return TOY


def test_a_new_engines_settings_and_cgroup_driver_are_read_from_its_registry_entry_alone(toy, tmp_path):
    facts = node(tmp_path, {"/etc/toy/toy.toml": '[toy]\ncgroup_manager = "systemd"\nstate = "/run/toy/a"\n',
                            "/etc/toy/toy.d/10-cgroupfs.toml": '[toy]\ncgroup_manager = "cgroupfs"\n',
                            "/etc/toy/toy.d/README": "not a drop-in\n"})
    rt = facts["runtime"]
    assert rt["stack"]["toy"] == {"cgroup_manager": "cgroupfs", "state": "/run/toy/a",
                                  "files": ["/etc/toy/toy.toml", "/etc/toy/toy.d/10-cgroupfs.toml"]}
    assert facts["engine_cgroup_driver"]["toy"] == {
        "value": "cgroupfs", "source": "/etc/toy/toy.toml, /etc/toy/toy.d/10-cgroupfs.toml: [toy] cgroup_manager = cgroupfs"}


def test_a_new_engines_roots_are_learnt_from_its_settings_and_its_own_processes_only(toy, tmp_path):
    root = tmp_path / "host"
    (root / "etc/toy").mkdir(parents=True)
    (root / "etc/toy/toy.toml").write_text('[toy]\nstate = "/run/toy/from-conf"\n')
    for pid, exe, uid in (("100", "/usr/bin/toyd", "0"), ("101", "/tmp/toyd-not", "0"), ("102", "/usr/bin/toyd", "1000")):
        d = root / "proc" / pid
        d.mkdir(parents=True)
        (d / "cmdline").write_bytes(b"\0".join([b"toyd", b"--state", f"/run/toy/p{pid}".encode()]) + b"\0")
        (d / "status").write_text(f"Name:\ttoyd\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")
        os.symlink(exe, d / "exe")
    roots = discovery.Roots(str(root))
    discovery._settings_roots(root, roots)
    discovery._proc_roots(root, roots, lambda: False)
    assert {p: s for p, s in roots.runc.items() if p.startswith("/run/toy")} == {
        "/run/toy/from-conf": ["/etc/toy/toy.toml [toy] state"], "/run/toy/p100": ["/proc/100/cmdline toyd --state"]}
    assert sorted(i.split(" ")[0] for i in roots.ignored) == ["/proc/101", "/proc/102"]
    # its working directory is not read: only an engine's Discovery.cwd_of names (containerd's shims) are
    seen = []
    os.symlink("/run/toy/cwd", root / "proc/100/cwd")
    with pytest.MonkeyPatch.context() as mp:
        for cwd_of, want in (((), [None]), (("toyd",), [None, "/run/toy/cwd"])):
            mp.setitem(ENGINES, "toy", replace(toy, discovery=replace(
                toy.discovery, cwd_of=cwd_of, from_cmdline=lambda name, argv, cwd, where: seen.append(cwd) or [])))
            discovery._proc_roots(root, discovery.Roots(str(root)), lambda: False)
            assert seen == want
    assert "its executable is '/tmp/toyd-not', not toyd's binary" in " ".join(roots.ignored)


def test_a_new_engine_is_remedied_by_its_own_cdi_steps(toy):
    st = {"engine": "toy", "device_plugin": "none", "hook_users": []}
    out = sr.by_command(toy, st, {"stack": {"toy": {"cgroup_manager": None}}}, False, "/")
    assert [(r["what"], r.get("follows")) for r in out] == [
        ("Generate a CDI spec for the GPUs", None), ("Start GPU containers with toyd's CDI devices", True)]
    assert out[0]["why"] == "toyd reads /etc/cdi" and out[1]["change"] == "toy run --device nvidia.com/gpu=all x"
    node_ = {"device_list_strategy": None, "pass_device_specs": None, "nvidia_runtime_mode": None}
    assert [r["what"] for r in remedies._for_stack(st, node_, {"stack": {}}, "/")] == [r["what"] for r in out]
