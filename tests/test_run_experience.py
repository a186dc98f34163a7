"""What a user sees and reuses: phase logs and run.log, where saved selections live, and when they replay."""
import sys

import pytest

import bench.runner as runner_mod
import methods.base as base
from bench.errors import ConfigError
from bench.log import configure
from bench.runner import Runner
from fakes import FakeBackend
from test_runner import make_config

PLUGIN = '''
from methods import Selector, register


@register("{name}")
class FirstK(Selector):
    """The first k pool items{comment}."""

    def fit(self, ctx):
        ctx.oracle.pull(ctx.pool[: self.k], ctx.validation[:1])  # one selection call, so a replay is visible
        self.demos_ = ctx.pool[: self.k]
        return self

    def select(self, query):
        return list(self.demos_)
'''


@pytest.fixture
def fake_backend(monkeypatch):
    monkeypatch.setattr(runner_mod, "make_backend", lambda spec: FakeBackend())


@pytest.fixture
def plugin(tmp_path):
    def write(comment="", name="first-k-test"):
        path = tmp_path / "plugins" / "first_k.py"
        path.parent.mkdir(exist_ok=True)
        path.write_text(PLUGIN.format(name=name, comment=comment))
        return path

    yield write
    base.SELECTORS.pop("first-k-test", None)
    for module in [m for m in sys.modules if m.startswith("bench_plugin_")]:
        sys.modules.pop(module)


def run(tmp_path, data_dir, folder, plugins, **kw):
    cfg = make_config(tmp_path, data_dir, methods=["first-k-test"], tasks=["gsm8k"], n_test=3,
                      out=tmp_path / folder, plugins=plugins, **kw)
    return Runner(cfg).run()


def test_plugin_file_path_registers_and_a_missing_one_is_one_line(tmp_path, plugin):
    path = plugin()
    base.load_plugin(str(path))
    assert "first-k-test" in base.available()
    with pytest.raises(ConfigError, match="plugin file not found: nowhere/x.py"):
        base.load_plugin("nowhere/x.py")
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('boom')\n")
    with pytest.raises(ConfigError, match="failed to load: RuntimeError: boom"):
        base.load_plugin(str(broken))


def test_store_lives_in_the_run_folder_unless_shared(tmp_path, data_dir, fake_backend, plugin):
    path = str(plugin())
    first = run(tmp_path, data_dir, "a", [path])
    assert (tmp_path / "a" / "selections").is_dir()
    assert first["runs"][0]["llm_calls"]["selection"] == 1
    # a sibling run without --selections does not see run a's store: it fits
    second = run(tmp_path, data_dir, "b", [path])
    assert second["runs"][0]["llm_calls"]["selection"] == 1 and not second["runs"][0]["selection_reused_from"]
    # a shared store replays
    shared = tmp_path / "shared"
    run(tmp_path, data_dir, "c", [path], selections=shared)
    replayed = run(tmp_path, data_dir, "d", [path], selections=shared)
    assert replayed["runs"][0]["llm_calls"]["selection"] == 0
    assert replayed["runs"][0]["selection_reused_from"] == str(shared)


def test_changed_selector_code_is_fitted_again(tmp_path, data_dir, fake_backend, plugin):
    shared = tmp_path / "shared"
    path = str(plugin())
    run(tmp_path, data_dir, "a", [path], selections=shared)
    for module in [m for m in sys.modules if m.startswith("bench_plugin_")]:
        sys.modules.pop(module)
    base.SELECTORS.pop("first-k-test")
    plugin(comment=", edited")  # the same selector, its source changed by one comment
    again = run(tmp_path, data_dir, "b", [path], selections=shared)
    assert again["runs"][0]["llm_calls"]["selection"] == 1 and not again["runs"][0]["selection_reused_from"]


