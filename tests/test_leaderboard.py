"""The leaderboard page (reports/leaderboard.py): live runs and table replays on the same items, the two-way
bootstrap against random few-shot with Holm's correction, and the rows a reader needs (cost, scale, what did not run)."""
import json

import numpy as np
import pytest

from bench.reward_table import RewardTable
from reports.leaderboard import BASELINE, build, write, zoo_split
from reports.stats import holm

ITEMS = [f"rules/test:{i}" for i in range(60)]


def live_run(folder, seed, scores_of, errors=()):
    folder.mkdir(parents=True)
    runs, records = [], []
    for method, scores in scores_of.items():
        runs.append({"method": method, "task": "rules", "metric": "accuracy", "metric_label": "Acc",
                     "score": float(np.mean(scores)), "llm_calls": {"selection": 10 * (seed + 1)},
                     "selection_seconds": 2.0 + seed, "inference_seconds_per_query": 0.5, "scale": {"queries": 7},
                     "warnings": [], "error": None})
        records += [{"method": method, "task": "rules", "item_id": item, "score": float(s)}
                    for item, s in zip(ITEMS, scores)]
    runs += [{"method": m, "task": "rules", "metric": "accuracy", "score": None, "llm_calls": {"selection": 0},
              "warnings": [], "error": "out of memory"} for m in errors]
    (folder / "results.json").write_text(json.dumps({"runs": runs}))
    (folder / "records.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")


@pytest.fixture
def study(tmp_path):
    rng = np.random.default_rng(0)
    for seed in (0, 1):
        random = rng.integers(0, 2, len(ITEMS))
        live_run(tmp_path / "runs" / f"rules-seed{seed}",
                 seed, {"few-shot": random, "knn": np.ones(len(ITEMS)), "bm25": random.copy()}, errors=["mmr"])
    return tmp_path


def test_a_selector_far_above_random_beats_it_and_one_equal_to_it_does_not(study):
    rows = {r["method"]: r for r in build(study, study / "no-tables", tasks=("rules",), seeds=(0, 1),
                                          resamples=2000)["tasks"]["rules"]}
    knn, bm25, base = rows["knn"], rows["bm25"], rows[BASELINE]
    assert knn["score"] == 1.0 and knn["verdict"] == "beats random" and knn["diff"] > 0.3
    assert bm25["diff"] == 0.0 and bm25["verdict"] == "not significant"
    assert "p" not in base and base["ci_low"] < base["score"] < base["ci_high"]
    assert knn["p_holm"] == pytest.approx(holm({"knn": knn["p"], "bm25": bm25["p"]})["knn"])
    assert knn["paired_seeds"] == [0, 1] and knn["paired_items"] == len(ITEMS) and knn["seeds"] == [0, 1]
    assert knn["selection_calls"] == 15 and knn["selection_seconds"] == 2.5  # means over the seeds
    assert rows["mmr"]["errors"] == ["seed 0: out of memory", "seed 1: out of memory"] and "score" not in rows["mmr"]


def test_a_per_query_selectors_select_time_counts_as_selection_not_inference(study):
    for seed in (0, 1):  # knn's records: 2 s of select() inside each item's 2.5 s latency (TopK+ConE's, MDL's calls)
        path = study / "runs" / f"rules-seed{seed}" / "records.jsonl"
        records = [json.loads(line) for line in path.read_text().splitlines()]
        for r in records:
            if r["method"] == "knn":
                r.update(select_s=2.0, latency_s=2.5)
        path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    rows = {r["method"]: r for r in build(study, study / "no-tables", tasks=("rules",), seeds=(0, 1),
                                          resamples=200)["tasks"]["rules"]}
    assert rows["knn"]["selection_seconds"] == pytest.approx(2.5 + 2.0 * len(ITEMS))  # the fit's, plus every query's
    assert rows["knn"]["inference_seconds"] == pytest.approx(0.5)
    assert rows["bm25"]["selection_seconds"] == 2.5 and rows["bm25"]["inference_seconds"] == 0.5  # no select time


