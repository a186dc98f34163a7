"""The installable wheel and sdist: built with `python -m build` from this checkout, installed outside it, run through
the console script and end to end with a fake LLM, so a module or data file missing from the package (task specs,
BERTScore baselines) fails here, not on a user's machine."""
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """`python -m build` (wheel and sdist) of a copy of the checkout without build leftovers: a stale *.egg-info
    would put files in the wheel that pyproject.toml forgot."""
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", "*.egg-info", "build", "dist", "runs", ".dev", ".whl", "__pycache__", ".pytest_cache",
        "site", "studies"))
    made = subprocess.run([sys.executable, "-m", "build", "--wheel", "--sdist", "--no-isolation", "--outdir",
                           str(tmp / "dist"), str(source)], capture_output=True, text=True)
    assert made.returncode == 0, made.stderr[-3000:]
    (wheel,) = (tmp / "dist").glob("icl_select_bench-*.whl")
    (sdist,) = (tmp / "dist").glob("icl_select_bench-*.tar.gz")
    return tmp, wheel, sdist


def install(tmp: Path, artifact: Path, name: str) -> Path:
    """pip-installs a wheel or an sdist (its wheel built from it) into a fresh folder outside the checkout."""
    site = tmp / name
    got = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                          "--target", str(site), str(artifact)], capture_output=True, text=True)
    assert got.returncode == 0, got.stderr[-3000:]
    return site


@pytest.fixture(scope="module")
def installed(built):
    tmp, wheel, _ = built
    return wheel, install(tmp, wheel, "site")


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


def test_the_sdist_installs_and_its_console_script_runs(built, tmp_path):
    tmp, _, sdist = built
    names = tarfile.open(sdist).getnames()
    assert any(n.endswith("/pyproject.toml") for n in names) and any(n.endswith("/bench/cli.py") for n in names)
    assert not any("/studies/" in n for n in names)  # the published data stays in the repository
    site = install(tmp, sdist, "site-from-sdist")
    helped = run_installed(site, str(site / "bin" / "icl-bench"), "--help", cwd=tmp_path)
    assert helped.returncode == 0 and "run selectors on tasks with an LLM" in helped.stdout, helped.stderr


def test_the_installed_package_runs_a_fake_llm_end_to_end(installed, tmp_path, data_dir):
    """bench.evaluate of the installed package (not this checkout) with the tests' fake LLM: selection, prompts,
    scoring and the results dict, outside the repository."""
    _, site = installed
    code = (f"import sys; sys.path.append({str(ROOT / 'tests')!r})\n"
            "import bench, methods\n"
            f"assert bench.__file__.startswith({str(site)!r}) and methods.__file__.startswith({str(site)!r})\n"
            "from fakes import FakeBackend\n"
            "results = bench.evaluate(['zero-shot', 'knn'], 'gsm8k', FakeBackend(), n_test=3, n_val=2, pool_size=20,\n"
            f"                        max_new_tokens=8, data_dir={str(data_dir)!r}, no_progress=True)\n"
            "print(sorted((r['method'], r['n'], r['llm_calls']['inference']) for r in results['runs']))\n")
    ran = run_installed(site, "-c", code, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout.strip().splitlines()[-1] == "[('knn', 3, 3), ('zero-shot', 3, 3)]"
