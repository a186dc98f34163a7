"""TopK+ConE (methods/topk_cone.py) and TopK+MDL (methods/mdl.py) on the `rules` task, answered by the ideal
in-context learner (tests/fakes.py): what each chooses, and that the choice follows the model's scores, not only
similarity."""
import numpy as np
import pytest

from bench.errors import ConfigError
from bench.llm import LLMClient
from bench.llm.base import RawLoglik
from bench.oracle import RewardOracle
from bench.tasks import make_task
from fakes import RulesLearner
from methods.base import FitContext
from methods.mdl import MDL
from methods.topk_cone import TopKConE

K = 4


@pytest.fixture(scope="module")
def world():
    task = make_task("rules").configure()
    return task, task.load_splits(None, n_test=30, n_val=4, pool_size=160, seed=0)


def fit(selector, world, encoder, learner=None, task=None, budget=None):
    rules, splits = world
    task = task or rules
    oracle = RewardOracle(LLMClient(learner or RulesLearner()), task, selector.name, bertscore=None, budget=budget)
    ctx = FitContext(task=task, pool=splits.pool, validation=splits.validation, encoder=encoder, oracle=oracle,
                     seed=0, k=K, budget=budget)
    return selector.fit(ctx), oracle


def same_rule_share(chosen, queries) -> float:
    return float(np.mean([np.mean([d.answer == q.answer for d in c]) for c, q in zip(chosen, queries)]))


class OtherTopicLearner(RulesLearner):
    """The opposite model: a query is likelier after a demonstration of ANOTHER topic."""

    def loglik(self, contexts, continuations):
        return [RawLoglik(-5.0 - r.logprob, r.n_tokens) if c.lstrip().startswith("Input:") else r
                for c, r in zip(continuations, super().loglik(contexts, continuations))]


def test_topk_cone_keeps_the_candidates_after_which_the_model_finds_the_query_likeliest(world, encoder):
    """Among the 60 most similar, the model's favourites: same-topic demonstrations under the ideal learner; under
    the opposite model the other-topic ones. Never outside the candidates; one call per candidate and query."""
    task, splits = world
    cone, oracle = fit(TopKConE(k=K, candidates=60), world, encoder)
    chosen = [cone.select(q) for q in splits.test]
    assert oracle.calls == 60 * len(splits.test)
    opposite, _ = fit(TopKConE(k=K, candidates=60), world, encoder, learner=OtherTopicLearner())
    against = [opposite.select(q) for q in splits.test]
    assert same_rule_share(chosen, splits.test) == 1.0 and same_rule_share(against, splits.test) <= 0.1
    for q, c in zip(splits.test, against):
        near = {cone.pool_[i].id for i in np.argsort(-cone.query_similarities(q), kind="stable")[:60]}
        assert {d.id for d in c} <= near and not {d.id for d in c} & {t.id for t in splits.test}


def test_topk_cone_orders_by_its_score_the_best_last_and_ties_by_similarity(world, encoder):
    task, splits = world
    cone, _ = fit(TopKConE(k=K, candidates=10), world, encoder)
    query = splits.test[0]
    near = [cone.pool_[i] for i in np.argsort(-cone.query_similarities(query), kind="stable")[:10]]
    scores = cone.cone(near, query)
    assert np.allclose(scores, [1.0 if d.answer == query.answer else 4.0 for d in near])  # -log p(query | d)
    expected = [near[i] for i in np.argsort(scores, kind="stable")[:K]][::-1]
    assert cone.select(query) == expected
    assert cone.select_info() == {"candidates": 10, "cone_best": float(scores.min())}
    with pytest.raises(ConfigError, match="candidates"):
        TopKConE(k=5, candidates=3)


def test_topk_cone_past_its_budget_keeps_the_most_similar_and_says_so(world, encoder):
    task, splits = world
    cone, oracle = fit(TopKConE(k=K, candidates=10), world, encoder, budget=25)
    chosen = [cone.select(q) for q in splits.test[:4]]
    near = [cone.pool_[i] for i in np.argsort(-cone.query_similarities(splits.test[3]), kind="stable")[:K]][::-1]
    assert chosen[3] == near and oracle.budget_exhausted and "TopK" in cone.fit_warnings[0]


class SureOnlyWithItsRule(RulesLearner):
    """An ideal learner that is sure of its answer only when a same-topic demonstration shows the code word; its
    recency guess otherwise is unsure (a flat label distribution)."""

    def loglik(self, contexts, continuations):
        out = []
        for ctx, cont, r in zip(contexts, continuations, super().loglik(contexts, continuations)):
            query = "Input:" + ctx.rsplit("Input:", 1)[-1]
            if not cont.lstrip().startswith("Input:") and not self.same_topic_shown(ctx.rsplit("Input:", 1)[0], query):
                r = RawLoglik(-2.0, r.n_tokens)
            out.append(r)
        return out


