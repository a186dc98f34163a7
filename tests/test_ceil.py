"""CEIL (methods/ceil.py): the authors' subset kernel, loss and candidate sampling, and a fit that learns the LM's
preference for whole subsets on queries it never saw."""
import re

import numpy as np
import pytest
import torch

from bench.encoder import item_text
from bench.errors import ConfigError, FitFailed
from bench.items import Item
from methods.ceil import CEIL, RIDGE, ranking_loss, subset_scores
from methods.dpp import dpp_kernel
from test_udr import make_ctx

# four topics; the fake LM likes demonstrations of the query's PARTNER topic, which no encoder can know
TOPICS = ("how fast the river flows past the old stone bridge", "which colour the painted wooden garden fence has",
          "how many goals the football team scored this season", "what the baker puts into the morning bread dough")
PARTNER = {0: 1, 1: 0, 2: 3, 3: 2}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def topic_items(n: int, start: int = 0, split: str = "pool") -> list[Item]:
    return [Item(f"toy/{split}:{i}", f"Question {i}: {TOPICS[i % 4]}?", str(i), f"It is {i}.", split=split,
                 meta={"topic": i % 4}) for i in range(start, start + n)]


def partner_loglik(contexts, targets):
    """One point for each demonstration of the query's partner topic (the query is the prompt's last question)."""
    out = []
    for context in contexts:
        numbers = [int(x) for x in re.findall(r"Question (\d+):", context)]
        query, demos = numbers[-1], numbers[:-1]
        out.append(float(sum(d % 4 == PARTNER[query % 4] for d in demos)))
    return out


def partner_share(selector, queries) -> float:
    return float(np.mean([np.mean([d.meta["topic"] == PARTNER[q.meta["topic"]] for d in selector.select(q)])
                          for q in queries]))


def fitted(encoder, pool, **params):
    ctx, _ = make_ctx(encoder, pool)
    ctx.oracle.loglik = partner_loglik
    return CEIL(**{"k": 3, "batch_queries": 8, **params}).fit(ctx), ctx


def test_a_fit_learns_the_lm_s_subset_preference_on_unseen_queries(encoder):
    """Untrained (lr ~0) the DPP picks the query's own topic (partner share 0.14 here); trained, the partner topic
    the LM rewards (1.0). A reversed loss, a skipped step or a select that reads the wrong indices fails."""
    pool, unseen = topic_items(32), topic_items(12, start=1000, split="test")
    untrained, _ = fitted(encoder, pool, epochs=1, lr=1e-12)
    trained, _ = fitted(encoder, pool, epochs=10, lr=1e-3)
    assert partner_share(untrained, unseen) <= 0.3 and partner_share(trained, unseen) >= 0.9
    assert trained.losses_[-1] < trained.losses_[0]
    chosen = [trained.select(q) for q in unseen]
    assert all(len({d.id for d in c}) == 3 and all(d.split == "pool" for d in c) for c in chosen)


def test_subset_scores_are_the_log_det_of_the_dpp_retriever_s_kernel():
    rng = np.random.default_rng(0)
    ground = rng.normal(size=(7, 5))
    ground /= np.linalg.norm(ground, axis=1, keepdims=True)
    query = rng.normal(size=5)
    query /= np.linalg.norm(query)
    subsets = np.array([[0, 1, 2], [2, 4, 6], [1, 3, 5]])
    _, kernel = dpp_kernel(ground @ query, ground, 0.1)
    kernel = kernel + RIDGE * np.eye(7)
    expected = [np.linalg.slogdet(kernel[np.ix_(s, s)])[1] for s in subsets]
    got = subset_scores(torch.as_tensor(query), torch.as_tensor(ground), torch.as_tensor(subsets), 0.1)
    assert np.allclose(got.numpy(), expected, atol=1e-8)


def test_ranking_loss_hand_example():
    """Best-first scores min-max normalised to [1, 0.5, 0]: every pair in order by more than margin x distance
    costs 0; reversed, [0, 0.5, 1]: shift 1 costs 0.1 + 0.5 per pair, shift 2 costs 0.2 + 1."""
    assert ranking_loss(torch.tensor([[3.0, 2.0, 1.0]]), margin=0.1).item() == pytest.approx(0.0)
    assert ranking_loss(torch.tensor([[1.0, 2.0, 3.0]]), margin=0.1).item() == pytest.approx(0.6 + 1.2)
    # a margin the gaps do not reach: shift 1 pairs are 0.5 apart, margin 0.7 -> 0.2 each
    assert ranking_loss(torch.tensor([[3.0, 2.0, 1.0]]), margin=0.7).item() == pytest.approx(0.2 + 0.4)


