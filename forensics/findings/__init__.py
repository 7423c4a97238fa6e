"""The findings floor: from Readings to the ``gpu-forensics/analysis/v1`` JSON.

The correlator (incidents and their windows), the cause rules (``verdicts.RULES``), exposure, the alert
audit and the analysis JSON. It reads only what collectors' ``read()`` returned (never the host, never a
collector module) and imports only the core (``forensics.*`` outside ``ops``).
"""
