"""A new user's first hour: live progress, every checkable mistake caught before a model loads (one line, no
folder left behind), resume from the folder, comparisons of like with like, a stated baseline, one scale,
readable plots, and help that shows every default."""
import argparse
import csv
import json
import re
import time
from pathlib import Path

import matplotlib.image
import pytest

import bench
import bench.runner as runner_mod
from bench.cli import DEMO_METHODS, default_out, main
from bench.errors import ConfigError
from bench.log import Progress, configure
from bench.llm import CallScope, LLMClient
from bench.llm.cache import CallCache
from fakes import FakeBackend
from test_cli import assert_one_line_error, bench as bench_cli, closed_port

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def fake(monkeypatch):
    backend = FakeBackend(batch_size=2)
    monkeypatch.setattr(runner_mod, "make_backend", lambda spec: backend)
    return backend


def run_args(data_dir, out, *more):
    return ["--methods", "zero-shot,few-shot", "--tasks", "gsm8k", "--n-test", "4", "--n-val", "2",
            "--pool-size", "30", "--data-dir", str(data_dir), "--out", str(out), "--no-progress", *more]


# ---- progress ---------------------------------------------------------------------------------------------
def test_a_phase_that_does_not_move_still_reports_its_elapsed_time(capsys):
    configure(0)
    bar = Progress(5, "inference knn/sst2", enabled=True, every=1.0, unit="calls")
    time.sleep(2.6)  # one long LLM batch: no update at all
    bar.update(2)
    bar.close()
    lines = [line.split("[bench] ")[1] for line in capsys.readouterr().err.splitlines() if "[bench]" in line]
    assert any(re.fullmatch(r"inference knn/sst2: 0/5 calls, 0:0[1-3] elapsed", line) for line in lines), lines
    assert Progress(10, "x", enabled=False).line().startswith("x: 0/10 it, 0:00 elapsed")


def test_the_client_reports_every_answered_call_batch_by_batch(tmp_path):
    from bench.tasks import make_task

    task = make_task("gsm8k")
    backend = FakeBackend(batch_size=2)
    client = LLMClient(backend, CallCache(tmp_path / "c.sqlite"))
    seen = []
    client.progress = seen.append
    prompts = [f"Question {i}" for i in range(5)]
    client.generate(prompts, scope=CallScope("m", "t", "inference"))
    assert seen == [2, 2, 1]  # one report per batch of the backend
    seen.clear()
    client.generate(prompts[:3] + ["Question new"], scope=CallScope("m", "t", "inference"))
    assert seen == [3, 1] and task  # cached calls first, at once; then the fresh one


@pytest.fixture
def bars(monkeypatch) -> list[Progress]:
    """Every progress bar the runner opens, counted but not shown."""
    opened = []

    class Recording(Progress):
        def __init__(self, total, desc, enabled=True, **kwargs):
            super().__init__(total, desc, False, **kwargs)
            opened.append(self)

    monkeypatch.setattr(runner_mod, "Progress", Recording)
    return opened


def test_inference_bars_count_every_call_to_their_totals(tmp_path, data_dir, fake, bars):
    bench.evaluate(["zero-shot", "knn"], ["gsm8k"], llm=fake, n_test=5, n_val=2, pool_size=30, data_dir=data_dir,
                   out=tmp_path / "run")
    inference = [b for b in bars if b.desc.startswith("inference")]
    assert [b.desc for b in inference] == ["inference zero-shot/gsm8k", "inference knn/gsm8k"]
    assert all(b.n == b.total == 5 for b in inference)


def test_a_calibrated_task_counts_its_content_free_calls(tmp_path, data_dir, bars):
    from test_classification import CopyingClassifier

    backend = CopyingClassifier(["Negative", "Positive"])
    bench.evaluate(["few-shot"], ["sst2"], llm=backend, n_test=6, n_val=2, pool_size=30, data_dir=data_dir,
                   calibration="contextual", out=tmp_path / "run")
    bar = next(b for b in bars if b.desc.startswith("inference"))
    assert bar.n == bar.total == 6 + 3  # six items, one demonstration set's three content-free inputs


