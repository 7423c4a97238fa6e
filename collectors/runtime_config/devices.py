"""NVIDIA device nodes on the host: ``/dev/nvidia*`` and what ``/dev/char`` says of them, by lstat only.

Nothing under /dev is opened or followed (a symlink's target is read, never resolved), so a node
the host's author placed there cannot make this collector read a device.
"""
from __future__ import annotations

import os
import stat

from forensics import hostfs


def device_nodes(root, dev: str, dev_char: list[str] | None) -> list[dict]:
    """``/dev/nvidia*`` under ``root`` (and one level inside directories such as /dev/nvidia-caps), by
    lstat only: ``[{"path", "kind": c|b|dir|symlink|fifo|socket|regular, "major", "minor", "mode",
    "target", "dev_char": "/dev/char/M:m", "dev_char_exists": bool|None}]``. ``dev_char`` is the
    listing of /dev/char (``None`` when it could not be listed). Paths are as seen on the host."""
    out = []
    try:
        base = hostfs.resolve(root, dev)
        names = [n for n in os.listdir(base) if n.startswith("nvidia")]
    except OSError:
        return out
    for name in sorted(names)[:256]:
        entries = [(f"{dev}/{name}", base / name)]
        try:
            if stat.S_ISDIR(os.lstat(base / name).st_mode):
                entries += [(f"{dev}/{name}/{n}", base / name / n) for n in sorted(os.listdir(base / name))[:256]]
        except OSError:
            pass
        for shown, real in entries:
            try:
                st = os.lstat(real)
            except OSError:
                continue
            rec = {"path": shown, "kind": _kind(st.st_mode), "major": None, "minor": None,
                   "mode": f"{stat.S_IMODE(st.st_mode):04o}", "target": None}
            if rec["kind"] in ("c", "b"):
                rec["major"], rec["minor"] = os.major(st.st_rdev), os.minor(st.st_rdev)
            if rec["kind"] == "symlink":
                rec["target"] = os.readlink(real)
            if rec["kind"] == "c":
                rec["dev_char"] = f"/dev/char/{rec['major']}:{rec['minor']}"
                rec["dev_char_exists"] = None if dev_char is None else f"{rec['major']}:{rec['minor']}" in dev_char
            out.append(rec)
    return out


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISCHR, "c"), (stat.S_ISBLK, "b"), (stat.S_ISDIR, "dir"), (stat.S_ISLNK, "symlink"),
                       (stat.S_ISFIFO, "fifo"), (stat.S_ISSOCK, "socket"), (stat.S_ISREG, "regular")):
        if test(mode):
            return name
    return "other"
