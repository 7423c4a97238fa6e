"""``gpu-forensics watch`` on a real systemd (tests/syslab.py, cgroup v1 hybrid layout), as a DaemonSet runs it.

One lab, one story, recorded by the module fixture and asserted by the tests:

1. the agent starts inside the namespace (the checkout through the overlay's lower layer, ``--out`` under the
   lab folder, ``--interval 3600`` so that only triggers sweep); its first sweep exports access 1 for the
   ``hook`` and ``spec`` containers, the hook one at risk;
2. a transient unit (``nvidia-driver-upgrade.service``) runs ``systemctl daemon-reload``: within 2 s of its
   end /metrics shows hook 0 and spec 1; one bundle is written under --out, ``verify`` accepts it and its
   analysis confirms the reload at PID 1's journal time;
3. a plain runc container with the legacy hook is started, the agent is SIGKILLed and started again: the
   counters and the last access per container come back from --out, no second bundle is written for the
   hook's loss, the new container is seen with access 1;
4. 20 ``systemctl daemon-reload`` issued within 2 s (systemd runs them one after the other): one sweep, one
   bundle, every reload counted once (D-Bus) as the journal shows;
5. on the system bus a look-alike ``Reloading`` signal from another client is not heard, systemd's is;
6. the spec container's init is killed, then a reload: the container is still listed by the runtime, its
   probe has no answer: a probe error counted, its access series withdrawn, the agent alive.

The watchdog is longer than test_syslab's (the story takes about a minute on 2 loaded cores).
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import threading
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

import syslab as S
from forensics.bundle import Bundle, verify
from forensics.ops.pipeline import analyze
from test_syslab import PROJECT, _close

DEADLINE_S = 300.0
PORT = 19464
#: run inside: the agent's system-bus follower, a look-alike ``Reloading`` signal sent by another client, then a
#: real reload; prints what the follower heard of each
BUS = r"""
import json, subprocess, sys, threading, time
sys.path.insert(0, %r)
from jeepney import DBusAddress, new_signal
from jeepney.io.blocking import open_dbus_connection
from forensics.ops.watch import triggers as T
got = []
sock, parser, owner = T._connect("/run/dbus/system_bus_socket", True)
threading.Thread(target=T._follow, args=(sock, parser, owner, lambda k, s, a: got.append(k), "bus"), daemon=True).start()
forger = open_dbus_connection("SYSTEM")
forger.send(new_signal(DBusAddress(T.SYSTEMD_PATH, interface=T.MANAGER), "Reloading", "b", (True,)))
time.sleep(1)
forged = list(got)
subprocess.run(["systemctl", "daemon-reload"], check=True, timeout=60)
time.sleep(1)
print(json.dumps({"forged": forged, "real": got[len(forged):], "owner": owner, "forger": forger.unique_name}))
"""
STORM = "for i in $(seq 20); do systemctl daemon-reload & sleep 0.1; done; wait"
#: run inside the namespace: a requester's reload, then /metrics polled every 20 ms until the hook container's
#: access is 0; prints the seconds from the reload's end (systemd-run --wait returned) to that moment
RELOAD_AND_WATCH = r"""
import subprocess, sys, time, urllib.request
subprocess.run(["systemd-run", "--unit=nvidia-driver-upgrade.service", "--wait", "--quiet", "/bin/systemctl",
                "daemon-reload"], check=True, timeout=60)
end = time.monotonic()
want = 'gpu_forensics_container_gpu_access{container="hook",'
while time.monotonic() < end + 20:
    text = urllib.request.urlopen("http://127.0.0.1:%s/metrics", timeout=5).read().decode()
    if any(line.startswith(want) and line.endswith(" 0.0") for line in text.splitlines()):
        print(time.monotonic() - end)
        break
    time.sleep(0.02)
