"""EPR (methods/epr.py): DPR's loss on LM-scored BM25 candidates, one positive and one hard negative a query."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from bench.errors import ConfigError
from methods import create
from methods.epr import EPR, EPRTraining
from methods.udr import ScoredList, UDR, embed, embed_candidates
from test_udr import make_ctx, order_accuracy_before_and_after, toy_items

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def listed(n: int) -> ScoredList:
    return ScoredList("q", list(range(n)), [(str(i),) for i in range(n)], -np.arange(float(n)))


def test_the_positive_is_the_best_candidate_and_the_negative_one_of_the_worst_five():
    rng = np.random.default_rng(0)
    pairs = [EPRTraining().pair(listed(20), rng) for _ in range(300)]
    assert {p for p, _ in pairs} == {0} and {n for _, n in pairs} == set(range(15, 20))
    short = [EPRTraining().pair(listed(3), rng) for _ in range(100)]  # bands overlap: never the positive twice
    assert {p for p, _ in short} == {0} and {n for _, n in short} == {1, 2}
    shuffled = [EPRTraining(positive_top=5).pair(listed(20), rng) for _ in range(300)]  # DQ-LoRe's pos_topk
    assert {p for p, _ in shuffled} == set(range(5))
    assert EPRTraining().pair(listed(2), rng) == (0, 1)
    # short lists with DQ-LoRe's 5 positives: the last candidate is never the positive, the best can be a negative
    short5 = [EPRTraining(positive_top=5).pair(listed(3), rng) for _ in range(200)]
    assert {p for p, _ in short5} == {0, 1} and {n for _, n in short5} == {0, 1, 2}
    assert all(p != n for p, n in short5)
    assert {EPRTraining(positive_top=5).pair(listed(2), rng) for _ in range(20)} == {(0, 1)}


def test_loss_is_in_batch_nll_over_every_positive_and_hard_negative(encoder, monkeypatch):
    """Recomputed by hand: query i against the batch's 2B contexts (positives first), target its own positive."""
    model = encoder.trainable_copy()
    training = EPRTraining(scale=7.0)
    batch = [ScoredList(f"query {i}", list(range(6)), [(f"text {i}.{j}",) for j in range(6)], -np.arange(6.0))
             for i in range(3)]
    pairs = [training.pair(s, np.random.default_rng(1)) for s in batch]
    monkeypatch.setattr(training, "pair", lambda scored, rng: pairs[batch.index(scored)])
    got = training.batch_loss(model, model, batch, np.random.default_rng(1))
    with torch.no_grad():
        queries = embed(model, [s.query_text for s in batch])
        contexts = embed_candidates(model, [s.texts[p] for s, (p, _) in zip(batch, pairs)]
                                    + [s.texts[n] for s, (_, n) in zip(batch, pairs)])
        expected = F.cross_entropy(7.0 * queries @ contexts.T, torch.arange(3))
    assert got.item() == pytest.approx(expected.item(), rel=1e-5)
    assert got.requires_grad


def test_epr_is_udr_s_mining_with_one_round_and_its_own_loss(encoder):
    ctx, backend = make_ctx(encoder, toy_items(12))
    epr = EPR(k=3, n_train_queries=4, n_candidates=5, epochs=1, batch_queries=2).fit(ctx)
    udr = UDR(k=3, n_train_queries=4, n_candidates=5, rounds=1, epochs=1, batch_queries=2)
    assert list(epr.candidates_of_) == [q.id for q in ctx.rng("udr-queries").sample(ctx.pool, 4)]
    assert ctx.oracle.calls == 4 * 5 and epr.trace()[0]["rounds"] == 1  # no re-mining
    assert epr.q_model_ is not epr.c_model_  # two encoders
    assert set(epr.scale()) == {"training queries", "candidates a query", "optimiser steps a round",
                                "authors' scale"} and udr.rounds == epr.rounds == 1


def test_a_small_fit_learns_the_lm_order_on_unseen_queries(encoder):
    """Unseen queries: the untuned encoder orders about half the pairs right, EPR's retriever most of them."""
    ctx, _ = make_ctx(encoder, toy_items(12))
    epr = EPR(k=3, n_train_queries=12, n_candidates=6, epochs=4, batch_queries=4).fit(ctx)
    before, after = order_accuracy_before_and_after(epr, ctx.pool, toy_items(12, start=1000, split="test"), encoder)
    assert before < 0.6 and after > 0.8, (before, after)
    losses = epr.round_losses_[-1]
    assert losses[-1] < losses[0]


@pytest.mark.parametrize("params", [{"epochs": 0}, {"n_candidates": 1}, {"bm25_field": "answer"}, {"top_k": 0}])
def test_bad_parameters_are_config_errors_naming_epr(params):
    with pytest.raises(ConfigError, match="^epr: "):
        create("epr", params)


@pytest.mark.parametrize("positive_top", [0, 6, 1.5])
def test_positive_top_must_lie_in_the_best_band(positive_top):
    with pytest.raises(ConfigError, match="^epr: positive_top"):
        EPRTraining(positive_top=positive_top).validate("epr")


def test_scale_and_call_bound_say_what_the_fit_ran_at(encoder):
    ctx, _ = make_ctx(encoder, toy_items(12))
    epr = EPR(k=3, n_train_queries=4, n_candidates=5, epochs=2, batch_queries=3)
    assert epr.scale() == {} and epr.selection_call_bound(n_val=9, n_test=50) == 4 * 5
    epr.fit(ctx)
    assert epr.scale() == {"training queries": 4, "candidates a query": 5.0, "optimiser steps a round": 2 * 2,
                           "authors' scale": "whole training set (up to 44,000 queries), 49 candidates, 30 epochs, "
                                             "GPT-Neo-2.7B scoring"}
    assert epr.training.sample_size == 2 and epr.training.rank_loss_factor == 0.0 and epr.level == "instance"
    assert EPR.needs_loglik and not epr.training.shared_encoder and epr.training.positive_top == 1
