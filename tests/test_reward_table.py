"""Recorded reward tables: built through the harness's own answering path (here with the ideal in-context learner
of `rules`, whose rewards are known), saved without pickles, replayed by `bench simulate --env table:FILE` with
the truth taken over the whole validation pool."""
import json

import numpy as np
import pytest

from bench.cli import main
from bench.errors import DataError
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


def test_a_replayed_pull_returns_recorded_rewards_and_the_truth_is_the_whole_pool():
    values = np.array([[[1.0, 0.0], [0.0, 0.0], [1.0, 1.0]], [[0.0, 0.0], [1.0, 1.0], [0.0, 1.0]]])  # 2 arms, 3 items
    env = RecordedEnvironment(values, rows=np.array([0, 2]), pool=np.array([0, 1, 2]), rng=np.random.default_rng(0))
    assert list(env.true_means) == pytest.approx([0.5, 0.5])  # over every item and sample, not the pulled rows
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
        assert row["mean_calls"] == pytest.approx(row["mean_pulls"] * 6)  # a pull = one call per validation item
        errors = round(row["eps_error_rate"] * 3)
        # one-sided 95% Clopper-Pearson bound: 1 - 0.05^(1/3) = 0.632 with no error in 3 runs
        assert row["eps_error_ucb95"] == pytest.approx(0.6316, abs=1e-3) if errors == 0 else row["eps_error_ucb95"] > 0.6


@pytest.mark.parametrize("bad, message", [("mc_passes", "KEY=VALUE"), ("passes=4", "KEY=VALUE"),
                                          ("mc_passes=many", "needs a int"), ("width_schedule=cosine", "width_schedule")])
def test_a_bad_neural_override_is_one_line_exit_2(bad, message, capsys):
    assert main(["simulate", "--env", "nonlinear", "--neural", bad, "--runs", "1"]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
