"""The six bandit selectors through the runner, with the deterministic fake backend."""


import json

import numpy as np
import pytest

from bench.errors import ConfigError
from bench.runner import Runner
from test_runner import lines, make_config

BANDITS = ["case-static", "case-dynamic", "dearicl-static", "dearicl-dynamic", "dearicl-random", "dearicl-noexplore"]
SMALL = {"*": {"n_arms": 16, "m": 3, "challengers": 2, "cold_start": 2, "max_pulls": 6, "mc_passes": 32,
               "hidden": [16], "epochs_per_round": 2, "initial_arms": 4, "train_rounds": 2, "pulls_per_query": 3}}


def test_bandit_selectors_run_end_to_end(tmp_path, data_dir, fake):
    cfg = make_config(tmp_path, data_dir, methods=BANDITS, tasks=["gsm8k"], n_test=3, n_val=4, pool_size=40,
                      method_params=SMALL)
    results = Runner(cfg).run()
    runs = {r["method"]: r for r in results["runs"]}
    assert set(runs) == set(BANDITS)
    for name in ("case-static", "dearicl-static", "dearicl-dynamic", "dearicl-random"):
        # 6 pulls of 4 validation items at most, plus re-scoring the top arms for the static ones
        assert 4 <= runs[name]["llm_calls"]["selection"] <= (6 + 3) * 4, name
    assert runs["dearicl-noexplore"]["llm_calls"]["selection"] == 4 * 4  # the initial arms only
    assert runs["case-dynamic"]["llm_calls"]["selection"] >= 4  # pulls happen per test query
    records = lines(tmp_path / "run" / "records.jsonl")
    assert all(len(r["demo_ids"]) == 5 for r in records)
    static = [r["demo_ids"] for r in records if r["method"] == "case-static"]
    assert all(d == static[0] for d in static)  # task level: one subset for every query
    fits = {(f["method"]): f for f in lines(tmp_path / "run" / "fits.jsonl")}
    trace = [row for row in fits["dearicl-dynamic"]["trace"] if "gap_index" in row]
    assert trace and all(row["regret_kind"] == "observed" for row in trace)
    regrets = [row["simple_regret"] for row in trace if row["simple_regret"] == row["simple_regret"]]
    assert regrets  # its value is checked on a hand-made history in test_dearicl_core
    assert fits["dearicl-dynamic"]["trace"][-1]["summary"]
    report = (tmp_path / "run" / "report.md").read_text()
    assert "## Bandit convergence" in report and (tmp_path / "run" / "convergence_gsm8k.png").exists()


def test_bandit_budget_is_enforced(tmp_path, data_dir, fake):
    params = {"*": {**SMALL["*"], "max_pulls": None}}
    cfg = make_config(tmp_path, data_dir, methods=["dearicl-dynamic", "case-static"], tasks=["gsm8k"], n_test=2,
                      n_val=4, pool_size=40, method_params=params, llm_budget=10)
    results = Runner(cfg).run()
    for run in results["runs"]:
        assert run["llm_calls"]["selection"] <= 10 and run["budget_exhausted"]
        assert run["n"] == 2  # still answers every test item with what it learned
    sel = [c for c in lines(tmp_path / "run" / "calls.jsonl") if c["phase"] == "selection" and not c["cached"]]
    assert len(sel) <= 20


def test_a_fit_cut_by_the_budget_reports_the_rounds_it_ran(tmp_path, data_dir, fake):
    # the budget runs out inside a round's pull: that round computed B_t and counts, as in the study's table
    params = {"*": {**SMALL["*"], "max_pulls": None}}
    cfg = make_config(tmp_path, data_dir, methods=["case-static"], tasks=["gsm8k"], n_test=2, n_val=4, pool_size=40,
                      method_params=params, llm_budget=9)
    Runner(cfg).run()
    (fit,) = lines(tmp_path / "run" / "fits.jsonl")
    summary = fit["trace"][-1]
    assert summary["stopped_by"] == "budget" and summary["rounds"] > len([r for r in fit["trace"] if "gap_index" in r])
    table = (tmp_path / "run" / "report.md").read_text().split("## Bandit convergence")[1]
    row = next(line for line in table.splitlines() if "| case-static " in line)
    assert [c.strip() for c in row.split("|")[1:-1]][2] == str(summary["rounds"])


