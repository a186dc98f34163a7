"""UDR (methods/udr.py): BM25 on outputs, counted LM scoring, UDR's loss and sampling, re-mining, retrieval."""
import re

import numpy as np
import pytest
import torch

import bench.runner as runner_mod
import methods.udr  # noqa: F401  (registers "udr")
from bench.encoder import item_text
from bench.errors import ConfigError, FitFailed
from bench.items import Item
from bench.llm import GenerationParams, LLMClient
from bench.oracle import RewardOracle
from bench.runner import Runner
from bench.tasks import make_task
from dearicl.losses import PADDED, lambda_mrr_loss
from fakes import FakeBackend, varied
from methods import FitContext, create
from methods.udr import UDR, ScoredList, UDRTraining, encode_texts, rank_labels
from test_runner import lines, make_config

FRUIT = "apple banana cherry grape mango"
METAL = "iron copper zinc nickel cobalt"
FRUIT_MARKS, METAL_MARKS = ("zq", "kb", "pm"), ("vx", "tr", "hl")


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def toy_items(n: int, start: int = 0, split: str = "pool") -> list[Item]:
    """Even items explain with fruit words, odd ones with metal words; the question only carries a marker
    from the item's group (three per group), which only LM feedback can tie to the group."""
    items = []
    for i in range(start, start + n):
        fruit = i % 2 == 0
        mark = (FRUIT_MARKS if fruit else METAL_MARKS)[(i // 2) % 3]
        items.append(Item(f"toy/{split}:{i}", f"Task {mark}: how many units are there?", str(i),
                          f"We count {FRUIT if fruit else METAL} units.", split=split))
    return items


def make_ctx(encoder, pool, budget=None, seed=0, k=3, validation=()):
    backend = FakeBackend()  # loglik: fewer gold-output words missing from the prompt -> higher score
    client = LLMClient(backend, None, None, GenerationParams(max_new_tokens=8, temperature=0.0))
    oracle = RewardOracle(client, make_task("gsm8k"), "udr", None, budget=budget)
    ctx = FitContext(task=make_task("gsm8k"), pool=pool, validation=list(validation), encoder=encoder,
                     oracle=oracle, seed=seed, k=k, budget=budget)
    return ctx, backend


def fake_loglik(context: str, continuation: str) -> float:
    return -float(len(set(re.findall(r"\w+", continuation)) - set(re.findall(r"\w+", context)))) - 0.5


def pair_order_accuracy(sims: np.ndarray, scores: np.ndarray) -> float:
    """Share of candidate pairs with different LM scores that the similarities order the same way."""
    i, j = np.where(scores[:, None] > scores[None, :])
    return float(np.mean(sims[i] > sims[j]))


def held_out_accuracy(pool, queries, query_vectors, pool_vectors) -> float:
    """How well retrieval similarities order the pool by the fake LM's score, over unseen queries."""
    task = make_task("gsm8k")
    accs = []
    for query, q in zip(queries, query_vectors):
        scores = np.array([fake_loglik(task.prefix([c]) + task.format_query(query), " " + query.gold_output)
                           for c in pool])
        accs.append(pair_order_accuracy(pool_vectors @ q, scores))
    return float(np.mean(accs))


def order_accuracy_before_and_after(selector, pool, unseen, encoder) -> tuple[float, float]:
    """held_out_accuracy of the untuned encoder and of the selector's trained bi-encoders."""
    pool_texts = [item_text(it, with_output=True) for it in pool]
    queries = [item_text(q) for q in unseen]
    before = held_out_accuracy(pool, unseen, encoder.encode(queries), encoder.encode(pool_texts))
    after = held_out_accuracy(pool, unseen, encode_texts(selector.q_model_, queries),
                              encode_texts(selector.c_model_, pool_texts))
    return before, after


# ---- the loss and the sampling ------------------------------------------------------------------
def test_rank_labels_are_reciprocal_ranks_with_ties_sharing_the_better_rank():
    assert rank_labels(np.array([-3.0, -1.0, -3.0, -2.0])).tolist() == [1 / 3, 1.0, 1 / 3, 1 / 2]


def test_lambda_mrr_loss_hand_example_and_padding():
    # true order: item 0 > item 1 > item 2; predicted scores put item 2 first
    y_pred = torch.tensor([[1.0, 0.0, 2.0]])
    y_true = torch.tensor([[1.0, 0.5, 1 / 3]])
    # predicted positions: item 2 -> 1, item 0 -> 2, item 1 -> 3
    pairs = [(0, 1, abs(1 / 2 - 1 / 3)), (0, 2, abs(1 / 2 - 1)), (1, 2, abs(1 / 3 - 1))]
    expected = np.mean([w * np.log1p(np.exp(-(y_pred[0, i] - y_pred[0, j]).item())) for i, j, w in pairs])
    assert lambda_mrr_loss(y_pred, y_true).item() == pytest.approx(expected, rel=1e-6)
    padded_pred = torch.tensor([[1.0, 0.0, 2.0, 9.0]])
    padded_true = torch.tensor([[1.0, 0.5, 1 / 3, PADDED]])
    assert lambda_mrr_loss(padded_pred, padded_true).item() == pytest.approx(expected, rel=1e-6)
    good = lambda_mrr_loss(torch.tensor([[2.0, 1.0, 0.0]]), y_true)
    assert good.item() < expected  # the right order costs less


def test_sampling_takes_one_of_the_best_one_of_the_worst_and_the_rest_between():
    training = UDRTraining()
    scored = ScoredList("q", list(range(20)), [(str(i),) for i in range(20)], -np.arange(20.0))
    rng = np.random.default_rng(0)
    for _ in range(30):
        pick = training.sample(scored, rng)
        assert len(pick) == 8 and pick == sorted(pick) and len(set(pick)) == 8
        assert sum(i < 5 for i in pick) >= 1 and sum(i >= 15 for i in pick) >= 1
    short = ScoredList("q", [0, 1, 2], [("a",), ("b",), ("c",)], np.array([3.0, 2.0, 1.0]))
    assert training.sample(short, rng) == [0, 1, 2]
    nine = ScoredList("q", list(range(9)), [(str(i),) for i in range(9)], -np.arange(9.0))
    for _ in range(200):  # the best and worst bands overlap at item 4: it is never drawn twice
        pick = training.sample(nine, rng)
        assert len(pick) == len(set(pick)) == 8


# ---- candidates and LM scoring --------------------------------------------------------------------
def test_bm25_searches_gold_outputs_and_never_returns_the_query(encoder):
    pool = toy_items(10) + [Item("toy/pool:dup", "Task zq: how many units are there?", "0", "x"),
                            Item("toy/pool:rare", "Question about seals", "1", "We count walrus tusks.")]
    query = Item("toy/pool:q", "How long?", "1", "We count walrus tusks.")
    selector = UDR(k=3, n_candidates=5)
    selector.pool_ = pool + [query]
    candidates = selector.bm25_candidates(query)
    assert candidates[0].id == "toy/pool:rare"  # the only OUTPUT sharing the rare words ranks first
    assert query.id not in {c.id for c in candidates} and len({c.question for c in candidates}) == 5
    by_question = UDR(k=3, n_candidates=5, bm25_field="question")
    by_question.pool_ = pool + [query]
    assert by_question.bm25_candidates(query)[0].id != "toy/pool:rare"  # "How long?" shares nothing with it


def test_training_queries_are_pool_items_scored_one_call_per_pair(encoder, monkeypatch):
    pool = toy_items(12)
    validation = toy_items(2, start=100, split="validation")
    ctx, backend = make_ctx(encoder, pool, validation=validation)
    batches = []
    real = ctx.oracle.loglik
    monkeypatch.setattr(ctx.oracle, "loglik", lambda c, x: batches.append((list(c), list(x))) or real(c, x))
    selector = UDR(k=3, n_train_queries=4, n_candidates=5, rounds=1, epochs=1, batch_queries=2).fit(ctx)
    queries = ctx.rng("udr-queries").sample(pool, 4)
    assert list(selector.candidates_of_) == [q.id for q in queries]  # never a validation (or test) item
    assert ctx.oracle.calls == 4 * 5 == len(backend.prompts) == len(batches) * 5
    task = ctx.task
    for (contexts, continuations), query in zip(batches, queries):
        cands = selector.candidates_of_[query.id]
        assert contexts == [task.prefix([c]) + task.format_query(query) for c in cands]
        assert continuations == [" " + query.gold_output] * 5
        assert [selector.lm_scores_[(query.id, c.id)] for c in cands] == \
            [fake_loglik(c, x) for c, x in zip(contexts, continuations)]
    summary = selector.trace()[0]
    assert summary["llm_calls"] == 20 and summary["queries_scored"] == 4 and summary["rounds"] == 1
    # the scale printed beside the score: 1 epoch x ceil(4 queries / 2 a batch) Adam steps
    assert selector.scale() == {"training queries": 4, "candidates a query": 5.0, "rounds": 1,
                                "optimiser steps a round": 2}


def test_scale_is_the_fit_s_training_size_and_empty_before_a_fit():
    selector = UDR(k=2, epochs=3, batch_queries=2)
    assert selector.scale() == {}
    selector.summary_ = {"queries_scored": 5, "candidates_per_query": 3.46, "rounds": 2}
    assert selector.scale() == {"training queries": 5, "candidates a query": 3.5, "rounds": 2,
                                "optimiser steps a round": 3 * 3}  # 3 epochs x ceil(5 / 2) batches


def test_remining_proposes_the_nearest_pool_items_under_the_tuned_retriever(encoder, monkeypatch):
    """The round's query encoder against its candidate encoder over pool items WITH their outputs: an item
    whose question says nothing but whose output answers the query is mined first."""
    pool = [Item(f"toy/pool:{i}", f"Entry number {i}.", str(i), text) for i, text in enumerate(
        ["The red fruit is an apple.", "Iron is a metal.", "Copper conducts.", "Zinc coats steel.",
         "Nickel is silvery.", "Cobalt is blue."])]
    query = Item("toy/pool:q", "Which fruit is red?", "0", "apple")
    selector = UDR(k=2, n_candidates=2)
    selector.pool_ = pool + [query]
    selector.q_model_ = selector.c_model_ = encoder.trainable_copy()
    selector.candidates_of_ = {query.id: [pool[3]]}
    monkeypatch.setattr(selector, "score_new", lambda ctx, queries: None)
    selector.remine(None, [query])

    def nearest(with_output):
        emb = encode_texts(selector.c_model_, [item_text(it, with_output=with_output) for it in selector.pool_])
        sims = emb @ encode_texts(selector.q_model_, [item_text(query)])[0]
        return [selector.pool_[i].id for i in np.argsort(-sims, kind="stable") if selector.pool_[i] is not query][:2]

    assert nearest(True)[0] == "toy/pool:0" and nearest(True) != nearest(False)  # the outputs decide
    assert [c.id for c in selector.candidates_of_[query.id]] == ["toy/pool:3"] + nearest(True)  # merged, in order


def test_remining_scores_only_new_pairs_and_merges_the_lists(encoder):
    ctx, backend = make_ctx(encoder, toy_items(14))
    selector = UDR(k=2, n_train_queries=3, n_candidates=3, rounds=2, epochs=1, batch_queries=3).fit(ctx)
    assert len(backend.prompts) == len(set(backend.prompts)) == ctx.oracle.calls == len(selector.lm_scores_)
    assert 3 * 3 < ctx.oracle.calls <= 3 * 3 * 2  # the tuned retriever found candidates BM25 had not
    assert all(len(c) >= 3 for c in selector.candidates_of_.values())  # merged: BM25's plus the mined ones
    assert selector.trace()[0]["rounds"] == 2 and len(selector.round_losses_) == 2
    # retrieval searches the pool embedded as candidates are: the tuned candidate encoder, outputs included
    np.testing.assert_allclose(selector.pool_emb_, encode_texts(
        selector.c_model_, [item_text(it, with_output=True) for it in ctx.pool]), rtol=0, atol=1e-5)


# ---- training ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def trained(encoder):
    """UDR at its DEFAULT settings on a 24-item pool (every item a training query)."""
    # torch's own thread count (every core, or OMP_NUM_THREADS where a shared machine sets it): 126 s at one
    # thread, 78 s at two on 2 idle cores; the bars below hold at either count
    shared = encoder._load()
    params_before = {name: p.detach().clone() for name, p in shared.named_parameters()}
    probe_before = shared.encode(["a sentence nobody embedded before"], normalize_embeddings=True)
    ctx, backend = make_ctx(encoder, toy_items(24))
    selector = create("udr", {"k": 3}).fit(ctx)
    yield selector, ctx, backend, params_before, probe_before


@pytest.mark.slow
def test_defaults_train_a_retriever_that_follows_the_lm_on_unseen_queries(trained, encoder):
    selector, ctx, _, _, _ = trained
    assert selector.trace()[0]["rounds"] == 3 and selector.trace()[0]["queries_scored"] == 24
    unseen = toy_items(12, start=1000, split="test")
    before, after = order_accuracy_before_and_after(selector, ctx.pool, unseen, encoder)
    assert after > before + 0.2 and after > 0.8, (before, after)
    # the most similar demonstration (last) has the query's kind of explanation
    right = [(FRUIT in selector.select(q)[-1].rationale) == (q.question.split()[1].rstrip(":") in FRUIT_MARKS) for q in unseen]
    assert np.mean(right) >= 0.9
    losses = selector.round_losses_[-1]
    assert losses[-1] < losses[0]


def test_a_small_fit_learns_the_lm_order_on_unseen_queries(encoder):
    """Non-slow: one round on 12 queries already moves the retriever from the encoder's order (about 0.53 of
    pairs right, the markers mean nothing to it) to the LM's (about 0.99); a reversed or skipped training fails."""
    ctx, _ = make_ctx(encoder, toy_items(12))
    selector = UDR(k=3, n_train_queries=12, n_candidates=6, rounds=1, epochs=3, batch_queries=4).fit(ctx)
    unseen = toy_items(12, start=1000, split="test")
    before, after = order_accuracy_before_and_after(selector, ctx.pool, unseen, encoder)
    assert before < 0.6 and after > 0.85, (before, after)


@pytest.mark.slow
def test_shared_encoder_is_not_modified(trained, encoder):
    selector, _, _, params_before, probe_before = trained
    shared = encoder._load()
    assert selector.q_model_ is not shared and selector.c_model_ is not shared
    for name, p in shared.named_parameters():
        assert torch.equal(p.detach(), params_before[name]), name
    probe = shared.encode(["a sentence nobody embedded before"], normalize_embeddings=True)
    assert np.allclose(probe, probe_before, rtol=0, atol=1e-6)


@pytest.mark.slow
def test_select_returns_k_pool_items_most_similar_last(trained):
    selector, ctx, _, _, _ = trained
    query = toy_items(1, start=500, split="test")[0]
    demos = selector.select(query)
    assert len(demos) == 3 and all(d in ctx.pool for d in demos)
    sims = selector.pool_emb_ @ encode_texts(selector.q_model_, [item_text(query)])[0]
    chosen = [sims[ctx.pool.index(d)] for d in demos]
    assert chosen == sorted(chosen) and chosen[-1] == pytest.approx(sims.max())


def test_same_seed_same_fit(encoder):
    picks = []
    for _ in range(2):
        ctx, _ = make_ctx(encoder, toy_items(8), seed=5)
        selector = UDR(k=2, n_train_queries=3, n_candidates=3, rounds=1, epochs=1, batch_queries=2).fit(ctx)
        picks.append(([d.id for q in toy_items(3, start=20, split="test") for d in selector.select(q)],
                      selector.trace()[0]["last_loss"]))
    assert picks[0] == picks[1]


# ---- budgets and bad input ---------------------------------------------------------------------------
def test_budget_trains_on_what_was_scored_and_says_so(encoder):
    ctx, _ = make_ctx(encoder, toy_items(12), budget=2 * 4 + 1)
    selector = UDR(k=3, n_train_queries=4, n_candidates=4, rounds=3, epochs=1, batch_queries=4).fit(ctx)
    summary = selector.trace()[0]
    assert summary["queries_scored"] == 2 and summary["budget_exhausted"] and summary["rounds"] == 1
    assert ctx.oracle.calls == 8 and ctx.oracle.budget_exhausted
    assert any("1 of 3 training rounds" in w for w in selector.fit_warnings)
    assert any("2 of 4 training queries" in w for w in selector.fit_warnings)
    assert len(selector.select(toy_items(1, start=90, split="test")[0])) == 3


def test_no_scored_list_is_a_failed_fit_not_knn(encoder):
    ctx, backend = make_ctx(encoder, toy_items(12), budget=3)  # fewer than one query's candidates
    with pytest.raises(FitFailed, match=r"^udr: no training query was scored by the LM before --llm-budget ended, so "
                                        r"the retriever would be the untuned encoder \(KNN\); raise the budget$"):
        UDR(k=3, n_train_queries=2, n_candidates=4).fit(ctx)
    assert backend.prompts == []


@pytest.mark.parametrize("params", [{"n_candidates": 1}, {"epochs": 0}, {"lr": 0.0}, {"batch_queries": 0},
                                    {"rounds": 0}, {"scale": -1.0}, {"n_train_queries": 0}, {"epochs": 1.5},
                                    {"bm25_field": "answer"}, {"top_sample": 8}])
def test_bad_parameters_are_config_errors(params):
    with pytest.raises(ConfigError):
        create("udr", params)


def test_k_larger_than_pool_is_a_config_error(encoder):
    ctx, _ = make_ctx(encoder, toy_items(4))
    with pytest.raises(ConfigError):
        UDR(k=5).fit(ctx)


# ---- through the runner ------------------------------------------------------------------------------
def test_udr_runs_end_to_end(tmp_path, data_dir, monkeypatch):
    backend = FakeBackend(batch_size=8)
    monkeypatch.setattr(runner_mod, "make_backend", lambda spec: backend)
    cfg = make_config(tmp_path, data_dir, methods=["udr"], tasks=["gsm8k"], n_test=2, n_val=3, pool_size=30,
                      method_params={"udr": {"n_train_queries": 3, "n_candidates": 4, "rounds": 1, "epochs": 1,
                                             "batch_queries": 3}})
    results = Runner(cfg).run()
    run = results["runs"][0]
    assert run["method"] == "udr" and run["n"] == 2 and run["warnings"] == [] and run["error"] is None
    assert run["llm_calls"] == {"selection": 3 * 4, "inference": 2}
    records = lines(tmp_path / "run" / "records.jsonl")
    test_ids = {r["item_id"] for r in records}
    assert all(len(r["demo_ids"]) == 5 and not set(r["demo_ids"]) & test_ids for r in records)
    pool = make_task("gsm8k").load_splits(data_dir, n_test=2, n_val=3, pool_size=30, seed=1).pool
    assert {d for r in records for d in r["demo_ids"]} <= {it.id for it in pool}


def test_udr_on_dearicl_data_ranks_dearicl_candidates(tmp_path, data_dir, monkeypatch):
    from test_bandit_selectors import SMALL

    backend = FakeBackend(respond=varied, batch_size=8)
    monkeypatch.setattr(runner_mod, "make_backend", lambda spec: backend)
    params = {"*": {**SMALL["*"], "epochs": 2}, "udr": {"n_train_queries": 2, "n_candidates": 3, "rounds": 1},
              "udr@dearicl-data": {"sample_size": 3, "epochs": 1}}  # arms of 5 real demonstrations: long texts
    cfg = make_config(tmp_path, data_dir, methods=["dearicl-dynamic", "udr"], tasks=["gsm8k"], n_test=2, n_val=4,
                      pool_size=40, method_params=params, ltr_data=("own", "dearicl"))
    results = Runner(cfg).run()
    runs = {r["method"]: r for r in results["runs"]}
    assert set(runs) == {"dearicl-dynamic", "udr", "udr@dearicl-data"}
    # trained on the DEARICL run's log: no call of its own
    assert runs["udr@dearicl-data"]["llm_calls"]["selection"] == runs["dearicl-dynamic"]["llm_calls"]["selection"]
    fits = {f["method"]: f for f in lines(tmp_path / "run" / "fits.jsonl")}
    ltr = fits["udr@dearicl-data"]["trace"][-1]
    assert ltr["ltr_data"] == "dearicl" and ltr["epochs"] == 1 and ltr["candidate_set"] == "dearicl"
    assert ltr["loss"] == "udr (lambda-MRR + in-batch CE)"
    records = [r for r in lines(tmp_path / "run" / "records.jsonl") if r["method"] == "udr@dearicl-data"]
    assert len(records) == 2 and all(len(r["demo_ids"]) == 5 for r in records)


def test_udr_on_dearicl_data_names_its_loss_on_the_ltr_entry_only(monkeypatch):
    from methods.ltr_base import LTRSelector

    selector = create("udr@dearicl-data", {})
    monkeypatch.setattr(LTRSelector, "trace", lambda self: [{"round": 1, "loss": 0.5}, {"ltr": True, "loss": "x"}])
    assert selector.trace() == [{"round": 1, "loss": 0.5}, {"ltr": True, "loss": "udr (lambda-MRR + in-batch CE)"}]
    monkeypatch.setattr(LTRSelector, "trace", lambda self: [{"round": 1, "loss": 0.5}])
    assert selector.trace() == [{"round": 1, "loss": 0.5}]  # no LTR entry (a failed fit): nothing renamed
    monkeypatch.setattr(LTRSelector, "trace", lambda self: [])
    assert selector.trace() == []


def test_udr_on_dearicl_data_trains_on_the_log_s_mean_rewards_of_arms_with_outputs(monkeypatch):
    """The DEARICL log's (arm, validation query) mean rewards become one list a query with >= 2 arms seen; arms are
    embedded with their demonstrations' gold outputs; the count of arms ever pulled and the failure say so."""
    from types import SimpleNamespace

    import methods.udr as udr_mod
    from methods.udr import UDROnDearIclData

    pool = toy_items(6)
    validation = toy_items(3, start=100, split="validation")
    members = {0: pool[0:2], 1: pool[2:4], 2: pool[4:6], 3: pool[1:3]}
    sums = np.array([[0.5, 1.0, 0.0], [0.9, 0.0, 0.0], [0.0, 0.0, 0.0], [0.2, 3.0, 0.0]])
    counts = np.array([[1, 2, 0], [1, 0, 0], [0, 0, 0], [1, 3, 1]])  # arm 2 never pulled; query 2 saw one arm
    selector = UDROnDearIclData(k=2)
    monkeypatch.setattr(selector, "fit_neural", lambda ctx: SimpleNamespace(seen=[0, 1, 3]))
    monkeypatch.setattr(selector, "demos_of", lambda arm: members[arm])
    selector.surrogate_ = SimpleNamespace(reward_sum=sums, reward_count=counts)
    trained = {}
    monkeypatch.setattr(selector.training, "train",
                        lambda model, lists, seed: trained.setdefault("lists", lists) and (None, None, [1.0]))
    monkeypatch.setattr(udr_mod, "embed_candidates", lambda model, texts: torch.zeros(len(texts), 4))
    ctx = SimpleNamespace(validation=validation, seed=0, encoder=SimpleNamespace(trainable_copy=lambda: None))
    selector.fit(ctx)
    lists = trained["lists"]
    assert [(s.query_text, s.keys) for s in lists] == [(item_text(validation[0]), [1, 0, 3]),
                                                       (item_text(validation[1]), [3, 0])]  # best first
    np.testing.assert_allclose(lists[0].scores, [0.9, 0.5, 0.2])
    np.testing.assert_allclose(lists[1].scores, [1.0, 0.5])
    assert lists[0].texts[0] == tuple(item_text(d, with_output=True) for d in members[1])
    assert all("We count" in text for text in lists[0].texts[0])  # the gold output is in the arm's text
    assert selector.training_arms_ == 3
    assert any("trained on 2 of 3 validation lists" in w for w in selector.fit_warnings)
    selector.surrogate_ = SimpleNamespace(reward_sum=sums, reward_count=np.array([[1, 0, 0]] + [[0, 0, 0]] * 3))
    with pytest.raises(FitFailed, match=r"no training data: 1 arm\(s\) in the DEARICL run's log, and a list needs "
                                        r"two; raise --llm-budget"):
        selector.fit(ctx)


def test_a_pool_under_three_items_is_a_config_error(encoder):
    ctx, backend = make_ctx(encoder, toy_items(2), k=1)
    with pytest.raises(ConfigError, match=r"^udr needs a pool of at least 3 items, got 2$"):
        UDR(k=1).fit(ctx)
    assert backend.prompts == []


def test_a_query_with_two_scored_candidates_is_a_training_list():
    """Two scored candidates make one pair to learn from: the list is kept, best first; one alone is not."""
    pool = toy_items(4)
    selector = UDR(k=2)
    selector.candidates_of_ = {"q1": pool[:2], "q2": pool[2:4]}
    selector.lm_scores_ = {("q1", pool[0].id): -2.0, ("q1", pool[1].id): -1.0, ("q2", pool[2].id): -1.5}
    queries = [Item("q1", "first?", "1", "one"), Item("q2", "second?", "2", "two")]
    (only,) = selector.scored_lists(queries)
    assert only.keys == [pool[1].id, pool[0].id] and only.scores.tolist() == [-1.0, -2.0]


def test_udr_on_dearicl_data_keeps_its_parameters():
    """Defaults as published (the trainer's, read at run time, not the signature) and a `candidates` given."""
    selector = create("udr@dearicl-data", {})
    assert (selector.training.rank_loss_factor, selector.training.scale, selector.training.top_k) == (4.0, 20.0, 5)
    assert selector.candidates == "dearicl" and create("udr@dearicl-data", {"candidates": "all"}).candidates == "all"
