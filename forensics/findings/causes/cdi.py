"""CDI spec generation or injection failing: nvidia-ctk or the device plugin (``deviceListStrategy
cdi-*``) could not find the driver's libraries under the driver root it was given (``failed to locate
libcuda.so.535.183.06``: NVIDIA/nvidia-container-toolkit#735, NVIDIA/k8s-device-plugin#621), or
containerd could not resolve a requested CDI device (``unresolvable CDI devices nvidia.com/gpu=...``).
The container is not created (wordings in forensics/neighbours.py).
"""
from __future__ import annotations

from ..verdicts import Cause, Evidence, Mechanism, Rule, Window, coverage_of, explains, first_seen, symptom_lines, weigh

KIND = "cdi-spec-failure"
TITLE = "CDI spec generation or injection failing"
EXPLAINS = frozenset({"create-failed", "no-driver", "plugin-down", "unknown"})
SIGNATURES = ("cdi-libcuda-missing", "cdi-unresolvable")


def judge(window: Window, ev: Evidence) -> Cause:
    """confirmed: a CDI generation or resolution failure inside the window; excluded: the journal covers the
    window with no such line, or the symptom is a running pod's; undetermined: no source covers the window."""
    hits = symptom_lines(window, ev, SIGNATURES)
    h = (first_seen(hits, f"CDI could not make or resolve the GPU's devices: {hits[0].summary}") if hits
         else coverage_of(("journal",), ev, window, "holds no CDI generation or resolution failure"))
    m = explains(EXPLAINS, ev.scope, TITLE) or Mechanism(
        "shown" if hits else "fits", "Without a CDI spec that names the devices, the GPU request cannot be resolved "
        "and the container is not created.")
    return weigh(KIND, h, m)


def remedy(cause: Cause, ev: Evidence) -> dict:
    """Point CDI generation at the real driver root and regenerate the spec."""
    return {"what": "Set the driver root CDI generation uses to where the driver's libraries are (nvidiaDriverRoot / "
                    "NVIDIA_DRIVER_ROOT), regenerate the spec, and check that containerd's enable_cdi and cdi_spec_dirs "
                    "point at it",
            "commands": ["nvidia-ctk cdi list", "ls /etc/cdi /var/run/cdi",
                         "grep -n -E 'enable_cdi|cdi_spec_dirs' /etc/containerd/config.toml"],
            "why": "A CDI device the node's specs do not define cannot be injected.",
            "sources": ["https://github.com/NVIDIA/nvidia-container-toolkit/issues/735"]}


RULE = Rule(KIND, TITLE, EXPLAINS, ("journal", "podlogs", "kube"), judge, remedy, severity="config")