def test_the_console_ends_with_a_table_of_scores_on_the_report_scale(tmp_path, data_dir, fake, capsys):
    assert main(run_args(data_dir, tmp_path / "r")) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.startswith("method"))
    assert "n" in header.split() and "score ×100" in header and "95% CI ×100" in header
    row = next(line for line in out.splitlines() if line.startswith("few-shot"))
    assert re.search(r"\bEM\s+4\s+\d+\.\d\d\s+\[\d+\.\d, \d+\.\d\]", row), row


# ---- mistakes caught before a model loads -------------------------------------------------------------------
@pytest.mark.parametrize("args, message", [
    (["--n-test", "0"], "argument --n-test: must be positive, got 0"),
    (["--llm-budget", "-5"], "argument --llm-budget: must be positive, got -5"),
    (["--methods", "knn", "--k", "5", "--pool-size", "3", "--tasks", "sst2"],
     "knn: k=5 is larger than the pool of task 'sst2' (3 items); lower --k or raise --pool-size"),
    (["--methods", "knn", "--tasks", "trec", "--n-test", "501"], "--n-test 501 is more than task 'trec' has (500"),
    (["--methods", "bridge", "--param", "bridge.n_candidates=2"], "bridge: n_candidates (2) must be at least k (5)"),
    (["--methods", "knn", "--tasks", "gsm8k", "--scoring", "rank"], "task 'gsm8k' has no labels"),
])
@pytest.mark.parametrize("dry", [False, True])
def test_mistakes_are_one_line_before_any_model_and_dry_run_checks_the_same(tmp_path, data_dir, args, message, dry):
    out = tmp_path / "r"
    proc = bench_cli(*args, "--data-dir", str(data_dir), "--out", str(out), "--backend", "openai", "--llm", "x",
                     "--api-base", f"http://127.0.0.1:{closed_port()}/v1", *(["--dry-run"] if dry else []))
    assert_one_line_error(proc, message)
    assert "usage:" not in proc.stderr and not out.exists()


def failing_selector(pull_first: bool):
    from methods.base import Selector

    class Failing(Selector):
        def fit(self, ctx):
            if pull_first:
                ctx.oracle.pull(ctx.pool[: self.k], ctx.validation[:1])
            raise ConfigError("this selector gave up")

        def select(self, query):
            return []

    return Failing(k=2)


@pytest.mark.parametrize("pull_first", [False, True])
def test_a_run_failing_after_the_model_loaded_keeps_its_folder_only_if_an_answer_was_cached(tmp_path, data_dir,
                                                                                          pull_first):
    out = tmp_path / "r"
    with pytest.raises(ConfigError, match="gave up"):
        bench.evaluate([failing_selector(pull_first)], ["gsm8k"], llm=FakeBackend(), n_test=2, n_val=2, pool_size=30,
                       data_dir=data_dir, out=out)
    assert out.exists() == pull_first  # an answer is kept for --resume; otherwise the same --out works again


# ---- resume from the folder ---------------------------------------------------------------------------------
def test_resume_needs_only_the_folder_and_a_mismatch_names_both_values(tmp_path, data_dir, fake, capsys):
    out = tmp_path / "r"
    assert main(run_args(data_dir, out)) == 0
    first = json.loads((out / "results.json").read_text())["runs"]
    assert main(["--resume", "--out", str(out), "--no-progress"]) == 0  # the saved run_config.yaml
    again = json.loads((out / "results.json").read_text())["runs"]
    assert [(r["method"], r["score"], r["n"]) for r in again] == [(r["method"], r["score"], r["n"]) for r in first]
    capsys.readouterr()
    assert main(["--resume", "--out", str(out), "--n-test", "3", "--seed", "2"]) == 2
    err = capsys.readouterr().err
    assert "n_test: 4 there, 3 now" in err and "seed: 0 there, 2 now" in err and err.count("\n") == 1


# ---- compare like with like -----------------------------------------------------------------------------------
def test_compare_refuses_unlike_runs_unless_told(tmp_path, capsys):
    row = {"method": "knn", "task": "gsm8k", "score": 0.2, "llm_calls": {"selection": 0, "inference": 5}}
    config = {"tasks": ["gsm8k"], "n_test": 5, "seed": 0, "llm": {"name": "gemma3-270m"},
              "generation": {"temperature": 0}}
    (tmp_path / "a.json").write_text(json.dumps({"runs": [row], "config": config}))
    (tmp_path / "b.json").write_text(json.dumps({"runs": [{**row, "score": 0.0}], "config": {**config, "n_test": 2}}))
    assert main(["compare", str(tmp_path / "b.json"), "--to", str(tmp_path / "a.json")]) == 2
    err = capsys.readouterr().err
    assert err.strip() == ("error: the runs are not alike: n_test 2 here, 5 in the reference "
                           "(--allow-different compares them anyway)")
    assert main(["compare", str(tmp_path / "b.json"), "--to", str(tmp_path / "a.json"), "--allow-different"]) == 1


