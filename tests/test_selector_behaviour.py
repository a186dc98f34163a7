"""Every selector against a planted answer: the `rules` task answered by an ideal in-context learner
(tests/fakes.py RulesLearner), so a prompt's utility for a query is known exactly (1 when it holds a
demonstration of the query's rule, else 0). Each selector runs its real fit through the real reward oracle, at a
small size, and must do what its method exists to do:
- what is chosen: a task-level set among the best random sets; an instance-level choice better than most
  fixed sets (the search, the training and the final choice all point the right way);
- a per-query choice reads the query: the scores a ranker gives the candidate arms change with the query, and
  retrieval picks other demonstrations for queries of other rules;
- a trained ranker ranks its training queries' arms by the planted utility;
- every final choice step (re-scoring the top m) keeps the best arm it observed, not the worst.
A selector whose core step is inverted (the worst kept) or skipped (no learning, query ignored) fails here.
"""
import inspect
import json
import os
import random
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from bench.llm import LLMClient
from bench.oracle import RewardOracle
from bench.tasks import make_task
from fakes import RulesLearner
from methods.bandit_base import observed_rewards
from methods.base import FitContext, accepted_params, available, create, default_params

K = 4
BANDIT = {"n_arms": 16, "m": 3, "challengers": 2, "cold_start": 2, "mc_passes": 8, "max_pulls": 12,
          "epochs_per_round": 2}
LTR = {**BANDIT, "train_arms": 8, "negatives": 2, "epochs": 60}
PARAMS = {
    "lens": {"indication_size": 2, "keep": 8, "max_candidates": 24, "beam": 4, "iterations": 3, "swaps": 3,
             "shuffles": 1, "heldout": 24, "heuristic_beam": 3, "heuristic_iterations": 3, "heuristic_init": 12},
    "explora": {"n_arms": 24, "iterations": 4, "u_size": 6, "v_size": 3},
    "bridge": {"n_candidates": 24, "n_init": 6, "n_iter": 14, "rounds": 1},
    "udr": {"n_train_queries": 16, "n_candidates": 8, "rounds": 1, "epochs": 2},
    "influence": {"n_candidates": 48, "n_subsets": 60, "subset_size": K},
    "dq-lore": {"n_train_queries": 16, "n_candidates": 8, "epochs": 3, "batch_queries": 8},
    "epr": {"n_train_queries": 16, "n_candidates": 8, "epochs": 3, "batch_queries": 8},
    "ceil": {"n_train_queries": 16, "n_subsets": 8, "epochs": 2},
    "case-dynamic": {**BANDIT, "pulls_per_query": 6},
    "udr@dearicl-data": {**BANDIT, "epochs": 2},
    "dearicl-noexplore": {**BANDIT, "initial_arms": 8, "train_rounds": 2},
}
SKIP = {"zero-shot": "no demonstrations: nothing to choose", "few-shot": "a seeded random draw: nothing to learn"}
# PiRank's loss fits its training slates but ranks unseen queries alike (methods/pirank.py, "Measured behaviour"):
# on its own data its choice is no better than a fixed set, so only its query dependence and training order count
WEAK_GENERALISATION = {"pirank"}
# In-context influences score demonstrations one at a time: here its k picks are all of the rules most frequent
# among the 12 validation items, redundant as a set (measured: 0.425 on the test items, random sets' median 0.625);
# tests/test_influence.py tests that it follows the validation items
ONE_AT_A_TIME = {"influence"}
SELECTORS = sorted(n for n in available() if n not in SKIP)
# retrieval without an LLM call: similarity, lexical match, or diversity over the pool
RETRIEVERS = ("knn", "mmr", "bm25", "dpp", "votek", "set-bsr")
# retrieval re-ranked by the LLM's scores per query (tests/test_cone_mdl.py tests their scores)
LM_RERANKERS = ("topk-cone", "mdl")
# dense retrievers trained on LM scores of BM25 candidates (tests/test_udr.py, tests/test_epr.py test their training)
TRAINED_RETRIEVERS = ("udr", "epr", "dq-lore")
# per-query choices by a trained model over a fixed set of candidate arms (`candidates_`, `candidate_scores`)
RANKERS = sorted(n for n in SELECTORS if available()[n].level == "instance" and n not in
                 (*RETRIEVERS, *TRAINED_RETRIEVERS, "ceil", "case-dynamic", *LM_RERANKERS))