def test_a_cell_cut_short_is_left_out(study):
    folder = study / "runs" / "rules-seed0"
    results = json.loads((folder / "results.json").read_text())
    results["runs"].append({**results["runs"][1], "method": "mdl", "n": 4})
    for run in results["runs"]:
        run.setdefault("n", len(ITEMS))
    (folder / "results.json").write_text(json.dumps(results))
    with (folder / "records.jsonl").open("a") as fh:
        fh.write("\n".join(json.dumps({"method": "mdl", "task": "rules", "item_id": i, "score": 1.0})
                           for i in ITEMS[:4]) + "\n")
    rows = {r["method"]: r for r in build(study, study / "no-tables", tasks=("rules",), seeds=(0, 1),
                                          resamples=200)["tasks"]["rules"]}
    assert "mdl" not in rows and rows["knn"]["seeds"] == [0, 1]


def test_only_the_asked_seeds_count_and_a_seed_without_the_baseline_is_not_paired(study):
    live_run(study / "runs" / "rules-seed5", 5, {"knn": np.zeros(len(ITEMS))})
    rows = {r["method"]: r for r in build(study, study / "no-tables", tasks=("rules",), seeds=(0, 1),
                                          resamples=500)["tasks"]["rules"]}
    assert rows["knn"]["score"] == 1.0  # seed 5 is not a leaderboard seed
    rows = {r["method"]: r for r in build(study, study / "no-tables", tasks=("rules",), seeds=(0, 1, 5),
                                          resamples=500)["tasks"]["rules"]}
    assert rows["knn"]["score"] == pytest.approx(2 / 3) and rows["knn"]["paired_seeds"] == [0, 1]
    page = write(study, study / "no-tables", tasks=("rules",), seeds=(0, 1, 5), resamples=500).read_text()
    assert "Beat random few-shot after Holm's correction: knn (seeds 0, 1 only); below it: none." in page