# ---- baseline and scale ---------------------------------------------------------------------------------------
def test_the_baseline_is_never_the_first_method_by_accident():
    from reports.tables import baseline_and_reason

    runs = lambda *names: [{"method": n} for n in names]  # noqa: E731
    assert baseline_and_reason(runs("knn", "case-dynamic", "zero-shot"), None)[0] == "case-dynamic"
    assert baseline_and_reason(runs("shortest-k", "knn", "zero-shot"), None)[0] == "zero-shot"
    base, why = baseline_and_reason(runs("knn", "mmr"), None)
    assert base is None and "no paired tests" in why
    assert baseline_and_reason(runs("knn", "mmr"), "mmr") == ("mmr", "Significance baseline: `mmr` (chosen with "
                                                                     "--baseline).")
    with pytest.raises(ConfigError, match="--baseline lens did not run here"):
        baseline_and_reason(runs("knn"), "lens")


def test_one_scale_the_reports_and_files_say_which(tmp_path, data_dir, fake):
    bench.evaluate(["zero-shot", "few-shot"], ["gsm8k"], llm=fake, n_test=4, n_val=2, pool_size=30,
                   data_dir=data_dir, out=tmp_path / "r")
    results = json.loads((tmp_path / "r" / "results.json").read_text())
    assert results["score_scale"] == "0-1" and 0 <= results["runs"][0]["score"] <= 1
    rows = list(csv.DictReader((tmp_path / "r" / "results.csv").open()))
    assert {r["scale"] for r in rows} == {"0-1"}
    report = (tmp_path / "r" / "report.md").read_text()
    assert "Significance baseline: `zero-shot`, since `case-dynamic` did not run" in report
    header = next(line for line in report.splitlines() if line.startswith("| Method"))
    assert "gsm8k (EM ×100 [95% CI], n = 4)" in header
    cell = next(line for line in report.splitlines() if line.startswith("| few-shot"))
    assert re.search(r"\d+\.\d\d\S* \[\d+\.\d, \d+\.\d\]", cell), cell


# ---- plots -----------------------------------------------------------------------------------------------------
def plot_runs(n_methods: int) -> list[dict]:
    runs = []
    for i in range(n_methods):
        calls = 0 if i % 3 == 0 else 10 * (i % 4 + 1)  # zero-call methods and a shared count
        for task in ("rules", "sst2"):
            runs.append({"method": f"method-{i}", "task": task, "metric": "accuracy", "metric_label": "Acc",
                         "score": 0.0, "ci_low": 0.0, "ci_high": 0.0, "n": 24,
                         "llm_calls": {"selection": calls, "inference": 24}, "selection_seconds": 0.0 if i % 3 == 0
                         else 2.0 + i, "selection_time": {"embedding": 0.5, "llm": 1.0, "other": 0.5 + i}
                         if i % 3 else {"embedding": 0.0, "llm": 0.0, "other": 0.0}})
    return runs


@pytest.mark.parametrize("n_methods", [4, 30])
def test_accuracy_vs_calls_separates_zero_call_methods_and_keeps_the_whole_range(tmp_path, n_methods, monkeypatch):
    import matplotlib.axes

    from reports.plots import accuracy_vs_calls

    points = []
    original = matplotlib.axes.Axes.errorbar
    monkeypatch.setattr(matplotlib.axes.Axes, "errorbar",
                        lambda self, x, y, **kw: points.append((self, kw["label"], x[0])) or original(self, x, y, **kw))
    path = accuracy_vs_calls(plot_runs(n_methods), tmp_path / "acc.png")
    axes = {ax for ax, _, _ in points}
    for ax in axes:
        xs = [x for a, _, x in points if a is ax]
        assert len(set(xs)) == len(xs)  # no two methods on one point, zero-call ones included
        assert ax.get_ylim() == (0, 108)  # all scores 0: the axis still spans the metric, not -0.04..0.04
    assert matplotlib.image.imread(path).shape[1] > 800