def params_for(name: str) -> dict:
    if name in PARAMS:
        return {"k": K, **PARAMS[name]}
    accepted = set(accepted_params(available()[name]))
    pool = LTR if {"epochs", "train_arms"} <= accepted else BANDIT
    return {"k": K, **{key: value for key, value in pool.items() if key in accepted}}


@pytest.fixture(scope="module")
def world():
    task = make_task("rules").configure()
    return task, task.load_splits(None, n_test=40, n_val=12, pool_size=160, seed=0)


@pytest.fixture(scope="module")
def fits(world, encoder):
    """Each selector fitted once for the module (fits are the slow part); under BENCH_FRESH_FITS=1 (set by
    scripts/mutation.sh) every test fits its own, so mutmut credits each test with the code its fit runs."""
    cache = {}
    fresh = os.environ.get("BENCH_FRESH_FITS") == "1"

    def fit(name):
        if name not in cache or fresh:
            task, splits = world
            oracle = RewardOracle(LLMClient(RulesLearner()), task, name, bertscore=None)
            ctx = FitContext(task=task, pool=splits.pool, validation=splits.validation, encoder=encoder,
                             oracle=oracle, seed=0, k=K)
            cache[name] = (create(name, params_for(name)).fit(ctx), oracle)
        return cache[name]

    return fit


def utility(demos, query) -> float:
    """The planted answer: the ideal learner is right exactly when a same-rule demonstration is shown."""
    return float(any(d.answer == query.answer for d in demos))


def random_utilities(splits, draws: int = 300, seed: int = 0) -> np.ndarray:
    rng = random.Random(seed)
    return np.array([np.mean([utility(s, q) for q in splits.test]) for s in
                     (rng.sample(splits.pool, K) for _ in range(draws))])


@pytest.mark.parametrize("name", SELECTORS)
def test_what_is_chosen_beats_most_fixed_sets(name, world, fits):
    task, splits = world
    selector, oracle = fits(name)
    chosen = [selector.select(q) for q in splits.test]
    assert all(len(c) == K for c in chosen)
    assert not {d.id for c in chosen for d in c} & {q.id for q in splits.test}
    assert oracle.calls > 0 or name in RETRIEVERS, f"{name} made no selection call"
    mean = float(np.mean([utility(c, q) for c, q in zip(chosen, splits.test)]))
    random_sets = random_utilities(splits)
    if selector.level == "task":
        assert len({tuple(d.id for d in c) for c in chosen}) == 1  # one set for every query
    if name in ONE_AT_A_TIME:  # its picks are of the rules the validation items hold most
        frequency = Counter(q.answer for q in splits.validation)
        assert min(frequency[d.answer] for d in chosen[0]) >= sorted(frequency.values())[-3], (frequency, chosen[0])
    if name in WEAK_GENERALISATION or name in ONE_AT_A_TIME:
        return
    # random sets: median 0.625, 75th percentile 0.70, best 0.825; a search or ranker turned upside down lands
    # near the bottom, one that does nothing near the median
    assert mean > np.percentile(random_sets, 75), (name, mean, np.percentile(random_sets, [50, 75, 100]))


