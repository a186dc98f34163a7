"""The installable wheel: built from this checkout, installed outside it, and run through its console script, so a
module or data file missing from the package (task specs, BERTScore baselines) fails here, not on a user's machine."""
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wheel")
    # a copy without build leftovers: a stale *.egg-info would put files in the wheel that pyproject.toml forgot
    source = tmp / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", "*.egg-info", "build", "runs", ".dev", ".whl", "__pycache__", ".pytest_cache"))
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                            str(tmp / "dist"), str(source)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp / "dist").glob("icl_select_bench-*.whl")
    site = tmp / "site"
    got = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
                         capture_output=True, text=True)
    assert got.returncode == 0, got.stderr
    return wheel, site


def run_installed(site: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(site), "HF_HUB_OFFLINE": "1"}  # the wheel, not this checkout
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=600)


def test_the_wheel_holds_every_package_its_data_and_the_console_script(installed):
    wheel, _ = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    for package in ("bench", "methods", "dearicl", "reports", "bench/llm", "bench/tasks"):
        assert f"{package}/__init__.py" in names, package
    assert {"bench/tasks/specs/sst2.yaml", "bench/bertscore_baselines/all-MiniLM-L6-v2-zh.tsv",
            "methods/bm25.py", "dearicl/paired.py"} <= names
    assert not any(n.startswith(("studies/", "tests/", "runs/")) for n in names)  # code, not published data
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    assert "icl-bench = bench.cli:main" in zipfile.ZipFile(wheel).read(entry).decode()


def test_the_installed_console_script_plans_a_run_outside_the_checkout(installed, tmp_path, data_dir):
    _, site = installed
    where = run_installed(site, "-c", "import bench, methods; print(bench.__file__)", cwd=tmp_path)
    assert where.stdout.strip().startswith(str(site)), where
    plan = run_installed(site, str(site / "bin" / "icl-bench"), "run", "--dry-run", "--tasks", "rules,sst2",
                         "--methods", "knn,bm25,votek", "--llm", "gemma3-270m", "--n-test", "5", "--data-dir",
                         str(data_dir), cwd=tmp_path)
    assert plan.returncode == 0, plan.stderr
    assert "| votek" in plan.stdout and "| sst2" in plan.stdout and "nothing loaded" in plan.stdout
