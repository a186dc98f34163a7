"""LENS and EXPLORA: filtering arithmetic, call counts, beam search, the linear surrogate, budgets, end to end."""
import itertools
from dataclasses import replace

import numpy as np
import pytest

import methods.explora  # noqa: F401  (registers "explora")
import methods.lens  # noqa: F401  (registers "lens")
from bench.errors import BudgetExhausted, ConfigError, FitFailed
from bench.items import Item
from bench.llm.client import LLMClient
from bench.oracle import RewardOracle
from bench.runner import Runner
from bench.tasks.gsm8k import GSM8K
from fakes import FakeBackend
from methods.base import FitContext, create
from methods.explora import Explora, choose_swap, fit_alpha, highest_predicted, surrogate_features
from methods.lens import (Lens, filtering_schedule, heuristic_search, propose_swap, search_features, seed_lists,
                          set_score, zscore)
from test_runner import lines, make_config

WORDS = [f"w{i}" for i in range(400)]


def make_pool(n: int, seed: int = 0) -> list[Item]:
    """GSM8K-like items whose rationales use disjoint-ish random words (the fake loglik counts unseen words)."""
    rng = np.random.default_rng(seed)
    return [Item(id=f"gsm8k/pool:{i}", question=f"How many q{i}?",
                 rationale=" ".join(rng.choice(WORDS, size=6, replace=False)), answer=str(i), split="pool")
            for i in range(n)]


def lens_context(pool: list[Item], budget: int | None = None, seed: int = 0) -> tuple[FitContext, FakeBackend]:
    backend = FakeBackend(batch_size=64)
    oracle = RewardOracle(LLMClient(backend), GSM8K(), "lens", bertscore=None, budget=budget)
    ctx = FitContext(task=GSM8K(), pool=pool, validation=[], encoder=None, oracle=oracle, seed=seed, k=2,
                     budget=budget)
    return ctx, backend


SMALL_LENS = {"k": 2, "indication_size": 3, "keep": 10, "beam": 2, "iterations": 2, "swaps": 2, "shuffles": 1,
              "heldout": 4, "search_metric": "loglik", "heuristic_beam": 4, "heuristic_iterations": 3,
              "heuristic_init": 8}


# ---- LENS ------------------------------------------------------------------------------------------
def test_filtering_schedule_halves_candidates_and_doubles_indication():
    # the paper's setting on a GSM8K-sized pool: the last round keeps exactly `keep`
    assert filtering_schedule(7000, 14, 500) == [(14, 3500), (28, 1750), (56, 875), (112, 500)]
    assert filtering_schedule(40, 3, 10) == [(3, 20), (6, 10)]
    assert filtering_schedule(21, 3, 10) == [(3, 10)]
    assert filtering_schedule(30, 14, 500) == []  # small pools skip filtering
    assert all(type(value) is int for row in filtering_schedule(7001, 14, 500) for value in row)  # slice bounds


def test_lens_loglik_calls_match_the_schedule():
    pool = make_pool(40)
    ctx, backend = lens_context(pool)
    sel = Lens(**SMALL_LENS).fit(ctx)
    assert [len(r["candidates"]) for r in sel.rounds_] == [40, 20]
    assert [len(r["new_indication"]) for r in sel.rounds_] == [3, 3]
    assert len(sel.candidates_) == 10 and len(sel.indication_) == 6
    # every candidate on every new indication example except itself, then one zero-shot call per indication example
    stage1 = sum(len([c for c in r["candidates"] if c != i]) for r in sel.rounds_ for i in r["new_indication"])
    assert sel.rounds_[0]["llm_calls"] == 40 * 3 - 3  # the first indication examples are all candidates
    searched = len(sel.list_scores_) * 4  # every distinct ordered list once on the 4 held-out items
    assert ctx.oracle.calls == stage1 + 6 + searched == len(backend.prompts)
    assert sel.search_[-1]["lists_scored"] == len(sel.list_scores_) and len(sel.search_) == 2
    # indication sets are nested: round 2 adds to round 1's examples
    assert sel.indication_[:3] == sel.rounds_[0]["new_indication"]
    assert all(len(sel.loglik_[c]) == 6 - (c in sel.indication_) for c in sel.candidates_)
    demos = sel.select(pool[0])
    assert len(demos) == 2 and len({d.id for d in demos}) == 2 and all(d in pool for d in demos)
    assert demos == sel.select(pool[5])  # task level


def test_lens_filter_keeps_the_candidate_that_raises_loglik():
    pool = make_pool(40, seed=3)
    every_word = " ".join(sorted({w for it in pool for w in it.rationale.split()} | {it.answer for it in pool}))
    helper = replace(pool[17], question=f"{pool[17].question} {every_word}")  # its prompt contains every gold word
    pool[17] = helper
    ctx, _ = lens_context(pool, seed=1)
    sel = Lens(**SMALL_LENS).fit(ctx)
    assert 17 in sel.candidates_
    assert sel.mean_score(17) == max(sel.mean_score(c) for c in sel.candidates_)
    assert sel.candidates_[0] == 17  # survivors are ranked best first
    # the fake: -(gold words missing from the prompt) - 0.5; the helper misses none
    assert sel.mean_score(17) == pytest.approx(-0.5)