def test_a_method_budget_caps_that_selector_alone(tmp_path, data_dir, fake):
    params = {"*": {**SMALL["*"], "max_pulls": None}}
    cfg = make_config(tmp_path, data_dir, methods=["dearicl-static", "case-static"], tasks=["gsm8k"], n_test=2,
                      n_val=4, pool_size=40, method_params=params, llm_budget=40,
                      method_budgets={"case-static": 8})
    runs = {r["method"]: r for r in Runner(cfg).run()["runs"]}
    assert runs["case-static"]["budget"] == 8 and runs["case-static"]["llm_calls"]["selection"] <= 8
    assert runs["case-static"]["warnings"][0].startswith("stopped at --method-budget case-static=8 after")
    assert runs["dearicl-static"]["budget"] == 40 and runs["dearicl-static"]["llm_calls"]["selection"] > 8
    # the cap is part of what a selection depends on: a different one is a different selection
    assert cfg.selection_identity("case-static", "gsm8k", {})["llm_budget"] == 8
    assert cfg.selection_identity("dearicl-static", "gsm8k", {})["llm_budget"] == 40


def test_a_method_budget_for_a_method_not_run_is_a_config_error(tmp_path, data_dir):
    cfg = make_config(tmp_path, data_dir, methods=["knn"], tasks=["gsm8k"], method_budgets={"lucb-static": 5})
    with pytest.raises(ConfigError, match="--method-budget names lucb-static, which this run does not run"):
        Runner(cfg)


def test_case_dynamic_reports_asked_and_distinct_calls(tmp_path, data_dir, fake):
    cfg = make_config(tmp_path, data_dir, methods=["case-dynamic"], tasks=["gsm8k"], n_test=4, n_val=4,
                      pool_size=40, method_params=SMALL)
    run = Runner(cfg).run()["runs"][0]
    records = lines(tmp_path / "run" / "records.jsonl")
    infos = [r["select_info"] for r in records]
    assert all(1 <= i["pulls"] <= 3 and i["llm_calls_requested"] > 0 for i in infos)
    asked = sum(i["llm_calls_requested"] for i in infos)
    new = sum(i["llm_calls_new"] for i in infos)
    assert run["llm_calls_requested"]["selection"] == asked  # every query's own requests, cache hits included
    assert run["llm_calls"]["selection"] == new <= asked  # distinct calls: what a cold cache pays once
    assert asked <= sum(4 * i["pulls"] for i in infos)  # a pull asks one call per item (greedy: a re-pull is the same)
    assert new < asked  # every query starts from the same seeded cold-start arms: later queries re-ask them
    report = (tmp_path / "run" / "report.md").read_text()
    assert f"{new} ({asked} asked)" in report
    # its convergence row summarises the queries' own runs (its fit traced no round)
    table = report.split("## Bandit convergence")[1]
    row = [c.strip() for c in next(line for line in table.splitlines() if "| case-dynamic " in line).split("|")[1:-1]]
    pulls = sorted(i["pulls"] for i in infos)
    assert row[3] == f"{int(np.median(pulls))} ({pulls[0]}–{pulls[-1]}) per query" and row[4] == f"{asked} asked"
    stops = {i["stopped_by"] for i in infos}
    assert row[5] == ", ".join(f"{s} {sum(i['stopped_by'] == s for i in infos)}/4" for s in sorted(stops))


@pytest.mark.parametrize("pulls, warned", [(2, True), (3, False)])
def test_case_dynamic_with_only_cold_start_pulls_says_so(tmp_path, data_dir, fake, pulls, warned):
    params = {"*": {**SMALL["*"], "pulls_per_query": pulls}}  # cold_start 2
    cfg = make_config(tmp_path, data_dir, methods=["case-dynamic"], tasks=["gsm8k"], n_test=2, n_val=4,
                      pool_size=40, method_params=params)
    run = Runner(cfg).run()["runs"][0]
    assert any("no gap-index round" in w for w in run["warnings"]) is warned
    pulls_made = [r["select_info"]["pulls"] for r in lines(tmp_path / "run" / "records.jsonl")]
    assert (max(pulls_made) <= 2) is warned  # the warning is true: the cold-start pulls only


def test_case_dynamic_with_every_arm_as_cold_start_fits_without_the_warning(tmp_path, data_dir, fake):
    """cold_start "all" (GIFA's start: every arm once) is no number to compare pulls_per_query with: no crash, no
    cold-start warning, and every query's run pulls every arm."""
    params = {"*": {**SMALL["*"], "cold_start": "all", "n_arms": 4, "pulls_per_query": 4}}
    cfg = make_config(tmp_path, data_dir, methods=["case-dynamic"], tasks=["gsm8k"], n_test=2, n_val=4,
                      pool_size=40, method_params=params)
    run = Runner(cfg).run()["runs"][0]
    assert run["error"] is None and not any("no gap-index round" in w for w in run["warnings"])
    assert [r["select_info"]["pulls"] for r in lines(tmp_path / "run" / "records.jsonl")] == [4, 4]


