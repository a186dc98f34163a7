"""Recorded reward tables: built through the harness's own answering path (here with the ideal in-context learner
of `rules`, whose rewards are known), saved without pickles, replayed by `bench simulate --env table:FILE` with
the truth taken over the whole validation pool."""
import json
import math

import numpy as np
import pytest

from bench.cli import main
from bench.errors import BudgetExhausted, ConfigError, DataError
from bench.llm import CallCache, LLMClient
from bench.reward_table import RewardTable, build
from bench.tasks import make_task
from dearicl.environments import RecordedEnvironment
from fakes import RulesLearner


@pytest.fixture(scope="module")
def table(encoder, tmp_path_factory):
    task = make_task("rules").configure()
    splits = task.load_splits(None, n_test=8, n_val=10, pool_size=120, seed=0)
    client = LLMClient(RulesLearner(), CallCache(tmp_path_factory.mktemp("t") / "cache.sqlite"))
    return build(task, splits, client, encoder, None, n_arms=6, k=4, seed=0, samples=3, progress=False), splits


def test_a_table_holds_every_arm_and_item_with_the_answers_the_harness_gives(table):
    t, splits = table
    assert t.rewards.shape == (6, 18, 1)  # ranked labels are deterministic: one sample
    assert list(t.item_ids) == [it.id for it in splits.validation + splits.test]
    assert list(t.split) == ["validation"] * 10 + ["test"] * 8
    pool = {it.id: it for it in splits.pool}
    items = splits.validation + splits.test
    for a, demo_ids in enumerate(t.arm_demo_ids):
        demos = [pool[d] for d in demo_ids]
        planted = [float(any(d.answer == q.answer for d in demos)) for q in items]  # the learner's known reward
        assert list(t.rewards[a, :, 0]) == planted and list(t.metric[a, :, 0]) == planted
        assert all(0 < v <= 1 for v in t.loglik[a])
        assert all((t.loglik[a] > 0.5) == np.array(planted, dtype=bool))  # exp(-0.1) when right, exp(-5) when not
    assert t.meta["task"] == "rules" and t.meta["model"] == "rules-learner" and t.meta["k"] == 4


def test_save_and_load_round_trip_without_pickles(table, tmp_path):
    t, _ = table
    t.save(tmp_path / "t.npz")
    back = RewardTable.load(tmp_path / "t.npz")
    assert np.array_equal(back.rewards, t.rewards) and list(back.item_ids) == list(t.item_ids)
    assert back.meta["template_hash"] == t.meta["template_hash"]
    (tmp_path / "bad.npz").write_bytes(b"not a table")
    with pytest.raises(DataError, match="not a readable reward table"):
        RewardTable.load(tmp_path / "bad.npz")


def test_a_recorded_environment_counts_the_calls_the_harness_would_make():
    deterministic = RecordedEnvironment(np.zeros((3, 5, 1)), np.array([0, 1]), np.arange(5), np.random.default_rng(0))
    sampled = RecordedEnvironment(np.zeros((3, 5, 2)), np.array([0, 1]), np.arange(5), np.random.default_rng(0))
    for arm in (0, 0, 2, 0):
        deterministic.pull(arm)
        sampled.pull(arm)
    assert deterministic.harness_calls() == 2 * 2 and sampled.harness_calls() == 4 * 2


def test_a_replayed_pull_returns_recorded_rewards_judged_on_the_rows_pulled_with_the_pool_beside():
    values = np.array([[[1.0, 0.0], [0.0, 0.0], [1.0, 1.0]], [[0.0, 0.0], [1.0, 1.0], [0.0, 1.0]]])  # 2 arms, 3 items
    env = RecordedEnvironment(values, rows=np.array([0, 2]), pool=np.array([0, 1, 2]), rng=np.random.default_rng(0))
    assert list(env.pool_means) == pytest.approx([0.5, 0.5])  # over every item and sample of the pool
    assert list(env.true_means) == pytest.approx([0.75, 0.25])  # the target: the rows pulled, every sample
    draws = np.array([env.pull(0) for _ in range(400)])
    assert set(draws[:, 1]) == {1.0} and set(draws[:, 0]) == {0.0, 1.0}  # item 2 always 1; item 0 one of its samples
    assert abs(draws[:, 0].mean() - 0.5) < 0.1


