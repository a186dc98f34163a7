"""`bench sweep`: a grid of run folders through submitit's local launcher (cells skipped when finished, resumed when
cut, a failed cell reported with its log while the others finish, one merged report), and the caches that travel
(`bench cache merge`, `--cache-from`). The fast tests answer from a loopback OpenAI-style server; the slow one runs
the embedded model and checks a sweep's records against the same cells run one by one."""
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from bench.errors import ConfigError
from bench.llm import CallCache
from test_cli import ROOT, assert_one_line_error, bench

pytest.importorskip("submitit")

TIMING = ("latency_s", "select_s")


class Answers:
    """A loopback OpenAI completions server answering every prompt with one label word (after `delay` seconds),
    counting the prompts it answered; `refuse`: every request is a 400, which the SDK does not retry."""

    def __init__(self, delay: float = 0.0, refuse: bool = False):
        self.delay, self.prompts = delay, []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                if refuse:
                    self.send_error(400, "refused")
                    return
                time.sleep(outer.delay)
                outer.prompts.append(body.get("prompt"))
                word = ["alpha", "bravo"][len(str(body.get("prompt"))) % 2]  # depends on the prompt alone
                text, logprobs = " " + word, None
                if body.get("echo"):  # the prompt's tokens (words) back with log-probabilities, as vLLM's echo
                    text = str(body["prompt"]) + text
                    words = [(m.start(), m.group()) for m in re.finditer(r"\s*\S+", text)]
                    logprobs = {"tokens": [w for _, w in words], "text_offset": [o for o, _ in words],
                                "token_logprobs": [None] + [-0.1 * (len(w) % 7) - 0.05 for _, w in words[1:]],
                                "top_logprobs": None}
                data = json.dumps({"id": "x", "object": "text_completion", "created": 0, "model": "m",
                                   "choices": [{"index": 0, "text": text, "finish_reason": "stop",
                                                "logprobs": logprobs}],
                                   "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    s = Answers()
    yield s
    s.close()


def grid_file(tmp_path: Path, url: str, **over) -> Path:
    grid = {"methods": ["zero-shot", "few-shot"], "tasks": "rules", "seed": [0, 1], "llm": "m", "backend": "openai",
            "api_base": url, "scoring": "generate", "max_new_tokens": 4, "n_test": 6, "n_val": 4, "pool_size": 40,
            "retries": 0, "timeout": 20, "no_progress": True, "no_html": True, "embedding_cache": "off", **over}
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump(grid, sort_keys=False))
    return path


def records(folder: Path) -> list[dict]:
    rows = [json.loads(l) for l in (folder / "records.jsonl").read_text().splitlines() if l.strip()]
    return sorted(({k: v for k, v in r.items() if k not in TIMING} for r in rows),
                  key=lambda r: (r["method"], r["task"], r["item_id"]))


def fresh_calls(folder: Path) -> list[str]:
    path = folder / "calls.jsonl"
    if not path.is_file():
        return []
    return [json.loads(l)["key"] for l in path.read_text().splitlines() if l.strip() and not json.loads(l)["cached"]]


# ---- the grid ------------------------------------------------------------------------------------------------------
def test_a_grid_is_the_product_of_its_lists_and_a_comma_string_is_one_value(tmp_path):
    from bench.sweep import read_grid

    path = tmp_path / "g.yaml"
    path.write_text("methods: [knn, few-shot]\ntasks: [rules, trec]\nseed: [0, 1, 2]\nn_test: 10\n")
    grid = read_grid(path, tmp_path / "out")
    assert len(grid.cells) == 12 and grid.baseline == "few-shot" and grid.axes == ["methods", "tasks", "seed"]
    assert grid.cells[0].name == "methods=knn_tasks=rules_seed=0"
    assert grid.cells[0].mapping["methods"] == ["knn"] and grid.cells[0].mapping["n_test"] == 10
    path.write_text("methods: knn,few-shot\ntasks: [rules]\nplugin: [a, b]\nname: 'c-{tasks}'\n")
    grid = read_grid(path, tmp_path / "out")
    assert len(grid.cells) == 1 and grid.cells[0].mapping["methods"] == ["knn", "few-shot"]
    assert grid.cells[0].mapping["plugin"] == ["a", "b"] and grid.cells[0].name == "c-rules"
    assert grid.baseline == "few-shot"


@pytest.mark.parametrize("text, message", [
    ("methods: [knn]\nout: x\n", "'out' is set by the sweep"),
    ("methods: [knn]\nn_tset: 3\n", "unknown option 'n_tset'"),
    ("methods: [knn]\nn_test: [3, -1]\n", "bad value for 'n_test'"),
    ("methods: [knn]\nbaseline: mmr\n", "baseline 'mmr' is not among"),
    ("tasks: [rules]\n", "no 'methods'"),
    ("methods: [knn, knn]\n", "two cells are both named"),
])
def test_a_bad_grid_is_one_line_exit_2_before_any_cell_runs(tmp_path, text, message):
    path = tmp_path / "g.yaml"
    path.write_text(text)
    proc = bench("sweep", str(path), "--out", str(tmp_path / "out"))
    assert_one_line_error(proc, message)
    assert not (tmp_path / "out" / "cells").exists()


def test_dry_run_prints_the_cells_and_their_calls_and_runs_none(tmp_path, server):
    proc = bench("sweep", str(grid_file(tmp_path, server.url)), "--out", str(tmp_path / "out"), "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert "4 cells (0 done, 0 to resume, 0 changed, 4 new)" in proc.stdout and "methods=few-shot_seed=1" in proc.stdout
    assert "planned LLM calls of a first run, cache hits ignored: 24" in proc.stdout
    assert not server.prompts and not (tmp_path / "out" / "cells").exists()


# ---- running it: local launcher --------------------------------------------------------------------------------------
def test_a_local_sweep_runs_each_cell_as_its_run_and_skips_it_once_finished(tmp_path, server):
    grid, out = grid_file(tmp_path, server.url), tmp_path / "out"
    proc = bench("sweep", str(grid), "--out", str(out), "--workers", "2", timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "[sweep] 4/4 done, 0 running, 0 failed, 0 queued" in proc.stderr
    cells = sorted((out / "cells").iterdir())
    assert [c.name for c in cells] == ["methods=few-shot_seed=0", "methods=few-shot_seed=1",
                                       "methods=zero-shot_seed=0", "methods=zero-shot_seed=1"]
    report = (out / "report.md").read_text()
    assert "## rules" in report and "Δ vs few-shot ×100" in report and "zero-shot" in report
    tested = json.loads((out / "sweep.json").read_text())["tasks"]["all cells | rules"]
    assert {r["method"]: r["seeds"] for r in tested} == {"few-shot": [0, 1], "zero-shot": [0, 1]}
    assert "p_holm" in next(r for r in tested if r["method"] == "zero-shot")
    # a cell is an ordinary run: the same command one by one writes the same records
    alone = tmp_path / "alone"
    one = bench("run", "--config", str(cells[0] / "cell.yaml"), "--out", str(alone))
    assert one.returncode == 0, one.stderr[-2000:]
    assert records(alone) == records(cells[0])
    # rerun: every cell is skipped, no LLM call is made
    asked = len(server.prompts)
    before = {c.name: (c / "records.jsonl").read_bytes() for c in cells}
    again = bench("sweep", str(grid), "--out", str(out), "--workers", "2")
    assert again.returncode == 0, again.stderr[-2000:]
    assert "[sweep] 4/4 done (4 finished before), 0 running, 0 failed, 0 queued" in again.stderr
    assert len(server.prompts) == asked and before == {c.name: (c / "records.jsonl").read_bytes() for c in cells}


def test_an_edited_cell_runs_afresh_its_earlier_run_set_aside(tmp_path, server):
    """A cell whose options changed since it ran (n_test here) is not resumed against its old settings: its folder
    is set aside and the cell runs again."""
    out = tmp_path / "out"
    first = bench("sweep", str(grid_file(tmp_path, server.url, methods="zero-shot", seed=[0, 1])), "--out", str(out))
    assert first.returncode == 0, first.stderr[-2000:]
    edited = grid_file(tmp_path, server.url, methods="zero-shot", seed=[0, 1], n_test=4)  # the same cells, n_test 6 before
    again = bench("sweep", str(edited), "--out", str(out))
    assert again.returncode == 0, again.stderr[-2000:]
    assert again.stderr.count("its options changed") == 2
    cells = out / "cells"
    assert {p.name.split(".replaced-")[0] for p in cells.iterdir() if ".replaced-" in p.name} == {"seed=0", "seed=1"}
    assert all(len(records(cells / f"seed={s}")) == 4 for s in (0, 1))


def test_a_failed_cell_is_reported_with_its_logs_last_lines_and_the_others_finish(tmp_path, server):
    grid, out = grid_file(tmp_path, server.url, methods="few-shot", tasks=["rules", "nosuchtask"], seed=0), \
        tmp_path / "out"
    proc = bench("sweep", str(grid), "--out", str(out), "--workers", "2", timeout=300)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "[sweep] FAILED tasks=nosuchtask" in proc.stderr
    assert "error: unknown task 'nosuchtask'" in proc.stderr.split("FAILED", 1)[1]  # the cell's own last line
    assert "1/2 done, 0 running, 1 failed, 0 queued" in proc.stderr
    assert (out / "cells" / "tasks=rules" / "sweep_done.json").is_file()
    assert "1 failed: tasks=nosuchtask" in (out / "report.md").read_text()


def test_a_cell_that_raised_is_reported_by_its_exception_even_when_its_log_holds_only_earlier_lines():
    """Found on a fresh machine: a cell that raised while loading its model was reported by its log's one line
    about shared cores; the exception itself came back only in submitit's traceback."""
    from submitit.core.utils import FailedJobError

    from bench.sweep import failure_line

    carried = FailedJobError('Job (task=0) failed during processing with trace:\n----------------------\nTraceback '
                             '(most recent call last):\n  File "bench/llm/embedded.py", line 32, in _gemma_gguf\n'
                             '    return Path(pkg.assemble())\nFileExistsError: gemma.gguf already exists with an '
                             'unexpected sha256\n\n----------------------\nYou can check full logs with '
                             "'job.stderr(0)' and 'job.stdout(0)'or at paths:\n  - /x/log.err\n  - /x/log.out\n")
    assert failure_line(carried) == "FileExistsError: gemma.gguf already exists with an unexpected sha256"
    assert failure_line(RuntimeError("boom")) == "boom" and failure_line(RuntimeError()) == "RuntimeError"


def test_a_killed_sweep_resumes_without_repeating_a_finished_cell_or_an_answered_call(tmp_path):
    slow = Answers(delay=0.15)  # a cell takes seconds: the kill lands while some are under way
    try:
        grid, out = grid_file(tmp_path, slow.url, n_test=12), tmp_path / "out"
        proc = subprocess.Popen([sys.executable, "-m", "bench", "sweep", str(grid), "--out", str(out), "--workers",
                                 "2"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "HF_HUB_OFFLINE": "1"})
        cells = out / "cells"
        deadline = time.time() + 240
        while time.time() < deadline and len(list(cells.glob("*/sweep_done.json"))) < 1:
            time.sleep(0.2)
        time.sleep(1.0)  # the next cells are under way
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        assert "interrupted" in err, err[-2000:]
        done = {p.parent.name: (p.parent / "records.jsonl").read_bytes() for p in cells.glob("*/sweep_done.json")}
        assert 1 <= len(done) < 4, err[-2000:]
        answered = {c.name: {k for k, in sqlite3.connect(c / "cache.sqlite").execute("SELECT key FROM calls")}
                    for c in cells.iterdir() if (c / "cache.sqlite").is_file()}
        logged = {c.name: len(fresh_calls(c)) for c in cells.iterdir()}
        again = subprocess.run([sys.executable, "-m", "bench", "sweep", str(grid), "--out", str(out), "--workers",
                                "2"], cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert again.returncode == 0, again.stderr[-3000:]
        assert f"({len(done)} finished before)" in again.stderr
        assert {name: (cells / name / "records.jsonl").read_bytes() for name in done} == done  # not run again
        for cell in cells.iterdir():  # the calls answered after the kill: none was answered before it
            new = fresh_calls(cell)[logged.get(cell.name, 0):]
            assert not set(new) & answered.get(cell.name, set()), cell.name
            assert len(records(cell)) == 12
    finally:
        slow.close()


# ---- a sweep fans out a table build ------------------------------------------------------------------------------------
def table_grid(tmp_path: Path, url: str, shards=3, **over) -> Path:
    build = {"task": "rules", "llm": "m", "backend": "openai", "api_base": url, "arms": 5, "k": 2, "n_val": 4,
             "n_test": 4, "pool_size": 40, "rewards": "loglik", **over}
    path = tmp_path / "tables.yaml"
    path.write_text(yaml.safe_dump({"table_build": build, "shards": shards}, sort_keys=False))
    return path


def test_a_sweep_fans_out_a_table_build_into_shards_joined_into_the_unsharded_builds_table(tmp_path, server):
    import numpy as np

    grid, out = table_grid(tmp_path, server.url), tmp_path / "out"
    dry = bench("sweep", str(grid), "--out", str(out), "--dry-run")
    assert dry.returncode == 0, dry.stderr[-2000:]
    assert "3 cells: 1 table(s) in 3 shard(s) each (0 done, 0 to resume, 0 changed, 3 new)" in dry.stdout
    assert re.search(r"\| table_shard=1of3 +\| new +\| 2-2 \(1\) +\|.*--shard 1/3", dry.stdout), dry.stdout
    proc = bench("sweep", str(grid), "--out", str(out), "--workers", "2", timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "[sweep] 3/3 done, 0 running, 0 failed, 0 queued" in proc.stderr
    assert (out / "tables" / "table.npz").is_file() and "`tables/table.npz`" in (out / "report.md").read_text()
    whole = bench("table", "build", str(tmp_path / "whole.npz"), "--task", "rules", "--llm", "m", "--backend",
                  "openai", "--api-base", server.url, "--arms", "5", "--k", "2", "--n-val", "4", "--n-test", "4",
                  "--pool-size", "40", "--rewards", "loglik", "--no-progress")
    assert whole.returncode == 0, whole.stderr[-2000:]
    with np.load(tmp_path / "whole.npz") as a, np.load(out / "tables" / "table.npz") as b:
        assert sorted(a.files) == sorted(b.files)
        for name in ("rewards", "metric", "loglik", "item_ids", "split", "arm_demo_ids"):
            assert a[name].dtype == b[name].dtype and a[name].tobytes() == b[name].tobytes(), name
        assert np.isfinite(b["loglik"]).all()  # the server's log-likelihoods, recorded
    # a cell is the command it says; rerun: every shard is skipped, no call made, the table joined again
    assert "--shard 2/3" in (out / "cells" / "table_shard=2of3" / "command.txt").read_text()
    asked = len(server.prompts)
    again = bench("sweep", str(grid), "--out", str(out), "--workers", "2")
    assert again.returncode == 0, again.stderr[-2000:]
    assert "(3 finished before)" in again.stderr and len(server.prompts) == asked
    # a shard that fails takes its table's earlier join away: the report says why, no stale table stays
    refusing = Answers(refuse=True)  # not a closed port: the SDK's retries of a refused connection took 30 s
    try:
        table_grid(tmp_path, refusing.url, k=3)  # another build (k) at a server that refuses: every shard fails
        failed = bench("sweep", str(grid), "--out", str(out), "--workers", "2", timeout=300)
    finally:
        refusing.close()
    assert failed.returncode == 1 and "its options changed" in failed.stderr
    assert not (out / "tables" / "table.npz").exists() and "not merged: 3 of 3 shard(s)" in (out / "report.md").read_text()
    assert any(p.name.startswith("table_shard=0of3.replaced-") for p in (out / "cells").iterdir())


@pytest.mark.parametrize("over, message", [
    ({"methods": "knn"}, "'methods' is not an option a sharded build takes"),
    ({"pool_size": None}, "'pool_size' has no value"),
    ({"shards": 9}, "9 shards of 5 arms"),
    ({"shards": 0}, "'shards' wants a whole number >= 1"),
    ({"cache": "x.sqlite"}, "the file, --cache and --shard are the sweep's")])
def test_a_bad_table_grid_is_one_line_exit_2(tmp_path, over, message):
    shards = over.pop("shards", 3)
    grid = table_grid(tmp_path, "http://127.0.0.1:9/v1", shards=shards, **over)
    assert_one_line_error(bench("sweep", str(grid), "--out", str(tmp_path / "out")), message)


# ---- caches that travel ----------------------------------------------------------------------------------------------
def answer(text: str, latency: float = 0.1) -> dict:
    return {"text": text, "prompt_tokens": 3, "completion_tokens": 1, "latency_s": latency}


def test_cache_merge_keeps_the_first_answer_and_counts_the_keys_answered_differently(tmp_path):
    a, b = CallCache(tmp_path / "a.sqlite"), CallCache(tmp_path / "b.sqlite")
    a.put_many({"k1": answer("x"), "k2": answer("y")})
    b.put_many({"k2": answer("y", latency=9.0), "k3": answer("z"), "k1": answer("DIFFERENT")})
    a.close(), b.close()
    proc = bench("cache", "merge", str(tmp_path / "a.sqlite"), str(tmp_path / "b.sqlite"), "--out",
                 str(tmp_path / "c.sqlite"))
    assert proc.returncode == 0, proc.stderr
    assert "3 keys from 2 cache(s) (3 added); 1 key(s) answered differently" in proc.stdout  # timing is no difference
    merged = CallCache(tmp_path / "c.sqlite")
    assert merged.get_many(["k1", "k2", "k3"]) == {"k1": answer("x"), "k2": answer("y"), "k3": answer("z")}
    merged.close()
    assert_one_line_error(bench("cache", "merge", str(tmp_path / "nope.sqlite"), "--out", str(tmp_path / "d.sqlite")),
                          "no such cache file")
    (tmp_path / "junk.sqlite").write_text("not sqlite")
    assert_one_line_error(bench("cache", "merge", str(tmp_path / "junk.sqlite"), "--out", str(tmp_path / "d.sqlite")),
                          "not an LLM answer cache")


def test_a_read_only_shared_cache_answers_what_the_own_cache_lacks_and_is_never_written(tmp_path):
    shared = CallCache(tmp_path / "shared" / "s.sqlite")
    shared.put_many({"k1": answer("from shared"), "k2": answer("old")})
    shared.close()
    for extra in ("-wal", "-shm"):
        (tmp_path / "shared" / f"s.sqlite{extra}").unlink(missing_ok=True)
    before = (tmp_path / "shared" / "s.sqlite").read_bytes()
    os.chmod(tmp_path / "shared" / "s.sqlite", 0o444)
    os.chmod(tmp_path / "shared", 0o555)  # a read-only mount: no journal can be made beside it
    try:
        own = CallCache(tmp_path / "own.sqlite", read_from=[tmp_path / "shared" / "s.sqlite"])
        own.put_many({"k2": answer("mine")})
        assert own.get_many(["k1", "k2", "k3"]) == {"k1": answer("from shared"), "k2": answer("mine")}
        own.put_many({"k3": answer("new")})
        assert own.shared_hits == 1 and len(own) == 2
        own.close()
    finally:
        os.chmod(tmp_path / "shared", 0o755)
    assert (tmp_path / "shared" / "s.sqlite").read_bytes() == before
    with pytest.raises(ConfigError, match="--cache-from .*no such cache file"):
        from bench.run_options import RunOptions

        RunOptions.from_mapping({"cache_from": [str(tmp_path / "missing.sqlite")]}, "test")


# ---- the real model ------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_sweep_of_the_embedded_model_gives_the_records_of_its_cells_run_one_by_one(tmp_path, data_dir):
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump({"methods": ["knn", "few-shot"], "tasks": ["rules", "trec"], "seed": 0,
                                    "n_test": 6, "pool_size": 100, "data_dir": str(data_dir), "no_progress": True,
                                    "no_html": True, "threads": "1"}))
    out = tmp_path / "out"
    proc = bench("sweep", str(grid), "--out", str(out), "--workers", "2", timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cells = sorted((out / "cells").iterdir())
    assert [cell.name for cell in cells] == ["methods=few-shot_tasks=rules", "methods=few-shot_tasks=trec",
                                             "methods=knn_tasks=rules", "methods=knn_tasks=trec"]
    for cell in cells[1:3]:  # four cells on two workers; two rerun alone (each method and each task once)
        alone = tmp_path / "alone" / cell.name
        one = bench("run", "--config", str(cell / "cell.yaml"), "--out", str(alone), timeout=600)
        assert one.returncode == 0, one.stderr[-2000:]
        assert records(alone) == records(cell), cell.name


def test_slurm_jobs_keep_the_embedding_cache_on_their_nodes_own_disk(tmp_path, monkeypatch):
    """The embedding cache is SQLite in WAL mode, unsafe over a network filesystem: a Slurm job's script points it at
    the node's temporary folder unless the submitting environment names one; the script really sets it so."""
    from bench.sweep import SlurmSettings, executor

    fake = tmp_path / "bin"  # submitit's Slurm executor needs an srun on PATH to be built; the script is only read here
    fake.mkdir()
    (fake / "srun").write_text("#!/bin/sh\nexit 1\n")
    (fake / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:{os.environ['PATH']}")
    ex = executor("slurm", tmp_path / "logs", SlurmSettings(), 60)
    script = ex._executor._make_submission_file_text("true", "x")
    setup = script.split("# setup\n", 1)[1].split("\n\n", 1)[0]
    show = 'echo "$BENCH_EMBEDDING_CACHE"'
    env = {"PATH": os.environ["PATH"], "USER": "u", "TMPDIR": "/scratch"}
    assert subprocess.run(["bash", "-c", f"{setup}\n{show}"], env=env, capture_output=True, text=True
                          ).stdout.strip() == "/scratch/icl-bench-u/embeddings.sqlite"
    mine = {**env, "BENCH_EMBEDDING_CACHE": "/mine.sqlite"}
    assert subprocess.run(["bash", "-c", f"{setup}\n{show}"], env=mine, capture_output=True, text=True
                          ).stdout.strip() == "/mine.sqlite"