def test_lens_features_are_z_scored_globally():
    pool = make_pool(24, seed=2)
    ctx, _ = lens_context(pool)
    ctx.validation = [replace(it, id=f"gsm8k/val:{i}") for i, it in enumerate(make_pool(3, seed=9))]
    sel = Lens(k=3, indication_size=4, keep=24, beam=3, iterations=1, heldout=3, search_metric="loglik").fit(ctx)
    assert sel.rounds_ == [sel.rounds_[0]] and len(sel.indication_) == 4  # no filtering, one scoring pass
    assert sel.features_.shape == (24, 4) and not np.isnan(sel.features_).any()
    # the feature of (candidate, indication x) = loglik with the candidate - zero-shot loglik of x
    c, i = sel.candidates_[0], next(x for x in sel.indication_ if x != sel.candidates_[0])
    task = GSM8K()
    zero = ctx.oracle.loglik([task.prefix([]) + task.format_query(pool[i])], [" " + pool[i].gold_output])[0]
    assert sel.features_[0, sel.indication_.index(i)] == pytest.approx(sel.loglik_[c][i] - zero)
    # one mean and one std over all survivors, and one over the whole similarity matrix (diagonal included)
    assert sel.zmean_.mean() == pytest.approx(0.0, abs=1e-9) and sel.zmean_.std() == pytest.approx(1.0)
    assert sel.zsim_.mean() == pytest.approx(0.0, abs=1e-9) and sel.zsim_.std() == pytest.approx(1.0)
    np.testing.assert_allclose(sel.zmean_, zscore(sel.features_.mean(axis=1)))
    # every pool item survived: the validation items are the held-out sample, and the row says so
    assert sel.heldout_ == ctx.validation
    assert sel.fit_warnings[0] == "every pool item survived filtering: the validation items are the held-out sample"
    ctx2 = lens_context(pool)[0]
    ctx2.validation = ctx.validation
    again = Lens(k=3, indication_size=4, keep=24, beam=3, iterations=1, heldout=3, search_metric="loglik").fit(ctx2)
    assert [d.id for d in again.select(pool[0])] == [d.id for d in sel.select(pool[0])]  # seeded


def test_set_score_and_heuristic_search_prefer_a_high_scoring_diverse_set():
    # candidates 0 and 1 are the best alone but redundant (same feature direction); 2 is good and orthogonal
    features = np.array([[2.0, 0.0], [2.0, 0.0], [0.0, 1.8], [0.1, 0.1], [0.0, 0.2]])
    zmean, zsim = search_features(features)
    raw = features / np.linalg.norm(features, axis=1, keepdims=True)
    np.testing.assert_allclose(zsim, zscore(raw @ raw.T))
    # the set score keeps the diagonal: mean over the 2x2 block of zsim
    assert set_score(zmean, zsim, (0, 2), 4.0) == pytest.approx(
        (zmean[0] + zmean[2]) / 2 - 4.0 * (zsim[0, 0] + zsim[2, 2] + 2 * zsim[0, 2]) / 4)
    assert set_score(zmean, zsim, (0, 2), 4.0) > set_score(zmean, zsim, (0, 1), 4.0)
    ranked = heuristic_search(zmean, zsim, k=2, diversity=4.0, beam=4, iterations=5, n_init=6, top_sample=4,
                              rng=np.random.default_rng(0))
    best = ranked[0][0]
    assert 2 in best and len(set(best) & {0, 1}) == 1
    greedy = heuristic_search(zmean, zsim, k=2, diversity=0.0, beam=4, iterations=5, n_init=6, top_sample=4,
                              rng=np.random.default_rng(0))
    assert greedy[0][0] == (0, 1)  # without the diversity term the two redundant best ones win


def test_heuristic_searchs_beam_keeps_its_best_sets_and_its_ranking_is_best_first():
    """A beam that kept its worst sets (or sets in index order) stays one swap from its random start and never
    reaches the planted best set, placed at the highest indices; every set scored comes back best first."""
    for seed in range(5):
        rng = np.random.default_rng(seed)
        zmean = np.concatenate([rng.normal(0, 0.1, 36), [2.7, 2.8, 2.9, 3.0]])
        ranked = heuristic_search(zmean, np.zeros((40, 40)), k=4, diversity=0.0, beam=2, iterations=8, n_init=2,
                                  top_sample=4, rng=np.random.default_rng(seed))
        assert ranked[0][0] == (36, 37, 38, 39)
        scores = [score for _, score in ranked]
        assert scores == sorted(scores, reverse=True) and len(ranked) > 10


def test_propose_swap_on_a_one_example_list_draws_from_the_best_others_and_lens_keeps_the_authors_diversity():
    zmean = np.array([0.0, 3.0, 2.9, -1.0])
    rng = np.random.default_rng(0)
    draws = {propose_swap((0,), zmean, np.zeros((4, 4)), 4.0, 2, rng) for _ in range(40)}
    assert draws == {(1,), (2,)}  # no rest to be diverse from: the two best others
    assert Lens().diversity == 4.0  # the authors' diversity weight


def test_propose_swap_replaces_one_slot_from_the_top_candidates():
    zmean = np.array([3.0, 2.0, 1.0, 0.5, -1.0, -2.0])
    zsim = np.zeros((6, 6))
    rng = np.random.default_rng(0)
    for _ in range(50):
        new = propose_swap((4, 5, 3), zmean, zsim, 4.0, 1, rng)
        changed = [j for j in range(3) if new[j] != (4, 5, 3)[j]]
        assert len(changed) == 1 and new[changed[0]] == 0  # top_sample 1: the best outsider, in the drawn slot
    drawn = {propose_swap((0, 5), zmean, zsim, 4.0, 2, rng)[0] for _ in range(200)} - {0}
    assert drawn <= {1, 2}  # softmax over the 2 best outsiders only
    assert propose_swap((0, 1), zmean[:2], zsim[:2, :2], 4.0, 4, rng) is None  # nothing left to swap in
    # the diversity term: candidate 0 is the best alone but a near-copy of the kept member 5, so 1 wins
    similar = np.zeros((6, 6))
    similar[0, 5] = similar[5, 0] = 1.0
    picks = {propose_swap((4, 5), zmean, similar, 4.0, 1, rng) for _ in range(30)}
    assert (1, 5) in picks and (0, 5) not in picks
    # the draw among the top_sample is a softmax of their fit: e^3 / (e^3 + e^2) = 0.73 for the best, not 1/2
    first = [propose_swap((4, 5), zmean, zsim, 0.0, 2, np.random.default_rng(i)) for i in range(600)]
    assert np.mean([0 in new for new in first]) == pytest.approx(np.e / (np.e + 1), abs=0.05)


