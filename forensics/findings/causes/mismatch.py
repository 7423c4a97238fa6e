"""A driver/library version mismatch: new NVIDIA user-space libraries (an unattended upgrade, a package
install) while the old kernel module stays loaded. NVML then fails with ``Driver/library version
mismatch``, nvidia-container-cli refuses to create GPU containers, and the kernel logs ``NVRM: API
mismatch: the client has the version X, but this kernel module has the version Y`` (docs/sources.md "NVIDIA kernel and driver wordings";
NVIDIA/k8s-device-plugin#1431, nvidia-docker#584). The fix is a reboot or a reload of the nvidia modules
on a drained node; holding the driver packages keeps it from coming back.

Evidence: the kernel's API-mismatch line, the library's own words in a pod or runtime log, and the host's
state at collection (host_gpu: the loaded module's version in /proc/driver/nvidia/version against the
user-space libraries' versions and the driver packages), dated by the transaction that changed the
driver packages.
"""
from __future__ import annotations

import re

from ...events import Event
from ...excerpt import excerpt
from ...timeutil import iso_z
from ..verdicts import (Cause, Evidence, Happened, Mechanism, Rule, Window, cite, coverage_of, explains, first_seen,
                        weigh)
from .commands import drain

KIND = "driver-version-mismatch"
TITLE = "a driver/library version mismatch"
EXPLAINS = frozenset({"version-mismatch", "no-driver", "create-failed", "device-unhealthy", "plugin-down", "unknown"})
#: NVIDIA driver packages (Debian/Ubuntu and RHEL names); the container toolkit's are not the driver
_DRIVER = re.compile(r"^(?:libnvidia-(?!container)[\w.+-]*|nvidia-(?!container)(?:driver|utils|kernel|dkms|compute|"
                     r"open|headless|fabricmanager|modprobe|persistenced|settings|firmware)[\w.+-]*|cuda-drivers[\w.+-]*"
                     r"|kmod-nvidia[\w.+-]*|xserver-xorg-video-nvidia[\w.+-]*)$")
_VERSION = re.compile(r"\b(\d{3}\.\d{1,3}(?:\.\d{1,3})?)\b")


def driver_packages(events: list[Event]) -> list[str]:
    """The NVIDIA driver packages ``events`` (package.* events) install, upgrade or remove, as
    ``name old -> new``, sorted; the container toolkit's packages are not counted."""
    out = set()
    for e in events:
        a = e.attrs
        if e.kind == "package.dpkg-action" and a.get("action") in ("install", "upgrade", "remove", "purge"):
            name = str(a.get("package") or "").split(":")[0]
            if _DRIVER.match(name):
                out.add(f"{name} {a.get('old_version') or '<none>'} -> {a.get('new_version') or '<none>'}")
        elif e.kind in ("package.transaction", "package.unattended-run"):
            for p in a.get("packages") or []:
                name = str(p.get("name") if isinstance(p, dict) else p).split(":")[0]
                if _DRIVER.match(name):
                    new = p.get("new") if isinstance(p, dict) else None
                    old = p.get("old") if isinstance(p, dict) else None
                    out.add(f"{name} {old or '<none>'} -> {new or '?'}" if new or old else name)
    return sorted(out)


def host_versions(ev: Evidence) -> tuple[str | None, list[str], str]:
    """``(loaded module version, user-space versions, where each was read)`` from the host_gpu fact."""
    h = ev.facts.get("host_gpu") or {}
    mod = (h.get("module") or {}) if isinstance(h.get("module"), dict) else {}
    us = (h.get("userspace") or {}) if isinstance(h.get("userspace"), dict) else {}
    versions = sorted({str(v) for v in us.get("versions") or []})
    where = f"module {mod.get('source') or 'not read'}; libraries {us.get('source') or 'not read'}"
    return (str(mod["version"]) if mod.get("version") else None), versions, where


def version_of(v: str) -> str:
    """The driver version a text names (``535.183.01`` of ``535.183.01-0ubuntu1`` or of a library's file
    name), or the text itself when it names none: what two versions are compared by."""
    m = _VERSION.search(v or "")
    return m.group(1) if m else (v or "")


