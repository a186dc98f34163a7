"""In-context influences (methods/influence.py) on the `rules` task, answered by the ideal in-context learner
(tests/fakes.py): the influence arithmetic, the label-balanced subsets, and that the choice follows the validation
items (demonstrations of the rules they need), not the pool."""
import random

import numpy as np
import pytest

from bench.errors import ConfigError, FitFailed
from bench.llm import LLMClient
from bench.oracle import RewardOracle
from bench.tasks import make_task
from fakes import RulesLearner
from methods.base import FitContext
from methods.influence import InContextInfluence, draw_subset, influences

K = 4


@pytest.fixture(scope="module")
def world():
    task = make_task("rules").configure()
    return task, task.load_splits(None, n_test=20, n_val=40, pool_size=160, seed=0)


def fit(world, encoder, validation, budget=None, **params):
    task, splits = world
    oracle = RewardOracle(LLMClient(RulesLearner()), task, "influence", bertscore=None, budget=budget)
    ctx = FitContext(task=task, pool=splits.pool, validation=validation, encoder=encoder, oracle=oracle, seed=0, k=K,
                     budget=budget)
    params = {"n_candidates": 48, "n_subsets": 72, "subset_size": K, **params}
    return InContextInfluence(k=K, **params).fit(ctx), oracle


def test_influence_is_mean_accuracy_with_minus_without_and_zero_when_a_side_is_empty():
    members = np.array([[0, 1], [1, 2], [0, 2], [3, 0]])
    accuracy = np.array([0.9, 0.3, 0.6, 0.2])
    got = influences(members, accuracy, 5)
    assert got == pytest.approx([(0.9 + 0.6 + 0.2) / 3 - 0.3, (0.9 + 0.3) / 2 - (0.6 + 0.2) / 2,
                                 (0.3 + 0.6) / 2 - (0.9 + 0.2) / 2, 0.2 - (0.9 + 0.3 + 0.6) / 3, 0.0])
    assert influences(np.array([[0], [0]]), np.array([0.2, 0.8]), 1) == pytest.approx([0.0])  # in every subset


def test_subsets_are_label_balanced_on_labelled_tasks_and_uniform_otherwise(world):
    task, splits = world
    rng = random.Random(0)
    candidates = splits.pool[:64]
    seen = set()
    for _ in range(200):
        subset = draw_subset(candidates, 10, task.labels, rng)
        counts = np.bincount([task.labels.index(candidates[i].answer) for i in subset], minlength=8)
        assert len(set(subset)) == 10 and sorted(counts)[-2:] == [2, 2] and set(counts) == {1, 2}
        seen |= {task.labels[j] for j in np.flatnonzero(counts == 2)}
    assert seen == set(task.labels)  # the remainder goes to random labels, not always the first ones
    plain = [draw_subset(candidates, 3, (), rng) for _ in range(300)]
    assert {i for s in plain for i in s} == set(range(64)) and all(len(set(s)) == 3 for s in plain)


def test_the_choice_is_the_rules_the_validation_items_need(world, encoder):
    """Validation items of two rules: their demonstrations raise accuracy, any other takes a slot; the k chosen
    are of those two rules, most influential last. Other validation rules, other demonstrations."""
    task, splits = world
    for rules in (("alpha", "bravo"), ("golf", "hotel")):
        validation = [q for q in splits.validation + splits.test if q.answer in rules][:12]
        selector, oracle = fit(world, encoder, validation)
        chosen = selector.select(splits.test[0])
        assert {d.answer for d in chosen} <= set(rules), (rules, [d.answer for d in chosen])
        assert oracle.calls == 72 * len(validation)
        assert not {d.id for d in chosen} & {q.id for q in validation + splits.test}
        ranked = [selector.influence_[selector.candidates_.index(d)] for d in chosen]
        assert ranked == sorted(ranked) and ranked[-1] == selector.influence_.max()
        assert selector.scale()["appearances a candidate"] == pytest.approx(72 * 4 / 48)


def test_a_budget_keeps_the_subsets_evaluated_and_says_so(world, encoder):
    validation = world[1].validation[:5]
    selector, oracle = fit(world, encoder, validation, budget=5 * 10 + 3)
    assert len(selector.accuracy_) == 10 and oracle.calls == 50
    assert any("10 of 72 subsets" in w for w in selector.fit_warnings)
    with pytest.raises(FitFailed, match="^influence: --llm-budget ended before one subset was evaluated; raise the "
                                        "budget$"):
        fit(world, encoder, validation, budget=3)


@pytest.mark.parametrize("name, value", [("n_candidates", 0), ("n_subsets", 1.5), ("subset_size", 0)])
def test_bad_parameters_are_config_errors(name, value):
    with pytest.raises(ConfigError, match=f"^influence: {name} must be an integer >= 1, got {value}$"):
        InContextInfluence(**{name: value})
    InContextInfluence(**{name: 1})  # 1 is allowed