def test_lens_scale_and_trace_report_the_search_size():
    assert Lens().scale() == {} and Lens().trace() == []  # nothing before a fit
    sel = Lens(**SMALL_LENS).fit(lens_context(make_pool(40))[0])
    assert sel.scale() == {"filtering rounds": 2, "candidates kept": 10, "beam": 2, "search iterations": 2,
                           "held-out items": 4}
    assert [(r["round"], r["candidates"], r["indication_new"], r["kept"]) for r in sel.trace()[:2]] == [
        (0, 40, 3, 20), (1, 20, 3, 10)]
    assert [r["search_iteration"] for r in sel.trace()[2:]] == [1, 2]
    # 40 x 3 - 3, then 20 x 3 - 1 (one of the new indication examples is a survivor): running totals
    assert [r["llm_calls"] for r in sel.trace()[:2]] == [r["llm_calls"] for r in sel.rounds_] == [117, 176]


def test_lens_continuation_gets_a_space_only_after_a_prompt_without_one():
    item = make_pool(1)[0]
    assert Lens._continuation("[Answer]: ", item) == item.gold_output
    assert Lens._continuation("[Answer]:\n", item) == item.gold_output
    assert Lens._continuation("[Answer]:", item) == " " + item.gold_output


@pytest.mark.parametrize("room", [1, 39])
def test_lens_spends_the_last_calls_of_a_budget_on_the_first_candidates(room):
    """The budget ends inside the first indication example's batch of 39 candidates: exactly `room` of them are
    scored (1 or all 39), each stored under that indication example."""
    pool = make_pool(40)
    ctx, _ = lens_context(pool, budget=room)
    sel = Lens(**SMALL_LENS).fit(ctx)
    first = sel.rounds_[0]["new_indication"][0]
    assert sum(len(v) for v in sel.loglik_.values()) == room == ctx.oracle.calls
    assert all(set(v) == {first} for v in sel.loglik_.values())


def test_seed_lists_respect_the_overlap_limit_against_the_union_of_taken_sets():
    ranked = [((0, 1, 2), 3.0), ((0, 1, 3), 2.9), ((4, 5, 6), 2.0), ((0, 4, 7), 1.0), ((7, 8, 9), 0.5)]
    seeds = seed_lists(ranked, n=10, k=3, size=3, overlap_limit=1, rng=np.random.default_rng(0))
    # (0,1,3) shares 2 with the first; (0,4,7) shares one example with each taken set but two with their union
    assert [tuple(sorted(s)) for s in seeds] == [(0, 1, 2), (4, 5, 6), (7, 8, 9)]
    more = seed_lists(ranked, n=10, k=3, size=5, overlap_limit=1, rng=np.random.default_rng(0))
    assert len(more) == 5 and len({tuple(sorted(s)) for s in more}) == 5  # random sets fill the shortfall
    many = seed_lists([], n=40, k=3, size=150, overlap_limit=1, rng=np.random.default_rng(0))
    assert len(many) == 150  # a long shortfall is filled too: up to 100 draws per missing list


class OrderedFake(FakeBackend):
    """loglik counts gold words missing from the LAST demonstration only: the order of a list matters."""

    def loglik(self, contexts, continuations):
        from bench.llm.base import RawLoglik

        self.prompts.extend(c + x for c, x in zip(contexts, continuations))
        out = []
        for c, x in zip(contexts, continuations):
            demos = c.split("[Question]:")
            last = demos[-2] if len(demos) > 2 else ""
            missing = len(set(x.split()) - set(last.split()))
            out.append(RawLoglik(logprob=-float(missing), n_tokens=len(x.split())))
        return out


def test_lens_search_is_scored_by_the_llm_and_keeps_the_searched_order():
    pool = make_pool(30, seed=4)
    helper_words = " ".join(sorted({w for it in pool for w in it.rationale.split()} | {it.answer for it in pool}))
    pool[5] = replace(pool[5], rationale=helper_words)  # as a demonstration, it holds every gold word
    backend = OrderedFake(batch_size=64)
    oracle = RewardOracle(LLMClient(backend), GSM8K(), "lens", bertscore=None)
    ctx = FitContext(task=GSM8K(), pool=pool, validation=[], encoder=None, oracle=oracle, seed=0, k=3)
    sel = Lens(k=3, indication_size=3, keep=10, beam=3, iterations=3, swaps=3, shuffles=2, heldout=5,
               search_metric="loglik", heuristic_beam=4, heuristic_iterations=2, heuristic_init=8).fit(ctx)
    heldout_ids = {h.id for h in sel.heldout_}
    assert len(heldout_ids) == 5 and not heldout_ids & {pool[c].id for c in sel.candidates_}
    best = max(sel.list_scores_, key=sel.list_scores_.get)
    assert [d.id for d in sel.select(pool[0])] == [pool[sel.candidates_[j]].id for j in best]
    assert 5 in sel.candidates_  # the helper survives filtering, and the search puts it last, next to the query
    assert sel.select(pool[0])[-1].id == pool[5].id
    assert sel.list_scores_[best] > max(v for lst, v in sel.list_scores_.items() if lst[-1] != best[-1])
    # lists that differ only in order are different lists, each scored once
    assert all(len(set(lst)) == 3 for lst in sel.list_scores_)
    assert oracle.calls == len(backend.prompts)


def ordered_context() -> FitContext:
    """40 pool items, item 5 holding every gold word: last in a list it misses none (OrderedFake), so lists differ."""
    pool = make_pool(40, seed=4)
    helper_words = " ".join(sorted({w for it in pool for w in it.rationale.split()} | {it.answer for it in pool}))
    pool[5] = replace(pool[5], rationale=helper_words)
    oracle = RewardOracle(LLMClient(OrderedFake(batch_size=64)), GSM8K(), "lens", bertscore=None)
    return FitContext(task=GSM8K(), pool=pool, validation=[], encoder=None, oracle=oracle, seed=0, k=2)


