"""gpu-forensics core: bundle, artifacts, events and the kinds table, time handling, read-only host
access, the collector contract (``source``) and the redaction policy (``redact``). The core imports
nothing above it; ``findings`` and ``ops`` are the floors on top (see docs/design.md "One way through")."""
__version__ = "0.1.0"
