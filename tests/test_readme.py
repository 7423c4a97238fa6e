"""README.md is the user's page (issue 28 item 6): under 150 lines, starting with exactly the two set-up
commands, the second of which is the test command written once in scripts/test.sh, the line .ci/run runs."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]


def test_readme_is_short_and_starts_with_the_two_commands_ci_runs_the_second():
    text = (PROJECT / "README.md").read_text()
    assert len(text.splitlines()) < 150
    block = re.match(r"# gpu-forensics\n\n```sh\n(.*?)\n```\n", text, re.S)
    assert block and block.group(1).splitlines() == [
        "bash scripts/setup-debian.sh && .venv/bin/gpu-forensics demo --out demo-out", "bash scripts/test.sh"]
    # .ci/run's own extraction, run as CI runs it, up to the echo of the command it would run
    awk = re.search(r"cmd=\$\((awk .*?README\.md)\)", (PROJECT / ".ci/run").read_text()).group(1)
    got = subprocess.run(["bash", "-c", awk], cwd=PROJECT, capture_output=True, text=True, check=True).stdout
    assert got == "bash scripts/test.sh\n"
    test_sh = (PROJECT / "scripts/test.sh").read_text()
    assert "bash scripts/setup-debian.sh --test\n" in test_sh
    assert ".venv/bin/python -m pytest -q -rs" in test_sh and ".venv-deb/bin/python -m pytest -q -rs" in test_sh


def test_every_doc_the_readme_names_exists():
    text = (PROJECT / "README.md").read_text()
    for doc in set(re.findall(r"`(docs/[\w.-]+\.md)`", text)):
        assert (PROJECT / doc).is_file(), doc