def test_mdl_picks_the_set_under_which_the_label_is_surest(world, encoder):
    """Under a learner sure only with a same-rule demonstration, the chosen set is the lowest-entropy one, which holds
    one; every candidate set costs one call per label; set 0 is the k most similar, most similar last."""
    task, splits = world
    mdl, oracle = fit(MDL(k=K, candidates=20, sets=6), world, encoder, learner=SureOnlyWithItsRule())
    labels = len(task.choice_words())
    for q in splits.test[:10]:
        sets = mdl.candidate_sets(q)
        near = [mdl.pool_[i] for i in np.argsort(-mdl.query_similarities(q), kind="stable")[:K]]
        assert sets[0] == near[::-1] and len(sets) == 6 and all(len(s) == K for s in sets)
        entropies = [mdl.label_entropy(s, q) for s in sets]
        chosen = mdl.select(q)
        assert chosen == sets[int(np.argmin(entropies))]
        assert any(d.answer == q.answer for d in chosen) or min(entropies) == max(entropies)
    assert oracle.calls <= 10 * 6 * labels
    again, _ = fit(MDL(k=K, candidates=20, sets=6), world, encoder, learner=SureOnlyWithItsRule())
    assert again.candidate_sets(splits.test[1]) == mdl.candidate_sets(splits.test[1])  # seeded by the query


def test_mdl_depends_on_the_model_not_only_on_similarity(world, encoder):
    """A learner sure only WITHOUT a same-rule demonstration turns the choice to sets lacking one."""

    class SureOnlyWithout(SureOnlyWithItsRule):
        def loglik(self, contexts, continuations):
            flipped = []
            for ctx, cont, r in zip(contexts, continuations, RulesLearner.loglik(self, contexts, continuations)):
                query = "Input:" + ctx.rsplit("Input:", 1)[-1]
                if self.same_topic_shown(ctx.rsplit("Input:", 1)[0], query):
                    r = RawLoglik(-2.0, r.n_tokens)
                flipped.append(r)
            return flipped

    task, splits = world
    sure, _ = fit(MDL(k=K, candidates=100, sets=10), world, encoder, learner=SureOnlyWithItsRule())
    unsure, _ = fit(MDL(k=K, candidates=100, sets=10), world, encoder, learner=SureOnlyWithout())
    with_rule = [any(d.answer == q.answer for d in sure.select(q)) for q in splits.test]
    without = [any(d.answer == q.answer for d in unsure.select(q)) for q in splits.test]
    assert np.mean(with_rule) > np.mean(without) + 0.3


def test_mdl_on_a_task_without_labels_keeps_the_k_most_similar_and_says_so(world, encoder):
    task, splits = world
    mdl, oracle = fit(MDL(k=K), world, encoder, task=make_task("gsm8k"))
    q = splits.test[0]
    assert mdl.select(q) == mdl.candidate_sets(q)[0] and oracle.calls == 0
    assert "no label words" in mdl.fit_warnings[0]


def test_a_budget_spent_while_selecting_per_query_marks_the_row(tmp_path, data_dir, monkeypatch):
    """TopK+ConE spends its budget in select(), after its fit's summary was written: the result row still says the
    budget ran out, with the selector's own warning."""
    import json

    import bench.runner as runner_mod
    from bench.cli import main

    monkeypatch.setattr(runner_mod, "make_backend", lambda spec: RulesLearner())
    out = tmp_path / "run"
    assert main(["--methods", "topk-cone,knn", "--tasks", "rules", "--n-test", "8", "--n-val", "2", "--pool-size",
                 "60", "--k", "3", "--llm-budget", "12", "--param", "topk-cone.candidates=5", "--llm", "gemma3-270m",
                 "--out", str(out), "--no-progress", "--scoring", "rank"]) in (0, 3)
    rows = {r["method"]: r for r in json.loads((out / "results.json").read_text())["runs"]}
    assert rows["topk-cone"]["budget_exhausted"] and not rows["knn"]["budget_exhausted"]
    assert any("TopK" in w for w in rows["topk-cone"]["warnings"])
    assert rows["topk-cone"]["llm_calls"]["selection"] == 10  # two queries' 5 candidates; the third did not fit


class FlatLearner(RulesLearner):
    """Every query equally likely after any demonstration: ConE ties everywhere."""

    def loglik(self, contexts, continuations):
        return [RawLoglik(-2.0, 3) if c.lstrip().startswith("Input:") else r
                for c, r in zip(continuations, super().loglik(contexts, continuations))]