@pytest.mark.parametrize("name", [*RETRIEVERS, *LM_RERANKERS, *TRAINED_RETRIEVERS, "ceil", "case-dynamic"])
def test_retrieval_reads_the_query(name, world, fits):
    """Retrieval and per-query bandits pick same-rule demonstrations, so other rules get other sets."""
    task, splits = world
    selector, _ = fits(name)
    chosen = [selector.select(q) for q in splits.test]
    assert np.mean([utility(c, q) for c, q in zip(chosen, splits.test)]) >= random_utilities(splits).max() + 0.1
    if name == "case-dynamic":  # it picks arms of four topics each: two rules may share the best arm
        assert len({tuple(d.id for d in c) for c in chosen}) >= 3
        return
    sets_of = {}
    for c, q in zip(chosen, splits.test):
        sets_of.setdefault(q.answer, set()).add(tuple(sorted(d.id for d in c)))
    rules = list(sets_of)
    assert all(sets_of[a].isdisjoint(sets_of[b]) for a in rules for b in rules if a < b)


@pytest.mark.parametrize("name", RANKERS)
def test_a_rankers_scores_depend_on_the_query(name, world, fits):
    task, splits = world
    selector, _ = fits(name)
    by_rule = {}
    for q in splits.test:
        by_rule.setdefault(q.answer, q)
    scores = [selector.candidate_scores(q, selector.candidates_) for q in by_rule.values()]
    assert len(selector.candidates_) >= 2
    assert any(not np.allclose(scores[0], s) for s in scores[1:]), f"{name}: the same scores for every query"


@pytest.mark.parametrize("name", RANKERS)
def test_a_per_query_choice_is_the_candidate_scored_highest(name, world, fits):
    """The final per-query step is an argmax over the trained model's scores (not the lowest-scored arm)."""
    task, splits = world
    selector, _ = fits(name)
    for q in splits.test[:10]:
        scores = selector.candidate_scores(q, selector.candidates_)
        assert scores.max() > scores.min(), f"{name}: all candidates tie for {q.id}"
        assert selector.select(q) == selector.demos_of(int(selector.candidates_[int(np.argmax(scores))]))


@pytest.mark.parametrize("name", [n for n in RANKERS if not n.startswith("dearicl")])
def test_a_trained_ranker_orders_its_training_queries_arms_by_the_planted_utility(name, world, fits):
    """The ranking loss trains toward the rewards: on the validation queries it was trained on, arms with a
    same-rule demonstration score above the others (ROC AUC; 0.5 is chance, below it an inverted loss)."""
    task, splits = world
    selector, _ = fits(name)
    aucs = []
    for q in splits.validation:
        truth = [utility(selector.demos_of(int(a)), q) for a in selector.candidates_]
        if 0 < sum(truth) < len(truth):
            aucs.append(roc_auc_score(truth, selector.candidate_scores(q, selector.candidates_)))
    assert len(aucs) >= 3
    assert np.mean(aucs) > (0.5 if name in WEAK_GENERALISATION else 0.65), (name, np.mean(aucs))
    if getattr(selector, "loss_name", ""):  # an LTR ranker: it trained for all its epochs and its loss went down
        losses = selector.losses_
        assert len(losses) == selector.epochs, (name, len(losses), selector.epochs)
        # PiRank's straight-through loss rises here (0.20 -> 0.36 over 60 epochs; methods/pirank.py)
        assert name.split("@")[0] in WEAK_GENERALISATION or losses[-1] < losses[0], (name, losses[:1], losses[-1:])


@pytest.mark.parametrize("name", ["case-static", "dearicl-static", "lucb-static", "dearicl-pac-static"])
def test_the_final_choice_keeps_the_best_rescored_arm(name, world, fits):
    task, splits = world
    selector, oracle = fits(name)
    observed = observed_rewards(selector.prep_.env, oracle)
    top = [a for a in selector.result_.top_m if observed.get(a)]
    means = {a: np.mean(observed[a]) for a in top}
    assert len(top) >= 2 and selector.best_arm_ in top
    assert means[selector.best_arm_] == max(means.values())
    assert selector.select(splits.test[0]) == selector.demos_of(selector.best_arm_)


@pytest.mark.parametrize("name", [n for n in SELECTORS if available()[n].level == "task"
                                  and n not in ("lens", "bridge", *ONE_AT_A_TIME)])
