"""The retrieval baselines of OpenICL beyond the paper: BM25, DPP (CEIL's greedy MAP) and fast vote-k, each against a
hand example or the authors' algorithm transcribed step by step."""
import itertools
from collections import defaultdict

import numpy as np
import pytest
from rank_bm25 import BM25Okapi

from bench.errors import ConfigError
from bench.items import Item
from methods.bm25 import BM25, bm25_tokens
from methods.dpp import DPP, dpp_kernel, greedy_map
from methods.base import FitContext
from methods.votek import VoteK, fast_votek, vote_graph


def items(questions, split="pool"):
    return [Item(f"t/{split}:{i}", q, str(i), f"because {i}", split=split) for i, q in enumerate(questions)]


def test_bm25_ranks_by_rank_bm25_scores_over_inputs_and_puts_the_best_match_last():
    pool = items(["How many apples are in the basket?", "What colour is the sky?", "Count the red apples and pears.",
                  "Who wrote the novel?", "Apples grow on trees."])
    selector = BM25(k=3)
    selector.pool_, selector.index_ = pool, BM25Okapi([bm25_tokens(it.question) for it in pool])
    query = items(["how many APPLES and pears?"], "test")[0]
    expected = BM25Okapi([bm25_tokens(it.question) for it in pool]).get_scores(["how", "many", "apples", "and", "pears"])
    np.testing.assert_allclose(selector.scores(query), expected)
    chosen = [d.id for d in selector.select(query)]
    best = list(np.argsort(-expected, kind="stable")[:3])
    assert chosen == [pool[i].id for i in best[::-1]] and chosen[-1] == "t/pool:2"  # "pears" and "apples" both


def test_dpp_greedy_map_is_the_greedy_log_det_maximiser():
    rng = np.random.default_rng(0)
    for n, k in ((12, 3), (30, 6)):
        x = rng.normal(size=(n, 5))
        kernel = x @ x.T + 0.05 * np.eye(n)
        chosen: list[int] = []
        for _ in range(k):  # the definition: add the item with the largest det(L_S)
            chosen.append(max((i for i in range(n) if i not in chosen),
                              key=lambda i: np.linalg.slogdet(kernel[np.ix_(chosen + [i], chosen + [i])])[1]))
        assert greedy_map(kernel, k) == chosen


def test_the_dpp_kernel_trades_relevance_for_diversity_by_its_scale_factor():
    """Three near-copies of the most relevant item and two distinct, slightly less relevant ones: a small scale
    factor keeps relevance (the copies), a large one diversity; the kernel is OpenICL's formula."""
    base = np.eye(4)
    emb = np.array([base[0], base[0] + 0.01 * base[1], base[0] + 0.01 * base[2], base[1] + 0.3 * base[0],
                    base[2] + 0.3 * base[0]])
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    sims = emb @ base[0]
    relevance, kernel = dpp_kernel(sims, emb, 0.1)
    r = np.exp(((sims + 1) / 2 - (sims.max() + 1) / 2) / 0.2)
    np.testing.assert_allclose(relevance, r)
    np.testing.assert_allclose(kernel, r[:, None] * (emb @ emb.T + 1) / 2 * r[None, :])
    assert sorted(greedy_map(dpp_kernel(sims, emb, 0.001)[1], 3)) == [0, 1, 2]  # relevance dominates
    assert sorted(greedy_map(dpp_kernel(sims, emb, 10.0)[1], 3))[1:] == [3, 4]  # one copy, then the distinct two


def test_dpp_select_orders_its_members_by_relevance_most_relevant_last():
    pool = items([f"q{i}" for i in range(6)])
    rng = np.random.default_rng(1)
    emb = rng.normal(size=(6, 8))
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    query = emb[2] + 0.1 * emb[4]
    query /= np.linalg.norm(query)
    selector = DPP(k=3, candidates=5)
    selector.pool_, selector.pool_emb_ = pool, emb
    selector.query_similarities = lambda q: emb @ query
    chosen = selector.select(pool[0])
    sims = emb @ query
    assert [sims[pool.index(d)] for d in chosen] == sorted(sims[pool.index(d)] for d in chosen)
    assert chosen[-1] is pool[2]  # the most relevant is always a member (the greedy MAP's first pick)
    assert pool[int(np.argmin(sims))] not in chosen  # outside the 5 candidates
    with pytest.raises(ConfigError, match="candidates"):
        DPP(k=5, candidates=3)


