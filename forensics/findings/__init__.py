"""The findings floor: from Readings to the ``gpu-forensics/analysis/v1`` JSON.

The incident openers (``openers.OPENERS``), the cause rules (``verdicts.RULES``), the correlator that
iterates both, exposure (with the device plugin's settings and the remedies), the alert audit and the
analysis JSON (``analysis.build``). It reads only what collectors' ``read()`` returned (never the host,
never a collector module) and imports only the core (``forensics.*`` outside ``ops``).
"""