def test_phases_are_logged_to_the_console_and_run_log(tmp_path, data_dir, fake_backend, capsys):
    configure(0)
    Runner(make_config(tmp_path, data_dir, methods=["zero-shot", "knn"], tasks=["gsm8k"], n_test=3,
                       llm_budget=7)).run()
    err = capsys.readouterr().err
    log = (tmp_path / "run" / "run.log").read_text()
    for line in ("LLM fake", "task gsm8k: 60 pool, 4 validation, 3 test items",
                 "fit knn on gsm8k (budget 7 selection calls)", "fit knn on gsm8k: 0 selection calls of 7",
                 "inference knn on gsm8k: 3 items"):
        assert line in err and line in log, line
    assert "[bench]" in err
    configure(-1)  # -q: warnings only on the console; run.log still gets everything
    Runner(make_config(tmp_path / "q", data_dir, methods=["zero-shot"], tasks=["gsm8k"], n_test=3)).run()
    assert "[bench]" not in capsys.readouterr().err
    assert "inference zero-shot on gsm8k: 3 items" in (tmp_path / "q" / "run" / "run.log").read_text()
    configure(0)


def test_results_carry_meta_confidence_intervals_and_a_long_csv(tmp_path, data_dir, fake_backend):
    import csv

    cfg = make_config(tmp_path, data_dir, methods=["zero-shot", "knn"], tasks=["gsm8k", "wmt19"], n_test=6,
                      command="python -m bench run --methods zero-shot,knn", options={"n_test": 6})
    results = Runner(cfg).run()
    meta = results["meta"]
    assert meta["command"] == "python -m bench run --methods zero-shot,knn" and meta["options"] == {"n_test": 6}
    assert meta["python"] and "numpy" in meta["libraries"] and meta["started"] <= meta["finished"]
    assert meta["package"] == "0.1.0"
    for run in results["runs"]:
        assert run["n"] == 6 and run["ci_low"] <= run["score"] <= run["ci_high"]
    wmt = next(r for r in results["runs"] if r["task"] == "wmt19" and r["method"] == "knn")
    assert set(wmt["extra_ci"]) == set(wmt["extra"]) and wmt["extra"]  # chrF etc. get intervals too
    with open(tmp_path / "run" / "results.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == sum(1 + len(r["extra"]) for r in results["runs"])
    knn = next(r for r in rows if r["method"] == "knn" and r["task"] == "gsm8k")
    gsm = next(r for r in results["runs"] if r["method"] == "knn" and r["task"] == "gsm8k")
    assert knn["metric"] == "exact_match" and float(knn["score"]) == pytest.approx(gsm["score"])
    assert float(knn["ci_high"]) == pytest.approx(gsm["ci_high"]) and knn["n"] == "6"
    assert knn["inference_calls"] == str(gsm["llm_calls"]["inference"])


def test_bootstrap_interval_contains_the_mean_and_narrows_with_n():
    import numpy as np

    from reports.stats import bootstrap_ci

    rng = np.random.default_rng(0)
    small, large = rng.random(20), rng.random(2000)
    low_s, high_s = bootstrap_ci(small)
    low_l, high_l = bootstrap_ci(large)
    assert low_s < small.mean() < high_s and low_l < large.mean() < high_l
    assert (high_l - low_l) < 0.2 * (high_s - low_s)
    assert bootstrap_ci([1.0]) == (None, None) and bootstrap_ci([1, 1, 1]) == (1.0, 1.0)


TASK_PLUGIN = '''
from bench.tasks import register_task
from bench.tasks.gsm8k import GSM8K


@register_task("gsm8k-accuracy")
class GSM8KAccuracy(GSM8K):
    """GSM8K under another name and metric label: a task added from a plugin file."""

    metric_label = "Accuracy"
'''


def test_a_plugin_task_registers_and_names_its_metric(tmp_path, data_dir, fake_backend):
    from bench.tasks import TASKS
    from reports.render import write_report

    path = tmp_path / "my_task.py"
    path.write_text(TASK_PLUGIN)
    try:
        cfg = make_config(tmp_path, data_dir, methods=["zero-shot"], tasks=["gsm8k-accuracy", "wmt19"], n_test=2,
                          plugins=[str(path)])
        results = Runner(cfg).run()
        labels = {r["task"]: r["metric_label"] for r in results["runs"]}
        assert labels == {"gsm8k-accuracy": "Accuracy", "wmt19": "chrF"}
        write_report(tmp_path / "run")
        header = next(line for line in (tmp_path / "run" / "report.md").read_text().splitlines()
                      if line.startswith("| Method"))
        assert "gsm8k-accuracy (Accuracy ×100 [95% CI], n = 2)" in header and "wmt19 (chrF ×100" in header
        with pytest.raises(TypeError, match="needs a Task subclass"):
            from bench.tasks import register_task

            register_task("x")(object)
    finally:
        TASKS.pop("gsm8k-accuracy", None)
        for module in [m for m in sys.modules if m.startswith("bench_plugin_")]:
            sys.modules.pop(module)


def test_log_prompts_stores_the_exact_prompt(tmp_path, data_dir, fake_backend):
    import json

    from bench.llm.cache import text_hash

    Runner(make_config(tmp_path / "on", data_dir, methods=["knn"], tasks=["gsm8k"], n_test=2,
                       log_prompts=True)).run()
    Runner(make_config(tmp_path / "off", data_dir, methods=["knn"], tasks=["gsm8k"], n_test=2)).run()
    on = [json.loads(line) for line in (tmp_path / "on" / "run" / "records.jsonl").read_text().splitlines()]
    off = [json.loads(line) for line in (tmp_path / "off" / "run" / "records.jsonl").read_text().splitlines()]
    assert all(r["prompt"] and text_hash(r["prompt"]) == r["prompt_hash"] for r in on)
    assert all(r["prompt"].count("[Question]") == 6 for r in on)  # five demonstrations and the query
    assert all(r["prompt"] == "" for r in off)


def readme_block(marker: str) -> str:
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "docs" / "api.md").read_text()
    match = re.search(rf"<!-- example: {marker} -->\n```python\n(.*?)```", text, re.S)
    assert match, f"docs/api.md lost its {marker} example"
    return match.group(1)