def test_case_dynamic_query_without_a_pull_fails_the_row(tmp_path, data_dir, fake):
    cfg = make_config(tmp_path, data_dir, methods=["case-dynamic", "knn"], tasks=["gsm8k"], n_test=4, n_val=4,
                      pool_size=40, method_params=SMALL, llm_budget=3)
    runs = {r["method"]: r for r in Runner(cfg).run()["runs"]}
    assert runs["case-dynamic"]["score"] is None
    assert "ran out before query" in runs["case-dynamic"]["error"]
    assert runs["knn"]["score"] is not None


def test_pac_selectors_run_in_the_beyond_group_and_warn_when_not_certified(tmp_path, data_dir, fake):
    cfg = make_config(tmp_path, data_dir, methods=["dearicl-pac-static", "dearicl-pac-dynamic"], tasks=["gsm8k"],
                      n_test=3, n_val=4, pool_size=40, method_params=SMALL)
    results = Runner(cfg).run()
    runs = {r["method"]: r for r in results["runs"]}
    for name, run in runs.items():
        assert run["group"] == "beyond" and run["score"] is not None
        # 6 pulls cannot certify 16 arms: the row says so
        assert any("before the certificate held" in w for w in run["warnings"]), name
        assert run["llm_calls"]["selection"] <= (6 + 3) * 4
    fits = {f["method"]: f for f in lines(tmp_path / "run" / "fits.jsonl")}
    summary = fits["dearicl-pac-dynamic"]["trace"][-1]
    assert summary["summary"] and summary["stopped_by"] == "max_pulls" and summary["pulls"] == 6
    assert "xi" in summary["certificate"]
    records = [r for r in lines(tmp_path / "run" / "records.jsonl") if r["method"] == "dearicl-pac-dynamic"]
    assert len(records) == 3 and all(len(r["demo_ids"]) == 5 for r in records)
    assert "Beyond the paper" in (tmp_path / "run" / "report.md").read_text()


def test_lucb_static_sweeps_every_arm_and_says_when_it_is_not_certified(tmp_path, data_dir, fake):
    cfg = make_config(tmp_path, data_dir, methods=["lucb-static"], tasks=["gsm8k"], n_test=2, n_val=4, pool_size=40,
                      method_params={"*": {**SMALL["*"], "max_pulls": 20}})
    run = Runner(cfg).run()["runs"][0]
    assert run["group"] == "beyond" and run["score"] is not None
    assert any("before the certificate held" in w for w in run["warnings"])
    assert not any("arms were pulled once" in w for w in run["warnings"])  # 20 pulls cover the 16 arms
    summary = [f for f in lines(tmp_path / "run" / "fits.jsonl")][0]["trace"][-1]
    assert summary["stopped_by"] == "max_pulls" and summary["pulls"] == 20 and summary["surrogate"] == "none"
    assert run["llm_calls"]["selection"] <= (20 + 3) * 4


def test_lucb_static_cut_short_in_its_sweep_warns_that_not_every_arm_was_seen(tmp_path, data_dir, fake):
    cfg = make_config(tmp_path, data_dir, methods=["lucb-static"], tasks=["gsm8k"], n_test=2, n_val=4, pool_size=40,
                      method_params=SMALL)
    run = Runner(cfg).run()["runs"][0]
    assert any("only 6 of 16 arms were pulled once" in w for w in run["warnings"])


def test_a_study_folder_renders_seeds_and_the_convergence_table_beside_the_paper(tmp_path, data_dir, fake):
    import csv

    from bench.cli import main

    study = tmp_path / "study"
    for seed in (0, 1):
        cfg = make_config(tmp_path, data_dir, methods=["case-static", "knn"], tasks=["gsm8k"], n_test=2, n_val=3,
                          pool_size=40, method_params=SMALL, seed=seed, out=study / f"rq1-seed{seed}")
        Runner(cfg).run()
    for _ in range(2):  # the study's own results.json does not make it a run folder on the next render
        assert main(["report", str(study)]) == 0
    md = (study / "report.md").read_text()
    table = md.split("## Bandit convergence and LLM calls")[1]
    row = next(line for line in table.splitlines() if "| case-static " in line)
    cells = [c.strip() for c in row.split("|")[1:-1]]
    assert cells[0:4] == ["rq1", "case-static", "gsm8k", "2"] and cells[-2:] == ["10200", "510"]  # the paper's
    assert "max_pulls 2" in cells[7]  # SMALL stops every fit at 6 pulls
    scores = md.split("## Scores")[1].split("## Bandit")[0]
    score_row = [c.strip() for c in next(line for line in scores.splitlines() if "| case-static " in line).split("|")]
    assert score_row[1:5] == ["gsm8k", "rq1", "case-static", "2"] and " ± " in score_row[7]  # over the two seeds
    assert "![gsm8k](convergence_gsm8k.png)" in md and (study / "convergence_gsm8k.png").stat().st_size > 5000
    rows = list(csv.DictReader((study / "results.csv").open()))
    assert sorted((r["seed"], r["method"]) for r in rows) == [("0", "case-static"), ("0", "knn"),
                                                              ("1", "case-static"), ("1", "knn")]
    meta = json.loads((study / "results.json").read_text())["meta"]
    assert meta["folders"] == ["rq1-seed0", "rq1-seed1"]
    assert (study / "rq1-seed0" / "report.md").exists()
    tex = (study / "report.tex").read_text()
    assert r"\label{tab:study-scores}" in tex  # the scores table first, then the convergence table
    tex_row = next(line for line in tex.split(r"\label{tab:study-scores}")[1].splitlines() if "case-static" in line)
    assert r"\label{tab:convergence}" in tex and [c.strip() for c in tex_row.rstrip("\\ ").split("&")][-2:] == [
        "10200", "510"] and r"$\pm$" in tex_row  # mean $\pm$ sd over the two seeds, in LaTeX