def test_lens_with_no_search_iteration_keeps_the_best_scored_seed():
    ctx = ordered_context()
    sel = Lens(**{**SMALL_LENS, "iterations": 0, "beam": 4}).fit(ctx)
    assert set(sel.list_scores_) == set(sel.seeds_) and sel.search_ == []
    best = max(sel.seeds_, key=sel.list_scores_.get)
    assert sel.demos_ == [ctx.pool[sel.candidates_[j]] for j in best]
    assert sel.list_scores_[best] > min(sel.list_scores_.values())  # the seeds differ: the choice matters


def test_lens_budget_partial_scores_still_give_k_pool_items():
    pool = make_pool(40)
    ctx, backend = lens_context(pool, budget=50)
    sel = Lens(**SMALL_LENS).fit(ctx)
    assert ctx.oracle.budget_exhausted and "ended the filtering stage" in sel.fit_warnings[0]
    assert ctx.oracle.calls == 50 == len(backend.prompts)  # the cut-short batch spends what was left
    demos = sel.select(pool[0])
    assert len(demos) == 2 and all(d in pool for d in demos)
    # ranked by the mean over what each candidate was scored on: the chosen two are the best scored
    scored = [c for c in sel.candidates_ if c in sel.loglik_]
    chosen = [pool.index(d) for d in demos]
    assert sorted(chosen) == sorted(scored[:2])
    assert sel.mean_score(chosen[1]) >= sel.mean_score(chosen[0])  # best last

    # budget enough for filtering but not for the zero-shot losses: falls back to the filtered ranking
    full = Lens(**SMALL_LENS).fit(lens_context(pool)[0])
    needed = full.rounds_[-1]["llm_calls"]
    ctx2, _ = lens_context(pool, budget=needed + 2)
    short = Lens(**SMALL_LENS).fit(ctx2)
    assert ctx2.oracle.calls == needed
    assert short.fit_warnings == ["--llm-budget ended the features stage: the top 2 candidates by the 1-shot scores "
                                  "so far are used, best last"]
    assert [pool.index(d) for d in short.select(pool[0])] == full.candidates_[:2][::-1]
    # budget for the features and a few lists: the best list scored so far, with a warning
    ctx3, _ = lens_context(pool, budget=needed + 6 + 4 * 3)
    cut = Lens(**SMALL_LENS).fit(ctx3)
    assert 1 <= len(cut.list_scores_) <= 3
    assert cut.fit_warnings == [f"--llm-budget ended the search after {len(cut.list_scores_)} evaluated lists: the "
                                "best of them is used"]
    best = max(cut.list_scores_, key=cut.list_scores_.get)
    assert [pool.index(d) for d in cut.select(pool[0])] == [cut.candidates_[j] for j in best]
    # nothing scored at all: the fit fails instead of returning arbitrary examples
    with pytest.raises(FitFailed, match=r"^lens: --llm-budget ended before any candidate was scored; raise the budget$"):
        Lens(**SMALL_LENS).fit(lens_context(pool, budget=0)[0])


def test_lens_zscore_of_a_constant_is_zero_not_nan():
    np.testing.assert_array_equal(zscore(np.full(4, 2.5)), np.zeros(4))
    np.testing.assert_allclose(zscore(np.array([1.0, 3.0])), [-1.0, 1.0])


def test_lens_seed_lists_take_a_set_at_exactly_the_overlap_limit_and_fill_with_distinct_random_sets():
    ranked = [((0, 1, 2), 3.0), ((2, 3, 4), 2.0), ((1, 3, 5), 1.5), ((5, 6, 7), 1.0)]
    seeds = seed_lists(ranked, n=10, k=3, size=3, overlap_limit=1, rng=np.random.default_rng(0))
    # (2, 3, 4) shares exactly one example (2) with the union so far: at the limit, taken; (1, 3, 5) shares two
    assert [tuple(sorted(s)) for s in seeds] == [(0, 1, 2), (2, 3, 4), (5, 6, 7)]
    # a 4-item pool holds 4 distinct 3-sets: asked for 6, the random fill finds the 3 others and then gives up
    few = seed_lists([((0, 1, 2), 1.0)], n=4, k=3, size=6, overlap_limit=0, rng=np.random.default_rng(0))
    assert sorted(tuple(sorted(s)) for s in few) == [(0, 1, 2), (0, 1, 3), (0, 2, 3), (1, 2, 3)]


def test_lens_features_fill_a_candidates_own_slot_with_its_row_mean():
    pool = make_pool(24, seed=2)
    ctx, _ = lens_context(pool)
    ctx.validation = [replace(it, id=f"gsm8k/val:{i}") for i, it in enumerate(make_pool(3, seed=9))]
    sel = Lens(k=3, indication_size=4, keep=24, beam=3, iterations=1, heldout=3, search_metric="loglik").fit(ctx)
    for i in sel.indication_:  # an indication example is also a candidate: it never indicates itself
        row, col = sel.candidates_.index(i), sel.indication_.index(i)
        others = np.delete(sel.features_[row], col)
        assert sel.features_[row, col] == pytest.approx(others.mean())
        assert np.isfinite(others).all() and len(sel.loglik_[i]) == 3


def test_lens_heldout_sample_is_seeded_and_warns_only_when_short():
    pool = make_pool(40)
    sel = Lens(**SMALL_LENS).fit(lens_context(pool)[0])
    outside = [int(i) for i in np.random.default_rng(0 + 100).permutation(40) if i not in set(sel.candidates_)]
    assert sel.heldout_ == [pool[i] for i in outside[:4]] and sel.fit_warnings == []  # the published stream
    exact = Lens(**{**SMALL_LENS, "heldout": 30}).fit(lens_context(pool)[0])  # 30 items outside the 10 survivors
    assert len(exact.heldout_) == 30 and exact.fit_warnings == []
    short = Lens(**{**SMALL_LENS, "heldout": 31}).fit(lens_context(pool)[0])
    assert short.fit_warnings == ["held-out sample of 30 pool items (fewer than heldout=31 outside the survivors)"]
    everything = Lens(k=3, indication_size=4, keep=24, beam=3, iterations=1, heldout=3, search_metric="loglik")
    with pytest.raises(ConfigError, match=r"^lens: every pool item survived filtering and there are no validation "
                                          r"items, so nothing is left to score the search on; lower keep or "
                                          r"max_candidates$"):
        everything.fit(lens_context(make_pool(24, seed=2))[0])