def test_a_task_level_search_ends_on_one_of_its_best_arms(name, world, fits):
    """Among the arms the search chose from (planted validation utility: 0.58 to 0.75 here), the chosen one is in
    the top quarter: a search or final choice that pursues the worst arms ends below it. (Random K-sets are a weak
    yardstick for these methods: their diverse arms nearly all beat the typical random set.)"""
    task, splits = world
    selector, _ = fits(name)
    members = selector.prep_.arms.members
    value = np.array([np.mean([utility([splits.pool[i] for i in row], q) for q in splits.validation])
                      for row in members])
    assert value.max() > value.min()
    assert value[selector.best_arm_] >= np.percentile(value, 75), (name, value[selector.best_arm_], np.sort(value))


def test_the_planted_answer_separates_good_and_bad_prompts(world):
    """The checks above bite: random sets spread widely, same-rule sets are perfect, other-rule ones useless, and
    the fake learner's reward is exactly the planted utility."""
    task, splits = world
    random_sets = random_utilities(splits)
    assert np.percentile(random_sets, 90) - np.percentile(random_sets, 10) >= 0.15 and random_sets.max() < 0.95
    same = [[d for d in splits.pool if d.answer == q.answer][:K] for q in splits.test]
    other = [[d for d in splits.pool if d.answer != q.answer][:K] for q in splits.test]
    assert [utility(s, q) for s, q in zip(same, splits.test)] == [1.0] * len(splits.test)
    assert [utility(s, q) for s, q in zip(other, splits.test)] == [0.0] * len(splits.test)
    oracle = RewardOracle(LLMClient(RulesLearner()), task, "check", bertscore=None)
    for demos in (same[0], other[0], random.Random(1).sample(splits.pool, K)):
        assert list(oracle.pull(demos, splits.test)) == [utility(demos, q) for q in splits.test]


@pytest.mark.parametrize("name", sorted(available()))
def test_every_selector_builds_from_its_defaults_with_the_papers_k(name):
    """Defaults are what `bench.api` users and configs without `k` get: k = 5 demonstrations, as in the paper."""
    selector = create(name, {})
    assert selector.k == 5
    assert selector.name == name