def test_runtime_chart_draws_no_bar_for_no_time_and_splits_the_rest(tmp_path, monkeypatch):
    import matplotlib.axes

    from reports.plots import selection_runtime_chart

    drawn = []
    original = matplotlib.axes.Axes.barh
    monkeypatch.setattr(matplotlib.axes.Axes, "barh",
                        lambda self, y, width, **kw: drawn.append((kw["label"], list(width))) or
                        original(self, y, width, **kw))
    selection_runtime_chart(plot_runs(6), tmp_path / "rt.png")
    labels = [label for label, _ in drawn]
    assert labels[:3] == ["embedding texts", "LLM calls", "training and search"]
    for _, widths in drawn:
        assert widths[0] == 0 and widths[3] == 0  # methods 0 and 3 took no time: no bar, not a 1 ms one
        assert widths[1] > 0


def test_runtime_chart_labels_a_cell_the_run_lacks_not_run_not_zero(tmp_path, monkeypatch):
    """A method run on one task only (the bandits on GSM8K, the rest on WMT19) is "not run" on the other: a "0 s"
    there would read as a free selector."""
    import matplotlib.axes

    from reports.plots import selection_runtime_chart

    texts = []
    original = matplotlib.axes.Axes.text
    monkeypatch.setattr(matplotlib.axes.Axes, "text",
                        lambda self, x, y, s, **kw: texts.append((self, s)) or original(self, x, y, s, **kw))
    runs = [r for r in plot_runs(4) if not (r["task"] == "sst2" and r["method"] == "method-1")]
    selection_runtime_chart(runs, tmp_path / "rt.png")
    texts = [(ax.get_title(), s) for ax, s in texts]
    assert [s for title, s in texts if title == "sst2"] == ["0 s", "not run", "4.0 s", "0 s"]
    assert "not run" not in [s for title, s in texts if title == "rules"]


def test_simulated_scatter_has_no_empty_panel_and_a_legend_outside(tmp_path):
    from reports.plots import pulls_vs_eps_error

    result = {"method": "lucb", "mean_pulls": 500.0, "eps_error_rate": 0.0, "delta": 0.05}
    path = pulls_vs_eps_error({"pairwise": [result, {**result, "method": "case", "mean_pulls": 80.0}]},
                              tmp_path / "sim.png")
    image = matplotlib.image.imread(path)
    assert image.shape[1] < 2.2 * image.shape[0]  # one panel and a legend beside it, not two panels' width


# ---- help and defaults -------------------------------------------------------------------------------------------
def parsers() -> dict[str, argparse.ArgumentParser]:
    from bench import cli, perf, simulate

    return {"run": cli.run_parser(), "list": cli.list_parser(), "report": cli.report_parser(),
            "compare": cli.compare_parser(), "data": cli.data_parser(), "simulate": simulate.parser(),
            "perf": perf.parser()}


@pytest.mark.parametrize("name", ["run", "list", "report", "compare", "data", "simulate", "perf"])
def test_every_option_has_help_and_shows_its_default(name):
    parser = parsers()[name]
    text = " ".join(parser.format_help().split())
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        assert action.help, f"{name} {action.option_strings or action.dest} has no help"
        if action.default not in (None, False, [], argparse.SUPPRESS):
            shown = " ".join(parser._get_formatter()._expand_help(action).split()) if action.help else ""
            assert "default" in shown, f"{name} {action.option_strings}: default {action.default!r} not shown"
    assert name == "run" or "usage:" in text


def test_list_is_aligned_and_never_cut(capsys):
    assert main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    section = lines[1:lines.index("tasks:")]
    starts = {len(line) - len(line.lstrip()) + len(line.split()[0]) for line in section}
    columns = {re.search(r"\s(task|instance)\s", line).start() for line in section}
    assert len(columns) == 1 and min(columns) >= max(starts)  # one column whatever the name's length
    assert all(line.rstrip().endswith((".", ")")) for line in section)  # whole sentences, not cut mid-word