def authors_fast_votek(embeddings, select_num, k):
    """xlang-ai/icl-selective-annotation two_steps.py fast_votek, step by step (ties compared after rounding)."""
    n = len(embeddings)
    vote_stat = defaultdict(list)
    for i in range(n):
        scores = embeddings @ embeddings[i]
        for idx in np.argsort(scores).tolist()[-k - 1:-1]:
            if idx != i:
                vote_stat[idx].append(i)
    votes = sorted(vote_stat.items(), key=lambda x: len(x[1]), reverse=True)
    selected, times = [], defaultdict(int)
    while len(selected) < select_num:
        cur = defaultdict(int)
        for idx, candidates in votes:
            if idx in selected:
                cur[idx] = -100
                continue
            for one in candidates:
                if one not in selected:
                    cur[idx] += 10 ** (-times[one])
        best = max(((i, round(v, 9)) for i, v in cur.items()), key=lambda x: x[1])[0]
        if best not in selected:
            selected.append(best)
        for one in vote_stat[best]:
            times[one] += 1
    return selected


@pytest.mark.parametrize("seed", range(8))
def test_fast_votek_is_the_authors_selection(seed):
    rng = np.random.default_rng(seed)
    emb = rng.normal(size=(50, 6))
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    voters, order = vote_graph(emb, 8)
    assert fast_votek(voters, order, 10) == authors_fast_votek(emb, 10, 8)


def test_votek_covers_every_cluster_before_a_second_pick_from_one():
    """Three tight clusters of 10, 8 and 6 items: the discount moves the second and third picks to the other
    clusters (plain vote counts would stay in the largest), and retrieval answers from the annotated items."""
    rng = np.random.default_rng(0)
    centres = np.eye(3, 8)
    emb = np.concatenate([c + 0.05 * rng.normal(size=(m, 8)) for c, m in zip(centres, (10, 8, 6))])
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    cluster = np.repeat([0, 1, 2], (10, 8, 6))
    voters, order = vote_graph(emb, 5)
    picks = fast_votek(voters, order, 3)
    assert sorted(cluster[picks]) == [0, 1, 2]
    pool = items([f"q{i}" for i in range(len(emb))])
    selector = VoteK(k=1, annotation_budget=3, neighbours=5)
    selector.pool_, selector.pool_emb_, selector.annotated_ = pool, emb, picks
    for c in range(3):
        selector.query_similarities = lambda q, c=c: emb @ centres[c]
        assert [cluster[pool.index(d)] for d in selector.select(pool[0])] == [c]  # the query decides
    with pytest.raises(ConfigError, match="annotation_budget"):
        VoteK(k=5, annotation_budget=4)


def test_bm25_fills_ties_in_pool_order():
    """Items no query word matches all score 0: the picks after the matches are the first of them in pool order (a
    stable sort), so a run's demonstrations do not depend on the sort's handling of ties."""
    pool = items([f"token{i} alone" for i in range(60)])
    selector = BM25(k=4)
    selector.pool_, selector.index_ = pool, BM25Okapi([bm25_tokens(it.question) for it in pool])
    chosen = [d.id for d in selector.select(items(["what about token37?"], "test")[0])]
    assert chosen == ["t/pool:2", "t/pool:1", "t/pool:0", "t/pool:37"]


