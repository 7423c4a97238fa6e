"""Which containers and GPUs one incident is about, from that incident's own evidence (issue 26 item 4:
a cause is judged for the pods of the incident, never from a container elsewhere on the node).

The exposure rows (:mod:`forensics.findings.exposure`) are the node's containers as the evidence shows
them; :func:`rows` picks those of the incident's pods (``Scope.pods``, ``Scope.containers``), or every
GPU container of the node when the incident names none, and says which it did. The GPUs a pod holds come
from the kubelet's device-plugin checkpoint (collectors/kubelet ``device_checkpoint``) or the container's
``NVIDIA_VISIBLE_DEVICES``; a kernel line names a GPU by its PCI address, which the driver's
``NVRM: GPU at PCI:...: GPU-<uuid>`` line (kernel.nvrm ``gpu-uuid``) or nvidia-smi ties to its UUID.
Nothing here reads the host or the bundle.
"""
from __future__ import annotations

import re

from ..timeutil import parse_iso
from .verdicts import Evidence

_UUID = re.compile(r"^(?:GPU|MIG)-[0-9a-fA-F-]{8,}")


_GPU_UUID = re.compile(r"\bGPU-[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}\b")


def broke(incidents, exposed: dict) -> dict:
    """What broke, for the top of the report: ``{"pods": ["ns/name"], "containers": ["name (<12-hex id>)" or
    "<12-hex id>"], "gpus": ["GPU-<uuid>"]}``, the pods of the incidents and the containers the exposure shows
    broken (a container with no pod, Podman's or plain runc's, by its name where the evidence gave one and
    its short id), and the GPUs the incidents' symptoms and opening evidence name (by UUID), each sorted."""
    rows = exposed.get("containers") or []
    keys = {p for inc in incidents for p in inc.pods}
    keys |= {pod_key(r.get("namespace"), r.get("pod") or r.get("id")) for r in rows if r.get("broken")}
    texts = [str(inc.symptom or "") for inc in incidents]
    texts += [str(e.get("summary") or "") for inc in incidents for e in (inc.evidence or [])[:50] if isinstance(e, dict)]
    named = {str(r.get("id"))[:12]: r.get("container_name") for r in rows if r.get("container_name")}
    shorts = sorted({podless(k) for k in keys} - {None})
    return {"pods": sorted(k for k in keys if not podless(k)),
            "containers": [f"{named[s]} ({s})" if named.get(s) else s for s in shorts],
            "gpus": sorted({m for t in texts for m in _GPU_UUID.findall(t)})}


def pod_key(namespace, pod) -> str:
    """``namespace/name`` as the scope holds it; a container with no pod is ``/<its id>``."""
    return f"{namespace or ''}/{pod or '?'}"


def podless(key: str) -> str | None:
    """The short id (12 hex digits) of a :func:`pod_key` that names a container with no pod (``/<id>``), else None."""
    m = _PODLESS.fullmatch(str(key))
    return m.group(1)[:12] if m else None


def key_words(key: str) -> str:
    """A :func:`pod_key` as a sentence says it: ``pod ml/trainer-0``, or ``container 100885f10df5 (no pod)``."""
    short = podless(key)
    return f"container {short} (no pod)" if short else f"pod {key}"


_PODLESS = re.compile(r"/([0-9a-f]{12,64})")


def _gpu_row(r: dict) -> bool:
    return r.get("gpu_injection") not in ("none",)


def rows(ev: Evidence) -> tuple[list[dict], str, bool]:
    """``(rows, where, named)``: the exposure rows of the incident's pods or containers and a phrase for
    the sentence ("the incident's pod ml/trainer-0"); with ``named`` False the incident names no pod and
    the rows are every GPU container of the node (or of unknown injection) that existed in its window, said
    so. Rows of pods the incident names but the node no longer holds are simply absent (the list may be
    empty). :func:`select` picks them."""
    sc = ev.scope
    picked, later = select((ev.exposure or {}).get("containers") or [], sc.pods, sc.containers,
                           ev.window.end if ev.window is not None else None)
    if sc.pods or sc.containers:
        pods = sorted(p for p in sc.pods if not podless(p))
        names = pods or sorted({podless(p) for p in sc.pods} - {None} | {str(i)[:12] for i in sc.containers})
        shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        what = "pod" if pods else "container"
        return picked, f"the incident's {what}{'s' if len(names) != 1 else ''} {shown}", True
    if later:
        return picked, (f"the node's GPU containers that existed in the window (the incident names no pod; "
                        f"{later} created after it left out)"), False
    return picked, "the node's GPU containers (the incident names no pod)", False


def select(all_rows: list, pods, containers, end=None) -> tuple[list[dict], int]:
    """``(rows, left out)``: the exposure rows ``all_rows`` of ``pods`` (``namespace/name``) or ``containers``
    (runtime ids, or prefixes of 12 or more); when both are empty, every GPU container's row but those
    created after ``end`` (UTC; a container made after the window closed cannot be the one that broke in it),
    and how many were left out so. Used for an incident's Evidence and, from analysis.json, by the
    consistency check."""
    all_rows = [r for r in all_rows if isinstance(r, dict)]
    if pods or containers:
        ids = {str(c) for c in containers}
        return [r for r in all_rows if pod_key(r.get("namespace"), r.get("pod")) in pods or str(r.get("id")) in ids
                or any(str(r.get("id") or "").startswith(i) for i in ids if len(i) >= 12)], 0
    gpu = [r for r in all_rows if _gpu_row(r)]
    kept = [r for r in gpu if end is None or not ((t := _created(r)) and t > end)]
    return kept, len(gpu) - len(kept)