def _changed(value):
    """Another valid value of a numeric or boolean default; None where no generic change is safe."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        changed = value * 0.5 + 0.01
        return changed if changed != value else value + 0.01  # 0.02 is its own image under the first rule
    return None


def _state(selector) -> str:
    return repr(sorted((key, repr(value)) for key, value in vars(selector).items()))


@pytest.mark.parametrize("name", sorted(available()))
def test_every_numeric_parameter_reaches_the_selector(name):
    """A parameter passed in changes the selector's state: a subclass that drops its **kwargs (or k) on the way to
    its base would run every configured selector at the defaults without a word."""
    cls = available()[name]
    defaults = {p.name: p.default for klass in reversed(cls.__mro__) if "__init__" in vars(klass)
                for p in inspect.signature(vars(klass)["__init__"]).parameters.values()
                if p.default is not inspect.Parameter.empty}
    default_state = _state(create(name, {}))
    for param in accepted_params(cls):
        value = _changed(defaults.get(param))
        if value is not None:
            assert _state(create(name, {param: value})) != default_state, f"{name}: {param}={value} was dropped"
    if name == "dearicl-random":
        assert create(name, {"rule": "greedy"}).settings()["selection_rule"] == "random"  # the ablation's point


def test_dearicl_noexplore_pulls_only_its_initial_random_arms(world, encoder):
    """dearicl-noexplore: the cold start alone (initial_arms arms, each pulled once), no gap-index round. It fits
    its own selector (not the module's shared fit) so that mutmut, which runs the tests that called the mutated
    function, runs this one."""
    task, splits = world
    oracle = RewardOracle(LLMClient(RulesLearner()), task, "dearicl-noexplore", bertscore=None)
    ctx = FitContext(task=task, pool=splits.pool, validation=splits.validation, encoder=encoder, oracle=oracle,
                     seed=0, k=K)
    result = create("dearicl-noexplore", params_for("dearicl-noexplore")).fit(ctx).result_
    assert result.pulls == PARAMS["dearicl-noexplore"]["initial_arms"] == len(result.pulled)
    assert set(result.pulled.values()) == {1}


PUBLISHED_DEFAULTS = json.loads((Path(__file__).parents[1] / "studies/reference/selector-defaults.json").read_text())


@pytest.mark.parametrize("name", sorted(available()))
def test_every_selectors_defaults_are_the_published_ones(name):
    """A changed default changes every run that does not set it: only on purpose, with the reference updated
    (`python -m bench list --defaults > studies/reference/selector-defaults.json`)."""
    assert default_params(available()[name]) == PUBLISHED_DEFAULTS.get(name), f"{name}: defaults differ"


def spy_on_core(monkeypatch, module, name: str) -> dict:
    """Replace a selector module's bandit core by a wrapper that records the settings it is called with."""
    seen = {}
    real = getattr(module, name)

    def spy(env, m, **kwargs):
        seen.update(kwargs, m=m)
        return real(env, m, **kwargs)

    monkeypatch.setattr(module, name, spy)
    return seen


def test_lucb_static_passes_its_settings_on_and_guards_its_edges(world, encoder, monkeypatch):
    """lucb-static's wiring: epsilon, delta, cs and max_pulls reach LUCB; no pull is a failure, one pull a warned
    fit; a sweep that saw every arm does not warn; its settings name the certified stop."""
    import methods.lucb_static as module
    from bench.errors import ConfigError, FitFailed
    from dearicl.confidence import FIXED_SET_SEQUENCES

    with pytest.raises(ConfigError, match=f"lucb-static: cs must be one of {', '.join(FIXED_SET_SEQUENCES)}, got 'x'"):
        create("lucb-static", {"cs": "x"})
    task, splits = world
    seen = spy_on_core(monkeypatch, module, "LUCB")

    def fit(budget=None, **params):
        oracle = RewardOracle(LLMClient(RulesLearner()), task, "lucb-static", bertscore=None, budget=budget)
        ctx = FitContext(task=task, pool=splits.pool, validation=splits.validation, encoder=encoder, oracle=oracle,
                         seed=0, k=K, budget=budget)
        return create("lucb-static", {"k": K, "n_arms": 16, "m": 3, **params}).fit(ctx)

    cs = FIXED_SET_SEQUENCES[-1]
    selector = fit(epsilon=0.3, delta=0.2, cs=cs, max_pulls=16)
    assert seen == {"epsilon": 0.3, "delta": 0.2, "cs": cs, "max_pulls": 16, "m": 3, "split": "uniform",
                    "sampling": "both"}
    assert selector.result_.pulls == 16 and not any("pulled once" in w for w in selector.fit_warnings)
    assert selector.settings()["stop_rule"] == "certified: min LCB(top m) >= max UCB(rest) - epsilon"
    assert selector.settings()["surrogate"] == "none (per-arm confidence sequences)"
    assert selector.settings()["confidence_sequence"] == cs
    pp = fit(split="lucb++", sampling="wider", max_pulls=20)
    assert (seen["split"], seen["sampling"]) == ("lucb++", "wider") and pp.result_.pulls <= 20
    assert (pp.settings()["split"], pp.settings()["sampling"]) == ("lucb++", "wider")
    bad = "method 'lucb-static': bad parameter value (lucb-static: "  # the constructor's ValueError, as create words it
    with pytest.raises(ConfigError, match=re.escape(f"{bad}split must be one of uniform, lucb++ and sampling one of "
                                                    "both, wider, got 'lucb', 'both'; given split='lucb')")):
        create("lucb-static", {"split": "lucb"})
    with pytest.raises(ConfigError, match="^" + re.escape(f"{bad}split and sampling are options of the per-arm LUCB, "
                                                          "not of paired=True; given paired=True, sampling='wider')")):
        create("lucb-static", {"paired": True, "sampling": "wider"})
    n_val = len(splits.validation)
    one = fit(budget=n_val, max_pulls=16)  # the budget pays for one pull
    assert one.result_.pulls == 1 and one.best_arm_ in one.result_.top_m
    assert any(w.startswith("only 1 of 16 arms were pulled once before the budget stop: the top m is chosen among "
                            "those") for w in one.fit_warnings)
    with pytest.raises(FitFailed, match="^lucb-static: no arm was pulled before the budget ended; raise --llm-budget$"):
        fit(budget=n_val - 1, max_pulls=16)
    for arms, m in ((2, 1), (3, 2)):  # m is clamped below the number of arms: a top m needs an arm outside it
        fit(n_arms=arms, m=10, max_pulls=8)
        assert seen["m"] == m


def test_lucb_static_paired_runs_the_paired_core_and_names_its_stop(world, encoder, monkeypatch):
    """paired=True: the paired differences' core (dearicl/paired.py) certifies, with its settings and its own stop
    rule named; it takes only the per-query sequence."""
    import methods.lucb_static as module
    from bench.errors import ConfigError

    with pytest.raises(ConfigError, match="paired comparisons use the per-query sequence, not cs='kl'"):
        create("lucb-static", {"cs": "kl", "paired": True})
    seen = spy_on_core(monkeypatch, module, "PairedLUCB")
    task, splits = world
    oracle = RewardOracle(LLMClient(RulesLearner()), task, "lucb-static", bertscore=None)
    ctx = FitContext(task=task, pool=splits.pool, validation=splits.validation, encoder=encoder, oracle=oracle,
                     seed=0, k=K)
    selector = create("lucb-static", {"k": K, "n_arms": 8, "m": 2, "paired": True, "epsilon": 0.3, "delta": 0.2,
                                      "max_pulls": 60}).fit(ctx)
    assert seen == {"epsilon": 0.3, "delta": 0.2, "cs": "query-bernstein", "max_pulls": 60, "m": 2}
    assert selector.result_.pulls >= 8 and selector.best_arm_ in selector.result_.top_m
    settings = selector.settings()
    assert settings["paired"] is True and settings["stop_rule"] == ("certified: LCB(mu_j - mu_o) > -epsilon for "
                                                                    "every j in the top m and o outside")
    assert settings["surrogate"] == "none (paired and per-arm confidence sequences)"  # the report's scale column
    assert settings["confidence_sequence"] == "query-bernstein" and "split" not in settings


@pytest.mark.parametrize("name", ["case-static", "case-dynamic", "dearicl-static"])
def test_the_gap_index_bandits_lower_m_on_a_small_pool_and_keep_their_best_estimated_arm(name, world, encoder,
                                                                                          monkeypatch):
    """m leaves the challengers and one arm outside the top m (4 arms, 2 challengers: m 1; 5 arms: m 2), and the
    choice is U_T's first arm, the best estimated (case-dynamic per query; the static ones after re-scoring)."""
    import methods.bandit_base
    import methods.case_dynamic
    from dearicl.bandit import GapIndexTopM

    runs = []

    class Spy(GapIndexTopM):
        def run(self):
            result = super().run()
            runs.append((self.cfg.m, result, self.s.means(np.array(result.top_m))))
            return result

    monkeypatch.setattr(methods.bandit_base, "GapIndexTopM", Spy)
    monkeypatch.setattr(methods.case_dynamic, "GapIndexTopM", Spy)
    task, splits = world
    for arms, m in ((4, 1), (5, 2), (16, 3)):
        oracle = RewardOracle(LLMClient(RulesLearner()), task, name, bertscore=None)
        ctx = FitContext(task=task, pool=splits.pool, validation=splits.validation, encoder=encoder, oracle=oracle,
                         seed=0, k=K)
        selector = create(name, {**params_for(name), "n_arms": arms, "m": 3, "challengers": 2}).fit(ctx)
        chosen = selector.select(splits.test[0])
        got_m, result, means = runs[-1]
        assert got_m == m and len(result.top_m) == m, (name, arms, got_m)
        assert list(means) == sorted(means, reverse=True)  # U_T best first
        if name == "case-dynamic":
            assert chosen == selector.prep_.env.demos(result.top_m[0])
