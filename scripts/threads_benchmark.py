"""How fast a small run is under each CPU-thread choice, alone and beside another busy process.

Each choice runs a fresh process (OpenMP reads its settings at start): a small `python -m bench` run on `rules`
with the embedded model. "Beside" starts a neighbour first: a second run of the same workload, with torch's
default threads, in a loop, the way a second job on a shared machine or CI runner would be. Reports seconds and
each choice's ratio to its own time alone (a measurement, never an assertion), as JSON and a table.

    python scripts/threads_benchmark.py [--out runs/threads-benchmark] [--cap 600]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# the run measured: every torch-heavy stage (encoder, model load, selection, answers) at a small scale
WORKLOAD = ["-m", "bench", "--tasks", "rules", "--methods", "zero-shot,few-shot,knn", "--n-test", "24", "--n-val", "4",
            "--pool-size", "60", "--k", "4", "--temperature", "0", "--max-new-tokens", "16", "--no-progress"]
CLEAR = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY", "BENCH_THREADS")


def choices(cores: int) -> dict[str, dict[str, str]]:
    """Environment (and --threads) of each choice: torch's default (every core, OpenMP's active wait), one thread,
    every core with a passive wait, and the suite's default (`--threads auto`)."""
    return {"torch default (active wait)": {"OMP_WAIT_POLICY": "ACTIVE", "BENCH_THREADS": str(cores)},
            "one thread": {"BENCH_THREADS": "1"},
            f"{cores} threads, passive wait": {"OMP_WAIT_POLICY": "PASSIVE", "BENCH_THREADS": str(cores)},
            "the default (--threads auto)": {}}


def environment(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in CLEAR}
    return {**env, "HF_HUB_OFFLINE": "1", **extra}


def timed_run(extra: dict[str, str], cap: float) -> float | None:
    """Seconds of one workload run (None past `cap`)."""
    with tempfile.TemporaryDirectory() as out:
        threads = extra.get("BENCH_THREADS")
        command = [sys.executable, *WORKLOAD, "--out", out + "/run"] + (["--threads", threads] if threads else [])
        env = environment({k: v for k, v in extra.items() if k != "BENCH_THREADS"})
        began = time.perf_counter()
        try:
            subprocess.run(command, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=cap)
        except subprocess.TimeoutExpired:
            return None
        return time.perf_counter() - began


def neighbour() -> subprocess.Popen:
    """The busy process beside: the same workload in a loop, torch's default threads and wait policy."""
    folder = tempfile.mkdtemp()
    loop = (f"while true; do {shlex_join([sys.executable, *WORKLOAD])} --out {folder}/run-$RANDOM > /dev/null 2>&1; "
            f"rm -rf {folder}/run-*; done")
    # another torch program as torch starts it (active wait, every core): `python -m bench` alone would be passive
    return subprocess.Popen(["bash", "-c", loop], cwd=ROOT, env=environment({"OMP_WAIT_POLICY": "ACTIVE"}),
                            start_new_session=True)


def shlex_join(parts: list[str]) -> str:
    import shlex

    return " ".join(shlex.quote(p) for p in parts)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "threads-benchmark")
    p.add_argument("--cap", type=float, default=600.0, help="seconds before a run counts as '> cap'")
    p.add_argument("--only", default=None, help="comma list of conditions: alone,beside (default both)")
    args = p.parse_args(argv)
    cores = len(os.sched_getaffinity(0))
    conditions = (args.only or "alone,beside").split(",")
    rows = []
    for condition in conditions:
        other = neighbour() if condition == "beside" else None
        try:
            if other is not None:
                time.sleep(20)  # the neighbour is past its imports and computing
            for name, extra in choices(cores).items():
                seconds = timed_run(extra, args.cap)
                rows.append({"choice": name, "condition": condition, "seconds": seconds,
                             "load_average": os.getloadavg()[0]})
                print(f"{condition:6s} {name:32s} {'> cap' if seconds is None else f'{seconds:.1f} s'}", flush=True)
        finally:
            if other is not None:
                os.killpg(other.pid, 15)
                other.wait()
    alone = {r["choice"]: r["seconds"] for r in rows if r["condition"] == "alone"}
    for r in rows:
        base = alone.get(r["choice"])
        r["ratio_to_alone"] = None if not base or r["seconds"] is None else round(r["seconds"] / base, 2)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "threads.json").write_text(json.dumps({"cores": cores, "workload": WORKLOAD, "rows": rows}, indent=2))
    from tabulate import tabulate

    table = tabulate([[r["condition"], r["choice"], "> cap" if r["seconds"] is None else f"{r['seconds']:.1f}",
                       r["ratio_to_alone"] or ""] for r in rows],
                     headers=["Condition", "Threads", "Seconds", "× alone"], tablefmt="github")
    (args.out / "threads.md").write_text(table + "\n")
    print(table)
    shutil.rmtree(args.out / "tmp", ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