def test_lens_search_by_reward_scores_each_list_by_one_pull_on_the_heldout_items(monkeypatch):
    pool = make_pool(40)
    ctx, _ = lens_context(pool)
    ctx.oracle.task = ctx.task = GSM8K().configure(reward="metric")  # exact match: no BERTScore model here
    pulls = []
    real_pull = ctx.oracle.pull

    def spy(demos, items):
        rewards = real_pull(demos, items)
        pulls.append((tuple(d.id for d in demos), [it.id for it in items], float(np.mean(rewards))))
        return rewards

    monkeypatch.setattr(ctx.oracle, "pull", spy)
    sel = Lens(**{**SMALL_LENS, "search_metric": "reward"}).fit(ctx)
    assert len(pulls) == len(sel.list_scores_) > 0
    heldout = [h.id for h in sel.heldout_]
    for members, value in sel.list_scores_.items():
        ids = tuple(pool[sel.candidates_[j]].id for j in members)
        assert (ids, heldout, value) in pulls


def test_lens_search_scores_every_proposal_and_passes_top_sample(monkeypatch):
    import methods.lens as lens_module

    calls = []
    real = lens_module.propose_swap

    def spy(members, zmean, zsim, diversity, top_sample, rng):
        out = real(members, zmean, zsim, diversity, top_sample, rng)
        calls.append((top_sample, out))
        return out

    monkeypatch.setattr(lens_module, "propose_swap", spy)
    ctx = ordered_context()
    sel = Lens(**{**SMALL_LENS, "top_sample": 3, "iterations": 1}).fit(ctx)
    assert len(set(sel.list_scores_.values())) > 1  # lists score differently: best_score must be the best
    assert {t for t, _ in calls} == {3}  # the heuristic pre-search and the LLM search both use top_sample
    searched = calls[-SMALL_LENS["beam"] * SMALL_LENS["swaps"]:]  # the LLM search's swaps: beam x swaps
    assert all(out is not None and out in sel.list_scores_ for _, out in searched)
    assert sel.search_ == [{"search_iteration": 1, "lists_scored": len(sel.list_scores_),
                            "best_score": max(sel.list_scores_.values()), "llm_calls": ctx.oracle.calls}]


def test_lens_budget_ending_at_the_search_keeps_the_heuristics_best_seed():
    pool = make_pool(40)
    full = Lens(**SMALL_LENS).fit(lens_context(pool)[0])
    before_search = full.rounds_[-1]["llm_calls"] + len(full.indication_)  # filtering + zero-shot losses
    ctx, _ = lens_context(pool, budget=before_search)
    cut = Lens(**SMALL_LENS).fit(ctx)
    assert cut.list_scores_ == {} and cut.stage_ == "search"
    assert cut.fit_warnings == ["--llm-budget ended before any list was evaluated by the LLM: the heuristic's best "
                                "seed is used"]
    assert cut.demos_ == [pool[cut.candidates_[j]] for j in cut.seeds_[0]] and cut.seeds_[0] == full.seeds_[0]


def test_lens_search_trace_reports_the_best_list_and_the_fit_keeps_it(monkeypatch):
    def distinct_score(self, ctx, members):  # every ordered list its own score: no ties at the top
        return self.list_scores_.setdefault(members, float(sum(m * 10.0 ** j for j, m in enumerate(members))))

    monkeypatch.setattr(Lens, "_list_score", distinct_score)
    ctx, _ = lens_context(make_pool(40))
    sel = Lens(**{**SMALL_LENS, "iterations": 3}).fit(ctx)
    best = max(sel.list_scores_, key=sel.list_scores_.get)
    assert [row["best_score"] for row in sel.search_][-1] == sel.list_scores_[best]
    assert all(a["best_score"] <= b["best_score"] for a, b in zip(sel.search_, sel.search_[1:]))
    assert sel.demos_ == [ctx.pool[sel.candidates_[j]] for j in best]


def test_lens_fills_the_beam_with_random_sets_when_the_heuristics_overlap():
    # 10 survivors and k = 2 hold at most 5 disjoint sets: a beam of 7 with overlap_limit 0 needs random sets
    sel = Lens(**{**SMALL_LENS, "beam": 7, "overlap_limit": 0, "iterations": 0}).fit(lens_context(make_pool(40))[0])
    assert len(sel.seeds_) == 7 and all(len(set(s)) == 2 for s in sel.seeds_)
    assert len({tuple(sorted(s)) for s in sel.seeds_}) == 7


def test_lens_rejects_bad_parameters():
    with pytest.raises(ConfigError):
        Lens(k=5, keep=3)
    with pytest.raises(ConfigError):
        Lens(indication_size=0)
    with pytest.raises(ConfigError):
        create("lens", {"diversity": -1})


@pytest.mark.parametrize("name", ["indication_size", "beam", "top_sample", "heldout", "heuristic_beam",
                                  "heuristic_init"])
def test_lens_each_count_must_be_at_least_one(name):
    assert getattr(Lens(**{name: 1}), name) == 1  # the smallest accepted value
    with pytest.raises(ConfigError, match=r"^lens: indication_size, beam, top_sample, heldout, heuristic_beam and "
                                          r"heuristic_init must be >= 1$"):
        Lens(**{name: 0})


@pytest.mark.parametrize("name", ["iterations", "swaps", "shuffles", "heuristic_iterations", "overlap_limit"])
def test_lens_each_repeat_count_may_be_zero(name):
    assert getattr(Lens(**{name: 0}), name) == 0
    with pytest.raises(ConfigError, match=r"^lens: iterations, swaps, shuffles, heuristic_iterations and "
                                          r"overlap_limit must be >= 0$"):
        Lens(**{name: -1})