def test_dpp_greedy_map_does_not_depend_on_the_kernel_s_scale():
    """det(c L_S) = c^|S| det(L_S): every subset of one size scales alike, so the greedy MAP is the same for a kernel
    whose entries are all below 1 (as OpenICL's are, relevance at most 1)."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(20, 6))
    kernel = x @ x.T + 0.05 * np.eye(20)
    assert greedy_map(1e-3 * kernel, 5) == greedy_map(kernel, 5) == greedy_map(1e3 * kernel, 5)


def test_dpp_fills_a_rank_deficient_kernel_with_the_most_relevant_others_in_relevance_order():
    """Three copies of the most relevant item: once one is taken the others add no volume, so the greedy MAP stops
    at four members and the fifth is the most relevant item left (a copy); ties in relevance keep candidate order,
    the earlier candidate nearer the query."""
    basis = np.eye(4)
    emb = np.array([basis[0], basis[0], basis[0], basis[1], basis[2], basis[3]])
    query = basis[0] + 0.5 * basis[1] + 0.3 * basis[2] + 0.1 * basis[3]
    query /= np.linalg.norm(query)
    sims = emb @ query
    assert len(greedy_map(dpp_kernel(sims, emb, 0.1)[1], 5)) == 4
    pool = items([f"q{i}" for i in range(6)])
    selector = DPP(k=5, candidates=6)
    selector.pool_, selector.pool_emb_ = pool, emb
    selector.query_similarities = lambda q: sims
    assert [d.id for d in selector.select(pool[0])] == [pool[i].id for i in (5, 4, 3, 1, 0)]


def test_dpp_parameters():
    assert (DPP().k, DPP().candidates, DPP().scale_factor) == (5, 100, 0.1)
    assert DPP(k=5, candidates=5).candidates == 5  # as many candidates as demonstrations: the k nearest
    with pytest.raises(ConfigError, match=r"^dpp: scale_factor must be > 0, got 0$"):
        DPP(scale_factor=0)
    with pytest.raises(ConfigError, match=r"^dpp: candidates \(3\) must be at least k \(5\)$"):
        DPP(k=5, candidates=3)


def test_fast_votek_discounts_a_voter_by_ten_per_selected_item_it_voted_for():
    """After item 0 is selected, item 1's 21 voters (all item 0's) weigh 10^-1 each, 2.1 in all, against item 2's
    two fresh voters, 2.0: item 1 is next. A discount of 11 (1.91) or of 10^-2 a vote (0.21) would pick item 2."""
    voters = [np.arange(10, 41), np.arange(10, 31), np.array([50, 51])] + [np.array([], dtype=np.int64)] * 49
    assert fast_votek(voters, [0, 1, 2], 2) == [0, 1]
    assert fast_votek(voters, [0, 1, 2], 3) == [0, 1, 2]


def test_votek_fit_votes_over_the_whole_small_pool_and_reports_its_graph():
    rng = np.random.default_rng(4)
    emb = rng.normal(size=(6, 5))
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    pool = items([f"q{i}" for i in range(6)])
    encoder = type("Enc", (), {"encode_items": lambda self, its, with_output=False: emb})()  # the pool's embeddings
    ctx = FitContext(task=None, pool=pool, validation=[], encoder=encoder, oracle=None, seed=0, k=2)
    selector = VoteK(k=2, annotation_budget=2)  # as many annotated as demonstrations: allowed
    selector.check_pool = lambda ctx: None
    selector.fit(ctx)
    assert selector.annotated_ == fast_votek(*vote_graph(emb, 5), 2)  # 150 neighbours in a 6-item pool: the 5 others
    assert selector.scale() == {"annotated": 2, "neighbours": 5}
    sims = emb @ emb[selector.annotated_[0]]
    selector.query_similarities = lambda q: sims
    chosen = selector.select(pool[0])
    assert chosen[-1] is pool[selector.annotated_[0]]  # the most similar annotated item last, next to the query
    # items 1-4 all have item 0 nearest, item 0 has item 1: only two items are voted for, fewer than k = 4
    star = np.array([[1.0, 0, 0], [0.9, 0.44, 0], [0.8, 0, 0.6], [0.8, -0.6, 0], [0.7, 0, -0.71]])
    star /= np.linalg.norm(star, axis=1, keepdims=True)
    small = items([f"s{i}" for i in range(5)])
    encoder = type("Enc", (), {"encode_items": lambda self, its, with_output=False: star})()
    few = VoteK(k=4, annotation_budget=4, neighbours=1)
    few.check_pool = lambda ctx: None
    with pytest.raises(ConfigError, match=r"^votek: only 2 pool items were voted for, fewer than k \(4\)$"):
        few.fit(FitContext(task=None, pool=small, validation=[], encoder=encoder, oracle=None, seed=0, k=4))


def test_votek_parameters():
    assert (VoteK().annotation_budget, VoteK().neighbours) == (100, 150)
    assert VoteK(k=5, annotation_budget=5).annotation_budget == 5 and VoteK(neighbours=1).neighbours == 1
    with pytest.raises(ConfigError, match=r"^votek: neighbours must be >= 1, got 0$"):
        VoteK(neighbours=0)