def test_a_bare_run_shows_the_plan_and_runs_nothing(tmp_path, data_dir, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(runner_mod, "make_backend", lambda spec: pytest.fail("a bare run loaded a model"))
    assert main(["--tasks", "rules", "--data-dir", str(data_dir)]) == 0
    out = capsys.readouterr().out
    assert all(f"| {m} " in out for m in DEMO_METHODS) and "Nothing was run: pass --methods" in out
    assert list(tmp_path.iterdir()) == []


def test_the_default_out_folder_is_new_each_time(monkeypatch):
    args = argparse.Namespace(llm="org/model", seed=3)
    first = default_out(args)
    assert re.fullmatch(r"runs/org_model-seed3-\d{8}-\d{6}", str(first))
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ConfigError, match="needs --out"):
        default_out(args)


def test_the_docs_document_the_item_fields_where_selector_authors_look():
    import dataclasses

    from bench.items import Item

    section = (ROOT / "docs" / "adding-a-selector.md").read_text()
    for item_field in dataclasses.fields(Item):
        assert f"`{item_field.name}`" in section, item_field.name
    assert "`gold_output`" in section


# ---- found by planting bugs in the first-hour features ------------------------------------------------------------
def test_the_eta_is_the_time_left_at_the_rate_so_far():
    bar = Progress(10, "x", enabled=False)
    bar.began -= 30  # 30 s for 3 of 10: 70 s to go
    bar.update(3)
    assert bar.line() == "x: 3/10 it, 0:30 elapsed, ETA 1:10"
    bar.update(7)
    assert bar.line() == "x: 10/10 it, 0:30 elapsed"  # done: no ETA


def test_pulls_made_while_selecting_are_not_counted_as_inference_calls(tmp_path, data_dir, fake, bars):
    from methods.base import Selector

    class PullsPerQuery(Selector):  # a per-query selector that asks the LLM while it selects (like case-dynamic)
        level = "instance"

        def fit(self, ctx):
            self.ctx_ = ctx
            return self

        def select(self, query):
            self.ctx_.oracle.pull(self.ctx_.pool[:self.k], self.ctx_.validation[:1])
            return self.ctx_.pool[:self.k]

    bench.evaluate([PullsPerQuery(k=2)], ["gsm8k"], llm=fake, n_test=5, n_val=2, pool_size=30, data_dir=data_dir,
                   out=tmp_path / "run")
    bar = next(b for b in bars if b.desc.startswith("inference"))
    assert bar.n == bar.total == 5  # three batches of the fake's two; the pulls between them are not these


def test_a_failed_run_never_removes_a_folder_it_did_not_create(tmp_path, data_dir):
    out = tmp_path / "r"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="gave up"):
        bench.evaluate([failing_selector(False)], ["gsm8k"], llm=FakeBackend(), n_test=2, n_val=2, pool_size=30,
                       data_dir=data_dir, out=out)
    assert (out / "notes.txt").read_text() == "mine"


def test_n_test_and_n_val_may_take_every_item_but_not_one_more():
    from bench.items import Item
    from bench.tasks import make_task

    task = make_task("gsm8k")

    def items(split, n):
        return [Item(id=f"gsm8k/{split}:{i}", question=f"{split} question {i}", answer=str(i), split=split)
                for i in range(n)]

    def subsample(n_test, n_val):
        return task.subsample(items("train", 20), items("val", 4), items("test", 6), n_test=n_test, n_val=n_val,
                              pool_size=None, seed=0)

    splits = subsample(6, 4)
    assert (len(splits.test), len(splits.validation)) == (6, 4)
    with pytest.raises(ConfigError,
                       match=r"^--n-test 7 is more than task 'gsm8k' has \(6 test items\); use --n-test all$"):
        subsample(7, 4)
    with pytest.raises(ConfigError, match=r"^--n-val 5 is more than task 'gsm8k' has \(4 validation items\)$"):
        subsample(6, 5)


def test_k_may_equal_the_pool_but_not_exceed_it():
    from bench.tasks import make_task
    from methods.base import create

    task = make_task("gsm8k")
    knn = create("knn", {"k": 5})
    knn.check_splits(task, 5, 2)
    with pytest.raises(ConfigError, match=r"knn: k=5 is larger than the pool of task 'gsm8k' \(4 items\)"):
        knn.check_splits(task, 4, 2)


def test_the_summary_table_shows_scores_and_intervals_x100():
    from reports.results import summary_table

    run = {"method": "knn", "task": "sst2", "metric": "accuracy", "metric_label": "Acc", "score": 0.625,
           "ci_low": 0.5, "ci_high": 0.75, "n": 8, "llm_calls": {"selection": 0, "inference": 8}}
    failed = {**run, "method": "mmr", "score": None, "ci_low": None, "ci_high": None, "warnings": ["w"]}
    lines = summary_table({"runs": [run, failed]}).splitlines()
    assert lines[2].split() == ["knn", "sst2", "Acc", "8", "62.50", "[50.0,", "75.0]", "0/8"]
    assert lines[3].split() == ["mmr", "sst2", "Acc", "8", "FAILED", "0/8", "1"]