"""


def _wait(pred, timeout: float):
    """syslab's poll, at the 0.1 s step these waits had (the agent's files and /metrics, not a lab shell)."""
    return S._wait(pred, timeout, step=0.1)


class Agent:
    """The watch agent inside the lab: started with nsenter, its stderr in ``<lab>/watch.log``."""

    def __init__(self, lab):
        self.lab, self.out, self.log = lab, lab.folder / "watch-out", lab.folder / "watch.log"
        self.ns_pid: int | None = None

    def start(self) -> None:
        before = self._lines()
        cmd = shlex.join([sys.executable, "-m", "forensics.ops.cli", "watch", "--root", "/", "--out", str(self.out),
                          "--listen", f"127.0.0.1:{PORT}", "--interval", "3600", "--keep-bundles", "5"])
        with open(self.log, "ab") as log:
            subprocess.Popen(["nsenter", "-t", str(self.lab.pid1()), "-m", "-u", "-i", "-n", "-p", "-C", "--", "env",
                              "-i", f"PATH={S.PATH}", "LANG=C.UTF-8", "/bin/sh", "-c",
                              f"cd {shlex.quote(str(PROJECT))} && exec {cmd}"],
                             stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        line = _wait(lambda: next((x for x in self._lines()[len(before):] if "; pid " in x), None), 30)
        assert line, self.log.read_text()[-2000:]
        self.ns_pid = int(line.rsplit("; pid ", 1)[1])

    def kill(self, sig: str = "KILL") -> None:
        self.lab.sh("kill", f"-{sig}", str(self.ns_pid), check=False)
        _wait(lambda: self.lab.sh("kill", "-0", str(self.ns_pid), check=False).returncode != 0, 10)

    def _lines(self) -> list[str]:
        try:
            return self.log.read_text().splitlines()
        except OSError:
            return []

    def sweeps(self, since: int = 0) -> list[str]:
        return [x for x in self._lines()[since:] if " sweep " in x and "): " in x]

    def metrics(self) -> dict:
        """``{(name, ((label, value), ...)): value}`` from /metrics (inside the namespace), {} when it does not answer."""
        p = self.lab.sh(sys.executable, "-c", "import urllib.request,sys; sys.stdout.write(urllib.request.urlopen("
                        f"'http://127.0.0.1:{PORT}/metrics', timeout=5).read().decode())", check=False)
        if p.returncode:
            return {}
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for fam in text_string_to_metric_families(p.stdout) for s in fam.samples}

    def state(self) -> dict:
        try:
            return json.loads((self.out / "watch-state.json").read_text())
        except (OSError, ValueError):
            return {}


def access(m: dict, cid: str, name: str = "gpu_forensics_container_gpu_access"):
    """The value of the container's series (None when it has none)."""
    return next((v for (n, labels), v in m.items() if n == name and dict(labels).get("id") == cid), None)


def value(m: dict, name: str):
    return m.get((name, ()))


def _bundles(agent: Agent) -> list[str]:
    return sorted(n for n in os.listdir(agent.out) if n.startswith("loss-"))


@pytest.fixture(scope="module")
def story(tmp_path_factory):
    """What the agent showed at each step of the module docstring's story."""
    lab = S.SysLab(tmp_path_factory.getbasetemp() / f"syslab-v1-watch-{os.getpid()}", "v1")
    dog = threading.Timer(DEADLINE_S, lab.down)
    dog.daemon = True
    dog.start()
    agent, rec = Agent(lab), {}
    hook, spec, storm = S.cid("hook"), S.cid("spec"), S.cid("storm")
    try:
        lab.up()
        lab.sh("ip", "link", "set", "lo", "up")
        agent.start()
        rec["start"] = _wait(lambda: (m := agent.metrics()) and access(m, hook) is not None and access(m, spec)
                             is not None and value(m, "gpu_forensics_last_sweep_timestamp_seconds") and m, 60)
        # 2. a requester's reload
        out = lab.sh(sys.executable, "-c", RELOAD_AND_WATCH % PORT, timeout=90).stdout
        rec["latency_s"] = float(out) if out.strip() else None
        rec["after"] = agent.metrics()
        rec["loss_state"] = _wait(lambda: (s := agent.state()).get("losses") and not s.get("pending") and s, 120)
        rec["bundles_1"] = _bundles(agent)
        rec["journal_reloads"] = lab.sh("journalctl", "-q", "--no-pager", "-o", "json", "_PID=1",
                                        "MESSAGE=Reloading.").stdout.splitlines()
        # 3. kill + restart
        lab.start_runc("storm")
        rec["before_kill"] = agent.metrics()
        agent.kill()
        agent.start()
        rec["after_restart"] = _wait(lambda: (m := agent.metrics()) and value(m, "gpu_forensics_last_sweep_timestamp_seconds")
                                     > value(rec["before_kill"], "gpu_forensics_last_sweep_timestamp_seconds") and m, 60)
        rec["bundles_2"] = _bundles(agent)
        # 4. the storm
        mark = len(agent._lines())
        t0 = time.monotonic()
        lab.sh("systemd-run", "--unit=reload-storm.service", "--wait", "--quiet", "/bin/sh", "-c", STORM, timeout=120)
        rec["storm_s"] = time.monotonic() - t0
        rec["after_storm"] = _wait(lambda: (m := agent.metrics()) and access(m, storm) == 0 and m, 90)
        _wait(lambda: len(_bundles(agent)) == 2 and not agent.state().get("pending"), 120)
        time.sleep(3)  # past the debounce: a second sweep would have run by now
        rec["storm_sweeps"] = agent.sweeps(mark)
        rec["bundles_3"] = _bundles(agent)
        rec["storm_state"] = agent.state()
        rec["storm_journal"] = len(lab.sh("journalctl", "-q", "--no-pager", "-o", "cat", "_PID=1",
                                          "MESSAGE=Reloading.").stdout.splitlines())
        rec["storm_metrics"] = agent.metrics()
        # the system bus: only systemd's own signal is heard
        rec["bus"] = json.loads(lab.sh(sys.executable, "-c", BUS % str(PROJECT), timeout=90).stdout)
        # 5. a container that vanishes
        init = lab.read(f"/run/containerd/io.containerd.runtime.v2.task/{S.NS}/{spec}/init.pid").strip()
        lab.sh("kill", "-9", init)
        errors = value(rec["storm_metrics"], "gpu_forensics_probe_errors_total")
        lab.reload()
        rec["vanished"] = _wait(lambda: (m := agent.metrics()) and
                                value(m, "gpu_forensics_probe_errors_total") > errors and m, 30)
        rec["vanished_log"] = agent.sweeps()[-1]
        rec["log"] = agent.log.read_text()
        yield rec
    finally:
        if agent.ns_pid and lab.pid1():
            agent.kill()
        _close(lab, dog)


