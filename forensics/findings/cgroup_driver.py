"""Which cgroup driver runs each container, from the best evidence for that container, with its source.

Order (issue 14 item 1; the house rule "evidence beats defaults"):

1. ``evidence``: the container's own record, ``cgroup.driver`` with ``cgroup.driver_source`` (runc's
   state.json, the cgroup path shape ``*.slice:prefix:id`` / ``.slice/...scope``, containerd's options.json
   ``SystemdCgroup``; collectors/containers). A record of an older version has the driver without its source.
2. ``engine config``: the engine's own setting (the runtime_config fact ``engine_cgroup_driver``:
   containerd's CRI ``SystemdCgroup``, Docker's daemon.json ``exec-opts native.cgroupdriver``, CRI-O's
   ``cgroup_manager``). Without that fact (a bundle of an older version) containerd's is the global
   ``systemd_cgroup`` fact with its ``systemd_cgroup_basis``. containerd's CRI setting applies to the CRI's
   namespace ``k8s.io`` only: its docs/cri/config.md says the CRI section is "not recognized by other
   containerd clients such as ctr, nerdctl, and Docker/Moby".
3. ``default``: the engine's default for the cgroup version (:attr:`forensics.engines.Engine.cgroup_default`,
   in each engine's module), worded "assumed: ...",
   never a fact: it may put a container at risk, never make it broken on its own.
4. ``unknown``: nothing above applies (the engine or, for Docker, the cgroup version is unknown).

Nothing here reads the host or the bundle.
"""
from __future__ import annotations

from forensics.engines import ENGINES as _TABLE, engine_of_record, title
from forensics.engines.containerd import CRI_NAMESPACE

DRIVERS = ("systemd", "cgroupfs")
ENGINES = tuple(_TABLE)


def engine_of(c: dict) -> str | None:
    """The engine of the registry that runs container record ``c``
    (:func:`forensics.engines.engine_of_record`); ``None`` when unknown or not in the registry (k3s and
    RKE2 are containerd's)."""
    e = engine_of_record(c)
    return e if e in ENGINES else None


def decide(c: dict, engines: dict | None, runtime: dict) -> dict:
    """The cgroup driver of container record ``c``: ``{"driver": "systemd"|"cgroupfs"|None, "source": str,
    "basis": "evidence"|"engine config"|"default"|"unknown", "engine": str|None, "conflict": str|None}``.

    ``engines``: the runtime_config fact ``engine_cgroup_driver`` (``{engine: {"value", "source"}}``; value
    None: the config was seen and does not set it) or ``None`` when the bundle has no such fact;
    ``runtime``: ``facts["runtime"]`` (its ``systemd_cgroup`` / ``systemd_cgroup_basis`` stand in for
    containerd's entry when ``engines`` is None). ``conflict`` says when the record's evidence and the
    engine's config disagree (the evidence is kept). Raises nothing for missing keys."""
    engine = engine_of(c)
    cg = c.get("cgroup") if isinstance(c.get("cgroup"), dict) else {}
    seen, value, cfg = _config(engine, c, engines, runtime or {})
    if cg.get("driver") in DRIVERS:
        source = cg.get("driver_source") if "driver_source" in cg else \
            "the container's runc state or cgroup path (source not recorded: a bundle of an older version)"
        conflict = (f"the container's own evidence says {cg['driver']} ({source}), but {cfg} says {value}"
                    if seen and value in DRIVERS and value != cg["driver"] else None)
        return _out(cg["driver"], source or "the container's record", "evidence", engine, conflict)
    if seen and value in DRIVERS:
        return _out(value, cfg, "engine config", engine)
    if seen is None:
        return _out(None, cfg, "unknown", engine)
    version = cg.get("version") if cg.get("version") in (1, 2) else None
    default = _TABLE[engine].default_driver(version) if engine in _TABLE else None
    if default is None:
        why = ("the engine that runs it is unknown" if engine is None else
               f"{title(engine)}'s default depends on the cgroup version, which is unknown")
        return _out(None, f"unknown: {why}" + (f"; {cfg} does not set it" if seen else ""), "unknown", engine)
    driver, why = default
    return _out(driver, f"assumed: {why}" + (f"; {cfg} does not set it" if seen else
                                              f"; {title(engine)}'s config was not seen"), "default", engine)


def _out(driver, source, basis, engine, conflict=None) -> dict:
    return {"driver": driver, "source": source, "basis": basis, "engine": engine, "conflict": conflict}


def _config(engine: str | None, c: dict, engines: dict | None, runtime: dict) -> tuple[bool | None, str | None, str]:
    """``(seen, value, source)`` of the engine's own setting: seen True (value a driver, or None: not set),
    False (not seen: the default applies), None (the setting does not apply to this container: unknown)."""
    if engine is None:
        return False, None, ""
    if engine == "containerd" and c.get("namespace") not in (None, CRI_NAMESPACE):
        return None, None, (f"unknown: containerd namespace {c.get('namespace')} is not the CRI's ({CRI_NAMESPACE}), "
                            "so the CRI plugin's SystemdCgroup does not apply (ctr and nerdctl set the driver "
                            "per client)")
    if engines is not None:
        ent = engines.get(engine)
        if not isinstance(ent, dict):
            return False, None, ""
        value = ent.get("value") if ent.get("value") in DRIVERS else None
        return True, value, str(ent.get("source") or f"{title(engine)}'s config")
    if engine != "containerd":
        return False, None, ""
    sc, basis = runtime.get("systemd_cgroup"), str(runtime.get("systemd_cgroup_basis") or "")
    if isinstance(sc, bool) and basis.startswith("config"):
        return True, "systemd" if sc else "cgroupfs", f"containerd's SystemdCgroup={str(sc).lower()} ({basis})"
    if isinstance(sc, bool):
        return True, None, f"containerd's config ({basis})"
    if (runtime.get("containerd") or {}).get("cri_disabled"):
        return None, None, basis or "unknown: containerd's CRI plugin is disabled"
    return False, None, ""
