import json
from pathlib import Path

import pytest

import bench.runner as runner_mod
from bench.errors import ConfigError, LLMError
from bench.llm import GenerationParams, LLMSpec
from bench.metrics import BertScoreConfig
from bench.runner import RunConfig, Runner
from fakes import FakeBackend

from reports.results import TIMING_KEYS as TIMING


def make_config(tmp_path: Path, data_dir: Path, **kw) -> RunConfig:
    base = dict(methods=["zero-shot", "few-shot", "knn", "mmr"], tasks=["gsm8k", "aquarat"],
                llm=LLMSpec(name="fake", backend="hf"), out=tmp_path / "run", data_dir=data_dir, n_test=5,
                n_val=4, pool_size=60, seed=1, generation=GenerationParams(max_new_tokens=16, temperature=0.0),
                bertscore=BertScoreConfig(model="local"), progress=False)
    base.update(kw)
    return RunConfig(**base)


@pytest.fixture
def fake_backend(monkeypatch):
    holder = {"backend": FakeBackend()}
    monkeypatch.setattr(runner_mod, "make_backend", lambda spec: holder["backend"])
    return holder


def lines(path: Path) -> list[dict]:
    return [json.loads(l) for l in path.read_text().splitlines() if l.strip()]


def strip_timing(results: dict) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in TIMING} for r in results["runs"]]


def test_run_writes_four_outputs_with_schema(tmp_path, data_dir, fake_backend):
    results = Runner(make_config(tmp_path, data_dir)).run()
    out = tmp_path / "run"
    for name in ("records.jsonl", "calls.jsonl", "results.json", "report.md"):
        assert (out / name).exists(), name
    records = lines(out / "records.jsonl")
    assert len(records) == 4 * 2 * 5
    rec = records[0]
    assert set(rec) >= {"method", "task", "item_id", "demo_ids", "prompt_hash", "output", "prediction", "gold",
                        "score", "latency_s"}
    on_disk = json.loads((out / "results.json").read_text())
    assert on_disk["runs"] == results["runs"]
    run = next(r for r in on_disk["runs"] if r["method"] == "knn" and r["task"] == "gsm8k")
    assert set(run) >= {"method", "task", "metric", "score", "n", "llm_calls", "selection_seconds",
                        "inference_seconds_per_query"}
    assert run["metric"] == "exact_match" and run["n"] == 5
    assert run["llm_calls"] == {"selection": 0, "inference": 5}
    # The fake answers with the number of demonstrations it saw: zero-shot 0, the others k = 5.
    by_method = {r["method"]: r for r in records if r["task"] == "gsm8k"}
    assert by_method["zero-shot"]["prediction"] == "0" and by_method["knn"]["prediction"] == "5"
    assert all(len(r["demo_ids"]) == (0 if r["method"] == "zero-shot" else 5) for r in records)
    # Test items are never demonstrations.
    test_ids = {r["item_id"] for r in records}
    assert not test_ids & {d for r in records for d in r["demo_ids"]}
    calls = lines(out / "calls.jsonl")
    assert len(calls) == 40 and {c["phase"] for c in calls} == {"inference"}


def test_same_seed_same_selection(tmp_path, data_dir, fake_backend):
    Runner(make_config(tmp_path / "a", data_dir, methods=["few-shot"])).run()
    Runner(make_config(tmp_path / "b", data_dir, methods=["few-shot"])).run()
    Runner(make_config(tmp_path / "c", data_dir, methods=["few-shot"], seed=2)).run()
    demos = [[r["demo_ids"] for r in lines(tmp_path / x / "run" / "records.jsonl")] for x in "abc"]
    assert demos[0] == demos[1] and demos[0] != demos[2]


def test_killed_run_resumes_without_repeating_calls(tmp_path, data_dir, fake_backend):
    full = Runner(make_config(tmp_path / "full", data_dir)).run()
    # Same run, but the LLM dies after 13 answered calls (mid-method, mid-batch).
    fake_backend["backend"] = FakeBackend(fail_after=13)
    cfg = make_config(tmp_path / "cut", data_dir)
    with pytest.raises(LLMError):
        Runner(cfg).run()
    out = tmp_path / "cut" / "run"
    kept = lines(out / "records.jsonl")
    assert 0 < len(kept) < 40  # what was answered before the failure is kept
    fake_backend["backend"] = FakeBackend()
    cfg.resume = True
    resumed = Runner(cfg).run()
    calls = lines(out / "calls.jsonl")
    uncached = [c["key"] for c in calls if not c["cached"]]
    assert len(uncached) == len(set(uncached)) == 40  # no answered call was made twice
    assert strip_timing(resumed) == strip_timing(full)
    assert len(lines(out / "records.jsonl")) == 40


def test_out_dir_guard_and_resume_mismatch(tmp_path, data_dir, fake_backend):
    cfg = make_config(tmp_path, data_dir, methods=["zero-shot"], tasks=["gsm8k"])
    Runner(cfg).run()
    with pytest.raises(ConfigError, match="already holds a run; pass --resume"):
        Runner(cfg).run()
    other = make_config(tmp_path, data_dir, methods=["zero-shot"], tasks=["gsm8k"], seed=9, resume=True)
    with pytest.raises(ConfigError, match=r"settings differ .*seed"):
        Runner(other).run()
    # adding a method to a finished run with --resume works and keeps the old records
    more = make_config(tmp_path, data_dir, methods=["few-shot"], tasks=["gsm8k"], resume=True)
    results = Runner(more).run()
    assert [r["method"] for r in results["runs"]] == ["zero-shot", "few-shot"]