def test_first_sweep_sees_both_gpu_containers_with_access(story):
    m = story["start"]
    assert access(m, S.cid("hook")) == 1 and access(m, S.cid("spec")) == 1
    assert access(m, S.cid("hook"), "gpu_forensics_container_at_risk") == 1
    assert access(m, S.cid("spec"), "gpu_forensics_container_at_risk") == 0
    labels = dict(next(lb for (n, lb), _ in m.items() if n == "gpu_forensics_container_gpu_access"
                       and dict(lb)["id"] == S.cid("hook")))
    assert labels == {"namespace": "default", "pod": "gpu-pod", "container": "hook", "id": S.cid("hook")}
    assert value(m, "gpu_forensics_daemon_reloads_total") == 0
    assert m[("gpu_forensics_build_info", (("version", "0.1.0"),))] == 1


def test_a_reload_cuts_the_hook_container_off_within_two_seconds(story):
    m = story["after"]
    assert access(m, S.cid("hook")) == 0 and access(m, S.cid("spec")) == 1
    assert story["latency_s"] is not None and story["latency_s"] <= 2.0, story["latency_s"]
    assert value(m, "gpu_forensics_daemon_reloads_total") == 1
    pid1 = json.loads(story["journal_reloads"][0])
    # the D-Bus signal arrives as PID 1 logs "Reloading.": within a second of journald's stamp
    assert abs(value(m, "gpu_forensics_last_reload_timestamp_seconds") - int(pid1["__REALTIME_TIMESTAMP"]) / 1e6) < 1
    assert "D-Bus: following systemd's Reloading signal on /run/systemd/private" in story["log"]


def test_one_verified_bundle_whose_analysis_confirms_the_reload(story):
    st = story["loss_state"]
    assert story["bundles_1"] == [st["losses"][0]["name"]]
    assert st["losses"][0]["ids"] == [S.cid("hook")] and st["losses"][0]["verified"] is True
    path = st["losses"][0]["path"]
    assert verify(path) == []
    b = Bundle.open(path)
    assert b.manifest["incidents"][0]["label"] == "watch: GPU access lost (hook)"
    a = analyze(b)
    pid1 = json.loads(story["journal_reloads"][0])
    at = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(int(pid1["__REALTIME_TIMESTAMP"]) // 10**6))
    reloads = [c for i in a["incidents"] for c in i["causes"] if c["kind"] == "daemon-reload"]
    assert reloads and {c["verdict"] for c in reloads} == {"confirmed"}
    assert {c["at"][:19] for c in reloads} == {at}
    assert f"]: bundle {path} verified (" in story["log"]


def test_kill_and_restart_keep_the_state(story):
    before, after = story["before_kill"], story["after_restart"]
    for name in ("gpu_forensics_daemon_reloads_total", "gpu_forensics_bundles_written_total",
                 "gpu_forensics_last_reload_timestamp_seconds"):
        assert value(after, name) == value(before, name), name
    assert value(after, "gpu_forensics_bundles_written_total") == 1
    assert story["bundles_2"] == story["bundles_1"]       # no second bundle for the hook's loss
    assert access(after, S.cid("hook")) == 0 and access(after, S.cid("storm")) == 1
    assert access(after, S.cid("storm"), "gpu_forensics_container_at_risk") == 1


def test_a_reload_storm_is_one_sweep_and_one_bundle(story):
    assert len(story["storm_sweeps"]) == 1, story["storm_sweeps"]
    assert len(story["bundles_3"]) == 2 and story["bundles_3"][:1] == story["bundles_1"]
    st = story["storm_state"]
    assert st["losses"][-1]["ids"] == [S.cid("storm")] and st["losses"][-1]["verified"] is True
    m = story["storm_metrics"]
    assert value(m, "gpu_forensics_bundles_written_total") == 2
    # every reload counted once: as many as PID 1 logged "Reloading." (1 before, 20 in the storm)
    assert value(m, "gpu_forensics_daemon_reloads_total") == story["storm_journal"] == 21


def test_a_vanished_container_is_an_error_counted_not_a_crash(story):
    m = story["vanished"]
    assert m, "the agent stopped answering"
    assert access(m, S.cid("spec")) is None               # no answer: no series, not the last value
    assert access(m, S.cid("hook")) == 0
    assert "no probe answer" in story["vanished_log"] and S.cid("spec")[:12] in story["vanished_log"]


def test_on_the_system_bus_only_systemds_own_signal_is_heard(story):
    bus = story["bus"]
    assert bus["owner"].startswith(":") and bus["forger"] != bus["owner"]
    assert bus["forged"] == []
    assert bus["real"] == ["reload-start", "reload-end"]