def test_the_docs_python_api_example_runs_and_returns_results(tmp_path, data_dir, fake_backend, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code = readme_block("evaluate").replace('"../shared/data"', repr(str(data_dir)))
    scope: dict = {}
    exec(compile(code, "docs evaluate example", "exec"), scope)
    results = scope["results"]
    assert [r["method"] for r in results["runs"]] == ["zero-shot", "knn", "FirstK"]
    assert all(r["n"] == 5 and r["ci_low"] <= r["score"] <= r["ci_high"] for r in results["runs"])
    first_k = results["runs"][2]
    assert first_k["selection_reused_from"] == "" and results["meta"]["command"].startswith("bench.evaluate(")
    assert "FirstK gsm8k:" in capsys.readouterr().out


def test_evaluate_takes_a_backend_object_and_leaves_nothing_behind(tmp_path, data_dir, monkeypatch):
    import bench
    from bench.errors import ConfigError

    monkeypatch.chdir(tmp_path)
    backend = FakeBackend(model_id="my-backend")
    results = bench.evaluate(["few-shot"], "gsm8k", backend, n_test=2, data_dir=data_dir, k=2,
                             param={"few-shot": {"k": 2}})
    assert results["llm"] == "my-backend" and results["runs"][0]["n"] == 2
    assert list(tmp_path.iterdir()) == []  # no out: a temporary folder, removed
    kept = bench.evaluate(["zero-shot"], "gsm8k", backend, n_test=2, data_dir=data_dir, out=tmp_path / "kept")
    assert (tmp_path / "kept" / "results.json").exists() and kept["runs"][0]["method"] == "zero-shot"
    with pytest.raises(ConfigError, match="bench.evaluate: unknown option .n_tests."):
        bench.evaluate(["zero-shot"], "gsm8k", backend, n_tests=2)
    with pytest.raises(ConfigError, match="unknown task 'nope'"):
        bench.evaluate(["zero-shot"], "nope", backend, data_dir=data_dir)
    with pytest.raises(ConfigError, match="a method is a name or a Selector instance"):
        bench.evaluate([42], "gsm8k", backend)


def test_dry_run_plans_without_loading_or_writing_anything(tmp_path, data_dir, monkeypatch, capsys):
    from bench.cli import main

    def no_model(spec):
        raise AssertionError("a dry run loaded a model")

    monkeypatch.setattr(runner_mod, "make_backend", no_model)
    out = tmp_path / "r"
    code = main(["--methods", "zero-shot,knn,case-static,dearicl-dynamic,case-dynamic", "--tasks", "gsm8k",
                 "--llm", "gemma3-270m", "--n-test", "7", "--n-val", "3", "--data-dir", str(data_dir),
                 "--out", str(out), "--dry-run", "--param", "case-static.max_pulls=4",
                 "--param", "case-dynamic.pulls_per_query=2", "--max-new-tokens", "50"])
    assert code == 0 and not out.exists()
    text = capsys.readouterr().out
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in text.splitlines() if line.startswith("| ") and "method" not in line}
    assert rows["knn"][1:3] == ["0", "7"] and rows["zero-shot"][1] == "0"
    assert rows["case-static"][1] == f"≤ {(4 + 10) * 3}"  # max_pulls + m rescoring pulls, 3 validation items
    assert rows["case-dynamic"][1] == f"≤ {2 * 3 * 7}"  # per test query: pulls_per_query x validation
    assert rows["dearicl-dynamic"][1] == "unbounded" and "pass --llm-budget" in text
    # zero-shot prompts hold no demonstrations: far fewer prompt tokens than knn's
    assert int(rows["zero-shot"][3].replace(",", "")) * 3 < int(rows["knn"][3].replace(",", ""))
    assert rows["knn"][4].endswith(f"–{7 * 50}")  # completions up to --max-new-tokens per call
    assert main(["--methods", "dearicl-dynamic", "--tasks", "gsm8k", "--data-dir", str(data_dir), "--dry-run",
                 "--llm-budget", "90", "--n-test", "7"]) == 0
    assert "| ≤ 90 " in capsys.readouterr().out
    # --only: the plan of the cells this command would run, not of the whole run
    assert main(["--methods", "zero-shot,knn,case-static", "--only", "knn", "--tasks", "gsm8k", "--data-dir",
                 str(data_dir), "--dry-run", "--n-test", "7"]) == 0
    planned = [line.split("|")[1].strip() for line in capsys.readouterr().out.splitlines()
               if line.startswith("| ") and "method" not in line]
    assert [m for m in planned if m in ("zero-shot", "knn", "case-static")] == ["knn"]