def test_a_fit_replayed_in_another_part_counts_the_measured_fit_in_both_parts(tmp_path, data_dir, fake):
    from bench.cli import main

    study = tmp_path / "study"
    common = dict(methods=["case-static"], tasks=["gsm8k"], n_test=2, n_val=3, pool_size=40, method_params=SMALL)
    Runner(make_config(tmp_path, data_dir, out=study / "rq1-seed0", selections=tmp_path / "s1", **common)).run()
    # another session's part: an empty store, the published folder replayed (no selection call)
    replay = Runner(make_config(tmp_path, data_dir, out=study / "other-seed0", selections=tmp_path / "s2",
                                replay_from=[study / "rq1-seed0"], **common)).run()
    assert replay["runs"][0]["llm_calls"]["selection"] == 0
    assert main(["report", str(study)]) == 0
    rows = json.loads((study / "results.json").read_text())["convergence"]
    by_part = {row["part"]: row for row in rows}
    assert set(by_part) == {"rq1", "other"} and by_part["rq1"]["selection_calls"] > 0
    for field in ("selection_calls", "rounds", "pulls", "stopped_by"):
        assert by_part["other"][field] == by_part["rq1"][field]
    assert by_part["other"]["replayed_from"] == "rq1-seed0" and by_part["rq1"]["replayed_from"] == ""
    md = (study / "report.md").read_text()
    assert "count that fit's calls and time: `other-seed0` (case-static, from `rq1-seed0`)" in md
    # and so does its row of the scores table (its own run made no selection call)
    scores = md.split("## Scores")[1].split("## ")[0]
    row = next(line for line in scores.splitlines() if "| other " in line)
    assert row.rstrip().rstrip("|").split("|")[-1].strip() == str(by_part["rq1"]["selection_calls"])


def test_case_dynamic_scale_trace_and_call_bound(tmp_path, data_dir, fake):
    from methods.base import create

    params = {"*": {**SMALL["*"], "pulls_per_query": 3}}
    cfg = make_config(tmp_path, data_dir, methods=["case-dynamic"], tasks=["gsm8k"], n_test=2, n_val=4,
                      pool_size=40, method_params=params)
    run = Runner(cfg).run()["runs"][0]
    assert run["scale"] == {"arms": 16, "pulls a query": 3, "validation items a pull": 4}
    summary = lines(tmp_path / "run" / "fits.jsonl")[0]["trace"][0]
    assert summary["summary"] is True and summary["surrogate"] == "linear" and summary["pulls_per_query"] == 3
    assert create("case-dynamic", {"pulls_per_query": 3}).selection_call_bound(4, 5) == 3 * 4 * 5
    unfitted = create("case-dynamic", {})
    assert unfitted.scale() == {} and unfitted.trace() == []  # nothing ran: no size or trace to report


def test_the_papers_surrogate_settings_reach_the_selectors_network():
    """configs/paper.yaml sets log_k, estimate, width_schedule and batch_size on the bandit selectors: each must reach
    the NeuralConfig their surrogate is built from (a dropped one would leave the paper's run on the default)."""
    from methods.base import create

    selector = create("dearicl-static", {"log_k": "arms", "estimate": "mc-mean", "width_schedule": "sqrt-log",
                                         "batch_size": 8, "mc_draws": "per-round"})
    assert (selector.neural.log_k, selector.neural.estimate, selector.neural.width_schedule,
            selector.neural.batch_size, selector.neural.mc_draws) == ("arms", "mc-mean", "sqrt-log", 8, "per-round")
