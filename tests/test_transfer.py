"""The transfer setting: a selection LLM apart from the inference LLM, and saved selections replayed."""
from dataclasses import replace

import pytest

import bench.runner as runner_mod
from bench.llm import GenerationParams, LLMSpec
from bench.runner import Runner
from fakes import FakeBackend, varied
from test_bandit_selectors import SMALL
from test_runner import lines, make_config

METHODS = ["few-shot", "knn", "dearicl-static", "dearicl-dynamic", "case-dynamic"]


@pytest.fixture
def backends(monkeypatch):
    made: dict[str, FakeBackend] = {}

    def make(spec):
        made.setdefault(spec.name, FakeBackend(respond=varied, model_id=f"fake-{spec.name}", batch_size=8))
        return made[spec.name]

    monkeypatch.setattr(runner_mod, "make_backend", make)
    return made


def run(tmp_path, data_dir, out, llm, **kw):
    cfg = make_config(tmp_path, data_dir, methods=METHODS, tasks=["gsm8k"], n_test=3, n_val=3, pool_size=40,
                      method_params=SMALL, out=tmp_path / out, llm=LLMSpec(name=llm, backend="hf"),
                      selection_llm=LLMSpec(name="selector", backend="hf"),
                      **{"selections": tmp_path / "store", **kw})
    return Runner(cfg).run()


def test_changing_only_the_inference_llm_replays_every_selection(tmp_path, data_dir, backends):
    first = run(tmp_path, data_dir, "a", "answerer-1")
    second = run(tmp_path, data_dir, "b", "answerer-2")
    calls_a, calls_b = lines(tmp_path / "a" / "calls.jsonl"), lines(tmp_path / "b" / "calls.jsonl")
    # selection calls go to the selection LLM, inference calls to the inference LLM
    assert {c["model"] for c in calls_a if c["phase"] == "selection"} == {"fake-selector"}
    assert {c["model"] for c in calls_a if c["phase"] == "inference"} == {"fake-answerer-1"}
    assert sum(r["llm_calls"]["selection"] for r in first["runs"]) > 0
    # the second run: not one selection-phase call, the same demonstrations for every item
    assert not [c for c in calls_b if c["phase"] == "selection"]
    assert all(r["llm_calls"]["selection"] == 0 and r["selection_reused_from"] for r in second["runs"])
    demos = lambda out: {(r["method"], r["item_id"]): r["demo_ids"] for r in lines(tmp_path / out / "records.jsonl")}
    assert demos("a") == demos("b")
    recs = lines(tmp_path / "b" / "records.jsonl")
    assert {(r["llm"], r["selection_llm"]) for r in recs} == {("fake-answerer-2", "fake-selector")}
    assert second["selection_llm"] == "fake-selector" and second["llm"] == "fake-answerer-2"
    report = (tmp_path / "b" / "report.md").read_text()
    assert "`fake-answerer-2`" in report and "`fake-selector`" in report and "replayed" in report


def test_a_different_selection_setting_fits_again(tmp_path, data_dir, backends):
    run(tmp_path, data_dir, "a", "answerer-1")
    # the oracle's decoding is part of what a selection depends on
    other = run(tmp_path, data_dir, "b", "answerer-1",
                selection_generation=GenerationParams(max_new_tokens=8, temperature=0.0))
    assert sum(r["llm_calls"]["selection"] for r in other["runs"]) > 0
    assert not any(r["selection_reused_from"] for r in other["runs"])


def test_a_published_run_folder_is_replayed_from_its_records(tmp_path, data_dir, backends):
    first = run(tmp_path, data_dir, "a", "answerer-1")
    # another session: no saved-selection store, only the published folder (fits.jsonl, records.jsonl)
    second = run(tmp_path, data_dir, "b", "answerer-2", selections=tmp_path / "empty", replay_from=[tmp_path / "a"])
    assert not (tmp_path / "empty").exists() or not list((tmp_path / "empty").iterdir())
    assert sum(r["llm_calls"]["selection"] for r in first["runs"]) > 0
    assert all(r["llm_calls"]["selection"] == 0 and r["selection_reused_from"] == str(tmp_path / "a")
               for r in second["runs"])
    demos = lambda out: {(r["method"], r["item_id"]): r["demo_ids"] for r in lines(tmp_path / out / "records.jsonl")}
    assert demos("a") == demos("b")
    # a replayed fit keeps the original's trace and key, so the replay can be replayed in turn
    fits = {(f["method"]): f for f in lines(tmp_path / "b" / "fits.jsonl")}
    original = {(f["method"]): f for f in lines(tmp_path / "a" / "fits.jsonl")}
    assert all(fits[m]["selection_key"] == original[m]["selection_key"] != "" for m in METHODS)
    assert fits["dearicl-static"]["trace"] == original["dearicl-static"]["trace"]
    # another seed is another selection: the published folder does not answer it
    third = run(tmp_path, data_dir, "c", "answerer-1", selections=tmp_path / "empty", replay_from=[tmp_path / "a"],
                seed=2)
    assert not any(r["selection_reused_from"] for r in third["runs"])
    assert all(r["llm_calls"]["selection"] > 0 for r in third["runs"] if r["method"] not in ("few-shot", "knn"))


def test_inference_decoding_alone_does_not_change_selections(tmp_path, data_dir, backends):
    run(tmp_path, data_dir, "a", "answerer-1")
    # a second inference configuration of the same model: only the answering decoding differs
    cfg_gen = GenerationParams(max_new_tokens=16, temperature=0.0)
    other = run(tmp_path, data_dir, "b", "answerer-1", generation=replace(cfg_gen, max_new_tokens=24),
                selection_generation=cfg_gen)
    assert all(r["llm_calls"]["selection"] == 0 for r in other["runs"])


