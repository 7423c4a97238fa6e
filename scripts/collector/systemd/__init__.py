"""A stand-in for systemd-python in the single-file collector (scripts/build-collector.py): only
``systemd.journal``, through the node's own libsystemd.so.0 with ctypes. Used when the zipapp runs on a
python3 without systemd-python; the real package, where importable, is used instead (see journal.py)."""
