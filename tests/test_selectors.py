import numpy as np
import pytest

from bench.errors import ConfigError
from bench.items import Item
from methods import FitContext, create
from methods.mmr import mmr_order


class GridEncoder:
    """Items carry their embedding in the question text: 'x,y'."""

    def encode_items(self, items, with_output=False):
        vecs = np.array([[float(v) for v in it.question.split(",")] for it in items])
        return vecs / np.linalg.norm(vecs, axis=1, keepdims=True)


def ctx(pool, k=2, seed=0):
    return FitContext(task=type("T", (), {"name": "toy"})(), pool=pool, validation=[], encoder=GridEncoder(),
                      oracle=None, seed=seed, k=k)


# three near-duplicates close to the query direction, one moderately close, one far
POOL = [Item("a", "1,0.01", "a"), Item("b", "1,0.02", "b"), Item("c", "1,0.03", "c"),
        Item("d", "1,0.6", "d"), Item("e", "0,1", "e")]
QUERY = Item("q", "1,0.1", "q")


def test_knn_picks_most_similar_and_puts_the_best_last():
    knn = create("knn", {"k": 3}).fit(ctx(POOL, k=3))
    assert [d.id for d in knn.select(QUERY)] == ["a", "b", "c"]


def test_mmr_trades_relevance_for_diversity():
    mmr = create("mmr", {"k": 2, "lam": 0.5}).fit(ctx(POOL))
    chosen = {d.id for d in mmr.select(QUERY)}
    # relevance 0.5 * 0.997 for c first, then e (0.5 * 0.10 - 0.5 * 0.03) beats d and the near-duplicates
    assert chosen == {"c", "e"}
    plain = create("mmr", {"k": 2, "lam": 1.0}).fit(ctx(POOL))
    knn = create("knn", {"k": 2}).fit(ctx(POOL))
    assert [d.id for d in plain.select(QUERY)] == [d.id for d in knn.select(QUERY)]


def test_mmr_order_hand_example():
    q = np.array([0.9, 0.8, 0.1])
    pair = np.array([[1.0, 0.95, 0.0], [0.95, 1.0, 0.0], [0.0, 0.0, 1.0]])
    # step 1: argmax 0.5*q -> 0; step 2: 0.5*0.8-0.5*0.95=-0.075 vs 0.5*0.1-0=0.05 -> 2
    assert mmr_order(q, pair, 2, 0.5) == [0, 2]


def test_few_shot_is_seeded_and_task_level():
    a = create("few-shot", {"k": 3}).fit(ctx(POOL, k=3, seed=1))
    b = create("few-shot", {"k": 3}).fit(ctx(POOL, k=3, seed=1))
    assert [d.id for d in a.select(QUERY)] == [d.id for d in b.select(QUERY)] == [d.id for d in a.select(POOL[0])]
    assert len({d.id for d in a.select(QUERY)}) == 3


def test_zero_shot_selects_nothing():
    assert create("zero-shot").fit(ctx(POOL)).select(QUERY) == []


@pytest.mark.parametrize("name", ["few-shot", "knn", "mmr"])
def test_k_larger_than_pool_is_a_clear_error(name):
    with pytest.raises(ConfigError, match=f"{name}: k=9 is larger than the pool of task 'toy' \\(5 items\\)"):
        create(name, {"k": 9}).fit(ctx(POOL, k=9))