def test_topk_cone_ties_keep_similarity_order_and_it_reports_what_it_did(world, encoder):
    """All scores tied: the k most similar, most similar last (a stable sort over 60 candidates); select_info,
    scale and the dry run's bound say what ran; the budget message names the fallback."""
    task, splits = world
    cone, _ = fit(TopKConE(k=K, candidates=60), world, encoder, learner=FlatLearner())
    query = splits.test[2]
    near = [cone.pool_[i] for i in np.argsort(-cone.query_similarities(query), kind="stable")[:K]]
    assert cone.select(query) == near[::-1]
    assert cone.select_info() == {"candidates": 60, "cone_best": 2.0}
    assert cone.scale() == {"candidates a query": 60, "authors' scale": "30 candidates, k 8, Llama-2-7B scoring"}
    assert cone.selection_call_bound(4, 7) == 60 * 7
    assert TopKConE(k=5, candidates=5).candidates == 5  # as many candidates as k is allowed
    spent, _ = fit(TopKConE(k=K, candidates=10), world, encoder, budget=5)
    spent.select(query)
    assert spent.select_info() == {"candidates": 10, "budget_exhausted": True}
    assert spent.fit_warnings == ["topk-cone: --llm-budget ran out; later queries use the k most similar (TopK)"]


def recording(learner: type, seen: list) -> RulesLearner:
    """`learner` that also keeps every continuation it scores in `seen`."""

    class Recording(learner):
        def loglik(self, contexts, continuations):
            seen.extend(continuations)
            return super().loglik(contexts, continuations)

    return Recording()


def test_mdl_reports_what_it_did_scores_labels_after_a_space_and_checks_its_settings(world, encoder):
    task, splits = world
    seen = []
    mdl, _ = fit(MDL(k=K, candidates=20, sets=3), world, encoder, learner=recording(SureOnlyWithItsRule, seen))
    query = splits.test[0]
    chosen = mdl.select(query)
    info = mdl.select_info()
    sets = mdl.candidate_sets(query)
    assert chosen == sets[info["chosen_set"]] and info["sets"] == 3
    assert info["entropy"] == pytest.approx(min(mdl.label_entropy(s, query) for s in sets))
    assert sorted(set(seen)) == sorted(" " + w for w in task.choice_words())  # " alpha": after "Output:"
    assert mdl.scale() == {"candidates a query": 20, "sets a query": 3,
                           "authors' scale": "30 candidates, 10 sets, k 8, GPT-2 XL scoring"}
    assert mdl.selection_call_bound(2, 5) == 3 * len(task.choice_words()) * 5
    spent, _ = fit(MDL(k=K, candidates=20, sets=3), world, encoder, learner=SureOnlyWithItsRule(), budget=2)
    assert spent.select(query) == spent.candidate_sets(query)[0]
    assert spent.select_info() == {"sets": 3, "budget_exhausted": True}
    assert spent.fit_warnings == ["mdl: --llm-budget ran out; later queries use the k most similar set (TopK)"]
    plain, _ = fit(MDL(k=K), world, encoder, task=make_task("gsm8k"))
    plain.select(query)
    assert plain.select_info() == {"sets": 1}
    assert plain.fit_warnings == ["mdl: task gsm8k has no label words to take an entropy over: the k most similar set "
                                  "(TopK) is used"]
    assert MDL(k=5, candidates=5, sets=1).sets == 1  # the bounds themselves are allowed
    for bad in ({"k": 5, "candidates": 4}, {"sets": 0}):
        with pytest.raises(ConfigError, match=r"mdl: candidates \(\d+\) must be at least k \(\d+\) and sets"):
            MDL(**bad)
    unseen = MDL(k=K)
    unseen.check_task(task)
    assert unseen.selection_call_bound(2, 5) == 10 * len(task.choice_words()) * 5  # the dry run's bound, before fit


def test_mdl_scores_a_label_without_a_space_after_a_prompt_that_ends_in_one(world, encoder):
    """A chat template's assistant turn ends in whitespace: the label follows it directly, as ranked labels do."""
    from types import SimpleNamespace

    task, splits = world
    seen = []
    mdl, _ = fit(MDL(k=K, candidates=8, sets=1), world, encoder, learner=recording(RulesLearner, seen))
    mdl.ctx_ = SimpleNamespace(task=SimpleNamespace(prefix=task.prefix, format_query=lambda q: "Question\n"),
                               oracle=mdl.ctx_.oracle, seed=0)
    mdl.label_entropy(splits.pool[:2], splits.test[0])
    assert seen and all(not c.startswith(" ") for c in seen)
    seen.clear()
    mdl.ctx_.task.format_query = lambda q: "Question:"
    mdl.label_entropy(splits.pool[:2], splits.test[0])
    assert all(c.startswith(" ") and not c.startswith("  ") for c in seen)
