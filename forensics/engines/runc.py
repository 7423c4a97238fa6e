"""Plain runc (and the roots every engine's runc keeps its state in).

State: ``<root>/<id>/state.json`` or ``<root>/<namespace>/<id>/state.json`` (the containerd shims run runc
with ``--root <Root>/<namespace>``); a container found only here gets its engine from the bundle path its
state.json names. With ``--systemd-cgroup`` and no cgroupsPath runc names the scope ``runc-<id>.scope``
(runc's default ``system.slice:runc:<id>``)."""
from __future__ import annotations

from forensics.engines.engine import Discovery, Engine, Version, flag

#: runc's own default root, containerd's shims' and dockerd's (``<exec-root>/runtime-runc``)
DEFAULT_ROOTS = ("/run/runc", "/run/containerd/runc", "/run/docker/runtime-runc")
#: command names that take runc's global ``--root``: runc itself and the runtimes that hand their
#: arguments on to it (nvidia-container-runtime and its .cdi/.legacy variants)
COMMANDS = ("runc", "docker-runc", "nvidia-container-runtime", "nvidia-container-runtime.cdi",
            "nvidia-container-runtime.legacy")


def roots_from_cmdline(name: str, argv: list[str], cwd: str | None, where: str) -> list[tuple]:
    """The global ``--root`` of a runc (or runtime wrapping runc) command line."""
    return [("runc", flag(argv[1:], "root"), f"{where} {name} --root")]


ENGINE = Engine(
    name="runc", title="runc", scope_prefix="runc",
    version=Version(("runc", "--version"), r"runc version (\S+)", ("runc", "moby-runc")),
    cgroup_default={None: ("cgroupfs", "runc's default (cgroupfs unless runc runs with --systemd-cgroup; runc(8), "
                                       "runc docs/cgroup-v2.md)")},
    cgroup_setting="runc's --systemd-cgroup flag", scope_decides=False,
    discovery=Discovery(roots={"runc": DEFAULT_ROOTS}, commands={n: (n,) for n in COMMANDS},
                        from_cmdline=roots_from_cmdline))