def test_a_selectors_changed_settings_redo_its_cells_only_and_keep_the_old_rows(tmp_path, data_dir, fake_backend,
                                                                                   caplog):
    old, new = {"mmr": {"lam": 0.2}}, {"mmr": {"lam": 0.95}}
    common = dict(methods=["knn", "mmr"], tasks=["gsm8k"])
    fresh = Runner(make_config(tmp_path / "fresh", data_dir, method_params=new, **common)).run()
    Runner(make_config(tmp_path, data_dir, method_params=old, **common)).run()
    out = tmp_path / "run"
    before = lines(out / "records.jsonl")
    # not run now (--only knn): mmr's rows stay, and config.json goes on giving the settings they were run with
    Runner(make_config(tmp_path, data_dir, method_params=new, only=["knn"], resume=True, **common)).run()
    assert "mmr's settings differ from those its cells were run with (params.lam 0.2 -> 0.95)" in caplog.text
    assert lines(out / "records.jsonl") == before and not (out / "superseded").exists()
    assert json.loads((out / "config.json").read_text())["cells"]["mmr"]["params"]["lam"] == 0.2
    # run now: mmr's cells are redone, knn's are not, and the old rows are set aside with their settings
    redone = Runner(make_config(tmp_path, data_dir, method_params=new, resume=True, **common)).run()
    assert strip_timing(redone) == strip_timing(fresh) and redone["cells"]["mmr"]["params"]["lam"] == 0.95
    [aside] = (out / "superseded").iterdir()
    assert lines(aside / "records.jsonl") == [r for r in before if r["method"] == "mmr"]
    assert {c["method"] for c in lines(aside / "calls.jsonl")} == {"mmr"}
    assert json.loads((aside / "cells.json").read_text())["mmr"]["params"]["lam"] == 0.2
    records = lines(out / "records.jsonl")
    assert [r for r in records if r["method"] == "knn"] == [r for r in before if r["method"] == "knn"]
    assert len(records) == 10 and json.loads((out / "config.json").read_text())["cells"]["mmr"]["params"]["lam"] == 0.95
    # a config.json from before "cells" (a selector's settings in the run's identity) still resumes
    config = json.loads((out / "config.json").read_text())
    cells = config.pop("cells")
    config["identity"]["method_params"] = {m: {k: v for k, v in c["params"].items() if k != "k"} for m, c in cells.items()}
    (out / "config.json").write_text(json.dumps(config))
    Runner(make_config(tmp_path, data_dir, method_params=new, resume=True, **common)).run()
    assert lines(out / "records.jsonl") == records and len(list((out / "superseded").iterdir())) == 1


def test_only_runs_some_cells_now_in_its_order_and_a_resume_runs_the_rest(tmp_path, data_dir, fake_backend):
    whole = Runner(make_config(tmp_path / "whole", data_dir, tasks=["gsm8k"])).run()
    cfg = make_config(tmp_path, data_dir, tasks=["gsm8k"], only=["mmr", "zero-shot"])
    first = Runner(cfg).run()
    assert [r["method"] for r in first["runs"]] == ["zero-shot", "mmr"]  # results list every finished cell
    assert [json.loads(line)["method"] for line in (tmp_path / "run" / "records.jsonl").read_text().splitlines()][::5] \
        == ["mmr", "zero-shot"]  # --only's order
    # the run's method list stays --methods', so the same identity resumes with the other cells
    assert json.loads((tmp_path / "run" / "config.json").read_text())["methods"] == ["zero-shot", "few-shot", "knn", "mmr"]
    rest = Runner(make_config(tmp_path, data_dir, tasks=["gsm8k"], only=["few-shot", "knn"], resume=True)).run()
    assert strip_timing(rest) == strip_timing(whole)
    with pytest.raises(ConfigError, match=r"--only names lens, which --methods does not include \(methods: zero-shot"):
        Runner(make_config(tmp_path / "bad", data_dir, only=["lens"]))


def test_bad_names_fail_before_any_work(tmp_path, data_dir, fake_backend):
    with pytest.raises(ConfigError, match="unknown method 'nope'"):
        Runner(make_config(tmp_path, data_dir, methods=["nope"]))
    with pytest.raises(ConfigError, match="unknown task 'math'"):
        Runner(make_config(tmp_path, data_dir, tasks=["math"]))
    with pytest.raises(ConfigError, match="unknown LLM 'gpt-5'"):
        Runner(make_config(tmp_path, data_dir, llm=LLMSpec(name="gpt-5")))
    with pytest.raises(ConfigError, match="method 'mmr' has no parameter lambda_"):
        Runner(make_config(tmp_path, data_dir, method_params={"mmr": {"lambda_": 0.3}}))
    assert not (tmp_path / "run").exists()


def test_k_larger_than_pool(tmp_path, data_dir, fake_backend):
    cfg = make_config(tmp_path, data_dir, methods=["knn"], tasks=["aquarat"], pool_size=3)
    with pytest.raises(ConfigError, match=r"knn: k=5 is larger than the pool of task 'aquarat' \(3 items\)"):
        Runner(cfg).run()


def test_all_expands_to_every_registered_method(tmp_path, data_dir, fake_backend):
    r = Runner(make_config(tmp_path, data_dir, methods=["all"], tasks=["gsm8k"]))
    assert {"zero-shot", "few-shot", "knn", "mmr"} <= set(r.methods)