def test_progress_without_a_terminal_logs_throttled_lines(capsys):
    from bench.log import Progress

    configure(0)
    progress = Progress(5, "fit knn/gsm8k", enabled=True, every=0.0, unit="selection calls")
    progress.set(2)
    progress.set(2)  # no movement: no line
    progress.update(3)
    progress.close()
    lines = [line for line in capsys.readouterr().err.splitlines() if "[bench]" in line]
    assert [line.split("[bench] ")[1] for line in lines] == [
        "fit knn/gsm8k: 2/5 selection calls, 0:00 elapsed, ETA 0:00", "fit knn/gsm8k: 5/5 selection calls, 0:00 elapsed"]
    slow = Progress(5, "x", enabled=True, every=3600.0)
    slow.update(5)
    off = Progress(5, "y", enabled=False, every=0.0)
    off.update(5)
    assert "[bench]" not in capsys.readouterr().err


def test_plugin_module_is_found_in_the_current_folder_without_it_on_sys_path(tmp_path, monkeypatch, plugin):
    (tmp_path / "cwd_plugin_mod.py").write_text(PLUGIN.format(name="first-k-test", comment=""))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    try:
        base.load_plugin("cwd_plugin_mod")  # as `icl-bench --plugin cwd_plugin_mod` run from this folder
        assert "first-k-test" in base.available()
    finally:
        sys.modules.pop("cwd_plugin_mod", None)


