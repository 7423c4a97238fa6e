#!/usr/bin/env python3
"""Write deploy/alerts/gpu-forensics.rules.yml and prometheusrule.yaml from their one home,
forensics/findings/alert_rules.py (the report's suggested rules come from the same groups).

usage: python3 deploy/alerts/generate.py   (from the checkout; prints the files written)
tests/test_alert_rules.py fails while the files in the tree differ from what this writes.
"""
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from forensics.findings.alert_rules import shipped_files  # noqa: E402

for name, text in shipped_files().items():
    (HERE / name).write_text(text, encoding="utf-8")
    print(HERE / name)