def test_simulate_replays_a_table_and_labels_it_recorded(table, tmp_path, data_dir, capsys):
    t, _ = table
    t.save(tmp_path / "t.npz")
    out = tmp_path / "sim.json"
    assert main(["simulate", "--env", f"table:{tmp_path / 't.npz'}", "--methods", "lucb", "--m", "2", "--n-val", "6",
                 "--runs", "2", "--data-dir", str(data_dir), "--no-progress", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "RECORDED (real LLM rewards replayed from a table)" in text and "SIMULATED" not in text
    result = json.loads(out.read_text())
    assert result["env"]["recorded"] and not result["results"][0]["simulated"]
    assert result["env"]["validation_pool"] == 10 and result["env"]["n_val"] == 6
    # --update reruns the methods named and keeps the others' rows, only under the same environment and settings
    base = ["simulate", "--env", f"table:{tmp_path / 't.npz'}", "--m", "2", "--n-val", "6", "--budget", "12",
            "--data-dir", str(data_dir), "--no-progress", "--out", str(out)]
    assert main(base + ["--methods", "case,lucb", "--runs", "2"]) == 0
    before = json.loads(out.read_text())
    edited = json.loads(out.read_text())
    edited["results"][1]["mean_pulls"] = -1.0  # a stale row of lucb
    out.write_text(json.dumps(edited))
    capsys.readouterr()
    assert main(base + ["--methods", "lucb", "--runs", "2", "--update"]) == 0
    after = json.loads(out.read_text())
    assert [r["method"] for r in after["results"]] == ["case", "lucb"]
    timeless = [[{k: v for k, v in r.items() if k != "mean_seconds"} for r in d["results"]] for d in (before, after)]
    assert timeless[0] == timeless[1] and after["results"][0] == before["results"][0]  # lucb's row made again
    assert set(after["traces"]) == {"case", "lucb"}
    assert "case " in capsys.readouterr().out  # the text is the whole file's, as a full run prints it
    assert after["env"]["arguments"]["budget"] == 12  # every option the rows depend on is kept, so it is compared
    for argv, message in ((["--methods", "lucb", "--runs", "3", "--update"], "other settings (runs)"),
                          (["--methods", "lucb", "--runs", "2", "--update", "--budget", "20"], "(--budget)"),
                          (["--methods", "lucb", "--runs", "2", "--update", "--challengers", "2"], "(--challengers)"),
                          (["--methods", "lucb", "--runs", "2", "--update", "--n-val", "5"], "(--n-val)"),
                          (["--methods", "lucb", "--runs", "2", "--update", "--out", str(tmp_path / "none.json")],
                           "needs --out naming an existing")):
        assert main(base + argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and message in err
    assert json.loads(out.read_text()) == after  # a refused update leaves the file as it was
    legacy = {**after, "env": {k: v for k, v in after["env"].items() if k != "arguments"}}  # saved before options were
    out.write_text(json.dumps(legacy))
    assert main(base + ["--methods", "lucb", "--runs", "2", "--update", "--n-val", "5"]) == 2  # the table's env says
    assert "other settings (n_val)" in capsys.readouterr().err
    assert main(base + ["--methods", "lucb", "--runs", "2", "--update"]) == 0  # the same settings: updated, said so
    assert "predates the options record" in capsys.readouterr().err
    assert json.loads(out.read_text())["env"]["arguments"]["budget"] == 12


def test_a_replay_reports_rounds_calls_and_the_eps_error_bound_with_the_knobs_it_ran(table, tmp_path, data_dir):
    t, _ = table
    t.save(tmp_path / "t.npz")
    out = tmp_path / "sim.json"
    assert main(["simulate", "--env", f"table:{tmp_path / 't.npz'}", "--methods", "dearicl,lucb", "--m", "2",
                 "--n-val", "6", "--runs", "3", "--data-dir", str(data_dir), "--no-progress", "--out", str(out),
                 "--budget", "12", "--neural", "mc_passes=16,width_schedule=inverse-sqrt,stability_init=0.5,hidden=8x4"]) == 0
    dearicl, lucb = json.loads(out.read_text())["results"]
    assert dearicl["settings"] == {"mc_passes": 16, "width_schedule": "inverse-sqrt", "stability_init": 0.5,
                                   "hidden": [8, 4]}
    assert lucb["settings"] == {}  # the knobs are the surrogate's: a model-free method runs without them
    for row in (dearicl, lucb):
        assert row["mean_rounds"] == pytest.approx(np.mean(row["rounds"])) and len(row["rounds"]) == 3
        # ranked labels are deterministic: a repeat costs nothing, so the calls are the distinct arms pulled
        assert 6 <= row["mean_calls"] <= min(row["mean_pulls"], 6) * 6
        errors = round(row["eps_error_rate"] * 3)
        # one-sided 95% Clopper-Pearson bound: 1 - 0.05^(1/3) = 0.632 with no error in 3 runs
        assert row["eps_error_ucb95"] == pytest.approx(0.6316, abs=1e-3) if errors == 0 else row["eps_error_ucb95"] > 0.6


def test_the_population_protocol_certifies_the_pool_mean_where_a_fixed_set_certifies_its_own(table, tmp_path,
                                                                                             data_dir, capsys):
    t, _ = table
    t.save(tmp_path / "t.npz")
    base = ["simulate", "--env", f"table:{tmp_path / 't.npz'}", "--m", "2", "--runs", "3", "--data-dir",
            str(data_dir), "--no-progress"]
    assert main([*base, "--methods", "lucb", "--protocol", "population"]) == 2
    assert "only the -wor methods run" in capsys.readouterr().err
    out = tmp_path / "wor.json"
    assert main([*base, "--methods", "all", "--protocol", "population", "--batch", "4", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    row, pp, pp_wider, paired, paired_pp = data["results"]
    assert row["method"] == "lucb-wor" and row["settings"] == {"cs": "wor"}
    assert pp["method"] == "lucb-pp-wor" and pp["settings"] == {"cs": "wor", "split": "lucb++"}
    assert pp_wider["settings"] == {"cs": "wor", "split": "lucb++", "sampling": "wider"}
    assert paired["method"] == "lucb-paired-wor" and paired["settings"] == {"cs": "wor"}
    assert paired_pp["method"] == "lucb-paired-pp-wor" and paired_pp["settings"] == {"cs": "wor", "split": "lucb++"}
    assert data["env"]["protocol"] == "population" and data["env"]["batch"] == 4
    for certified in (row, pp, pp_wider, paired, paired_pp):
        assert certified["coverage"] == 1.0 and certified["eps_error_rate"] == 0.0
        assert certified["event_rate"] == 1.0  # the proof's event at every round of every run
        assert len(certified["calls"]) == 3  # per run: the paired ratio of calls


@pytest.mark.parametrize("bad, message", [("mc_passes", "KEY=VALUE"), ("passes=4", "KEY=VALUE"),
                                          ("mc_passes=many", "needs a int"), ("width_schedule=cosine", "width_schedule")])
def test_a_bad_neural_override_is_one_line_exit_2(bad, message, capsys):
    assert main(["simulate", "--env", "nonlinear", "--neural", bad, "--runs", "1"]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


SMALL = {"m": 2, "challengers": 1, "cold_start": 2, "mc_passes": 8, "max_pulls": 8, "epochs_per_round": 1}


def test_the_harness_selectors_replay_from_a_table_with_zero_llm_calls(table, tmp_path, data_dir, capsys):
    """`bench table replay`: real fits and selections with the table in the LLM's place (no client exists), the
    test score read from the table's test columns, seeds paired, a resumed replay keeping what was done."""
    t, splits = table
    t.save(tmp_path / "t.npz")
    out = tmp_path / "replay"
    methods = ["case-static", "dearicl-static", "lucb-static", "dearicl-dynamic", "explora", "case-static:wide"]
    argv = ["table", "replay", str(tmp_path / "t.npz"), "--methods", ",".join(methods), "--seeds", "3", "--n-val", "6",
            "--data-dir", str(data_dir), "--no-progress", "--out", str(out), "--param", "explora.n_arms=6",
            "--param", "explora.u_size=2", "--param", "explora.v_size=1", "--param", "explora.iterations=2"]
    for name in methods[:4] + ["case-static:wide"]:
        argv += [arg for key, value in SMALL.items() for arg in ("--param", f"{name}.{key}={value}")]
    argv += ["--param", "case-static:wide.challengers=2"]  # one selector under a second setting
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert text.startswith("RECORDED rewards replayed (no LLM call)")
    rows = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
    assert len(rows) == 18 and {r["method"] for r in rows} == set(methods)
    metric = t.metric.mean(axis=2)
    truth = t.true_means()
    for row in rows:
        assert 0 < row["calls"] and row["scale"]  # it pulled, and says at what size
        assert ("rank_corr_all" in row) == row["method"].startswith("dearicl")  # a surrogate of arm means
        if row["method"] != "dearicl-dynamic":  # a task-level choice: its score is that arm's test mean in the table
            (arm,) = row["arms_chosen"]
            assert row["test_score"] == pytest.approx(metric[arm, t.test].mean())
            assert row["true_value"] == pytest.approx(truth[arm]) and row["regret"] == pytest.approx(truth.max() - truth[arm])
    summary = json.loads((out / "summary.json").read_text())
    assert [c["method"] for c in summary["comparisons"]] == methods[1:]
    # floats at 12 significant digits: another CPU's last-bit sums leave a committed summary unchanged
    floats = [v for c in summary["comparisons"] for v in c.values() if isinstance(v, float) and math.isfinite(v)]
    assert all(float(f"{v:.12g}") == v for v in floats) and any(float(f"{v:.6g}") != v for v in floats)
    assert all(c["verdict"] in ("differs", "differs, by less than the margin", "equivalent within the margin",
                                "cannot decide") for c in summary["comparisons"])
    for row in rows:  # each test item's arm, kept for the primary test: the score is their mean
        assert len(row["chosen"]) == len(t.test)
        assert row["test_score"] == pytest.approx(metric[row["chosen"], t.test].mean())
    for c in summary["comparisons"]:  # the plan's primary test and margin (accuracy: 0.05), Wilcoxon beside it
        assert c["primary"]["margin"] == 0.05 and c["margin"] == 0.05 and "bootstrap" in c["primary"]["test"]
        assert c["primary"]["diff"] == pytest.approx(c["mean_difference"])
    (out / "summary.json").unlink()
    assert main(argv) == 0  # every (method, seed) is in rows.jsonl: nothing is fitted again
    assert len((out / "rows.jsonl").read_text().splitlines()) == 18 and (out / "summary.json").is_file()
    saved = (out / "rows.jsonl").read_text()
    capsys.readouterr()
    for other in (["--n-val", "5"], ["--param", "lucb-static.m=3"]):  # fits made otherwise are not mixed in
        at = argv.index(other[0]) if other[0] == "--n-val" else len(argv)
        changed = argv[:at] + other + argv[at + 2:] if other[0] == "--n-val" else argv + other
        assert main(changed) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "rows.jsonl holds fits of" in err
        assert ("n_val 6 (now 5)" in err) if other[0] == "--n-val" else ("lucb-static" in err and "params" in err)
        assert (out / "rows.jsonl").read_text() == saved  # nothing lost, nothing added


@pytest.mark.parametrize("method, message", [("knn", "does not choose among the table's arms"),
                                             ("udr", "does not choose among the table's arms"),
                                             ("nope", "unknown method"),
                                             ("case-static --param dearicl-static.m=3", "--param names dearicl-static"),
                                             ("case-static --param case-static.mm=3", "mm")])
def test_a_selector_that_cannot_replay_is_refused_in_one_line(table, tmp_path, method, message, capsys):
    t, _ = table
    t.save(tmp_path / "t.npz")
    assert main(["table", "replay", str(tmp_path / "t.npz"), "--methods", *method.split(), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_a_table_oracle_answers_recorded_samples_in_turn_and_counts_calls_like_the_llm():
    from bench.items import Item
    from bench.replay import TableOracle

    values = np.arange(2 * 3 * 2, dtype=float).reshape(2, 3, 2) / 100  # [arms, items, samples]
    demos = [[Item("d0", "", "")], [Item("d1", "", "")]]
    items = [Item(f"q{i}", "", "") for i in range(3)]
    oracle = TableOracle(values, {("d0",): 0, ("d1",): 1}, {f"q{i}": i for i in range(3)}, make_task("rules"), "x",
                         budget=9)
    np.testing.assert_allclose(oracle.pull(demos[1], items), values[1, :, 0])
    np.testing.assert_allclose(oracle.pull(demos[1], items[:2]), values[1, :2, 1])  # the second recorded sample
    np.testing.assert_allclose(oracle.pull(demos[1], items[:1]), values[1, :1, 0])  # then round again
    assert oracle.calls == 6 and oracle.remaining == 3
    oracle.pull(demos[0], items)  # the last 3 calls of the budget
    with pytest.raises(BudgetExhausted):
        oracle.pull(demos[0], items[:1])  # a second sample is a new call
    with pytest.raises(ConfigError, match="not one of the table's arms"):
        oracle.pull([Item("other", "", "")], items)


def test_a_ranked_tables_gold_loglik_is_read_from_the_answers_call_and_equals_scoring_the_gold_alone(tmp_path):
    from bench.llm import CallScope
    from bench.reward_table import gold_loglik

    task = make_task("rules").configure()
    splits = task.load_splits(None, n_test=6, n_val=4, pool_size=60, seed=0)
    client = LLMClient(RulesLearner(), CallCache(tmp_path / "cache.sqlite"))
    scope = CallScope("t", "rules", "selection")
    demos, items = splits.pool[:4], splits.validation + splits.test
    client.classify(task, demos, items, scope=scope)  # the ranked answers' call
    scored = []
    backend_scores = client.backend.choice_logliks
    client.backend.choice_logliks = lambda prefix, suffixes, choices: scored.extend(suffixes) or backend_scores(
        prefix, suffixes, choices)
    fast = gold_loglik(client, task, demos, items, scope)
    assert scored == []  # read from the answers' call: no second pass over the items
    alone = client.classify(task, demos, items, scope=scope, words=[[task.reward_reference(it)] for it in items])[0]
    tokens = [len(client.backend.tokenizer(" " + task.reward_reference(it), add_special_tokens=False)["input_ids"])
              if getattr(client.backend, "tokenizer", None) is not None else 1 for it in items]
    np.testing.assert_allclose(fast, np.exp(np.array([row[0] for row in alone]) / np.array(tokens)), rtol=1e-6)
    assert len(scored) == len(items)  # scoring the gold word alone is a new call per item


def test_the_knob_sweep_runs_each_setting_on_the_table_and_reports_the_paper_range(table, tmp_path, data_dir,
                                                                                  monkeypatch):
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("knob_sweep", Path(__file__).parents[1] / "scripts/knob_sweep.py")
    sweep = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sweep)
    t, _ = table
    t.save(tmp_path / "t.npz")
    monkeypatch.setenv("BENCH_DATA_DIR", str(data_dir))
    out = tmp_path / "sweep"
    assert sweep.main([str(tmp_path / "t.npz"), "--runs", "2", "--n-val", "4", "--budget", "6", "--m", "2",
                       "--challengers", "1", "--out", str(out), "--only", "N 16"]) == 0
    done = json.loads((out / "sweep.json").read_text())
    assert list(done) == ["N 16"] and done["N 16"]["neural"] == "mc_passes=16"
    assert done["N 16"]["env"]["recorded"] and len(done["N 16"]["rounds"]) == 2
    assert "N 16" in (out / "sweep.md").read_text() and "in 79-130" in (out / "sweep.md").read_text()
    rerun = [str(tmp_path / "t.npz"), "--runs", "2", "--n-val", "4", "--budget", "6", "--m", "2", "--challengers",
             "1", "--out", str(out), "--only", "N 16"]
    done["N 16"]["seconds"] = -1.0
    (out / "sweep.json").write_text(json.dumps(done))
    assert sweep.main(rerun) == 0 and json.loads((out / "sweep.json").read_text())["N 16"]["seconds"] == -1.0  # kept
    done["N 16"]["neural"] = "mc_passes=8"  # a row run under an earlier definition of the setting is run again
    (out / "sweep.json").write_text(json.dumps(done))
    assert sweep.main(rerun) == 0
    again = json.loads((out / "sweep.json").read_text())["N 16"]
    runs = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]
    # rerun, not the kept -1.0: >= 0, since two tiny runs on an idle machine round to 0.0
    assert again["neural"] == "mc_passes=16" and again["seconds"] == round(sum(r["seconds"] for r in runs), 1) >= 0
    # run by run: its two runs were kept in runs.jsonl the first time, and taken back rather than run again
    assert len((out / "runs.jsonl").read_text().splitlines()) == 2 and again["rounds"] == done["N 16"]["rounds"]

    # every setting the paper states, CASE's two settings beside them; --skip leaves the costly ones for later
    stated = tmp_path / "stated"
    assert sweep.main([str(tmp_path / "t.npz"), "--runs", "2", "--n-val", "4", "--budget", "6", "--m", "2",
                       "--challengers", "1", "--out", str(stated), "--settings", "stated", "--skip", "100 epochs"]) == 0
    done = json.loads((stated / "sweep.json").read_text())
    assert list(done)[:2] == ["case", "case-script"] and done["case"]["settings"] == {"sigma": 0.5, "patience": 0}
    (stated / "sweep.json").write_text(json.dumps(dict(reversed(done.items()))))  # rows written side by side
    assert sweep.main([str(tmp_path / "t.npz"), "--runs", "2", "--n-val", "4", "--budget", "6", "--m", "2",
                       "--challengers", "1", "--out", str(stated), "--settings", "stated", "--skip", "100 epochs"]) == 0
    assert list(json.loads((stated / "sweep.json").read_text())) == list(done)  # back in the settings' order
    labels = [label for label in done if not label.startswith("case")]
    assert len(labels) == 4 and not any("100 epochs" in label for label in labels)
    for label in labels[1:]:  # Algorithm 1's epoch, and each c_t schedule, with every stated value
        assert {"log_k=arms", "estimate=mc-mean", "lr=0.0001", "batch_size=16", "epochs_per_round=1"} <= set(
            done[label]["neural"].split(","))
    assert {done[label]["neural"].split("width_schedule=")[1] for label in labels[1:]} == set(
        ["constant", "inverse-sqrt", "sqrt-log"])
    assert sweep.share_in_paper_range([79, 130, 78, 131]) == (2, pytest.approx(0.0676, abs=1e-3),
                                                              pytest.approx(0.9324, abs=1e-3))


def test_seed_level_verdicts_differ_equivalent_or_undecided_against_the_preset_margin():
    from bench.replay import summarise

    rng = np.random.default_rng(0)
    t = RewardTable(np.zeros((3, 4, 1)), rng.uniform(size=(3, 4, 1)), np.zeros((3, 4)), np.array(list("abcd")),
                    np.array(["validation", "validation", "test", "test"]), np.array([["x"], ["y"], ["z"]]), {})
    base = rng.uniform(0.4, 0.6, 30)

    def rows(name, scores):
        return [{"method": name, "seed": s, "test_score": float(v), "calls": 1, "regret": 0.0, "fit_seconds": 0.0,
                 "scale": {}} for s, v in enumerate(scores)]

    out = summarise(rows("base", base) + rows("better", base + 0.1 + rng.normal(0, 0.01, 30))
                    + rows("same", base + rng.normal(0, 0.002, 30)) + rows("noisy", base + rng.normal(0, 0.2, 30))
                    + rows("shifted", base + 0.005), t, "rewards", "base", margin=0.02)
    verdicts = {c["method"]: c["verdict"] for c in out["comparisons"]}
    assert verdicts == {"better": "differs", "same": "equivalent within the margin", "noisy": "cannot decide",
                        "shifted": "differs, by less than the margin"}  # real, and smaller than what matters
    shifted = next(c for c in out["comparisons"] if c["method"] == "shifted")
    assert shifted["p_tost"] == 0.0 and shifted["mean_difference"] == pytest.approx(0.005)
    # four comparisons: the MDD is a paired t-test's at Holm's strictest level 0.05 / 4, the TOSTs Holm-adjusted too
    from reports.stats import min_detectable_difference

    same = next(c for c in out["comparisons"] if c["method"] == "same")
    assert same["alpha_holm"] == pytest.approx(0.0125)
    assert same["mdd"] == pytest.approx(min_detectable_difference(same["sd_difference"], 30, alpha=0.0125))
    assert min_detectable_difference(same["sd_difference"], 30) < same["mdd"] < 0.01
    noisy = next(c for c in out["comparisons"] if c["method"] == "noisy")
    assert noisy["p_tost_holm"] >= noisy["p_tost"] and noisy["mdd"] > 0.1


def test_an_equivalence_claim_is_holm_adjusted_across_the_methods():
    """Two methods each equivalent at p 0.03 alone: not both at once (Holm: 0.06), so neither is called equivalent."""
    from bench.replay import summarise

    t = RewardTable(np.zeros((3, 4, 1)), np.zeros((3, 4, 1)), np.zeros((3, 4)), np.array(list("abcd")),
                    np.array(["validation", "validation", "test", "test"]), np.array([["x"], ["y"], ["z"]]), {})
    base = np.linspace(0.4, 0.6, 12)
    wobble = np.array([0.031, -0.029] * 6)  # mean 0.001, sd 0.031: TOST at ±0.02 gives p 0.03 alone

    def rows(name, scores):
        return [{"method": name, "seed": s, "test_score": float(v), "calls": 1, "regret": 0.0, "fit_seconds": 0.0,
                 "scale": {}} for s, v in enumerate(scores)]

    out = summarise(rows("base", base) + rows("a", base + wobble) + rows("b", base - wobble), t, "rewards", "base",
                    margin=0.02)
    for c in out["comparisons"]:
        assert c["p_tost"] < 0.05 <= c["p_tost_holm"] and c["verdict"] == "cannot decide"


# ---- recording on another machine: plan here, calls there, build here from the cache they filled -------------------
@pytest.fixture
def gsm8k_setting(data_dir):
    from bench.llm import GenerationParams

    task = make_task("gsm8k").configure(reward="metric")  # no scorer model: the plumbing is under test
    splits = task.load_splits(data_dir, n_test=3, n_val=4, pool_size=30, seed=0)
    params = GenerationParams(max_new_tokens=16, temperature=0.25, seed=0)
    return task, splits, params


def test_a_plan_answered_elsewhere_builds_the_same_table_with_no_call_here(gsm8k_setting, encoder, tmp_path):
    from bench.reward_table import answer_plan, read_plan, write_plan
    from fakes import FakeBackend, varied

    task, splits, params = gsm8k_setting
    direct_backend = FakeBackend(varied, batch_size=64)
    direct = build(task, splits, LLMClient(direct_backend, CallCache(tmp_path / "direct.sqlite"), params=params),
                   encoder, None, n_arms=3, k=2, seed=0, samples=3, progress=False)
    # all samples of an arm are one shared-prefix call
    assert [rows for _, rows in direct_backend.prefix_calls] == [7 * 3] * 3

    plan = write_plan(tmp_path / "plan.json", task, splits, LLMClient(FakeBackend(varied), None, params=params),
                      encoder, llm="fake", n_arms=3, k=2, seed=0, samples=3)
    assert plan["samples"] == 3 and len(plan["arms"]) == 3 and len(plan["items"]) == 7
    remote = CallCache(tmp_path / "remote.sqlite")
    recorded = answer_plan(read_plan(tmp_path / "plan.json"), LLMClient(FakeBackend(varied), remote, params=params),
                           progress=False)
    assert recorded["plan"] == plan["plan"] and recorded["device"] == "n/a"

    silent = LLMClient(FakeBackend(varied, fail_after=0), remote, params=params)  # any call would raise
    here = build(task, splits, silent, encoder, None, n_arms=3, k=2, seed=0, samples=3, progress=False,
                 answers_from=recorded)
    for what in ("rewards", "metric", "loglik", "arm_demo_ids", "item_ids"):
        assert np.array_equal(getattr(here, what), getattr(direct, what)), what
    assert here.rewards.shape == (3, 7, 3) and here.meta["answers_recorded"] == recorded
    assert len(remote) == 3 * (7 * 3 + 7)  # per arm: each item's 3 samples, and its gold log-likelihood

    # the guards: answers for other calls, a cache that lacks some, a plan for another model
    with pytest.raises(ConfigError, match="recorded for plan"):
        build(task, splits, silent, encoder, None, n_arms=3, k=2, seed=1, samples=3, progress=False,
              answers_from=recorded)
    remote._conn.execute("DELETE FROM calls WHERE key = (SELECT key FROM calls LIMIT 1)")
    remote._conn.commit()
    with pytest.raises(ConfigError, match=r"1 of \d+ calls of this table are not in the cache"):
        build(task, splits, silent, encoder, None, n_arms=3, k=2, seed=0, samples=3, progress=False,
              answers_from=recorded)
    with pytest.raises(ConfigError, match="made for model fake-model"):
        answer_plan(plan, LLMClient(FakeBackend(varied, model_id="other"), None, params=params), progress=False)


def test_table_calls_errors_are_one_line_exit_2(tmp_path, capsys):
    (tmp_path / "bad.json").write_text("{}")
    assert main(["table", "calls", str(tmp_path / "bad.json"), "--cache", str(tmp_path / "c.sqlite")]) == 2
    assert "not a plan of table calls" in capsys.readouterr().err
    (tmp_path / "plan.json").write_text(json.dumps({"format": "icl-select-bench table calls v1"}))
    assert main(["table", "calls", str(tmp_path / "plan.json")]) == 2
    assert "needs --cache" in capsys.readouterr().err


def test_a_secondary_metric_is_saved_and_scores_the_replay_when_asked(table, tmp_path, data_dir, capsys):
    """A table keeps the task's secondary metrics (WMT19's chrF); `--table-metric` scores selections with one."""
    from dataclasses import replace

    t, _ = table
    flipped = replace(t, extras={"chrf": 1.0 - t.metric})  # a planted secondary metric: the reverse of the metric
    flipped.save(tmp_path / "t.npz")
    back = RewardTable.load(tmp_path / "t.npz")
    assert list(back.extras) == ["chrf"] and np.allclose(back.extras["chrf"], 1.0 - t.metric)
    argv = ["table", "replay", str(tmp_path / "t.npz"), "--methods", "case-static", "--seeds", "2", "--n-val", "6",
            "--data-dir", str(data_dir), "--no-progress", "--out", str(tmp_path / "r"), "--table-metric", "chrf"]
    argv += [arg for key, value in SMALL.items() for arg in ("--param", f"case-static.{key}={value}")]
    assert main(argv) == 0
    assert "test score 'chrf'" in capsys.readouterr().out
    rows = [json.loads(line) for line in (tmp_path / "r" / "rows.jsonl").read_text().splitlines()]
    summary = json.loads((tmp_path / "r" / "summary-chrf.json").read_text())
    for row in rows:
        assert row["test_scores"]["chrf"] == pytest.approx(1.0 - row["test_score"])
    assert summary["methods"][0]["test_score"] == pytest.approx(np.mean([1.0 - r["test_score"] for r in rows]))
    assert main(argv[:-2] + ["--table-metric", "bleu"]) == 2
    err = capsys.readouterr().err
    assert "the table holds no 'bleu' (it holds rewards, metric, loglik, chrf)" in err and len(err.strip().splitlines()) == 1


def test_a_surrogates_ranking_of_the_arms_it_never_pulled_is_scored_against_the_truth():
    """Spearman's correlation of a fitted surrogate's arm means with the table's truth, over the held-out arms."""
    from types import SimpleNamespace

    from bench.items import Item
    from bench.replay import surrogate_agreement

    truth = np.array([0.1, 0.5, 0.3, 0.9, 0.7, 0.2])
    arm_of = {(f"d{a}",): a for a in range(6)}

    def fitted(estimates, pulled):
        return SimpleNamespace(surrogate_=SimpleNamespace(means=lambda arms: np.asarray(estimates)[arms]),
                               result_=SimpleNamespace(pulled=dict.fromkeys(pulled, 1)),
                               demos_of=lambda a: [Item(f"d{a}", "q", "a")])

    right = surrogate_agreement(fitted(truth * 2, [3, 4]), arm_of, truth)
    assert right == {"rank_corr_all": pytest.approx(1.0), "rank_corr_held_out": pytest.approx(1.0)}
    # right on the pulled arms only, reversed on the rest: the held-out number shows it
    estimates = -truth.copy()
    estimates[[3, 4]] = [5.0, 4.0]
    mixed = surrogate_agreement(fitted(estimates, [3, 4]), arm_of, truth)
    assert mixed["rank_corr_held_out"] == pytest.approx(-1.0) and mixed["rank_corr_all"] > -1.0
    assert surrogate_agreement(SimpleNamespace(), arm_of, truth) == {}  # no surrogate: nothing to say
    pac = fitted(estimates, [])
    pac.result_ = SimpleNamespace(seen=[3, 4])  # a PAC run lists the arms it pulled as `seen`
    assert surrogate_agreement(pac, arm_of, truth) == mixed


def test_a_batched_path_that_disagrees_with_one_call_at_a_time_stops_the_recording(gsm8k_setting, encoder, tmp_path):
    """`table calls` first runs the first arm through the batched paths and compares one item of each suffix length
    with one call at a time: a backend wrong on one length (as the H200 was for SST-2) records nothing."""
    from bench.errors import LLMError
    from bench.llm.base import RawChoices
    from bench.reward_table import answer_plan, write_plan
    from fakes import FakeBackend, varied

    task, splits, params = gsm8k_setting
    plan = write_plan(tmp_path / "plan.json", task, splits, LLMClient(FakeBackend(varied), None, params=params),
                      encoder, llm="fake", n_arms=3, k=2, seed=0, samples=3)

    class WrongOnOneLength(FakeBackend):
        def choice_logliks(self, prefix, suffixes, choices):
            out = super().choice_logliks(prefix, suffixes, choices)
            longest = max(len(s) for s in suffixes)
            return [RawChoices([v - 5.0 for v in r.logliks], r.prompt_tokens, r.prefilled_tokens)
                    if len(s) == longest and len(suffixes) > 1 else r for s, r in zip(suffixes, out)]

    class WrongGreedy(FakeBackend):
        def generate_with_prefix(self, prefix, suffixes, params, seeds):
            out = super().generate_with_prefix(prefix, suffixes, params, seeds)
            if len(suffixes) > 1:
                out[-1].text += " drift"
            return out

    for bad in (WrongOnOneLength(varied), WrongGreedy(varied)):
        cache = CallCache(tmp_path / f"{type(bad).__name__}.sqlite")
        with pytest.raises(LLMError, match="batched path disagrees with one call at a time on 1 of"):
            answer_plan(plan, LLMClient(bad, cache, params=params), progress=False)
        assert len(cache) == 0  # nothing recorded
    good = answer_plan(plan, LLMClient(FakeBackend(varied), CallCache(tmp_path / "ok.sqlite"), params=params),
                       progress=False)
    check = good["batching_check"]
    assert check["items"] == check["suffix_lengths"] >= 2 and check["max_loglik_gap"] == 0.0
    assert check["greedy_outputs_differ"] == 0
    assert "batching_check" not in answer_plan(plan, LLMClient(FakeBackend(varied), None, params=params),
                                               progress=False, check=False)


def test_a_tables_code_version_is_the_one_its_build_started_from(encoder, tmp_path, monkeypatch):
    """An hour's build outlives commits: meta.code names the commit when the build began, not when it saved."""
    import bench.provenance

    class Learner(RulesLearner):
        answered = False

        def answer(self, prompt):
            Learner.answered = True  # a commit lands while the build runs
            return super().answer(prompt)

    monkeypatch.setattr(bench.provenance, "environment",
                        lambda: {"git_commit": "bbbbbbb" if Learner.answered else "aaaaaaa"})
    task = make_task("rules").configure()
    splits = task.load_splits(None, n_test=2, n_val=2, pool_size=40, seed=0)
    t = build(task, splits, LLMClient(Learner(), CallCache(tmp_path / "c.sqlite")), encoder, None, n_arms=2,
              k=2, seed=0, samples=1, progress=False)
    assert t.meta["code"] == "aaaaaaa"


# ---- column groups: log-likelihoods alone (a CPU's build), AQuA-RAT's options ranked, merged tables ------------
def _gold_first(context: str, continuation: str) -> float:
    """A fake scorer: a continuation whose words the context holds scores high; used for the option ranking."""
    import re

    words = set(re.findall(r"\w+", continuation))
    return -float(len(words - set(re.findall(r"\w+", context)))) - 0.01 * len(continuation)


def test_a_loglik_table_holds_only_the_gold_loglik_from_the_same_calls_as_a_generation_build(gsm8k_setting, encoder,
                                                                                             tmp_path, data_dir):
    from fakes import FakeBackend, varied

    task, splits, params = gsm8k_setting
    cache = CallCache(tmp_path / "c.sqlite")
    backend = FakeBackend(varied, batch_size=64)
    only = build(task, splits, LLMClient(backend, cache, params=params), encoder, None, n_arms=3, k=2, seed=0,
                 samples=3, progress=False, groups=("loglik",))
    assert backend.prefix_calls == [] and not any("[Explanation]: step" in p for p in backend.prompts)  # no generation
    assert only.columns == ["loglik"] and only.meta["groups"] == ["loglik"] and only.meta["samples"] == 1
    assert np.all((only.loglik > 0) & (only.loglik <= 1)) and np.isnan(only.rewards).all()
    with pytest.raises(ConfigError, match="holds no 'rewards' \\(it holds loglik\\)"):
        only.values("rewards")
    assert only.default_reward == "loglik" and only.values("auto") is only.loglik
    # the harness's selectors replay from it, scored by the column itself ([arms, items]: no samples axis)
    only.save(tmp_path / "only.npz")
    argv = ["table", "replay", str(tmp_path / "only.npz"), "--methods", "case-static,lucb-static", "--seeds", "2",
            "--n-val", "2", "--data-dir", str(data_dir), "--no-progress", "--out", str(tmp_path / "replay")]
    for name in ("case-static", "lucb-static"):
        argv += [arg for key in ("m", "challengers", "cold_start", "max_pulls") for arg in
                 ("--param", f"{name}.{key}={ {'m': 1, 'challengers': 1, 'cold_start': 2, 'max_pulls': 4}[key]}")]
    assert main(argv) == 0
    summary = json.loads((tmp_path / "replay" / "summary.json").read_text())
    assert summary["test_metric"] == "loglik" and 0 < summary["reference"]["mean_arm"] <= 1
    # a generation build later finds every gold log-likelihood in the cache: the same calls, the same numbers
    asked = len(backend.prompts)
    full = build(task, splits, LLMClient(backend, cache, params=params), encoder, None, n_arms=3, k=2, seed=0,
                 samples=3, progress=False)
    assert np.array_equal(full.loglik, only.loglik)
    assert len(backend.prompts) - asked == 3 * 7 * 3  # only the sampled answers were new
    merged = only.merge(full)
    assert merged.columns == ["rewards", "metric", "loglik"] and np.array_equal(merged.rewards, full.rewards)
    merged.save(tmp_path / "m.npz")
    back = RewardTable.load(tmp_path / "m.npz")
    assert back.columns == merged.columns and back.meta["samples"] == 3 and len(back.meta["merged_from"]) == 2


def test_a_staged_build_records_a_seeded_part_of_the_test_items_and_the_whole_build_reuses_it(gsm8k_setting, encoder,
                                                                                                 data_dir, tmp_path,
                                                                                                 capsys):
    from fakes import FakeBackend, varied

    from bench.reward_table import table_splits

    task, splits, params = gsm8k_setting
    cache = CallCache(tmp_path / "c.sqlite")
    backend = FakeBackend(varied, batch_size=64)
    staged = build(task, splits, LLMClient(backend, cache, params=params), encoder, None, n_arms=3, k=2, seed=0,
                   samples=1, progress=False, groups=("loglik",), test_recorded=2)
    test_ids = [it.id for it in splits.test]
    held = list(staged.item_ids[staged.test])
    assert len(held) == 2 and set(held) < set(test_ids) and held == [i for i in test_ids if i in held]  # in order
    assert staged.meta["n_test"] == 3 and staged.meta["n_test_recorded"] == 2 and len(staged.validation) == 4
    staged.save(tmp_path / "s.npz")
    table_splits(RewardTable.load(tmp_path / "s.npz"), data_dir)  # its splits re-derive from the data folder
    asked = len(backend.prompts)
    full = build(task, splits, LLMClient(backend, cache, params=params), encoder, None, n_arms=3, k=2, seed=0,
                 samples=1, progress=False, groups=("loglik",))
    assert len(backend.prompts) - asked == 3 * 1  # one new test item per arm: the rest came from the cache
    assert "n_test_recorded" not in full.meta
    from bench.reward_table import held_test_items as _test_items  # a replay's header: the items held, not n_test
    assert (_test_items(staged.meta), _test_items(full.meta)) == ("2 test items (of 3: a staged table)",
                                                             "3 test items")
    # the table says how many calls its build answered and how many an earlier process did (its seconds cover the first)
    assert staged.meta["calls_answered"] == {"here": 3 * 6, "cache": 0}
    assert full.meta["calls_answered"] == {"here": 3, "cache": 3 * 6}
    from reports.claims import _built
    assert _built(full.meta).endswith("for 3 calls (18 read from its cache, answered earlier)")
    columns = [list(full.item_ids).index(i) for i in staged.item_ids]
    assert np.array_equal(full.loglik[:, columns], staged.loglik)
    # on a machine without that cache, --extend keeps the staged table's cells and answers only the item it lacks
    fresh = FakeBackend(varied, batch_size=64)
    grown = build(task, splits, LLMClient(fresh, CallCache(tmp_path / "new.sqlite"), params=params), encoder, None,
                  n_arms=3, k=2, seed=0, samples=1, progress=False, groups=("loglik",),
                  extend=RewardTable.load(tmp_path / "s.npz"))
    assert len(fresh.prompts) == 3 * 1 and grown.meta["calls_answered"] == {"here": 3, "cache": 0}
    assert list(grown.item_ids) == list(full.item_ids) and np.allclose(grown.loglik, full.loglik, rtol=1e-6)
    assert grown.meta["extends"]["items_kept"] == 6 and grown.meta["extends"]["calls_answered"] == {"here": 18,
                                                                                                     "cache": 0}
    assert "n_test_recorded" not in grown.meta
    # two --shard builds grow their slices of the staged table; joined, they are the unsharded extension
    from bench.reward_table import join_shards
    shards = [build(task, splits, LLMClient(FakeBackend(varied, batch_size=64), CallCache(tmp_path / f"{i}.sqlite"),
                                            params=params), encoder, None, n_arms=3, k=2, seed=0, samples=1,
                    progress=False, groups=("loglik",), shard=(i, 2), extend=RewardTable.load(tmp_path / "s.npz"))
              for i in range(2)]
    assert [s.meta["calls_answered"]["here"] for s in shards] == [2, 1]  # only the item the staged table lacks
    joined = join_shards(shards)
    assert list(joined.item_ids) == list(grown.item_ids) and np.allclose(joined.loglik, grown.loglik, rtol=1e-6)
    assert joined.arm_demo_ids.tolist() == grown.arm_demo_ids.tolist()
    joined.meta["shard_seconds"], joined.meta["build_seconds"], joined.meta["extends"]["build_seconds"] = \
        [20.0, 10.0], 30.0, 1200.0
    assert _built(joined.meta) == "1,230 s here in 2 stages (1,200 s + 30 s in 2 shards (20 s, 10 s))"
    grown.meta["build_seconds"], grown.meta["extends"]["build_seconds"] = 30.0, 1200.0
    assert _built(grown.meta) == "1,230 s here in 2 stages (1,200 s + 30 s)"
    # a table of another build does not grow this one: other arms, or items it does not draw
    with pytest.raises(ConfigError, match="other arms"):
        build(task, splits, LLMClient(fresh, CallCache(tmp_path / "new.sqlite"), params=params), encoder, None,
              n_arms=2, k=2, seed=0, samples=1, progress=False, groups=("loglik",), extend=staged)
    with pytest.raises(ConfigError, match="1 item\\(s\\) this build does not draw"):
        build(task, splits, LLMClient(fresh, CallCache(tmp_path / "new.sqlite"), params=params), encoder, None,
              n_arms=3, k=2, seed=0, samples=1, progress=False, groups=("loglik",), test_recorded=1, extend=staged)
    # the command refuses a table of other settings in one line, before any model loads
    capsys.readouterr()
    assert main(["table", "build", str(tmp_path / "g.npz"), "--task", "gsm8k", "--reward", "metric", "--rewards",
                 "loglik", "--arms", "3", "--k", "2", "--n-val", "4", "--pool-size", "30", "--data-dir",
                 str(data_dir), "--llm", "smollm2-135m", "--extend", str(tmp_path / "s.npz")]) == 2
    err = capsys.readouterr().err
    assert "built with another n_test (3, this build 200)" in err and len(err.strip().splitlines()) == 1


def test_tables_of_other_arms_or_disagreeing_columns_do_not_merge(gsm8k_setting, encoder, tmp_path):
    from fakes import FakeBackend, varied

    task, splits, params = gsm8k_setting
    make = lambda seed, path: build(task, splits, LLMClient(FakeBackend(varied), CallCache(tmp_path / path),  # noqa
                                                            params=params), encoder, None, n_arms=3, k=2, seed=seed,
                                    samples=1, progress=False, groups=("loglik",))
    a, b = make(0, "a.sqlite"), make(1, "b.sqlite")
    with pytest.raises(ConfigError, match="differ in seed"):
        a.merge(b)
    c = make(0, "c.sqlite")
    c.loglik = c.loglik * 0.5  # the same arms and items, another answer
    with pytest.raises(ConfigError, match="both tables hold 'loglik' and their values differ"):
        a.merge(c)


def test_aquarat_options_are_ranked_by_loglik_with_a_tie_counted_wrong(data_dir, encoder, tmp_path):
    from bench.llm.base import Backend, RawLoglik
    from bench.tasks.aquarat import option_text
    from scipy.special import softmax

    class Scorer(Backend):
        model_id, batch_size = "scorer", 64

        def generate(self, prompts, params, seeds):
            raise AssertionError("option ranking generates nothing")

        def loglik(self, contexts, continuations):
            return [RawLoglik(_gold_first(c, x), n_tokens=1) for c, x in zip(contexts, continuations)]

    task = make_task("aquarat").configure(reward="metric")
    splits = task.load_splits(data_dir, n_test=6, n_val=6, pool_size=40, seed=0)
    t = build(task, splits, LLMClient(Scorer(), CallCache(tmp_path / "c.sqlite")), encoder, None, n_arms=3, k=2,
              seed=0, samples=3, progress=False, groups=("loglik", "options"))
    assert t.columns == ["loglik", "option_correct", "option_prob"] and t.values("option_prob").shape == (3, 12, 1)
    pool = {it.id: it for it in splits.pool}
    ranker = task.option_ranking()
    for a, ids in enumerate(t.arm_demo_ids):
        prefix = ranker.prefix([pool[d] for d in ids])
        for i, item in enumerate(splits.validation + splits.test):
            context = prefix + ranker.format_query(item)
            scores = np.array([_gold_first(context, " " + option_text(o)) for o in item.options])
            gold = "ABCDE".index(item.answer)
            others = np.delete(scores, gold)
            assert t.extras["option_correct"][a, i, 0] == float(scores[gold] > others.max())  # a tie is wrong
            assert t.extras["option_prob"][a, i, 0] == pytest.approx(softmax(scores)[gold], rel=1e-5)
    # a staged build extended later holds the same option columns (kept cells and new ones in their places)
    staged = build(task, splits, LLMClient(Scorer(), CallCache(tmp_path / "s.sqlite")), encoder, None, n_arms=3, k=2,
                   seed=0, samples=3, progress=False, groups=("loglik", "options"), test_recorded=3)
    grown = build(task, splits, LLMClient(Scorer(), CallCache(tmp_path / "g.sqlite")), encoder, None, n_arms=3, k=2,
                  seed=0, samples=3, progress=False, groups=("loglik", "options"), extend=staged)
    assert grown.meta["calls_answered"]["here"] == 3 * 3 * 2 and list(grown.item_ids) == list(t.item_ids)
    for name in t.columns:
        assert np.allclose(grown.values(name), t.values(name), rtol=1e-6), name
    # the ranking prompt shows question and option text, never the rationale or the letters
    demo = ranker.format_demo(splits.pool[0])
    assert splits.pool[0].rationale[:30] not in demo and "[Options]" not in demo and demo.startswith("[Question]:")


@pytest.mark.parametrize("argv, message", [
    (["--task", "gsm8k", "--rewards", "options"], "task 'gsm8k' has none"),
    (["--task", "gsm8k", "--rewards", "loglik,bogus"], "--rewards takes a comma list of generation, loglik, options"),
    (["--task", "gsm8k", "--rewards", "loglik", "--plan", "p.json"], "--plan writes the generation calls"),
])
def test_bad_column_groups_are_one_line_exit_2_before_any_model_loads(argv, message, tmp_path, data_dir, capsys):
    assert main(["table", "build", str(tmp_path / "t.npz"), "--llm", "no-such-model-is-loaded", "--data-dir",
                 str(data_dir), *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_a_fixed_set_replay_is_judged_on_the_fixed_sets_means_with_the_pools_floor_beside_it(table, tmp_path,
                                                                                             data_dir):
    """The bandit pulls --n-val items: its target is their mean (eps-error, regret, coverage); the pool's mean is
    reported beside it with the floor an oracle that knows the fixed set's exact means already has there."""
    from bench.simulate import run

    t, _ = table
    t.save(tmp_path / "t.npz")
    env = RecordedEnvironment(t.rewards, rows=np.array([0, 1, 2]), pool=t.validation, rng=np.random.default_rng(0))
    assert env.target == "fixed set"
    np.testing.assert_allclose(env.true_means, t.rewards[:, [0, 1, 2]].mean(axis=(1, 2)))
    np.testing.assert_allclose(env.pool_means, t.true_means())
    whole = RecordedEnvironment(t.rewards, rows=t.validation, pool=t.validation, rng=np.random.default_rng(0))
    assert whole.target == "pool" and np.array_equal(whole.true_means, whole.pool_means)

    out = run(["--env", f"table:{tmp_path / 't.npz'}", "--methods", "lucb", "--m", "2", "--n-val", "3", "--runs",
               "6", "--epsilon", "0.01", "--budget", "200", "--data-dir", str(data_dir), "--no-progress"])
    row = out["results"][0]
    assert row["target"] == "fixed set" and row["eps_error_rate"] == 0.0 and row["coverage"] == 1.0
    floors = []
    for r in range(6):  # the oracle floor, recomputed: the fixed set's exact top 2, judged on the pool
        pick = np.sort(np.random.default_rng([0, r, 2]).choice(10, 3, replace=False))
        fixed = t.rewards[:, pick].mean(axis=(1, 2))
        oracle = np.argsort(-fixed, kind="stable")[:2]
        floors.append(float(np.any(t.true_means()[oracle] < np.sort(t.true_means())[::-1][1] - 0.01 - 1e-12)))
    assert row["oracle_floor_pool"] == pytest.approx(np.mean(floors)) and row["oracle_floor_pool"] > 0
    assert row["eps_error_pool_rate"] >= 0 and "mean_simple_regret_pool" in row


def test_simulate_runs_the_harness_case_by_default_and_the_script_setting_as_a_named_variant(table, tmp_path,
                                                                                            data_dir):
    from bench.simulate import run

    t, _ = table
    t.save(tmp_path / "t.npz")
    out = run(["--env", f"table:{tmp_path / 't.npz'}", "--methods", "case,case-script", "--m", "2", "--n-val", "6",
               "--runs", "2", "--budget", "60", "--data-dir", str(data_dir), "--no-progress"])
    case, script = out["results"]
    from methods.case_static import CaseStatic

    harness = CaseStatic()
    assert case["settings"] == {"sigma": harness.sigma, "patience": harness.patience} == {"sigma": 0.5, "patience": 0}
    assert script["settings"] == {"sigma": 0.1, "patience": 20}
    assert case["pulls"] != script["pulls"]


def test_the_two_way_bootstrap_finds_a_planted_difference_and_grants_equivalence_only_above_the_mdd():
    from reports.stats import bootstrap_seeds_items, planned_verdict

    rng = np.random.default_rng(0)
    items = rng.normal(0.5, 0.2, size=200)  # item difficulty, shared by both methods and every seed
    base = items[None, :] + rng.normal(0, 0.05, size=(30, 200))
    better = base + 0.03 + rng.normal(0, 0.05, size=base.shape)
    got = bootstrap_seeds_items(better, base, margin=0.05)
    assert got["diff"] == pytest.approx(0.03, abs=0.005) and got["p"] < 0.001 and got["ci95"][0] < got["diff"] < got["ci95"][1]
    same = bootstrap_seeds_items(base, base, margin=0.05)
    assert same["p"] == 1.0 and same["p_tost"] < 0.001 and same["se"] == 0.0
    # noisy per-item differences: a wide bootstrap, an MDD above the margin, so no equivalence can be claimed
    noisy = bootstrap_seeds_items(base + rng.normal(0, 0.6, size=base.shape), base, margin=0.01)
    assert noisy["mdd"] > 0.01
    assert planned_verdict(0.5, 0.001, margin=0.01, mdd=noisy["mdd"]) == "cannot decide (margin < MDD)"
    assert planned_verdict(0.5, 0.001, margin=0.05, mdd=0.02) == "equivalent within the margin"
    assert planned_verdict(0.5, 0.001, margin=0.03, mdd=0.03) == "equivalent within the margin"  # margin = MDD
    assert planned_verdict(0.01, 0.9, margin=0.05, mdd=0.02) == "differs"
    # the items are resampled too: a seed-only bootstrap of item-dependent noise would be narrower
    item_noise = rng.normal(0, 0.3, size=200)[None, :] + np.zeros((30, 1))
    wide = bootstrap_seeds_items(base + item_noise, base, margin=0.05)
    assert wide["se"] > 0.015  # sd 0.3 over 200 items: se ~ 0.021; seeds alone would see no spread at all
