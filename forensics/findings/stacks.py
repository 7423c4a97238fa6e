"""Which GPU stack the node runs, from evidence: the container engine(s), the device plugin's kind, the
containerised driver's root, and who uses the standalone ``nvidia-container-runtime-hook``.

What identifies each stack is docs/sources.md "GPU stacks" (cited below as "stacks.md N": 1 NVIDIA chart, 2 GPU
Operator, 4 HAMi, 5 Bottlerocket, 6 Docker, 7 CRI-O, 8 k3s / RKE2). Inputs are plain dicts: the
runtime_config Reading's ``runtime`` facts (with its ``stack`` entry), the container records of
collectors/containers/ (their ``engine`` key where h-engines' collector wrote it), the device plugin's
settings (:mod:`forensics.findings.device_plugin`) and the kube collector's ``facts["kube"]``. Every
conclusion carries the evidence it was drawn from; nothing seen is ``None``, never a guess.
"""
from __future__ import annotations

from ..engines import ENGINES, engine_of_record
from .record import Record

LEGACY_HOOK = "nvidia-container-runtime-hook"


def recognise(runtime: dict, containers: list[dict], dp: dict | None, kube: dict | None) -> dict:
    """The exposure's ``stack``: ``{"engine": "containerd"|"k3s"|"rke2"|"docker"|"crio"|"podman"|"runc"|None,
    "engines": [str] (every engine seen), "device_plugin": "nvidia-device-plugin"|"gpu-operator"|"hami"|
    "bottlerocket"|"none"|None, "driver_root": str|None, "plugin_pod": {"namespace", "pod"}|None,
    "hook_users": [str] (what runs the standalone
    hook), "docker": bool, "k3s_templates": [{"path", "directives"}], "k3s_config_dir": str|None,
    "engine_version": {"engine", "version", "basis"}|None (the Node's containerRuntimeVersion), "evidence": [str]}``. ``engine`` is the one the kubelet (or, with no kubelet seen, the GPU
    containers) use; ``None`` when nothing says. Raises nothing for missing keys."""
    runtime, kube, dp = runtime or {}, kube or {}, dp or {}
    st = runtime.get("stack") or {}
    ev: list[str] = []
    engines, engine = _engines(runtime, st, containers, kube, ev)
    plugin = _plugin(runtime, st, containers, dp, kube, ev)
    root = _driver_root(runtime, st, dp, ev)
    hooks = _hook_users(runtime, st, containers, engines)
    ev += [f"standalone hook user: {h}" for h in hooks]
    rancher = next((r for r in st.get("rancher") or [] if r.get("distro") == engine), None)
    rec = next((c for c in map(Record.of, containers) if dp.get("id") and c.id == dp.get("id")), None)
    return {"engine": engine, "engines": engines, "device_plugin": plugin, "driver_root": root,
            "plugin_pod": {"namespace": (rec and rec.pod_namespace) or (kube.get("device_plugin") or {}).get("namespace"),
                           "pod": dp.get("pod")} if dp.get("pod") else None,
            "hook_users": hooks, "docker": "docker" in engines,
            "k3s_templates": (rancher or {}).get("templates") or [],
            "k3s_config_dir": f"/var/lib/rancher/{engine}/agent/etc/containerd" if rancher else None,
            "engine_version": _reported_version(kube), "evidence": ev}


def _reported_version(kube: dict) -> dict | None:
    """``{"engine", "version", "basis"}`` of the engine the Node reports (``status.nodeInfo.containerRuntimeVersion``,
    ``cri-o://1.29.1``: the kubelet's own answer of the runtime it talks to), None when it reports none known."""
    ver = str((kube.get("node") or {}).get("container_runtime_version") or "")
    for n, e in ENGINES.items():
        if e.cri_runtime and ver.startswith(e.cri_runtime) and ver[len(e.cri_runtime):]:
            return {"engine": n, "version": ver[len(e.cri_runtime):], "basis": f"the Node's containerRuntimeVersion {ver}"}
    return None


