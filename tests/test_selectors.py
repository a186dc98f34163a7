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


def reference_mmr(q: np.ndarray, emb: np.ndarray, k: int, lam: float) -> list[int]:
    """Loop version of the EXPLORA repository's MMR: 0.5 + z-scores, raw-cosine first pick."""
    def norm(col):
        return [0.5 + (v - np.mean(col)) / np.std(col) for v in col]

    rel = norm(list(q))
    chosen = [int(np.argmax(q))]
    while len(chosen) < k:
        cols = [norm([float(emb[i] @ emb[c]) for i in range(len(q))]) for c in chosen]
        best, best_score = None, -np.inf
        for i in range(len(q)):
            if i in chosen:
                continue
            score = lam * rel[i] - (1 - lam) * max(col[i] for col in cols)
            if score > best_score:
                best, best_score = i, score
        chosen.append(best)
    return chosen


def test_mmr_order_matches_the_reference_loop():
    rng = np.random.default_rng(0)
    for _ in range(20):
        emb = rng.normal(size=(12, 4))
        emb /= np.linalg.norm(emb, axis=1, keepdims=True)
        q = emb @ (rng.normal(size=4) / 2)
        assert mmr_order(q, emb, 4, 0.7) == reference_mmr(q, emb, 4, 0.7)


def test_mmr_normalisation_changes_the_pick_hand_example():
    # a and b are near-duplicates close to the query, c is orthogonal to a, d sits between
    emb = np.array([[1.0, 0.0], [0.995, 0.0999], [0.0, 1.0], [0.8, 0.6]])
    q = np.array([0.95, 0.94, 0.60, 0.90])
    # first pick: a (raw cosine). Relevance 0.5 + z: a 1.21, b 1.14, c -1.22, d 0.86;
    # redundancy to a, 0.5 + z of (1, 0.995, 0, 0.8): b 1.22, c -1.20, d 0.75.
    # lam 0.7: b 0.43, c -0.49, d 0.38 -> b. Raw MMR picks c: 0.42 > d 0.39 > b 0.36.
    assert mmr_order(q, emb, 2, 0.7) == [0, 1]
    raw = [0.7 * q[i] - 0.3 * float(emb[i] @ emb[0]) for i in (1, 2, 3)]
    assert np.round(raw, 2).tolist() == [0.36, 0.42, 0.39]


def test_mmr_keeps_selection_order_and_lam_one_is_knn():
    plain = create("mmr", {"k": 3, "lam": 1.0}).fit(ctx(POOL, k=3))
    knn = create("knn", {"k": 3}).fit(ctx(POOL, k=3))
    # the authors' MMR keeps the selection order (most relevant first); KNN puts the most similar last
    assert [d.id for d in plain.select(QUERY)] == [d.id for d in knn.select(QUERY)][::-1]
    diverse = create("mmr", {"k": 2}).fit(ctx(POOL))  # lam 0.7 by default
    assert diverse.lam == 0.7 and [d.id for d in diverse.select(QUERY)][0] == "c"


def test_few_shot_wei_exemplars_on_gsm8k_only():
    from bench.tasks.gsm8k import GSM8K

    wei = create("few-shot", {"k": 3, "exemplars": "wei"})
    demos = wei.fit(FitContext(task=GSM8K(), pool=POOL, validation=[], encoder=None, oracle=None, k=3)).select(QUERY)
    assert [d.answer for d in demos] == ["6", "5", "39"] and demos[0].question.startswith("There are 15 trees")
    assert demos[2].rationale.endswith("74 - 35 = 39.")
    with pytest.raises(ConfigError, match="exists for gsm8k only, not toy"):
        wei.check_task(type("T", (), {"name": "toy"})())
    with pytest.raises(ConfigError, match="8 GSM8K exemplars"):
        create("few-shot", {"k": 9, "exemplars": "wei"})
    all_eight = create("few-shot", {"k": 8, "exemplars": "wei"})  # every exemplar Wei et al. wrote may be used
    demos = all_eight.fit(FitContext(task=GSM8K(), pool=POOL, validation=[], encoder=None, oracle=None, k=8)).select(QUERY)
    # ids and split name them as fixed outside items (fingerprints, the test-item check): never a pool or test item
    assert [(d.id, d.split) for d in demos] == [(f"gsm8k/wei2022:{i}", "fixed") for i in range(8)]
    with pytest.raises(ConfigError, match="^few-shot: exemplars must be one of random, wei, got 'hand'$"):
        create("few-shot", {"exemplars": "hand"})


def test_few_shot_is_seeded_and_task_level():
    a = create("few-shot", {"k": 3}).fit(ctx(POOL, k=3, seed=1))
    b = create("few-shot", {"k": 3}).fit(ctx(POOL, k=3, seed=1))
    assert [d.id for d in a.select(QUERY)] == [d.id for d in b.select(QUERY)] == [d.id for d in a.select(POOL[0])]
    assert len({d.id for d in a.select(QUERY)}) == 3
    # the draw is the seed's "few-shot" stream: published selections stay reproducible across versions
    import random

    assert [d.id for d in a.select(QUERY)] == [d.id for d in random.Random("1:few-shot").sample(POOL, 3)]


def test_zero_shot_selects_nothing():
    assert create("zero-shot").fit(ctx(POOL)).select(QUERY) == []


@pytest.mark.parametrize("name", ["few-shot", "knn", "mmr"])
def test_k_larger_than_pool_is_a_clear_error(name):
    with pytest.raises(ConfigError, match=f"{name}: k=9 is larger than the pool of task 'toy' \\(5 items\\)"):
        create(name, {"k": 9}).fit(ctx(POOL, k=9))


def test_mmr_shortlist_keeps_to_the_most_relevant_candidates():
    # lam 0.5 reaches past the near-duplicates for diversity; a shortlist of 3 keeps it to the 3 most relevant
    wide = create("mmr", {"k": 3, "lam": 0.5}).fit(ctx(POOL, k=3))
    short = create("mmr", {"k": 3, "lam": 0.5, "shortlist": 3}).fit(ctx(POOL, k=3))
    assert {d.id for d in wide.select(QUERY)} != {"a", "b", "c"}
    assert {d.id for d in short.select(QUERY)} == {"a", "b", "c"}


def test_mmr_parameter_bounds_and_messages():
    for lam in (0.0, 1.0):
        assert create("mmr", {"lam": lam}).lam == lam
    for lam in (-0.1, 1.01, 2.0):
        with pytest.raises(ConfigError, match=rf"mmr: lam must be in \[0, 1\], got {lam}"):
            create("mmr", {"lam": lam})
    assert create("mmr", {"k": 3, "shortlist": 3}).shortlist == 3
    with pytest.raises(ConfigError, match=r"mmr: shortlist \(2\) must be at least k \(3\)"):
        create("mmr", {"k": 3, "shortlist": 2})


def test_mmr_centring_of_a_constant_column_and_default_k():
    from methods.mmr import MMR, centred

    # a query equally similar to every candidate: no spread, every candidate scores 0.5 (no division by zero)
    assert centred(np.full(4, 0.3)).tolist() == [0.5] * 4
    assert MMR().k == 5 and MMR().lam == 0.7 and MMR().shortlist is None
