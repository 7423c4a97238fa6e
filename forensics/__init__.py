"""gpu-forensics core: bundle, events, time handling, correlator and CLI (see ../shared/DESIGN.md)."""
__version__ = "0.1.0"
