"""Set up the sample node ``samples/node3-gpu`` (a host root) for the demo and the tests.

The journal is kept in git as Journal Export Format text (``node3-gpu.journal.export``) and built
into a real binary ``.journal`` with systemd-journal-remote here, at
``node3-gpu/var/log/journal/<machine-id>/system.journal`` (ignored by git).

The sample: node3-gpu, Asia/Seoul, Ubuntu 24.04 with systemd 255, a single boot since 2025-12-25.
- July incident: the pod's GPU was lost between 2026-07-11 12:34 and 2026-08-02 00:00 KST; the journal
  was rotated and starts 2026-07-17; apt/dpkg history reaches back to 2025-08 with nothing in the window.
- September incident: snapd's refresh requested a daemon-reload at 2026-09-02 13:05:13 KST and the
  trainer pod's readiness probe failed with "Failed to initialize NVML: Unknown Error" 14 s later.

Run ``python3 samples/build.py`` to (re)build the journal.
"""
from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from journalbuild import build_journal  # noqa: E402

ROOT = HERE / "node3-gpu"
EXPORT = HERE / "node3-gpu.journal.export"
MACHINE_ID = "5f1c0b9e7d3a4c21a8e6b2f4d9c1e370"
JOURNAL = ROOT / "var" / "log" / "journal" / MACHINE_ID / "system.journal"
#: the windows the demo passes with --incident (the September one comes from the journal itself)
INCIDENTS = ["2026-07-11T12:34+09:00..2026-08-02T00:00+09:00=july-outage"]


def ensure_journal(force: bool = False) -> Path:
    """Build the sample's binary journal when it is missing or older than the export text.
    Returns its path. Raises ``FileNotFoundError`` when systemd-journal-remote is not installed."""
    if force or not JOURNAL.exists() or JOURNAL.stat().st_mtime < EXPORT.stat().st_mtime:
        build_journal(EXPORT, JOURNAL)
    return JOURNAL


if __name__ == "__main__":
    print(ensure_journal(force=True))
