"""End to end with the embedded Gemma 3 270M: real generations, kill and resume, two processes."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from reports.results import TIMING_KEYS
from test_cli import ROOT, bench

pytestmark = pytest.mark.slow

# AQuA-RAT and WMT19: the CI smoke regression runs GSM8K and WMT19 (configs/smoke.yaml), so each task runs end to end;
# 8 new tokens (16 until 2026-12-04): generation is most of these runs' time, and what they test is the run around it
MAX_NEW = 8
SMALL = ["--tasks", "aquarat,wmt19", "--n-test", "2", "--n-val", "4", "--pool-size", "60",
         "--max-new-tokens", str(MAX_NEW), "--batch-size", "1", "--seed", "7"]
METHODS = ["--methods", "zero-shot,few-shot,knn,mmr"]
N_CALLS = 4 * 2 * 2  # methods x tasks x test items: one inference call each


def rows(path: Path) -> list[dict]:
    return [json.loads(l) for l in path.read_text().splitlines() if l.strip()]


def results_without_timing(out: Path) -> list[dict]:
    """Results minus what measures compute rather than outcome: seconds, and prefilled tokens (which
    depend on how items were batched behind a shared prefix). Scores to 1e-6: BERTScore of a padded
    batch differs from one item at a time by float32 rounding."""
    runs = json.loads((out / "results.json").read_text())["runs"]
    kept = []
    for r in runs:
        r = {k: v for k, v in r.items()
             if k not in TIMING_KEYS}
        r["score"] = round(r["score"], 6)
        r["extra"] = {k: round(v, 6) for k, v in r["extra"].items()}  # WMT19's BERTScore beside chrF: the same rounding
        # intervals are bootstraps of those scores: equal to the same float32 rounding
        r["ci_low"], r["ci_high"] = (None if v is None else round(v, 5) for v in (r["ci_low"], r["ci_high"]))
        r["extra_ci"] = {k: [None if v is None else round(v, 5) for v in ci] for k, ci in r["extra_ci"].items()}
        r["tokens"] = {phase: {k: v for k, v in t.items() if k != "prefilled_tokens"} for phase, t in r["tokens"].items()}
        kept.append(r)
    return kept


@pytest.fixture(scope="module")
def full_run(tmp_path_factory, data_dir):
    out = tmp_path_factory.mktemp("e2e") / "full"
    proc = bench(*METHODS, *SMALL, "--data-dir", str(data_dir), "--out", str(out), timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def test_full_run_outputs(full_run):
    for name in ("records.jsonl", "calls.jsonl", "results.json", "report.md"):
        assert (full_run / name).exists()
    recs = rows(full_run / "records.jsonl")
    assert len(recs) == N_CALLS
    assert all(r["output"] is not None and r["latency_s"] > 0 for r in recs)
    results = json.loads((full_run / "results.json").read_text())
    assert {(r["method"], r["task"]) for r in results["runs"]} == {
        (m, t) for m in ("zero-shot", "few-shot", "knn", "mmr") for t in ("aquarat", "wmt19")}
    assert all(0.0 <= r["score"] <= 1.0 and r["n"] == 2 for r in results["runs"])
    wmt = [r for r in results["runs"] if r["task"] == "wmt19"]
    assert all(r["metric"] == "chrf" and 0.0 <= r["extra"]["bertscore_f1"] <= 1.0 for r in wmt)  # chrF first
    report = (full_run / "report.md").read_text()
    assert "small-model numbers" in report and "BERTScore (zh): all-MiniLM-L6-v2 (local), layer 6" in report
    calls = rows(full_run / "calls.jsonl")
    assert len(calls) == N_CALLS and all(c["phase"] == "inference" and c["completion_tokens"] <= MAX_NEW for c in calls)


def test_killed_midway_and_resumed(full_run, tmp_path, data_dir):
    out = tmp_path / "cut"
    cmd = [sys.executable, "-m", "bench", *METHODS, *SMALL, "--data-dir", str(data_dir), "--out", str(out)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 600
    calls = out / "calls.jsonl"
    while time.time() < deadline and (not calls.exists() or len(calls.read_text().splitlines()) < 6):
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    answered = len(rows(calls))
    assert 6 <= answered < N_CALLS
    records = out / "records.jsonl"  # killed between answers and their records: those items' calls come from the cache
    records.write_text("".join(line + "\n" for line in records.read_text().splitlines()[:-2]))
    resumed = bench(*METHODS, *SMALL, "--data-dir", str(data_dir), "--out", str(out), "--resume", timeout=900)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    log = rows(calls)
    uncached = [c["key"] for c in log if not c["cached"]]
    assert len(uncached) == len(set(uncached)) == N_CALLS  # no answered call made twice
    assert sum(c["cached"] for c in log) >= 2  # the items whose records were lost were answered from the call cache
    assert results_without_timing(out) == results_without_timing(full_run)
    # report and compare work on it
    rep = bench("report", str(out))
    assert rep.returncode == 0 and "## Accuracy" in rep.stdout
    cmp = bench("compare", str(out), "--to", str(full_run / "results.json"), "--tolerance", "0")
    assert cmp.returncode == 0, cmp.stdout
    worse = tmp_path / "worse.json"
    ref = json.loads((full_run / "results.json").read_text())
    for run in ref["runs"]:
        run["llm_calls"]["inference"] -= 1  # pretend the reference needed fewer calls
    worse.write_text(json.dumps(ref))
    assert bench("compare", str(out), "--to", str(worse), "--tolerance", "0").returncode == 1


@pytest.mark.skipif(shutil.which("torchrun", path=str(Path(sys.executable).parent)) is None,
                    reason="torchrun not installed")
def test_two_processes_split_items_and_merge(full_run, tmp_path, data_dir):
    out = tmp_path / "ddp"
    torchrun = str(Path(sys.executable).parent / "torchrun")
    cmd = [torchrun, "--standalone", "--nproc_per_node", "2", "-m", "bench", *METHODS, *SMALL,
           "--data-dir", str(data_dir), "--out", str(out)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    recs = rows(out / "records.jsonl")
    keys = [(r["method"], r["task"], r["item_id"]) for r in recs]
    assert len(keys) == len(set(keys)) == N_CALLS
    assert not list(out.glob("*.rank*.jsonl"))  # merged
    calls = rows(out / "calls.jsonl")
    assert {c["rank"] for c in calls} == {0, 1}
    assert results_without_timing(out) == results_without_timing(full_run)
