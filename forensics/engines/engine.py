"""The shape of one container engine's entry in the registry (forensics/engines/__init__.py)."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Engine:
    """One container engine, as data.

    ``name``: as container records, stacks and remedies carry it (``"podman"``); ``title``: as a sentence
    writes it (``"Podman"``); ``scope_prefix``: of its containers' systemd scopes (``"libpod"``);
    ``cgroup_default``: ``{cgroup version (1, 2) or None (either): (driver, why)}``, the driver it uses when
    its setting is not given, with the upstream source; ``cgroup_setting``: where that setting lives, in
    words; ``marker``: a spec annotation ``(key, value)`` only this engine writes (``None``: none is
    decisive); ``pod_annotations``: ``(pod, namespace, container)`` annotation keys naming the Kubernetes
    pod of a container it runs (empty: it runs no pods); ``cdi_run``: the command that starts a container
    with a CDI device (``None``: CDI goes through Kubernetes, not a command)."""

    name: str
    title: str
    scope_prefix: str
    cgroup_default: dict = field(default_factory=dict)
    cgroup_setting: str = ""
    marker: tuple[str, str] | None = None
    pod_annotations: tuple[str, ...] = ()
    cdi_run: str | None = None

    def default_driver(self, version: int | None) -> tuple[str, str] | None:
        """``(driver, why)`` for cgroup ``version`` (1, 2 or None: unknown); None when the default depends
        on a version that is unknown."""
        return self.cgroup_default.get(None) or self.cgroup_default.get(version)
