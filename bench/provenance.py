"""What made a result: package version and git commit, library versions, platform and device."""
from __future__ import annotations

import platform
import subprocess
import sys
from functools import cache
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as package_version
from pathlib import Path

PACKAGE = "icl-select-bench"
LIBRARIES = ("torch", "transformers", "bert-score", "sentence-transformers", "numpy", "scipy", "openai",
             "llama-cpp-python")


def git_commit() -> str:
    """The checkout's commit (with '+dirty' when files differ from it), or '' outside a checkout."""
    here = Path(__file__).resolve().parent
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True, text=True,
                                timeout=5).stdout.strip()
        if not commit:
            return ""
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""
    return commit + ("+dirty" if dirty else "")


def installed(name: str) -> str | None:
    try:
        return package_version(name)
    except PackageNotFoundError:
        return None


def version() -> str:
    """'icl-select-bench 0.1.0 (git abc1234)'."""
    commit = git_commit()
    return f"{PACKAGE} {installed(PACKAGE) or '(not installed)'}" + (f" (git {commit})" if commit else "")


@cache  # the CPU does not change within a process; simulate asks once a run
def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo), or what `platform` knows of it."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def float_path() -> str:
    """What decides a CPU run's floats beyond its seed: the CPU, the instruction set torch dispatches to, torch's
    version. Two machines that differ here may part ways after many training steps (a seeded run is reproducible on
    its machine, not across machines)."""
    torch = sys.modules.get("torch")  # only when the run already loaded it
    kernels = f"{torch.backends.cpu.get_cpu_capability()}, torch {torch.__version__}" if torch else "torch not loaded"
    return f"{cpu_name()} ({platform.machine()}, {kernels})"


def environment() -> dict:
    """Versions and machine, for results.json's `meta`."""
    device = "cpu"
    if "torch" in sys.modules:  # only when the run already loaded it
        torch = sys.modules["torch"]
        if torch.cuda.is_available():
            device = f"cuda: {torch.cuda.get_device_name(0)}"
    return {"package": installed(PACKAGE), "git_commit": git_commit() or None,
            "python": platform.python_version(),
            "libraries": {name: installed(name) for name in LIBRARIES if installed(name)},
            "platform": platform.platform(), "machine": platform.machine(), "cpu": float_path(), "device": device}
