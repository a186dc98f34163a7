"""--k-sweep (bench/k_sweep.py, reports/k_sweep.py): every selector at several k in one command, a run folder per
k, one shared LLM cache, a resumable sweep, and the longest prompt checked against the model's context before any
model loads."""
import json

import pytest

import bench.runner as runner_mod
from bench.cli import main
from bench.errors import ConfigError
from bench.run_options import RunOptions
from fakes import RulesLearner

ARGS = ["--methods", "few-shot,knn", "--tasks", "rules", "--n-test", "24", "--n-val", "2", "--pool-size", "60",
        "--scoring", "rank", "--llm", "gemma3-270m", "--no-progress", "--seed", "3"]


def test_a_sweep_runs_each_k_in_its_folder_and_reports_accuracy_vs_k(tmp_path, monkeypatch, capsys):
    learner = RulesLearner()
    monkeypatch.setattr(runner_mod, "make_backend", lambda spec: learner)
    out = tmp_path / "sweep"
    assert main([*ARGS, "--k-sweep", "4,1,2", "--out", str(out)]) == 0
    assert "context checked" in capsys.readouterr().out
    scores = {}
    for k in (1, 2, 4):
        records = [json.loads(line) for line in (out / f"k={k}" / "records.jsonl").read_text().splitlines()]
        assert {len(r["demo_ids"]) for r in records} == {k} and len(records) == 2 * 24
        results = json.loads((out / f"k={k}" / "results.json").read_text())
        scores[k] = {r["method"]: r["score"] for r in results["runs"]}
        assert not (out / f"k={k}" / "cache.sqlite").exists()  # the sweep's one cache
    assert (out / "cache.sqlite").is_file() and (out / "accuracy_vs_k.png").stat().st_size > 10_000
    # random demonstrations show the query's rule more often as k grows; the nearest already at k = 1
    assert scores[1]["few-shot"] < scores[4]["few-shot"] and scores[1]["knn"] == 1.0
    table = (out / "k-sweep.md").read_text()
    assert "| method   | k=1" in table and table.count("| few-shot |") == 1 and "## rules" in table
    rows = json.loads((out / "k-sweep.json").read_text())["rows"]
    assert {(r["method"], r["k"]) for r in rows} == {(m, k) for m in ("few-shot", "knn") for k in (1, 2, 4)}
    assert [r["score"] for r in rows if r["method"] == "few-shot"] == [scores[k]["few-shot"] for k in (1, 2, 4)]

    scored = learner.scored
    (out / "k-sweep.md").unlink()
    assert main(["--resume", "--out", str(out), "--no-progress"]) == 0  # the sweep's own options, read back
    assert learner.scored == scored and (out / "k-sweep.md").read_text() == table  # nothing answered again


def test_a_k_over_the_models_context_is_one_line_before_any_model_loads(tmp_path, monkeypatch, capsys):
    def no_model(spec):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(runner_mod, "make_backend", no_model)
    argv = [*ARGS, "--pool-size", "3000", "--llm", "smollm2-135m", "--k-sweep", "8,64,1500",
            "--out", str(tmp_path / "sweep")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "k=1500 prompts of rules reach ~" in err
    assert "over smollm2-135m's 8192-token context; the k that fit: 8,64" in err
    assert not (tmp_path / "sweep").exists()


def test_k_values_parse_sorted_and_distinct_from_a_flag_or_a_config_list(tmp_path):
    assert RunOptions.from_mapping({"k_sweep": "4,1,2,2"}, "x").k_sweep == [1, 2, 4]
    assert RunOptions.from_mapping({"k_sweep": [8, 2]}, "x").k_sweep == [2, 8]
    for bad in ("0,2", "two", ""):
        with pytest.raises(ConfigError):
            RunOptions.from_mapping({"k_sweep": bad}, "x")


def test_a_sweep_needs_methods(tmp_path, capsys):
    assert main(["--tasks", "rules", "--k-sweep", "1,2", "--out", str(tmp_path / "s")]) == 2
    assert "--k-sweep runs --methods at every k" in capsys.readouterr().err


def test_split_seed_keeps_the_items_while_the_seed_varies_the_selection(tmp_path, monkeypatch):
    monkeypatch.setattr(runner_mod, "make_backend", lambda spec: RulesLearner())
    argv = ["--methods", "few-shot", "--tasks", "rules", "--n-test", "6", "--n-val", "2", "--pool-size", "40", "--k",
            "2", "--scoring", "rank", "--no-progress"]
    seen = {}
    for name, extra in (("s0", ["--seed", "0", "--split-seed", "0"]), ("s1", ["--seed", "1", "--split-seed", "0"]),
                        ("plain1", ["--seed", "1"])):
        assert main([*argv, *extra, "--out", str(tmp_path / name)]) == 0
        records = [json.loads(line) for line in (tmp_path / name / "records.jsonl").read_text().splitlines()]
        seen[name] = ([r["item_id"] for r in records], [tuple(r["demo_ids"]) for r in records])
        config = json.loads((tmp_path / name / "config.json").read_text())
        assert ("split_seed" in json.dumps(config)) == (name != "plain1")  # in the run's identity when given
    assert seen["s0"][0] == seen["s1"][0] != seen["plain1"][0]  # the same items, unless the seed draws them
    assert seen["s0"][1] != seen["s1"][1]  # the seed still draws the demonstrations