def test_reasoning_outputs_are_scored_on_the_answer_and_kept_whole(tmp_path, data_dir, monkeypatch):
    import json

    thinking = "<think>Maybe 5? The question wants 7. Or 9.</think>\nThe answer is 7"
    monkeypatch.setattr(runner_mod, "make_backend", lambda spec: FakeBackend(respond=lambda prompt: thinking))
    Runner(make_config(tmp_path, data_dir, methods=["zero-shot"], tasks=["gsm8k"], n_test=2)).run()
    records = [json.loads(line) for line in (tmp_path / "run" / "records.jsonl").read_text().splitlines()]
    assert all(r["prediction"] == "7" and r["output"] == "The answer is 7" for r in records)
    assert all(r["full_output"] == thinking for r in records)


def test_bootstrap_interval_does_not_depend_on_record_order():
    import numpy as np

    from reports.stats import bootstrap_ci

    values = np.random.default_rng(1).random(30)
    assert bootstrap_ci(values) == bootstrap_ci(values[::-1]) == bootstrap_ci(np.random.default_rng(2).permutation(values))


def test_dry_run_counts_prompt_tokens_with_a_tokenizer_at_hand_and_says_which(monkeypatch, tmp_path):
    """--dry-run counts tokens with the model's tokenizer when one is on disk (no model loaded), else estimates
    characters / 4, and the plan says which."""
    import bench.llm.embedded as embedded
    from bench.llm.registry import LLMSpec
    from bench.plan import characters_over_4, task_token_profile, token_counter
    from bench.tasks import make_task

    monkeypatch.setattr(embedded, "cache_root", lambda: tmp_path)  # nothing converted yet
    count, counted = token_counter(LLMSpec("gemma3-270m"))
    assert count is characters_over_4 and counted == "characters / 4 (no tokenizer at hand)"
    count, counted = token_counter(LLMSpec("some/model", backend="openai"))
    assert count is characters_over_4
    from bench.encoder import local_encoder_path
    from transformers import AutoTokenizer

    converted = tmp_path / "gemma3-270m-0123456789ab"  # what an earlier run's conversion leaves, tokenizer included
    AutoTokenizer.from_pretrained(local_encoder_path()).save_pretrained(converted)  # a stand-in tokenizer
    count, counted = token_counter(LLMSpec("gemma3-270m"))
    reference = AutoTokenizer.from_pretrained(converted)
    assert counted == "counted with gemma3-270m's tokenizer"
    assert count("Hello there, tokenizer") == len(reference("Hello there, tokenizer")["input_ids"]) != characters_over_4(
        "Hello there, tokenizer")
    task = make_task("rules").configure()
    splits = task.load_splits(None, n_test=4, n_val=2, pool_size=20, seed=0)
    words = lambda text: len(text.split())  # noqa: E731  (a stand-in tokenizer)
    prompt, answer = task_token_profile(task, splits, 3, count=words)
    expected = sum(words(task.render(splits.pool[:3], it)) for it in splits.test) / len(splits.test)
    assert prompt == round(expected) and answer == round(sum(words(it.gold_output) for it in splits.test) / 4)


