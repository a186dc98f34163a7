"""Set-BSR (methods/set_bsr.py): BERTScore-recall of the query's tokens, the set extension, the authors' greedy with
its reset, the ordering, and on `rules` a choice that covers the query's words."""
import numpy as np
import pytest

from bench.errors import ConfigError
from bench.tasks import make_task
from methods.base import FitContext
from methods.set_bsr import SetBSR, greedy_cover, recall_matrix


def unit(rows):
    rows = np.asarray(rows, dtype=float)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def test_recall_is_each_query_tokens_best_match_averaged():
    query = unit([[1, 0, 0], [0, 1, 0]])
    candidates = [unit([[1, 0, 0], [0, 0, 1]]), unit([[1, 1, 0]]), unit([[0, 0, 1]])]
    recall = recall_matrix(query, candidates)
    np.testing.assert_allclose(recall, [[1 / 2, 0], [np.sqrt(.5) / 2, np.sqrt(.5) / 2], [0, 0]], atol=1e-12)


def set_bsr(recall, members):
    return recall[list(members)].max(axis=0).sum()


def test_the_greedy_adds_the_largest_set_recall_and_resets_when_nothing_adds():
    """Against the definition: each pick maximises setBSR of the set so far plus it; once the set covers every
    token as well as any candidate can, the next pick is the best single candidate left (the reset)."""
    rng = np.random.default_rng(0)
    for _ in range(20):
        recall = rng.random((9, 4))
        picks = greedy_cover(recall, 4)
        chosen: list[int] = []
        for pick in picks:
            gains = {c: set_bsr(recall, chosen + [c]) for c in range(9) if c not in chosen}
            if chosen and max(gains.values()) <= set_bsr(recall, chosen):
                break  # a reset: checked below
            assert pick == max(gains, key=gains.get)
            chosen.append(pick)
    covered = np.array([[1.0, 1.0, 1.0], [0.9, 0.0, 0.0], [0.0, 0.8, 0.0], [0.2, 0.2, 0.2]])
    assert greedy_cover(covered, 3) == [0, 1, 2]  # 0 covers all: then 1 (0.9) and 2 (0.8) as fresh sets


def test_the_set_beats_the_individually_best_on_coverage():
    """Two near-copies that cover the same tokens well, and one that covers the rest: the set takes one copy and the
    other, where the top-2 by single recall takes both copies."""
    recall = np.array([[0.9, 0.9, 0.0], [0.88, 0.88, 0.0], [0.0, 0.0, 0.7]])
    assert sorted(greedy_cover(recall, 2)) == [0, 2]
    assert set_bsr(recall, [0, 2]) > set_bsr(recall, [0, 1])


@pytest.fixture(scope="module")
def fitted(encoder):
    task = make_task("rules").configure()
    splits = task.load_splits(None, n_test=20, n_val=2, pool_size=120, seed=0)
    ctx = FitContext(task=task, pool=splits.pool, validation=splits.validation, encoder=encoder, oracle=None, k=4)
    return SetBSR(k=4).fit(ctx), SetBSR(k=4, ordering="greedy").fit(ctx), splits


def test_on_rules_it_covers_the_querys_words_and_orders_by_recall(fitted, encoder):
    selector, greedy_order, splits = fitted
    for query in splits.test:
        chosen = selector.select(query)
        words = set(query.question.split(", "))
        assert any(words & set(d.question.split(", ")) for d in chosen)  # a demonstration sharing a word
        tokens = encoder.token_embeddings([query.question])[0]
        own = [recall_matrix(tokens, encoder.token_embeddings([d.question]))[0].sum() for d in chosen]
        assert own == sorted(own)  # the highest recall last, next to the query
        pool_recall = recall_matrix(tokens, selector.pool_tokens_)
        first_last = [selector.pool_[i] for i in greedy_cover(pool_recall, 4)[::-1]]
        assert greedy_order.select(query) == first_last and set(first_last) == set(chosen)  # first greedy pick last
        picks = [selector.pool_.index(d) for d in chosen]
        rng = np.random.default_rng(0)
        random_sets = [set_bsr(pool_recall, rng.choice(len(pool_recall), 4, replace=False)) for _ in range(200)]
        assert set_bsr(pool_recall, picks) >= max(random_sets)  # covers more than any of 200 random sets


def test_bad_ordering_is_a_config_error():
    with pytest.raises(ConfigError, match="ordering"):
        SetBSR(ordering="random")