def test_a_replayed_selector_scores_the_tables_recorded_answers_for_the_arm_it_chose(study, tmp_path):
    table_path = "studies/tables/rules-gemma3-270m.npz"
    table = RewardTable.load(table_path)
    test = [i for i, s in enumerate(table.split) if s == "test"]
    chosen = [3] * 100 + [7] * 100
    replay = study / "replays" / "rules"
    replay.mkdir(parents=True)
    rows = [{"method": "case-static", "seed": 0, "chosen": chosen, "calls": 250, "fit_seconds": 9.0,
             "scale": {"arms": 100}, "warnings": []},
            {"method": "dearicl-static:paper", "seed": 0, "chosen": chosen, "calls": 1, "fit_seconds": 1.0}]
    replay.joinpath("rows.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    tables = tmp_path / "tables"
    tables.mkdir()
    (tables / "rules-gemma3-270m.npz").symlink_to(__import__("pathlib").Path(table_path).resolve())
    board = build(study, tables, tasks=("rules",), seeds=(0, 1), resamples=500)
    got = {r["method"]: r for r in board["tasks"]["rules"]}
    expected = np.mean([table.metric[a, test[j]].mean() for j, a in enumerate(chosen)])
    assert got["case-static"]["score"] == pytest.approx(expected) and got["case-static"]["source"] == "table"
    assert got["case-static"]["inference_seconds"] is None and "dearicl-static:paper" not in got
    assert got["case-static"]["n_items"] == 200 and "p" not in got["case-static"]  # no item shared with the fakes


def test_the_page_lists_every_selector_of_the_zoo_and_draws_the_cost_plot(study):
    (study / "HEADER.md").write_text("# Board\n\nCaveat.\n")
    page = write(study, study / "no-tables", tasks=("rules",), seeds=(0, 1), resamples=500).read_text()
    live, table = zoo_split()
    assert page.startswith("# Board") and "## rules (Acc)" in page
    assert "Beat random few-shot after Holm's correction: knn; below it: none." in page
    for method in live + table:
        assert f"| {method} " in page, method
    assert "failed: seed 0: out of memory" in page and "not run yet" in page and "0/2" in page
    assert (study / "accuracy_vs_cost.png").stat().st_size > 10_000
    assert json.loads((study / "leaderboard.json").read_text())["seeds"] == [0, 1]


def test_the_zoo_splits_into_live_and_table_fitted_selectors():
    live, table = zoo_split()
    assert {"few-shot", "knn", "epr", "dq-lore", "influence"} <= set(live)
    assert {"case-static", "dearicl-dynamic", "pirank", "explora"} <= set(table) and not set(live) & set(table)


def test_the_verdict_rests_on_the_holm_adjusted_p_not_the_raw_one():
    """Four wins on 200 pairs: p 0.025 alone, 0.075 after Holm over three selectors: not significant."""
    from reports.leaderboard import Cell, task_rows

    rng = np.random.default_rng(0)
    items = [f"i{j}" for j in range(100)]
    base_values = {s: rng.integers(0, 2, 100) for s in (0, 1)}
    cells = {}
    for name, flips in ((BASELINE, 0), ("a", 4), ("b", 0), ("c", 1)):
        cell = Cell(name, "live")
        for s in (0, 1):
            values = base_values[s].copy()
            values[np.flatnonzero(values == 0)[:flips]] = 1
            cell.scores[s], cell.calls[s], cell.selection_seconds[s] = dict(zip(items, map(float, values))), 0, 0.0
        cells[name] = cell
    row = {r["method"]: r for r in task_rows(cells, 2000)}["a"]
    assert row["p"] < 0.05 < row["p_holm"] and row["verdict"] == "not significant"


def test_the_committed_page_is_what_the_committed_runs_and_replays_give(tmp_path):
    """Every number on studies/leaderboard-2026-11 comes from files in the repository: its live cells' runs/ (once
    ignored by git as if they were the root work folder) and its replays/; rendering them again gives the same page."""
    import shutil
    from pathlib import Path

    committed = Path(__file__).resolve().parents[1] / "studies" / "leaderboard-2026-11"
    copy = tmp_path / "study"
    shutil.copytree(committed, copy, ignore=shutil.ignore_patterns("*.png"))
    write(copy, committed.parents[0] / "tables")
    assert (copy / "README.md").read_text() == (committed / "README.md").read_text()
    assert json.loads((copy / "leaderboard.json").read_text()) == json.loads((committed / "leaderboard.json").read_text())


def test_the_readme_leaderboard_paragraph_is_what_the_committed_page_says():
    """The README's leaderboard sentences (how many beat random few-shot on each task, the leaders' scores) are
    read from studies/leaderboard-2026-11/leaderboard.json, so a re-rendered page cannot leave them stale."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    rows = json.loads((root / "studies" / "leaderboard-2026-11" / "leaderboard.json").read_text())["tasks"]
    readme = root.joinpath("README.md").read_text()
    paragraph = " ".join(readme.split("## Leaderboard: which selector, at what cost", 1)[1].split("\n\n")[1].split())
    paragraph = paragraph.split("(The first live cells", 1)[0]
    segments = dict(zip(["rules", "sst2", "trec", "agnews"],
                        re.split(r"(?:On `rules`|; on SST-2|; on TREC|; on AG News) ", paragraph)[1:]))
    assert len(segments) == 4, "the README's leaderboard paragraph no longer names the four tasks"
    for task, text in segments.items():
        score = {r["method"]: round(100 * r["score"], 1) for r in rows[task]}
        beating = sum(r.get("verdict") == "beats random" for r in rows[task])
        count = re.match(r"\s*(none|all \d+|\d+(?: of them)?)", text).group(1)
        assert beating == (0 if count == "none" else int(re.search(r"\d+", count).group())), task
        claimed = re.findall(r"([a-z][\w-]*) \((\d+\.\d)[,)]", text)  # "udr (79.3, 16 min ...)"
        claimed += re.findall(r"([a-z][\w-]*) scores highest, (\d+\.\d)", text)
        claimed += [("zero-shot", a) for a in re.findall(r"zero-shot included[:(]? ?\(?(\d+\.\d) against", text)]
        pair = re.search(r"dpp and knn \((\d+\.\d) and (\d+\.\d)", text)
        claimed += [("dpp", pair.group(1)), ("knn", pair.group(2))] if pair else []
        for method, value in claimed:
            assert score[method] == float(value), (task, method, value, score[method])
        if task != "rules":
            assert claimed, f"no score read from the README's {task} sentence"