def test_merged_report_has_a_column_group_per_run_and_tokens_add_up(tmp_path, data_dir, backends):
    from bench.cli import main

    run(tmp_path, data_dir, "a", "answerer-1")
    run(tmp_path, data_dir, "b", "answerer-2")
    merged = tmp_path / "merged.md"
    assert main(["report", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(merged)]) == 0
    text = merged.read_text()
    header = next(line for line in text.splitlines() if line.startswith("| Method"))
    assert "fake-answerer-1: gsm8k" in header and "fake-answerer-2: gsm8k" in header
    assert "**Instance level (bandit + LTR)**" in text and "`fake-selector`" in text
    # token totals in calls.jsonl add up to the report's token table, and prices turn them into cost
    prices = tmp_path / "prices.yaml"
    prices.write_text("fake-answerer: {input: 2.0, output: 10.0}\nfake-selector: {input: 1.0, output: 0}\n")
    assert main(["report", str(tmp_path / "a"), "--prices", str(prices)]) == 0
    report = (tmp_path / "a" / "report.md").read_text()
    calls = [c for c in lines(tmp_path / "a" / "calls.jsonl") if not c["cached"]]
    rows = [line.split("|") for line in report.split("Cost (USD)")[1].split("\n\n")[0].splitlines()[2:]]
    table = {(r[1].strip(), r[2].strip(), r[3].strip()): [c.strip() for c in r[5:10]] for r in rows}
    for method in METHODS:
        for phase in ("selection", "inference"):
            mine = [c for c in calls if c["method"] == method and c["phase"] == phase]
            if not mine:
                continue
            n, prompt, prefilled, completion, cost = table[(method, "gsm8k", phase)]
            assert int(n) == len(mine) and int(prompt) == sum(c["prompt_tokens"] for c in mine)
            assert int(prefilled) == sum(c["prefilled_tokens"] for c in mine)
            assert int(completion) == sum(c["completion_tokens"] for c in mine)
            rate = (2.0, 10.0) if phase == "inference" else (1.0, 0.0)
            expected = (int(prompt) * rate[0] + int(completion) * rate[1]) / 1e6
            assert float(cost) == pytest.approx(expected, abs=1e-6)


def test_bad_price_file_is_one_line_error(tmp_path):
    from bench.errors import ConfigError
    from reports.costs import PriceTable

    bad = tmp_path / "p.yaml"
    bad.write_text("gpt-4o-mini: {input: 0.15}\n")
    with pytest.raises(ConfigError, match="needs 'input' and 'output'"):
        PriceTable.load(bad)
    with pytest.raises(ConfigError, match="price file: no file at"):
        PriceTable.load(tmp_path / "missing.yaml")
    table = PriceTable.load(bad.with_name("ok.yaml")) if bad.with_name("ok.yaml").write_text(
        "gemma3-270m: {input: 0, output: 1}\n") else None
    assert table.for_model("gemma3-270m-q4_k_m@abc").output_per_m == 1.0  # a key matches as a prefix
    assert table.for_model("other") is None


def test_exemplar_table_shows_disagreements(tmp_path):
    from bench.records import ItemRecord
    from reports.exemplars import exemplar_table

    def rec(method, item, score, demos):
        return ItemRecord(method, "aquarat", item, [], "h", "o", "p", "g", score, 0.1, query=f"Question {item}?",
                          demo_questions=demos)

    records = [rec("dearicl-dynamic", "t1", 1.0, ["Profit and loss " * 30, "Interest"]),
               rec("neuralndcg", "t1", 0.0, ["Trains", "Ages"]),
               rec("dearicl-dynamic", "t2", 1.0, ["x"]), rec("neuralndcg", "t2", 1.0, ["y"])]
    (a, b), table, found = exemplar_table(records, n=5, limit=40)
    assert (a, b) == ("dearicl-dynamic", "neuralndcg") and found == 1
    row = [line for line in table.splitlines() if "Question t1?" in line][0]
    assert "1. Profit and loss" in row and "…" in row and "2. Interest" in row and row.rstrip(" |").endswith("dearicl-dynamic")
    assert "Question t2?" not in table  # both right: no disagreement


def test_selection_key_covers_the_algorithm_modules_a_selector_imports(tmp_path, monkeypatch):
    # a saved DEARICL selection must not be replayed after a change in dearicl/bandit.py, nor a plugin's after a
    # change in a helper module of its own package
    import sys
    from pathlib import Path

    import dearicl.bandit
    import methods.dearicl_static
    from methods.base import code_version

    files: list[Path] = []
    from methods.base import _with_imports
    _with_imports(Path(methods.dearicl_static.__file__), "methods.dearicl_static", {"methods", "dearicl"}, files)
    assert Path(dearicl.bandit.__file__) in files and Path(methods.dearicl_static.__file__) == files[0]
    assert not any("/bench/" in str(path) for path in files)  # the LLM layer is keyed by the answer cache
    import methods.knn
    knn_files: list[Path] = []
    _with_imports(Path(methods.knn.__file__), "methods.knn", {"methods", "dearicl"}, knn_files)
    assert [path.name for path in knn_files] == ["knn.py", "base.py"]  # not every selector via the registry

    package = tmp_path / "myplug"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "helper.py").write_text("STEP = 1\n")
    (package / "sel.py").write_text("from methods.base import Selector\nfrom .helper import STEP\n\n\n"
                                    "class Mine(Selector):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    from myplug.sel import Mine

    before = code_version(Mine)
    assert code_version(Mine) == before
    (package / "helper.py").write_text("STEP = 2\n")
    assert code_version(Mine) != before
    sys.modules.pop("myplug.sel"), sys.modules.pop("myplug.helper"), sys.modules.pop("myplug")