def test_lens_keep_diversity_and_metric_edges():
    assert Lens(k=5, keep=5, max_candidates=5).keep == 5 and Lens(diversity=0.0).diversity == 0.0
    with pytest.raises(ConfigError, match=r"^lens: keep \(500\) and max_candidates \(4\) must be at least k \(5\)$"):
        Lens(k=5, max_candidates=4)
    with pytest.raises(ConfigError, match=r"^lens: diversity must be >= 0, got -0.5$"):
        Lens(diversity=-0.5)
    with pytest.raises(ConfigError, match=r"^lens: search_metric must be one of reward, loglik, got 'bleu'$"):
        Lens(search_metric="bleu")
    assert filtering_schedule(10, 3, 10) == []  # a pool of exactly `keep` is not filtered


# ---- EXPLORA ---------------------------------------------------------------------------------------
def test_surrogate_features_put_cosines_on_arm_members():
    sims = np.arange(24, dtype=float).reshape(8, 3) / 24  # 8 pool items, 3 validation items
    members = np.array([[0, 5], [2, 5], [7, 3]])
    used, phi = surrogate_features(members, sims)
    assert used.tolist() == [0, 2, 3, 5, 7] and phi.shape == (3, 3, 5)
    assert np.allclose(phi[0][:, 0], sims[0]) and np.allclose(phi[0][:, 3], sims[5])
    assert np.count_nonzero(phi[0][:, [1, 2, 4]]) == 0  # items outside the arm contribute nothing


def test_least_squares_recovers_known_alphas():
    rng = np.random.default_rng(0)
    n_pool, n_val, k = 15, 4, 3
    sims = rng.uniform(0.1, 1.0, size=(n_pool, n_val))
    members = np.array([rng.choice(n_pool, size=k, replace=False) for _ in range(40)])
    used, phi = surrogate_features(members, sims)
    alpha_true = rng.normal(0, 1, size=len(used))
    observed = rng.choice(len(members), size=25, replace=False)
    design = np.concatenate([phi[a] for a in observed])
    losses = design @ alpha_true
    assert np.allclose(fit_alpha(design, losses, reg=1e-9), alpha_true, atol=1e-4)
    noisy = losses + rng.normal(0, 0.01, size=len(losses))
    assert np.allclose(fit_alpha(design, noisy, reg=1e-3), alpha_true, atol=0.1)
    # predictions on unobserved arms follow from the recovered weights
    held_out = [a for a in range(len(members)) if a not in observed]
    alpha = fit_alpha(design, losses, reg=1e-9)
    assert np.allclose(phi[held_out] @ alpha, phi[held_out] @ alpha_true, atol=1e-3)
    # the ridge term shrinks the weights
    assert np.linalg.norm(fit_alpha(design, losses, reg=100.0)) < np.linalg.norm(alpha_true)


def test_explora_swap_rule_and_probe_set():
    predicted = np.array([0.5, 0.4, 0.9, 0.1, 0.7, 0.3, 0.8])
    # the authors swap out U's worst PREDICTED subset (arm 2, 0.9) for the best predicted outside U (arm 3)
    assert choose_swap([0, 1, 2], predicted) == (2, 3)
    # by the predictions, not by arm number: U's worst is its lowest index, the best outside its highest
    assert choose_swap([2, 4, 0], np.array([0.9, 0.1, 0.2, 0.8, 0.3, 0.05])) == (0, 5)
    assert highest_predicted([0, 3, 2], predicted, 2) == [6, 4]  # highest predicted loss outside U
    assert highest_predicted([0, 3, 2], predicted, 10) == [6, 4, 1, 5]
    assert choose_swap([0, 1], np.array([0.3, 0.3])) is None  # U already holds every arm


class StubEncoder:
    """Seeded unit vectors per item id: fast stand-in for the sentence encoder."""

    def encode_items(self, items, with_output=False):
        rows = [np.random.default_rng(int(it.id.split(":")[1]) + 1000 * with_output).normal(size=8) for it in items]
        emb = np.array(rows, dtype=np.float32)
        return emb / np.linalg.norm(emb, axis=1, keepdims=True)


class StubOracle:
    """Reward of a pull = mean quality of its demonstrations (item i has quality i / n); optional pull limit."""

    def __init__(self, n_pool: int, max_pulls: int | None = None):
        self.n_pool, self.max_pulls, self.calls, self.pulled = n_pool, max_pulls, 0, []

    def pull(self, demos, items):
        if self.max_pulls is not None and len(self.pulled) >= self.max_pulls:
            raise BudgetExhausted("stub budget")
        self.pulled.append(tuple(d.id for d in demos))
        self.calls += len(items)
        quality = np.mean([int(d.id.split(":")[1]) / self.n_pool for d in demos])
        return np.full(len(items), quality)


def explora_context(max_pulls: int | None = None) -> tuple[FitContext, list[Item]]:
    pool = make_pool(30)
    validation = [replace(it, id=f"gsm8k/val:{i}", split="validation") for i, it in enumerate(make_pool(4, seed=9))]
    ctx = FitContext(task=GSM8K(), pool=pool, validation=validation, encoder=StubEncoder(),
                     oracle=StubOracle(len(pool), max_pulls), seed=0, k=3)
    return ctx, pool


