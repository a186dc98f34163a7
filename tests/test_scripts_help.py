"""Every script answers --help with its usage and does nothing else (no run, no deleted folder, no written file)."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHELL = sorted(p for p in (ROOT / "scripts").glob("*.sh") if not p.name.startswith("_"))
PYTHON = sorted((ROOT / "scripts").glob("*.py"))


@pytest.mark.parametrize("script", SHELL, ids=lambda p: p.name)
def test_a_shell_script_prints_its_comment_for_help_and_runs_nothing(script, tmp_path):
    # a copy in an empty project: without the --help guard the script would run there and fail (no .venv)
    (tmp_path / "scripts").mkdir()
    for name in (script.name, "_help.sh"):
        shutil.copy(ROOT / "scripts" / name, tmp_path / "scripts" / name)
    marker = tmp_path / "runs" / "smoke" / "keep"
    marker.parent.mkdir(parents=True)
    marker.write_text("a user's earlier run")
    done = subprocess.run(["bash", str(tmp_path / "scripts" / script.name), "--help"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    first = script.read_text().splitlines()[1].lstrip("# ")
    assert done.stdout.splitlines()[0] == first and done.stderr == ""
    assert marker.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["runs", "scripts"]


@pytest.mark.parametrize("script", PYTHON, ids=lambda p: p.name)
def test_a_python_script_prints_its_usage_for_help_and_writes_nothing(script):
    before = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True).stdout
    done = subprocess.run([sys.executable, str(script), "--help"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and done.stdout.startswith("usage:"), done.stderr[-500:]
    assert subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True).stdout == before
