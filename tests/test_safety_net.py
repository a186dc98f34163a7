"""The CI regression sees behaviour: fingerprints of what each cell selected and answered, a compare that names
changed cells with an example, an explicit accept, and the scale each fit ran at printed beside its score."""
import json
import shutil

import pytest

import bench
from bench.cli import main
from fakes import FakeBackend


def run(tmp_path, data_dir, name, methods=("zero-shot", "knn", "case-static"), **options):
    return bench.evaluate(list(methods), ["gsm8k"], llm=FakeBackend(), n_test=4, n_val=2, pool_size=30, k=2,
                          data_dir=data_dir, out=tmp_path / name, param=["case-static.n_arms=6",
                                                                         "case-static.max_pulls=4",
                                                                         "case-static.cold_start=2",
                                                                         "case-static.m=2"], **options)


def test_every_row_carries_a_fingerprint_of_its_selections_and_outputs(tmp_path, data_dir):
    results = run(tmp_path, data_dir, "a")
    again = run(tmp_path, data_dir, "b")
    for row, same in zip(results["runs"], again["runs"]):
        assert set(row["fingerprint"]) == {"demos", "outputs"} and len(row["items"]) == row["n"] == 4
        assert row["fingerprint"] == same["fingerprint"]  # reproducible: seeded, greedy
    knn = next(r for r in results["runs"] if r["method"] == "knn")
    records = [json.loads(line) for line in (tmp_path / "a" / "records.jsonl").read_text().splitlines()]
    assert {r["item_id"]: r["demo_ids"] for r in records if r["method"] == "knn"} == \
        {item: entry["demos"] for item, entry in knn["items"].items()}
    zero = next(r for r in results["runs"] if r["method"] == "zero-shot")
    assert zero["fingerprint"]["demos"] != knn["fingerprint"]["demos"]


def test_compare_names_a_changed_selector_and_accept_makes_it_the_reference(tmp_path, data_dir, capsys):
    run(tmp_path, data_dir, "ref")
    reference = tmp_path / "reference.json"
    shutil.copyfile(tmp_path / "ref" / "results.json", reference)
    # the same run, but knn now picks different demonstrations (its ranking turned upside down)
    from methods.knn import KNN

    original = KNN.query_similarities
    KNN.query_similarities = lambda self, query: -original(self, query)
    try:
        run(tmp_path, data_dir, "changed")
    finally:
        KNN.query_similarities = original
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "changed"), "--to", str(reference), "--tolerance", "1"]) == 1
    out = capsys.readouterr().out
    status = {(cells[0], cells[2]): cells[-1] for cells in
              ([c.strip() for c in line.split("|")[1:-1]] for line in out.splitlines() if line.startswith("| "))}
    assert status[("knn", "fingerprint")] == "CHANGED"
    assert status[("zero-shot", "fingerprint")] == status[("case-static", "fingerprint")] == "ok"
    line = next(line for line in out.splitlines() if line.startswith("- knn on gsm8k: demonstrations changed"))
    assert "for 4 of 4 items; e.g. gsm8k/" in line and "->" in line
    assert f"accept it: python -m bench compare {tmp_path / 'changed'} --to {reference} --accept" in out
    assert main(["compare", str(tmp_path / "changed"), "--to", str(reference), "--accept"]) == 0
    assert main(["compare", str(tmp_path / "changed"), "--to", str(reference), "--tolerance", "1"]) == 0


def test_a_score_drop_is_still_caught_within_the_tolerance(tmp_path):
    row = {"method": "knn", "task": "gsm8k", "score": 0.5, "llm_calls": {"selection": 0, "inference": 4},
           "fingerprint": {"demos": "a", "outputs": "b"}, "items": {}}
    (tmp_path / "ref.json").write_text(json.dumps({"runs": [row]}))
    (tmp_path / "cur.json").write_text(json.dumps({"runs": [{**row, "score": 0.45}]}))
    assert main(["compare", str(tmp_path / "cur.json"), "--to", str(tmp_path / "ref.json"), "--tolerance", "0.1"]) == 0
    assert main(["compare", str(tmp_path / "cur.json"), "--to", str(tmp_path / "ref.json"), "--tolerance", "0.02"]) == 1


def test_the_scale_of_each_fit_is_recorded_and_printed_beside_the_score(tmp_path, data_dir):
    results = run(tmp_path, data_dir, "a")
    rows = {r["method"]: r for r in results["runs"]}
    assert rows["knn"]["scale"] == {} and rows["zero-shot"]["scale"] == {}
    scale = rows["case-static"]["scale"]
    assert scale["arms"] == 6 and 0 < scale["pulls"] <= 4 and scale["validation items a pull"] == 2
    report = (tmp_path / "a" / "report.md").read_text()
    line = next(line for line in report.splitlines() if line.startswith("| case-static"))
    assert "arms 6" in report and f"pulls {scale['pulls']}" in report and "case-static" in line


@pytest.mark.parametrize("name, keys", [
    ("udr", {"training queries", "candidates a query", "rounds", "optimiser steps a round"}),
    ("lens", {"filtering rounds", "candidates kept", "beam", "search iterations", "held-out items"}),
    ("listnet", {"arms", "pulls", "training arms", "epochs", "optimiser steps"}),
    ("explora", {"subsets evaluated", "iterations"}),
    ("bridge", {"candidates", "subsets scored", "rounds"}),
    ("case-dynamic", {"arms", "pulls a query"}),
])
def test_trained_and_searching_selectors_say_what_they_ran_at(name, keys, world_fits):
    selector, _ = world_fits(name)
    scale = selector.scale()
    assert keys <= set(scale) and all(isinstance(v, (int, float)) and v >= 0 for v in scale.values())


@pytest.fixture(scope="module")
def world_fits(encoder):
    from test_selector_behaviour import K, params_for

    from bench.llm import LLMClient
    from bench.oracle import RewardOracle
    from bench.tasks import make_task
    from fakes import RulesLearner
    from methods.base import FitContext, create

    task = make_task("rules").configure()
    splits = task.load_splits(None, n_test=10, n_val=12, pool_size=160, seed=0)

    def fit(name):
        oracle = RewardOracle(LLMClient(RulesLearner()), task, name, bertscore=None)
        ctx = FitContext(task=task, pool=splits.pool, validation=splits.validation, encoder=encoder, oracle=oracle,
                         seed=0, k=K)
        return create(name, params_for(name)).fit(ctx), oracle

    return fit