def test_too_few_candidates_or_no_validation_is_a_config_error(world):
    task, _ = world
    with pytest.raises(ConfigError, match="must outnumber"):
        InContextInfluence(k=5, n_candidates=5).check_splits(task, 100, 10)
    with pytest.raises(ConfigError, match="^influence evaluates its subsets on validation items: --n-val must be at "
                                          "least 1$"):
        InContextInfluence(k=5, subset_size=5).check_splits(task, 100, 0)
    InContextInfluence(k=5, subset_size=5).check_splits(task, 100, 1)  # one validation item is enough
    with pytest.raises(ConfigError, match="larger than the pool"):  # the base check (k <= pool) still runs
        InContextInfluence(k=5, subset_size=2, n_candidates=3).check_splits(task, 3, 1)


def test_what_it_reports_scale_trace_and_call_bound(world, encoder):
    validation = world[1].validation[:3]
    selector, oracle = fit(world, encoder, validation, n_candidates=20, n_subsets=10)
    assert selector.scale() == {"subsets evaluated": 10, "subset size": K, "candidates": 20,
                                "appearances a candidate": 2.0,
                                "authors' scale": "400 candidates, 100 subsets of 18 (README: 650), 200 dev items, "
                                                  "OPT-6.7B"}
    appearances = np.bincount(selector.members_.ravel(), minlength=20)
    assert selector.trace() == [{"summary": True, "subsets": 10, "candidates": 20,
                                 "uncovered": int((appearances == 0).sum()), "mean_appearances": 2.0,
                                 "llm_calls": 30, "best_influence": float(selector.influence_.max())}]
    assert selector.selection_call_bound(n_val=7, n_test=99) == 10 * 7 == 70
    assert InContextInfluence().scale() == {}
    assert InContextInfluence().trace() == []
    assert selector.level == "task" and selector.select(world[1].test[0]) == selector.select(world[1].test[1])


def test_a_label_with_too_few_candidates_is_filled_from_the_others(world):
    task, splits = world
    two_alpha = [c for c in splits.pool if c.answer == "alpha"][:2]
    others = [c for c in splits.pool if c.answer not in ("alpha", "bravo")][:30]  # no bravo at all
    candidates = two_alpha + others
    rng = random.Random(1)
    for _ in range(50):
        subset = draw_subset(candidates, 21, task.labels, rng)  # 3 of each of 7 present labels; alpha has 2
        assert len(subset) == len(set(subset)) == 21
        assert {0, 1} <= set(subset)  # both alphas, every time
        assert sum(candidates[i].answer == "alpha" for i in subset) == 2


def test_the_candidates_must_outnumber_the_subset_and_k_exactly(world):
    task, _ = world
    InContextInfluence(k=4, n_candidates=6, subset_size=5).check_splits(task, 100, 1)  # 6 > 5: fine
    with pytest.raises(ConfigError, match="must outnumber"):
        InContextInfluence(k=4, n_candidates=5, subset_size=5).check_splits(task, 100, 1)
    with pytest.raises(ConfigError, match="must outnumber"):
        InContextInfluence(k=6, n_candidates=6, subset_size=2).check_splits(task, 100, 1)
    with pytest.raises(ConfigError, match="must outnumber"):
        InContextInfluence(k=4, n_candidates=400, subset_size=5).check_splits(task, 5, 1)  # the pool caps them


def test_the_fit_draws_label_balanced_subsets_from_its_seed_and_warns_only_when_cut(world, encoder):
    task, splits = world
    selector, _ = fit(world, encoder, splits.validation[:2], n_candidates=40, n_subsets=12)
    assert selector.fit_warnings == []
    for members in selector.members_:  # 4 of 8 labels: never one label twice
        labels = [selector.candidates_[i].answer for i in members]
        assert len(set(labels)) == len(labels) == K
    rng = random.Random("0:influence-subsets")  # FitContext.rng(salt): the seed and the salt
    assert selector.members_.tolist() == [draw_subset(selector.candidates_, K, task.labels, rng) for _ in range(12)]
    candidates = random.Random("0:influence-candidates").sample(splits.pool, 40)
    assert selector.candidates_ == candidates


def test_tied_influences_keep_candidate_order(world, encoder):
    """Every subset equally good: every influence 0, and the last k candidates serve, in candidate order."""
    task, splits = world
    selector = InContextInfluence(k=K, n_candidates=20, n_subsets=6, subset_size=K)

    class Flat:
        calls = 0

        def pull(self, demos, items):
            return np.full(len(items), 0.5)

    ctx = FitContext(task=task, pool=splits.pool, validation=splits.validation[:2], encoder=encoder, oracle=Flat(),
                     seed=0, k=K)
    selector.fit(ctx)
    assert not selector.influence_.any()
    assert selector.select(splits.test[0]) == selector.candidates_[-K:]