def judge(window: Window, ev: Evidence) -> Cause:
    """confirmed: the kernel's ``API mismatch`` line or the library's ``Driver/library version mismatch``
    inside the window, or the host's module and libraries differing now with a driver package change
    inside the window; inferred: they differ now but nothing dates when they began to; excluded: a kernel
    log covers the window with no mismatch line while the host's versions agree, or the symptom is not
    one a mismatch produces (NVML says "Driver/library version mismatch", never "Unknown Error");
    undetermined: neither the kernel log nor the host's versions are in the bundle."""
    start, end = window
    loaded, userspace, where = host_versions(ev)
    differ = bool(loaded and userspace and any(version_of(u) != version_of(loaded) for u in userspace))
    lines = [e for e in ev.events if start <= e.at <= end and (
        e.kind == "kernel.api-mismatch" or (e.kind in ("journal.symptom", "container.log-symptom")
                                            and e.attrs.get("signature") == "nvml-version-mismatch"))]
    pkgs = [e for e in ev.events if start <= e.at <= end and e.kind.startswith("package.")
            and "tz-unknown" not in e.flags and driver_packages([e])]
    detail = {"loaded": loaded, "userspace": userspace, "where": where, "packages": driver_packages(pkgs)}
    if lines:
        h = first_seen(lines, "The driver and its libraries disagree: " + _said(lines[0]))
    elif differ and pkgs:
        h = Happened("yes", f"The driver packages changed inside the window ({', '.join(driver_packages(pkgs)[:4])}, "
                     f"first at {iso_z(pkgs[0].at)}) and the loaded module ({loaded}) still differs from the "
                     f"user-space libraries ({', '.join(userspace)}).", at=pkgs[0].at, evidence=[cite(e) for e in pkgs[:10]])
    elif differ:
        h = Happened("possibly", f"The loaded module ({loaded}) differs from the user-space libraries "
                     f"({', '.join(userspace)}) at collection, but nothing dates when they began to differ "
                     "(no mismatch line and no driver package change in the window).")
    else:
        h = coverage_of(("kernel", "kern.log", "kmsg"), ev, window, "logged no NVRM API mismatch")
        if h.state == "no" and not (loaded and userspace):
            h = Happened("partly", h.said + " The host's driver versions were not both read, so a mismatch outside "
                         "the kernel's words cannot be ruled out.", gaps=h.gaps)
    m = explains(EXPLAINS, ev.scope, TITLE)
    if m is None:
        m = (Mechanism("shown", f"The loaded kernel module is {loaded} and the user-space libraries are "
                       f"{', '.join(userspace)} ({where}).") if differ else
             Mechanism("fits", "A mismatch fails every NVML and CUDA call until the module is reloaded; "
                       + (f"the host's versions agree now ({loaded}), so it has been cured since (a reboot, a module "
                          "reload)." if loaded and userspace else f"the host's versions were not both read ({where}).")))
    return weigh(KIND, h, m, detail)


def _said(e: Event) -> str:
    a = e.attrs
    if e.kind == "kernel.api-mismatch" and a.get("client_version") and a.get("kernel_version"):
        return f"the client has version {a['client_version']} and the kernel module {a['kernel_version']}"
    return f"\"{excerpt(str(a.get('message') or e.summary), 200)}\""


def remedy(cause: Cause, ev: Evidence) -> dict:
    """Reboot (or drain and reload the modules), and hold the driver packages."""
    node = ev.node.get("hostname")
    return {"what": "Drain the node and reboot it (or unload and reload the nvidia kernel modules) so the module "
                    "matches the installed libraries; hold the driver packages so an unattended upgrade cannot do it "
                    "again",
            "commands": drain(node) + [
                "sudo systemctl reboot   # or: sudo systemctl stop nvidia-persistenced; sudo rmmod nvidia_uvm "
                "nvidia_drm nvidia_modeset nvidia; sudo modprobe nvidia",
                "cat /proc/driver/nvidia/version; ls /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.*",
                "sudo apt-mark hold $(dpkg-query -W -f '${Package}\\n' 'libnvidia-*' 'nvidia-*' | grep -v container)"],
            "why": "NVML refuses to work while the kernel module and its libraries differ; after a reboot \"the mismatch "
                   "error disappears\" (NVIDIA/k8s-device-plugin#1431).",
            "sources": ["https://github.com/NVIDIA/k8s-device-plugin/issues/1431",
                        "https://github.com/NVIDIA/nvidia-docker/issues/584"]}


RULE = Rule(KIND, TITLE, EXPLAINS, ("kernel", "kern.log", "host_gpu", "dpkg", "apt", "podlogs"), judge, remedy,
            severity="node")