def _engines(runtime, st, containers, kube, ev) -> tuple[list[str], str | None]:
    seen: dict[str, str] = {}

    def saw(engine, why):
        seen.setdefault(engine, why)
    ver = ((kube.get("node") or {}).get("container_runtime_version") or "")
    kubelet = next((n for n, e in ENGINES.items() if e.cri_runtime and ver.startswith(e.cri_runtime)), None)
    if kubelet:
        saw(kubelet, f"the Node reports containerRuntimeVersion {ver}")
    counts: dict[str, int] = {}
    for c in containers:
        if e := engine_of_record(c):
            counts[e] = counts.get(e, 0) + 1
    for e, n in sorted(counts.items(), key=lambda x: -x[1]):
        saw(e, f"{n} container record{'s' if n != 1 else ''} of {e}")
    ctd = runtime.get("containerd") or {}
    files = ctd.get("files") or []
    rancher = [r["distro"] for r in st.get("rancher") or [] if r.get("config")]
    for d in rancher:
        saw(d, f"/var/lib/rancher/{d}/agent/etc/containerd/config.toml exists (stacks.md 8)")
    if ctd and ctd.get("cri_table") and not ctd.get("cri_disabled"):
        saw("containerd", f"{', '.join(files)} configures containerd's CRI plugin")
    for n, e in ENGINES.items():  # the engines' own settings files, where they show the engine runs here
        conf = st.get(n)
        if e.settings and e.settings.shows_engine and isinstance(conf, dict):
            saw(n, e.settings.shows_engine.format(files=conf.get("source") or ", ".join(conf.get("files") or [])))
    if "docker" not in seen and ctd.get("cri_disabled"):
        saw("docker", f"{', '.join(files)} disables the CRI plugin, as dockerd's own containerd config does")
    engines = list(seen)
    ev += [f"engine {e}: {why}" for e, why in seen.items()]
    if kubelet == "containerd" and rancher:  # k3s / RKE2 report their embedded containerd
        kubelet = "k3s" if "k3s" in rancher else rancher[0]
    if kubelet:
        return engines, kubelet
    gpu = [e for c in containers if (e := engine_of_record(c)) and _gpu(c)]
    if gpu:
        top = max(set(gpu), key=gpu.count)
        return engines, (rancher[0] if top == "containerd" and rancher else top)
    for e in (*rancher, "crio" if st.get("crio") and not (ctd.get("cri_table") and not ctd.get("cri_disabled"))
              else None, "containerd" if "containerd" in seen else None, "docker" if "docker" in seen else None,
              "runc" if "runc" in seen else None):
        if e:
            return engines, e
    return engines, None


def _gpu(c: dict) -> bool:
    r = Record.of(c)
    return bool(r.env.get("NVIDIA_VISIBLE_DEVICES") not in (None, "", "void", "none") or _hooked(r))


def _hooked(r: Record) -> bool:
    """The container's spec has the standalone hook among its prestart hooks."""
    pre = (r.hooks or {}).get("prestart")
    return any(LEGACY_HOOK in _hook_text(h) for h in (pre if isinstance(pre, list) else []))


def _hook_text(h) -> str:
    return " ".join([str(h.get("path") or ""), *map(str, h.get("args") or [])]) if isinstance(h, dict) else str(h)


def _plugin(runtime, st, containers, dp, kube, ev) -> str | None:
    """The device plugin's kind (stacks.md summary table), the first that has evidence, most specific first."""
    img = str(dp.get("image") or "").lower()
    pod = str(dp.get("pod") or "").lower()
    ds = kube.get("device_plugin") or {}
    ds_images = " ".join(ds.get("images") or []).lower()
    labels = (kube.get("node") or {}).get("labels") or {}
    osr = st.get("os_release") or {}
    if st.get("bottlerocket") or st.get("bottlerocket_plugin_unit") or st.get("bottlerocket_settings") is not None:
        why = [w for w, ok in ((f"/etc/os-release ID={osr.get('ID')} VARIANT_ID={osr.get('VARIANT_ID')}",
                                st.get("bottlerocket")),
                               ("nvidia-k8s-device-plugin.service drop-in exec-start.conf", st.get("bottlerocket_plugin_unit")),
                               ("/etc/nvidia-k8s-device-plugin/settings.yaml", st.get("bottlerocket_settings") is not None))
               if ok]
        ev.append(f"device plugin bottlerocket (host service, stacks.md 5): {'; '.join(why)}")
        return "bottlerocket"
    hami = [w for w, ok in ((f"plugin image {img}", "projecthami" in img or "/hami:" in img),
                            (f"plugin pod {pod}", "hami" in pod),
                            (f"DaemonSet images {ds_images}", "projecthami" in ds_images)) if ok]
    if hami:
        ev.append(f"device plugin hami (stacks.md 4): {'; '.join(hami)}"
                  + ("; /usr/local/vgpu/libvgpu.so on the host" if st.get("hami_vgpu") else ""))
        return "hami"
    op = st.get("operator") or {}
    tk = runtime.get("nvidia_runtime") or {}
    ctd = runtime.get("containerd") or {}
    oper = [w for w, ok in (
        ("/run/nvidia/validations/driver-ready", op.get("driver_ready") is not None),
        ("/run/nvidia/validations/toolkit-ready", op.get("toolkit_ready")),
        ("/usr/local/nvidia/toolkit (the operator's toolkit install)", op.get("toolkit_dir")),
        (f"containerd's nvidia runtime is {ctd.get('nvidia_binary')}",
         str(ctd.get("nvidia_binary") or "").startswith("/usr/local/nvidia/")),
        (f"toolkit config {tk.get('source')}", str(tk.get("source") or "").startswith("/usr/local/nvidia/")),
        ("node labels nvidia.com/gpu.deploy.*", any(str(k).startswith("nvidia.com/gpu.deploy.") for k in labels)),
        (f"plugin DaemonSet {ds.get('namespace')}/{ds.get('name')}",
         ds.get("name") == "nvidia-device-plugin-daemonset" and ds.get("namespace") not in (None, "kube-system")))
        if ok]
    if oper:
        ev.append(f"device plugin gpu-operator (ClusterPolicy manages toolkit and plugin, stacks.md 2): {'; '.join(oper)}")
        return "gpu-operator"
    nv = [w for w, ok in ((f"plugin image {img}", "k8s-device-plugin" in img),
                          (f"plugin pod {pod}", "nvidia-device-plugin" in pod),
                          (f"DaemonSet images {ds_images}", "k8s-device-plugin" in ds_images)) if ok]
    if nv:
        ev.append(f"device plugin nvidia-device-plugin (chart or static manifest, stacks.md 1): {'; '.join(nv)}")
        return "nvidia-device-plugin"
    if dp.get("socket_mount") is False:  # named like a plugin, but not trusted (device_plugin.py)
        ev.append(f"device plugin unknown: {(dp.get('basis') or {}).get('device_plugin')}")
        return None
    if containers or ds:
        ev.append("device plugin: none seen among the container records or the kube answers")
        return "none"
    return None