def test_explora_loop_swaps_probes_and_uses_the_final_evaluation_of_u():
    ctx, pool = explora_context()
    sel = Explora(k=3, n_arms=20, u_size=4, v_size=2, iterations=5).fit(ctx)
    steps = [r for r in sel.trace() if not r.get("summary")]
    assert [r["pulls"] for r in steps] == [6, 9, 12, 15, 18, 21]  # u + v, then 1 swap-in + v probes each
    assert [r["llm_calls"] for r in steps] == [4 * r["pulls"] for r in steps]  # 4 validation items per pull
    assert all(r["swapped_in"] is not None and r["swapped_out"] is not None for r in steps[1:])
    assert all(r["swapped_out"] != r["swapped_in"] for r in steps[1:])
    assert len(sel.pulls_) == 21 + 4  # the final U is evaluated once more
    assert [arm for arm, _ in sel.pulls_[-4:]] == sel.working_
    assert sel.best_arm_ == min(sel.working_, key=lambda a: sel.final_loss_[a])
    assert sel.alpha_.shape == (len(sel.used_),) and sel.fit_warnings == []
    demos = sel.select(pool[0])
    assert len(demos) == 3 and all(d in pool for d in demos) and demos == sel.select(pool[9])
    assert sel.trace()[-1] == {"summary": True, "pulls": 25, "rounds": 6, "stopped_by": "iterations",
                               "best_arm": sel.best_arm_}
    again = Explora(k=3, n_arms=20, u_size=4, v_size=2, iterations=5).fit(explora_context()[0])
    assert again.best_arm_ == sel.best_arm_ and again.pulls_[-1][0] == sel.pulls_[-1][0]  # seeded


def test_explora_fits_least_squares_on_the_current_u_and_v_only():
    ctx, _ = explora_context()
    sel = Explora(k=3, n_arms=20, u_size=4, v_size=2, iterations=2).fit(ctx)
    before = sel.predicted_losses().copy()
    outsider = next(a for a in range(20) if a not in sel.working_ + sel.probes_)
    sel.latest_[outsider] = np.full(4, 100.0)  # an observation outside U and V must not move the fit
    np.testing.assert_allclose(sel.predicted_losses(), before)
    rows = np.concatenate([sel.phi_[a] for a in dict.fromkeys(sel.working_ + sel.probes_)])
    target = np.concatenate([sel.latest_[a] for a in dict.fromkeys(sel.working_ + sel.probes_)])
    np.testing.assert_allclose(sel.alpha_, np.linalg.lstsq(rows, target, rcond=None)[0])  # minimum norm, no ridge


def test_explora_budget_stops_the_loop_and_still_returns_k_demos():
    ctx, pool = explora_context(max_pulls=8)
    sel = Explora(k=3, n_arms=20, u_size=4, v_size=2, iterations=5).fit(ctx)
    assert sel.stopped_by_ == "budget" and len(ctx.oracle.pulled) == 8 and len(sel.pulls_) == 8
    observed = sel.observed_losses()
    assert sel.best_arm_ in sel.working_ and sel.best_arm_ == min(sel.working_, key=lambda a: observed[a])
    assert "before the final evaluation of U" in sel.fit_warnings[0]
    assert len(sel.select(pool[0])) == 3
    # the budget ran out while scoring U itself: the best of what was scored
    ctx2, _ = explora_context(max_pulls=2)
    early = Explora(k=3, n_arms=20, u_size=4, v_size=2, iterations=5).fit(ctx2)
    assert early.best_arm_ in {arm for arm, _ in early.pulls_} and len(early.select(pool[0])) == 3
    with pytest.raises(FitFailed, match="before any subset was evaluated"):
        Explora(k=3, n_arms=20, u_size=4, v_size=2, iterations=5).fit(explora_context(max_pulls=0)[0])


def test_explora_rejects_bad_parameters():
    with pytest.raises(ConfigError, match="explora: reg must be >= 0"):
        Explora(reg=-1.0)
    for bad in ({"u_size": 0}, {"n_arms": 0}, {"v_size": -1}, {"iterations": -1}, {"v_size": -1, "iterations": 0}):
        with pytest.raises(ConfigError, match="explora: n_arms and u_size must be >= 1"):
            create("explora", bad)
    smallest = Explora(n_arms=1, u_size=1, v_size=0, iterations=0, reg=0.0)  # the smallest accepted values
    assert (smallest.n_arms, smallest.u_size, smallest.v_size, smallest.iterations) == (1, 1, 0, 0)


def test_explora_scale_and_trace_report_the_search():
    assert Explora().scale() == {} and Explora().trace() == []  # nothing before a fit
    ctx, _ = explora_context()
    sel = Explora(k=3, n_arms=20, u_size=4, v_size=2, iterations=3).fit(ctx)
    assert sel.scale() == {"subsets evaluated": 19, "iterations": 4}  # 6 + 3 x 3 + the final 4; rounds 0..3
    steps = [r for r in sel.trace() if not r.get("summary")]
    # best_loss is U's best mean observed loss (the stub's rewards are constant per arm: 1 - its quality)
    assert steps[-1]["best_loss"] == pytest.approx(min(sel.observed_losses()[a] for a in sel.working_))
    assert all(0.0 < r["best_loss"] < 1.0 for r in steps)


def test_explora_loss_is_one_minus_the_reward_and_the_best_arm_has_the_highest_reward():
    """The stub's reward of an arm is its members' mean quality i/30: the final U is scored as 1 - that, and the
    subset kept is U's highest-quality one (an inverted loss would keep the lowest)."""
    ctx, pool = explora_context()
    sel = Explora(k=3, n_arms=20, u_size=4, v_size=2, iterations=5).fit(ctx)
    quality = {arm: float(np.mean([int(d.id.split(":")[1]) / 30 for d in sel.prep_.env.demos(arm)]))
               for arm in sel.working_}
    assert sel.final_loss_ == pytest.approx({arm: 1.0 - q for arm, q in quality.items()})
    assert sel.best_arm_ == max(sel.working_, key=quality.get)
    assert all(loss.dtype == np.float64 for _, loss in sel.pulls_)


def test_explora_swaps_its_working_set_toward_better_predicted_arms():
    """Each iteration replaces U's worst predicted arm by the newcomer: U changes, and the swapped-in arm stays."""
    ctx, _ = explora_context()
    sel = Explora(k=3, n_arms=20, u_size=4, v_size=2, iterations=5).fit(ctx)
    steps = [r for r in sel.trace() if not r.get("summary")]
    working = [arm for arm, _ in sel.pulls_[:4]]  # the initial U, evaluated first
    for step in steps[1:]:
        assert step["swapped_out"] in working and step["swapped_in"] not in working
        working = [step["swapped_in"] if a == step["swapped_out"] else a for a in working]
    assert sel.working_ == working != [arm for arm, _ in sel.pulls_[:4]]