def test_first_sentence_reads_past_et_al_and_line_breaks():
    from bench.cli import first_sentence

    assert first_sentence("Few-shot CoT as in Wei et al. (2022), with\n    k demonstrations. More.\n\nOther.") == \
        "Few-shot CoT as in Wei et al. (2022), with k demonstrations."
    assert first_sentence("KNN of Rubin et al. Their retriever. Rest.") == "KNN of Rubin et al. Their retriever."
    assert first_sentence(None) == ""


@pytest.mark.parametrize("setting", ["tasks", "n_test", "n_val", "pool_size", "seed", "k", "llm", "generation",
                                     "selection_llm", "selection_generation", "scoring", "calibration", "reward"])
def test_compare_checks_every_setting_the_scores_depend_on(setting):
    from bench.compare import differing_settings

    assert differing_settings({"config": {setting: 1}}, {"config": {setting: 2}}) == \
        [f"{setting} 1 here, 2 in the reference"]
    assert differing_settings({"config": {setting: 1, "out": "a"}}, {"config": {setting: 1, "out": "b"}}) == []


def test_report_cells_and_headers_on_the_x100_scale():
    from reports.tables import _task_header, score_cell

    assert score_cell({"score": 0.625, "ci_low": 0.5, "ci_high": 0.75}, None, "github") == "62.50 [50.0, 75.0]"
    assert score_cell({"score": 0.5}, None, "github") == "50.00"
    row = {"task": "sst2", "metric": "accuracy", "metric_label": "Acc", "n": 8, "score": 0.5}
    failed = {**row, "n": 0, "score": None}
    assert _task_header("sst2", [row, failed]) == "sst2 (Acc ×100 [95% CI], n = 8)"
    assert _task_header("sst2", [row, {**row, "n": 6}]) == "sst2 (Acc ×100 [95% CI], n = 6–8)"


def test_selection_time_splits_into_embedding_llm_and_the_rest():
    from bench.records import FitSummary
    from reports.results import selection_time

    fit = FitSummary("knn", "sst2", "task", selection_seconds=10.0, selection_calls=0, budget=None,
                     budget_exhausted=False, llm_seconds=3.0, embedding_seconds=2.0)
    assert selection_time(fit) == {"embedding": 2.0, "llm": 3.0, "other": 5.0}
    assert selection_time(None) == {"embedding": 0.0, "llm": 0.0, "other": 0.0}


def test_the_encoder_adds_up_its_seconds_and_shows_long_encodes(monkeypatch):
    import numpy as np

    import bench.encoder as encoder_mod

    opened = []

    class Recording(Progress):
        def __init__(self, total, desc, enabled=True, **kwargs):
            super().__init__(total, desc, False, **kwargs)
            self.shown = enabled
            opened.append(self)

    class SlowModel:
        def encode(self, texts, **kwargs):
            time.sleep(0.05)
            return np.ones((len(texts), 4))

    monkeypatch.setattr(encoder_mod, "Progress", Recording)
    encoder = encoder_mod.Encoder(model="fake")
    encoder._model = SlowModel()
    encoder.encode([f"text {i}" for i in range(1100)])  # three chunks of at most 512
    assert opened[0].shown and opened[0].n == opened[0].total == 1100
    first = encoder.seconds
    assert first >= 0.15
    encoder.encode(["one more"])
    assert not opened[1].shown  # a short encode: no progress lines
    assert encoder.seconds >= first + 0.05  # added up over encodes, not the last one's