def _driver_root(runtime, st, dp, ev) -> str | None:
    """Where the NVIDIA driver's files and nodes are: the GPU Operator's driver-ready file, then
    /run/nvidia/driver holding device nodes, then the toolkit's ``[nvidia-container-cli] root``, then
    the plugin's own NVIDIA_DRIVER_ROOT, then the host's /dev/nvidiactl; ``None`` when nothing says."""
    ready = (st.get("operator") or {}).get("driver_ready") or {}
    if ready.get("NVIDIA_DRIVER_ROOT"):
        root = "/" if ready.get("IS_HOST_DRIVER") == "true" else ready["NVIDIA_DRIVER_ROOT"]
        ev.append(f"driver root {root}: /run/nvidia/validations/driver-ready NVIDIA_DRIVER_ROOT="
                  f"{ready['NVIDIA_DRIVER_ROOT']} IS_HOST_DRIVER={ready.get('IS_HOST_DRIVER')}")
        return root
    if runtime.get("driver_root") not in (None, "/") and runtime.get("driver_root_devices"):
        ev.append(f"driver root {runtime['driver_root']}: NVIDIA device nodes under {runtime['driver_root']}/dev")
        return runtime["driver_root"]
    cli_root = (runtime.get("nvidia_runtime") or {}).get("cli_root")
    if cli_root:
        ev.append(f"driver root {cli_root}: [nvidia-container-cli] root in {runtime['nvidia_runtime'].get('source')}")
        return cli_root
    if str((dp.get("basis") or {}).get("NVIDIA_DRIVER_ROOT") or "").endswith("in the container's env"):
        ev.append(f"driver root {dp['driver_root']}: the device plugin's NVIDIA_DRIVER_ROOT")
        return dp["driver_root"]
    if any(d.get("path") == "/dev/nvidiactl" for d in runtime.get("host_devices") or []):
        ev.append("driver root /: /dev/nvidiactl is on the host")
        return "/"
    return None


def _hook_users(runtime, st, containers, engines) -> list[str]:
    """What starts GPU containers through the standalone ``nvidia-container-runtime-hook``, which refuses
    to run once the toolkit's mode is not legacy (toolkit cmd/nvidia-container-runtime-hook/main.go,
    ``assertModeIsLegacy`` in ``doPrestart``): CRI-O / podman hooks.d files, Bottlerocket's shimpei hook,
    Docker containers with the hook (``--gpus``), and a Docker daemon whose ``--gpus`` would use it."""
    out = [f"OCI hook file {h.get('source')} runs {h.get('path')}"
           + (" for every container" if h.get("always") else "")
           for h in runtime.get("oci_hooks") or [] if h.get("nvidia")]
    if st.get("shimpei_hook"):
        out.append("Bottlerocket's /etc/shimpei/nvidia-oci-hooks.json (prestart nvidia-container-runtime-hook)")
    for c in containers:
        e, r = engine_of_record(c), Record.of(c)
        if e in ENGINES and ENGINES[e].hook_user and _hooked(r):
            out.append(f"{e} container {str(r.id)[:12]} has the {LEGACY_HOOK} prestart hook")
    if "docker" in engines and not any(o.startswith("docker container") for o in out):
        out.append("the Docker daemon: containers it starts with --gpus get the standalone hook (stacks.md 6)")
    return out
