"""The documentation site builds with `mkdocs build --strict`: a broken link, a missing README section or a
docstring mkdocstrings cannot read fails here."""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None, reason="the docs extra is not installed")
def test_the_site_builds_strictly(tmp_path):
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                           cwd=ROOT, capture_output=True, text=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
                           timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    selectors = (tmp_path / "site" / "selectors" / "index.html").read_text()
    assert "Shark-NLP/OpenICL" in selectors and "KaiLv69/UDR" in selectors  # every module's docstring is there