def test_explora_with_every_arm_in_u_stops_swapping_and_still_evaluates_u():
    """n_arms <= u_size: U holds every arm, no swap exists, the loop ends and U's final evaluation still picks."""
    ctx, pool = explora_context()
    sel = Explora(k=3, n_arms=3, u_size=4, v_size=2, iterations=5).fit(ctx)
    assert len(sel.working_) == 3 and sel.probes_ == [] and len(sel.trace_) == 1
    assert len(sel.final_loss_) == 3 and sel.best_arm_ == min(sel.working_, key=sel.final_loss_.get)
    assert len(sel.select(pool[0])) == 3


def test_explora_under_a_budget_keeps_the_best_observed_arm_of_u_not_a_better_probe():
    ctx, _ = explora_context()
    sel = Explora(k=3, n_arms=20, u_size=4, v_size=2, iterations=5)
    sel.working_, sel.final_loss_ = [0, 1], {}
    sel.pulls_ = [(0, np.full(4, 0.5)), (1, np.full(4, 0.4)), (7, np.full(4, 0.1))]  # arm 7: a probe outside U
    assert sel._best() == 1 and "before the final evaluation of U" in sel.fit_warnings[-1]
    sel.working_ = [3]  # no arm of U observed: the best observed arm of any kind
    assert sel._best() == 7


# ---- end to end ---------------------------------------------------------------------------------------
PARAMS = {"lens": {"indication_size": 2, "keep": 8, "beam": 2, "iterations": 2, "swaps": 1, "shuffles": 1,
                   "heldout": 3, "heuristic_beam": 4, "heuristic_iterations": 2, "heuristic_init": 8},
          "explora": {"n_arms": 12, "u_size": 2, "v_size": 1, "iterations": 3}}


def test_lens_and_explora_end_to_end(tmp_path, data_dir, fake):
    cfg = make_config(tmp_path, data_dir, methods=["lens", "explora"], tasks=["gsm8k"], n_test=2, n_val=3,
                      pool_size=30, method_params=PARAMS)
    results = Runner(cfg).run()
    runs = {r["method"]: r for r in results["runs"]}
    assert set(runs) == {"lens", "explora"} and all(r["n"] == 2 for r in runs.values())
    splits = GSM8K().load_splits(data_dir, n_test=2, n_val=3, pool_size=30, seed=cfg.seed)
    pool_ids = {it.id for it in splits.pool}
    records = lines(tmp_path / "run" / "records.jsonl")
    for method in ("lens", "explora"):
        demo_ids = [r["demo_ids"] for r in records if r["method"] == method]
        assert len(demo_ids) == 2 and demo_ids[0] == demo_ids[1]  # task level: one set for every query
        assert len(demo_ids[0]) == 5 and len(set(demo_ids[0])) == 5 and set(demo_ids[0]) <= pool_ids
    # LENS: 30 -> 15 -> 8 candidates, indication set 2 then 4
    fits = {f["method"]: f for f in lines(tmp_path / "run" / "fits.jsonl")}
    lens_trace = fits["lens"]["trace"]
    filtering = [r for r in lens_trace if "candidates" in r]
    search = [r for r in lens_trace if "search_iteration" in r]
    assert [(r["candidates"], r["indication_new"], r["kept"]) for r in filtering] == [(30, 2, 15), (15, 2, 8)]
    assert fits["lens"]["selection_calls"] == runs["lens"]["llm_calls"]["selection"]
    # 29 per round-1 example, 15 (14 if it is a survivor itself) per round-2 example, 4 zero-shot; then the
    # search generates each ordered list on the 3 held-out items (greedy: a repeated list is one call)
    stage1 = fits["lens"]["selection_calls"] - 3 * search[-1]["lists_scored"]
    assert [r["search_iteration"] for r in search] == [1, 2] and 58 + 28 + 4 <= stage1 <= 58 + 30 + 4
    # EXPLORA: 3 initial arms, then 1 swap-in + 1 probe per iteration, then U once more; a pull = 3 items
    steps = [r for r in fits["explora"]["trace"] if not r.get("summary")]
    assert [r["iteration"] for r in steps] == [0, 1, 2, 3]
    assert [r["pulls"] for r in steps] == [3, 5, 7, 9] and fits["explora"]["trace"][-1]["pulls"] == 11
    assert all(b["llm_calls"] >= a["llm_calls"] for a, b in itertools.pairwise(steps))
    # greedy decoding: a repeated pull of an arm is the same call, so calls = 3 x distinct arms pulled
    assert runs["explora"]["llm_calls"]["selection"] % 3 == 0 and runs["explora"]["llm_calls"]["selection"] <= 11 * 3
    assert runs["lens"]["warnings"] == [] and runs["explora"]["warnings"] == []
    assert fits["explora"]["trace"][-1]["summary"] and fits["explora"]["trace"][-1]["stopped_by"] == "iterations"


def test_budget_is_enforced_end_to_end(tmp_path, data_dir, fake):
    cfg = make_config(tmp_path, data_dir, methods=["lens", "explora"], tasks=["gsm8k"], n_test=2, n_val=3,
                      pool_size=30, method_params=PARAMS, llm_budget=10)
    results = Runner(cfg).run()
    for run in results["runs"]:
        assert run["llm_calls"]["selection"] <= 10 and run["budget_exhausted"], run["method"]
        assert run["n"] == 2  # still answers every test item with what it learned
        assert run["warnings"][0].startswith("stopped at --llm-budget 10") and len(run["warnings"]) == 2
    records = lines(tmp_path / "run" / "records.jsonl")
    assert all(len(r["demo_ids"]) == 5 for r in records)
    fits = {f["method"]: f for f in lines(tmp_path / "run" / "fits.jsonl")}
    assert fits["explora"]["trace"][-1]["stopped_by"] == "budget"
    assert fits["lens"]["selection_calls"] == 10  # LENS spends the whole budget on its cut-short batch
