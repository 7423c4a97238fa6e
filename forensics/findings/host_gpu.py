"""The report's "Host GPU state" section: the loaded driver against its user-space libraries, the node's
GPUs with the Xids and losses the kernel (and DCGM, and the device plugin) logged for each, and the fabric
manager, from the host_gpu fact (collectors/nvidia_host) and the kernel events. Facts only: the verdicts
are the cause rules'.
"""
from __future__ import annotations

from .. import xid as catalog
from ..events import Coverage, Event
from ..timeutil import iso_z
from . import scope as S
from .causes.gpu import KERNEL_SOURCES
from .causes.mismatch import version_of

_FAULTS = ("kernel.xid", "kernel.gpu-lost", "metrics.xid")


def summary(facts: dict, events: list[Event], coverage: dict[str, Coverage]) -> dict:
    """``{"collected": bool, "driver": {"loaded", "version", "kind", "source", "userspace", "userspace_source",
    "packages", "match"}, "gpus": [{"pci", "uuid", "runtime_status", "xids": [{"xid", "mnemonic", "scope",
    "immediate", "count", "first", "last", "source"}], "lost"}], "xids_unplaced": [...], "fabric_manager",
    "nvswitch", "kernel_log": [{"source", "start", "end", "reason"}]}``. ``match`` is True/False when both
    the module's and the libraries' versions were read, else None. Raises nothing for missing keys."""
    h = facts.get("host_gpu") if isinstance(facts.get("host_gpu"), dict) else {}
    mod = h.get("module") if isinstance(h.get("module"), dict) else {}
    us = h.get("userspace") if isinstance(h.get("userspace"), dict) else {}
    versions = sorted({str(v) for v in us.get("versions") or []})
    loaded = mod.get("version")
    match = (all(version_of(v) == version_of(str(loaded)) for v in versions) if loaded and versions else None)
    uuid = S.uuid_of_pci(events, facts)
    gpus: dict[str, dict] = {}
    for p in h.get("pci") or []:
        if isinstance(p, dict) and (a := S.norm_pci(p.get("address"))):
            gpus[a] = {"pci": p.get("address"), "uuid": uuid.get(a), "class": p.get("class"),
                       "runtime_status": p.get("runtime_status"), "xids": {}, "lost": False}
    unplaced: dict = {}
    for e in events:
        if e.kind not in _FAULTS or "same-line" in e.flags:
            continue
        a = S.norm_pci(e.attrs.get("pci"))
        g = gpus.setdefault(a, {"pci": e.attrs.get("pci"), "uuid": uuid.get(a), "class": None, "runtime_status": None,
                                "xids": {}, "lost": False}) if a else None
        if e.kind == "kernel.gpu-lost" or e.attrs.get("xid") == 79:
            if g is not None:
                g["lost"] = True
        n = e.attrs.get("xid")
        if not isinstance(n, int):
            continue
        bucket = g["xids"] if g is not None else unplaced
        ent = catalog.lookup(n)
        x = bucket.setdefault(n, {"xid": n, "mnemonic": ent.mnemonic, "scope": ent.scope, "immediate": ent.immediate,
                                  "count": 0, "first": iso_z(e.at), "last": None, "source": e.source})
        x["count"] += 1
        x["last"] = iso_z(e.at)
    out_gpus = [{**g, "xids": sorted(g["xids"].values(), key=lambda x: x["xid"])} for g in gpus.values()]
    return {"collected": bool(h), "driver": {"loaded": mod.get("loaded"), "version": loaded, "kind": mod.get("kind"),
                                             "source": mod.get("source"), "userspace": versions,
                                             "userspace_source": us.get("source"), "packages": h.get("packages") or {},
                                             "match": match},
            "gpus": sorted(out_gpus, key=lambda g: str(g["pci"])), "xids_unplaced": sorted(unplaced.values(),
                                                                                          key=lambda x: x["xid"]),
            "fabric_manager": h.get("fabric_manager"), "nvswitch": h.get("nvswitch"),
            "kernel_log": [{"source": n, "start": iso_z(c.start), "end": iso_z(c.end), "reason": c.reason}
                           for n in KERNEL_SOURCES if (c := coverage.get(n))]}