def test_the_fit_bar_moves_once_calls_are_answered_also_from_per_query_oracles(tmp_path):
    from bench.items import Item
    from bench.oracle import RewardOracle
    from bench.tasks import make_task

    backend = FakeBackend()
    client = LLMClient(backend, CallCache(tmp_path / "c.sqlite"))
    oracle = RewardOracle(client, make_task("gsm8k").configure(reward="metric"), "m", bertscore=None)
    seen = []
    oracle.on_calls = lambda calls: seen.append((calls, len(backend.prompts)))  # (counted, answered by then)
    demos = [Item(id=f"gsm8k/train:{i}", question=f"Q{i}", answer=str(i), rationale="r") for i in range(2)]
    items = [Item(id=f"gsm8k/val:{i}", question=f"V{i}", answer=str(i)) for i in range(2)]
    oracle.child(None).pull(demos, items)
    assert seen == [(2, 2)]
    oracle.loglik(["context a", "context b"], [" x", " y"])
    assert seen[-1] == (4, 4)


def setup_project(tmp_path) -> Path:
    """scripts/setup.sh in a project folder of its own, with a .venv whose pip only writes down what it was asked."""
    import shutil

    project = tmp_path / "project"
    (project / "scripts").mkdir(parents=True)
    for name in ("setup.sh", "_help.sh"):  # _help.sh: the --help guard every script sources first
        shutil.copy(ROOT / "scripts" / name, project / "scripts" / name)
    (project / "pyproject.toml").write_text("")
    (project / "constraints.txt").write_text("")
    venv = project / ".venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").write_text("#!/bin/sh\nexit 0\n")
    (venv / "pip").write_text('#!/bin/sh\necho "$*" >> "$(dirname "$0")/../pip.log"\n')
    for tool in ("python", "pip"):
        (venv / tool).chmod(0o755)
    return project


def run_setup(project: Path, *args: str):
    import subprocess

    return subprocess.run(["bash", str(project / "scripts" / "setup.sh"), *args], capture_output=True, text=True,
                          timeout=60)


@pytest.mark.parametrize("args, extras", [((), "embedded,test,docs"), (("--with-llamacpp",), "embedded,test,docs,llamacpp")])
def test_setup_installs_llama_cpp_only_when_asked(tmp_path, args, extras):
    project = setup_project(tmp_path)
    proc = run_setup(project, *args)
    assert proc.returncode == 0, proc.stderr
    installs = (project / ".venv" / "pip.log").read_text().splitlines()
    assert sum(f"-e .[{extras}]" in line for line in installs) == 1, installs
    assert ("llamacpp" in "".join(installs)) == ("--with-llamacpp" in args)


def test_setup_refuses_an_unknown_option_before_installing_anything(tmp_path):
    project = setup_project(tmp_path)
    proc = run_setup(project, "--with-llama")
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: unknown option --with-llama (scripts/setup.sh [--with-llamacpp])"
    assert not (project / ".venv" / "pip.log").exists()


def test_a_calibrated_task_counts_the_content_free_calls_of_every_demonstration_set(tmp_path, data_dir, bars):
    from methods.base import Selector
    from test_classification import CopyingClassifier

    class Rotating(Selector):  # a demonstration set of its own for each query
        level = "instance"

        def fit(self, ctx):
            self.pool_, self.queries_ = ctx.pool, 0
            return self

        def select(self, query):
            self.queries_ += 1
            return self.pool_[self.queries_:self.queries_ + self.k]

    bench.evaluate([Rotating(k=2)], ["sst2"], llm=CopyingClassifier(["Negative", "Positive"]), n_test=6, n_val=2,
                   pool_size=30, data_dir=data_dir, calibration="contextual", out=tmp_path / "run")
    bar = next(b for b in bars if b.desc.startswith("inference"))
    assert bar.n == bar.total == 6 + 6 * 3  # six items, and three content-free inputs for each of six sets


def test_a_resume_mismatch_names_a_setting_the_earlier_run_did_not_have(tmp_path, data_dir, fake, capsys):
    out = tmp_path / "r"
    assert main(run_args(data_dir, out)) == 0
    saved = json.loads((out / "config.json").read_text())
    del saved["identity"]["seed"]  # a run from before the setting existed
    (out / "config.json").write_text(json.dumps(saved))
    capsys.readouterr()
    assert main(["--resume", "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "(seed: null there, 0 now)" in err and err.count("\n") == 1


def test_resume_without_out_is_one_line_and_starts_nothing(tmp_path, data_dir, fake, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    args = run_args(data_dir, "unused")
    del args[args.index("--out"):args.index("--out") + 2]
    assert main([*args, "--resume"]) == 2
    assert capsys.readouterr().err.strip() == "error: --resume needs --out DIR, the run folder to continue"
    assert list(tmp_path.iterdir()) == [] and fake.prompts == []