def test_candidate_subsets_are_the_k_nearest_then_distinct_sorted_random_subsets():
    selector = CEIL(k=3, n_subsets=20)
    subsets = selector.candidate_subsets(10, np.random.default_rng(0))
    assert subsets.shape == (20, 3) and subsets[0].tolist() == [0, 1, 2]
    assert len({tuple(s) for s in subsets}) == 20 and all(list(s) == sorted(s) for s in subsets)
    assert subsets.min() >= 0 and subsets.max() < 10
    assert len(selector.candidate_subsets(4, np.random.default_rng(0))) == 4  # C(4, 3): every subset once


def test_each_subset_is_one_lm_call_with_the_nearest_demonstration_last_and_never_the_query(encoder):
    pool = topic_items(16)
    ctx, _ = make_ctx(encoder, pool)
    seen = []
    ctx.oracle.loglik = lambda contexts, targets: seen.append((list(contexts), list(targets))) or \
        partner_loglik(contexts, targets)
    selector = CEIL(k=3, n_train_queries=4, n_subsets=6, epochs=1).fit(ctx)
    assert [len(c) for c, _ in seen] == [6] * 4 and selector.summary_["queries_scored"] == 4
    assert selector.selection_call_bound(3, 5) == 4 * 6 == sum(len(c) for c, _ in seen)  # what --dry-run plans
    for contexts, targets in seen:
        numbers = [[int(x) for x in re.findall(r"Question (\d+):", c)] for c in contexts]
        query = numbers[0][-1]
        assert all(n[-1] == query and query not in n[:-1] and len(n) == 4 for n in numbers)
        assert set(targets) == {" " + pool[query].gold_output}
        # the first subset is the query's 3 nearest, the nearest last (next to the query)
        sims = selector.pool_emb_ @ selector.pool_emb_[query]
        nearest = [int(i) for i in np.argsort(-sims, kind="stable") if i != query][:3]
        assert numbers[0][:-1] == nearest[::-1]


def test_a_budget_trains_on_what_was_scored_and_none_scored_is_a_failed_fit(encoder):
    pool = topic_items(16)
    ctx, _ = make_ctx(encoder, pool, budget=13)
    selector = CEIL(k=3, n_train_queries=8, n_subsets=6, epochs=1).fit(ctx)
    assert selector.summary_["queries_scored"] == 2 and selector.budget_hit_
    assert any("trained on 2 of 8 training queries" in w for w in selector.fit_warnings)
    ctx, _ = make_ctx(encoder, pool, budget=5)
    with pytest.raises(FitFailed, match="no training query was scored"):
        CEIL(k=3, n_train_queries=8, n_subsets=6, epochs=1).fit(ctx)


@pytest.mark.parametrize("params", [{"n_subsets": 1}, {"topk": 2}, {"epochs": 0}, {"scale_factor": 0},
                                    {"margin": -1}, {"lr": 0}, {"warmup": 1}, {"n_train_queries": 1.5}])
def test_bad_parameters_are_config_errors(params):
    with pytest.raises(ConfigError, match="^ceil: "):
        CEIL(k=3, **params)


def test_a_pool_no_larger_than_k_is_a_config_error(encoder):
    ctx, _ = make_ctx(encoder, topic_items(3))
    with pytest.raises(ConfigError, match="larger than k"):
        CEIL(k=3).fit(ctx)


def test_scale_reports_the_training_size(encoder):
    assert CEIL().scale() == {}
    selector, _ = fitted(encoder, topic_items(12), n_train_queries=5, n_subsets=4, epochs=2, batch_queries=2)
    assert selector.scale() == {"training queries": 5, "subsets a query": 4, "optimiser steps": 6}
    assert CEIL().trace() == [] and selector.trace() == [selector.summary_]  # the fit's line in fits.jsonl
    assert selector.summary_["queries_scored"] == 5 and selector.summary_["subsets_per_query"] == 4
    assert item_text(selector.pool_[0]) == selector.pool_[0].question


def test_ceil_runs_end_to_end_with_counted_calls_and_pool_demonstrations(tmp_path, data_dir, monkeypatch):
    import bench.runner as runner_mod
    from bench.runner import Runner
    from bench.tasks import make_task
    from fakes import FakeBackend
    from test_runner import lines, make_config

    backend = FakeBackend(batch_size=8)
    monkeypatch.setattr(runner_mod, "make_backend", lambda spec: backend)
    cfg = make_config(tmp_path, data_dir, methods=["ceil"], tasks=["gsm8k"], n_test=2, n_val=3, pool_size=30,
                      method_params={"ceil": {"n_train_queries": 3, "n_subsets": 4, "epochs": 1, "topk": 12}})
    run = Runner(cfg).run()["runs"][0]
    assert run["method"] == "ceil" and run["n"] == 2 and run["warnings"] == [] and run["error"] is None
    assert run["llm_calls"] == {"selection": 3 * 4, "inference": 2}
    records = lines(tmp_path / "run" / "records.jsonl")
    pool = make_task("gsm8k").load_splits(data_dir, n_test=2, n_val=3, pool_size=30, seed=1).pool
    assert all(len(set(r["demo_ids"])) == 5 and set(r["demo_ids"]) <= {it.id for it in pool} for r in records)