def _created(r: dict):
    try:
        return parse_iso(str(r["created"])) if r.get("created") else None
    except (ValueError, OverflowError):
        return None


def unassessed(ev: Evidence) -> str | None:
    """Why the node's containers could not be assessed at all (the exposure's ``reason``: no runtime state
    in the bundle, a dead node's disk), else ``None``."""
    exp = ev.exposure or {}
    return None if exp.get("assessed", False) else str(exp.get("reason") or "the containers were not assessed")


def norm_pci(addr) -> str | None:
    """A PCI address as ``dddd:bb:dd`` in lower case (the Xid line's form; sysfs adds ``.f``), or None."""
    m = re.match(r"^(?:([0-9a-fA-F]{4,8}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})", str(addr or "").strip())
    if not m:
        return None
    return f"{(m.group(1) or '0000')[-4:]}:{m.group(2)}:{m.group(3)}".lower()


def uuid_of_pci(events, facts: dict) -> dict[str, str]:
    """PCI address (:func:`norm_pci`) -> GPU UUID, from the driver's ``NVRM: GPU at PCI:...: GPU-<uuid>``
    kernel lines of ``events`` (the whole timeline) and nvidia-smi's answer when it ran (``facts``' host_gpu
    ``nvidia_smi``)."""
    out = {}
    for e in events:
        if e.kind == "kernel.nvrm" and e.attrs.get("uuid") and norm_pci(e.attrs.get("pci")):
            out[norm_pci(e.attrs.get("pci"))] = str(e.attrs["uuid"])
    smi = ((facts.get("host_gpu") or {}).get("nvidia_smi") or {})
    for g in smi.get("gpus") or []:
        if isinstance(g, dict) and g.get("uuid") and norm_pci(g.get("bus_id")):
            out.setdefault(norm_pci(g.get("bus_id")), str(g["uuid"]))
    return out


def node_gpus(ev: Evidence) -> list[str] | None:
    """The node's NVIDIA GPUs by PCI address (host_gpu ``pci``, display and 3D controllers), or None when
    the bundle does not show them."""
    pci = (ev.facts.get("host_gpu") or {}).get("pci")
    if not isinstance(pci, list):
        return None
    return sorted({a for p in pci if isinstance(p, dict) and str(p.get("class") or "").startswith(("0x0300", "0x0302"))
                   and (a := norm_pci(p.get("address")))})


def gpu_free(ev: Evidence) -> str | None:
    """The clause saying the node has no NVIDIA GPU, when the bundle shows it: sysfs was listed whole and holds
    no NVIDIA display or 3D controller (host_gpu ``pci``), and no container row holds a GPU; else ``None``
    (sysfs not read, or cut short: then nothing is known)."""
    h = ev.facts.get("host_gpu") or {}
    src = h.get("pci_source") or {}
    if src.get("status") != "listed" or src.get("cut") or not src.get("seen") or node_gpus(ev) != []:
        return None
    if any(_gpu_row(r) for r in (ev.exposure or {}).get("containers") or [] if isinstance(r, dict)):
        return None
    return (f"the node has no NVIDIA GPU (sysfs lists {src['seen']} PCI functions, none an NVIDIA display or 3D "
            "controller) and no container holds one")


def pod_gpus(ev: Evidence) -> tuple[set[str] | None, str]:
    """``(GPU UUIDs the incident's pods hold, where that was read)``: from the kubelet's device-plugin
    checkpoint entries of those pods, else their containers' ``NVIDIA_VISIBLE_DEVICES`` when it lists
    UUIDs; ``(None, why)`` when neither shows it ("all", an index, no checkpoint)."""
    sc = ev.scope
    if not (sc.pods or sc.containers):
        return None, "the incident names no pod"
    ck = ((ev.facts.get("kubelet") or {}).get("device_checkpoint") or {})
    held = {str(d) for e in ck.get("entries") or [] if isinstance(e, dict)
            and pod_key(e.get("namespace"), e.get("pod")) in sc.pods for d in e.get("device_ids") or []}
    if held:
        return held, f"the kubelet's device-plugin checkpoint ({ck.get('source') or 'kubelet_internal_checkpoint'})"
    ids = {str(c) for c in sc.containers}
    for c in ev.records():
        if pod_key(c.pod_namespace, c.pod) in sc.pods or str(c.id) in ids:
            nvd = str(c.env.get("NVIDIA_VISIBLE_DEVICES") or "")
            uuids = {v.strip() for v in nvd.split(",") if _UUID.match(v.strip())}
            held |= uuids
    if held:
        return held, "the container's NVIDIA_VISIBLE_DEVICES"
    return None, "neither the kubelet's device checkpoint nor the containers' NVIDIA_VISIBLE_DEVICES names its GPUs"