def test_the_cli_the_config_file_and_evaluate_build_one_configuration(tmp_path, data_dir):
    """The same options through the command line, a --config file and bench.evaluate's keyword arguments build the
    same typed RunOptions (and so the same run configuration), converted and checked by one path."""
    from pathlib import Path

    import yaml

    from bench.cli import config_options, run_config, run_parser
    from bench.errors import ConfigError
    from bench.run_options import RunOptions, method_params_of

    out, data = str(tmp_path / "run"), str(data_dir)
    argv = ["--methods", "knn,mmr", "--tasks", "sst2", "--n-test", "5", "--temperature", "0.25", "--param",
            "mmr.lam=0.5", "--fewshot-as-multiturn", "--out", out, "--data-dir", data, "--plugin", "a"]
    cli = RunOptions.from_args(run_parser().parse_args(argv))
    config = tmp_path / "run.yaml"
    config.write_text(f"methods: [knn, mmr]\ntasks: sst2\nn-test: 5\ntemperature: 0.25\nfewshot_as_multiturn: true\n"
                      f"out: {out}\ndata_dir: {data}\nplugin: a\nparams:\n  mmr: {{lam: 0.5}}\n")
    from_file = config_options(config)
    from_file_cli = RunOptions.from_args(run_parser(from_file).parse_args([]), from_file.params)
    kwargs = {"methods": ["knn", "mmr"], "tasks": "sst2", "n_test": 5, "temperature": 0.25,
              "fewshot_as_multiturn": True, "out": out, "data_dir": data, "param": ["mmr.lam=0.5"], "plugin": ["a"]}
    from_api = RunOptions.from_mapping(kwargs, "bench.evaluate")
    assert cli == from_file == from_file_cli == from_api
    assert cli.n_test == 5 and cli.out == Path(out) and cli.params == {"mmr": {"lam": 0.5}} and cli.plugin == ["a"]
    built = [run_config(o) for o in (cli, from_file, from_api)]
    assert built[0].options == built[1].options == built[2].options and built[0].llm.fewshot_as_multiturn
    assert built[0].method_params == built[2].method_params == {"mmr": {"lam": 0.5}}
    # run_config.yaml round-trips: what a run writes, --config reads back to the same options
    saved = tmp_path / "run_config.yaml"
    saved.write_text(yaml.safe_dump(built[0].options))
    assert config_options(saved) == cli
    # a flag overrides the file's value, and only that one
    flagged = RunOptions.from_args(run_parser(from_file).parse_args(["--k", "3"]), from_file.params)
    assert flagged.k == 3 and flagged.n_test == 5 and flagged.params == from_file.params
    with pytest.raises(ConfigError, match=r"^bench.evaluate: bad value for 'temperature'"):
        RunOptions.from_mapping({"temperature": "hot"}, "bench.evaluate")
    with pytest.raises(ConfigError, match=r"^bench.evaluate: 'chat_template' must be one of auto, on, off$"):
        RunOptions.from_mapping({"chat_template": "sometimes"}, "bench.evaluate")
    with pytest.raises(ConfigError, match=r"^bench.evaluate: unknown option 'n_tests'; options: api_base, "):
        RunOptions.from_mapping({"n_tests": 5}, "bench.evaluate")
    with pytest.raises(ConfigError, match=r"^--temperature must be >= 0, got -1.0$"):
        RunOptions.from_mapping({"temperature": -1}, "bench.evaluate")
    with pytest.raises(ConfigError, match=r"^--method-budget wants METHOD=POSITIVE_COUNT"):
        RunOptions.from_args(run_parser().parse_args(["--method-budget", "knn"]))
    with pytest.raises(ConfigError, match=r"^bench.evaluate: --param wants METHOD.NAME=VALUE"):
        method_params_of(["lam=0.5"], "bench.evaluate")


