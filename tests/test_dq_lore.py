"""DQ-LoRe (methods/dq_lore.py): the PCA re-ranking, the shared encoder trained on inputs with their chains of
thought, and a test-time query that carries the model's first answer."""
import numpy as np
import pytest
from sklearn.decomposition import PCA

from bench.errors import ConfigError
from bench.llm import LLMClient
from bench.oracle import RewardOracle
from bench.tasks import make_task
from fakes import RulesLearner
from methods.base import FitContext, create
from methods.dq_lore import DQLoRe, lore_scores
from methods.few_shot import wei_exemplars
from methods.udr import encode_texts

pytestmark = pytest.mark.usefixtures("one_torch_thread")
K = 4


def test_lore_scores_are_inner_products_in_the_top_principal_components():
    rng = np.random.default_rng(0)
    query, candidates = rng.normal(size=6), rng.normal(size=(5, 6))
    stacked = np.vstack([query, candidates])
    centred = stacked - stacked.mean(axis=0)
    assert lore_scores(query, candidates, 128) == pytest.approx(centred[1:] @ centred[0])  # all 5 components
    first = PCA(n_components=1).fit(stacked).components_[0]
    assert lore_scores(query, candidates, 1) == pytest.approx((centred[1:] @ first) * (centred[0] @ first))
    assert not np.allclose(lore_scores(query, candidates, 1), candidates @ query)


@pytest.fixture(scope="module")
def fitted(encoder):
    task = make_task("rules").configure()
    splits = task.load_splits(None, n_test=24, n_val=4, pool_size=160, seed=0)
    oracle = RewardOracle(LLMClient(RulesLearner()), task, "dq-lore", bertscore=None)
    ctx = FitContext(task=task, pool=splits.pool, validation=splits.validation, encoder=encoder, oracle=oracle,
                     seed=0, k=K)
    selector = DQLoRe(k=K, n_train_queries=24, n_candidates=8, epochs=3, batch_queries=8).fit(ctx)
    return selector, splits, oracle


def test_training_shares_one_encoder_and_reads_inputs_with_their_chains_of_thought(fitted):
    selector, splits, oracle = fitted
    assert selector.q_model_ is selector.c_model_
    assert selector.training.positive_top == 5 and selector.training.shared_encoder
    query = splits.pool[0]
    assert selector.training_text(query).endswith(" " + query.gold_output)
    assert oracle.calls == 24 * 8  # EPR's scoring: one call a candidate of each training query


def test_each_query_asks_the_model_once_and_retrieves_with_its_answer(fitted, monkeypatch):
    """One generation a query (the first query); replacing that answer by another rule's code word moves the
    retrieval to that rule's demonstrations: the second query reads the model's answer."""
    selector, splits, oracle = fitted
    before = oracle.calls
    chosen = [selector.select(q) for q in splits.test]
    assert oracle.calls - before == len(splits.test) and selector.select_info()["first_answer"]
    same = np.mean([np.mean([d.answer == q.answer for d in c]) for c, q in zip(chosen, splits.test)])
    assert same >= 0.75, same
    monkeypatch.setattr(selector, "first_answer", lambda query: "hotel" if query.answer != "hotel" else "alpha")
    moved = [selector.select(q) for q in splits.test]
    assert np.mean([np.mean([d.answer == q.answer for d in c]) for c, q in zip(moved, splits.test)]) < same - 0.3


def test_the_re_ranked_best_goes_last_among_the_nearest(fitted):
    selector, splits, _ = fitted
    query = splits.test[1]
    answer = selector.first_answer(query)
    vector = encode_texts(selector.q_model_, [f"{query.question} {answer}"])[0]
    near = np.argsort(-(selector.pool_emb_ @ vector), kind="stable")[:16]
    scores = lore_scores(vector, selector.pool_emb_[near], 128)
    expected = [selector.pool_[i] for i in near[np.argsort(-scores, kind="stable")[:K]][::-1]]
    assert selector.select(query) == expected


def test_the_first_prompt_is_wei_s_on_gsm8k_and_seeded_pool_items_elsewhere(fitted):
    selector, splits, _ = fitted
    assert all(d in splits.pool for d in selector.first_demos_) and len(selector.first_demos_) == 8
    gsm8k = FitContext(task=make_task("gsm8k"), pool=splits.pool, validation=[], encoder=None, oracle=None)
    assert selector.first_prompt_demos(gsm8k) == wei_exemplars(8)
    assert DQLoRe(k=K, first_shots=3).first_prompt_demos(gsm8k) == wei_exemplars(3)
    assert len(DQLoRe(k=K, first_shots=9).first_prompt_demos(gsm8k)) == 9  # more than Wei wrote: pool items
    rules = FitContext(task=make_task("rules"), pool=splits.pool, validation=[], encoder=None,
                       oracle=None, seed=0)
    assert selector.first_prompt_demos(rules) == selector.first_demos_
    assert selector.first_prompt_demos(FitContext(**{**rules.__dict__, "seed": 1})) != selector.first_demos_


def test_past_the_budget_a_query_is_encoded_without_an_answer(encoder):
    task = make_task("rules").configure()
    splits = task.load_splits(None, n_test=4, n_val=2, pool_size=60, seed=0)
    oracle = RewardOracle(LLMClient(RulesLearner()), task, "dq-lore", bertscore=None, budget=8 * 6 + 1)
    ctx = FitContext(task=task, pool=splits.pool, validation=splits.validation, encoder=encoder, oracle=oracle,
                     seed=0, k=K, budget=oracle.budget)
    selector = DQLoRe(k=K, n_train_queries=8, n_candidates=6, epochs=1, batch_queries=4).fit(ctx)
    selector.select(splits.test[0])
    assert selector.select_info()["first_answer"]
    assert len(selector.select(splits.test[1])) == K and not selector.select_info()["first_answer"]
    assert any("without a generated answer" in w for w in selector.fit_warnings)


@pytest.mark.parametrize("params, message", [
    ({"retrieve": 3}, "retrieve (3) must be at least k (5)"), ({"retrieve": 0}, "retrieve must be an integer >= 1, got 0"),
    ({"pca_dims": 0}, "pca_dims must be an integer >= 1, got 0"),
    ({"first_shots": 0}, "first_shots must be an integer >= 1, got 0"), ({"epochs": 0}, "epochs must be")])
def test_bad_parameters_are_config_errors(params, message):
    with pytest.raises(ConfigError, match="^dq-lore: " + message.replace("(", r"\(").replace(")", r"\)")):
        create("dq-lore", {"k": 5, **params})


def test_scale_call_bound_and_what_a_query_did(fitted):
    selector, splits, _ = fitted
    assert selector.scale() == {"training queries": 24, "candidates a query": 8.0, "optimiser steps a round": 3 * 3,
                                "retrieved, re-ranked": "16 -> 4",
                                "authors' scale": "1,000 (AQuA) / 7,473 (GSM8K) queries, 500 epochs at lr 1e-6, "
                                                  "16 -> 8, text-davinci-003"}
    assert selector.selection_call_bound(n_val=3, n_test=40) == 24 * 8 + 40
    selector.select(splits.test[2])
    assert selector.select_info() == {"retrieved": 16, "first_answer": True}
    assert DQLoRe.needs_loglik and selector.level == "instance"
    assert (selector.retrieve, selector.pca_dims, selector.first_shots) == (16, 128, 8)


def test_an_unfitted_selector_reports_no_scale():
    assert DQLoRe().scale() == {}