def test_threads_are_applied_before_the_models_recorded_and_a_shared_machine_is_named_once(tmp_path, data_dir,
                                                                                         fake_backend, monkeypatch,
                                                                                         capsys):
    import torch

    import bench.threads as threads_mod

    before = torch.get_num_threads()
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads_mod, "load_average", lambda: 0.1)
    monkeypatch.setattr(threads_mod, "cores", lambda: 3)
    configure(0)
    try:
        results = Runner(make_config(tmp_path / "a", data_dir, methods=["zero-shot"], tasks=["gsm8k"], n_test=2,
                                     threads="1")).run()
        assert torch.get_num_threads() == 1
        assert results["meta"]["threads"] == {"threads": 1, "cores": 3, "load_average": 0.1, "how": "given",
                                              "wait_policy": results["meta"]["threads"]["wait_policy"], "shared": False}
        assert "cores are shared" not in capsys.readouterr().err
        # auto: every core, unless the caller pinned OMP_NUM_THREADS; a busy machine is named, with the way out
        monkeypatch.setattr(threads_mod, "load_average", lambda: 1.7)
        results = Runner(make_config(tmp_path / "b", data_dir, methods=["zero-shot"], tasks=["gsm8k"],
                                     n_test=2)).run()
        assert torch.get_num_threads() == 3 and results["meta"]["threads"]["how"] == "auto"
        err = capsys.readouterr().err
        assert err.count("the cores are shared (load average 1.70 on 3 cores") == 1 and "--threads 1" in err
        monkeypatch.setenv("OMP_NUM_THREADS", "2")
        results = Runner(make_config(tmp_path / "c", data_dir, methods=["zero-shot"], tasks=["gsm8k"],
                                     n_test=2)).run()
        assert torch.get_num_threads() == 2 and results["meta"]["threads"]["how"] == "OMP_NUM_THREADS"
    finally:
        torch.set_num_threads(before)
    with pytest.raises(ConfigError, match="--threads takes auto or a positive count, got '0'"):
        threads_mod.parse_threads("0")


def test_evaluate_shows_progress_where_nobody_configured_logging_and_progress_false_is_silent(tmp_path, data_dir,
                                                                                         capsys):
    import logging

    import bench
    from bench.log import LOG

    saved = LOG.handlers[:], logging.getLogger().handlers[:], LOG.propagate
    LOG.handlers[:] = []
    logging.getLogger().handlers[:] = []
    try:
        bench.evaluate(["zero-shot"], "gsm8k", llm=FakeBackend(), n_test=2, n_val=4, pool_size=30, data_dir=data_dir)
        err = capsys.readouterr().err
        assert "[bench] inference zero-shot on gsm8k: 2 items" in err and "[bench] LLM" in err
        assert LOG.handlers == [] and LOG.propagate  # the caller's logging is left as it was
        bench.evaluate(["zero-shot"], "gsm8k", llm=FakeBackend(), n_test=2, n_val=4, pool_size=30, data_dir=data_dir,
                       progress=False)
        assert "[bench]" not in capsys.readouterr().err
        logging.basicConfig(level=logging.WARNING)  # the caller's own logging: theirs decides
        bench.evaluate(["zero-shot"], "gsm8k", llm=FakeBackend(), n_test=2, n_val=4, pool_size=30, data_dir=data_dir)
        assert "[bench]" not in capsys.readouterr().err and LOG.handlers == []
    finally:
        LOG.handlers[:], logging.getLogger().handlers[:], LOG.propagate = saved


def test_each_method_is_charged_its_own_embedding_time_whatever_an_earlier_one_left_in_the_memo(tmp_path, data_dir,
                                                                                               fake_backend):
    from bench.records import read_fits

    Runner(make_config(tmp_path, data_dir, methods=["knn", "mmr"], tasks=["gsm8k"], n_test=2, pool_size=200)).run()
    fits = read_fits(tmp_path / "run" / "fits.jsonl")
    knn, mmr = fits[("knn", "gsm8k")], fits[("mmr", "gsm8k")]
    assert knn.embedding_reused_seconds == 0.0 and mmr.embedding_reused_seconds > 0  # mmr found knn's pool embedded
    # charged what embedding the pool took: the same texts, so about knn's embedding time without the model's load
    assert mmr.embedding_seconds >= mmr.embedding_reused_seconds > 0.2 * knn.embedding_seconds
    assert mmr.selection_seconds >= mmr.embedding_seconds


def test_the_encoder_charges_each_distinct_text_once_per_account():
    from bench.encoder import Encoder

    enc = Encoder()
    enc.encode(["a b c", "d e f"])
    cost = dict(enc._cost)
    enc.account()
    enc.encode(["a b c", "a b c", "g h"])
    enc.encode(["a b c"])
    assert enc.charged_seconds == pytest.approx(cost["a b c"] + enc._cost["g h"])
    assert enc.reused_seconds == pytest.approx(cost["a b c"])
