"""LTR baselines: slates from rewards, rankers learning an order, padding, and the selectors end to end."""
import json

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr

import bench.runner as runner_mod
from bench.runner import Runner, expand_methods
from dearicl.losses import PADDED
from dearicl.ltr import LOSSES, MLPRanker, Slates, SlateTransformer, pair_features, slates_from_rewards, train_ranker
from fakes import FakeBackend, varied
from test_bandit_selectors import SMALL
from test_runner import lines, make_config


def test_slates_grade_each_query_and_mark_unobserved():
    q, a = np.eye(2, 3, dtype=np.float32), np.ones((4, 3), dtype=np.float32)
    sums = np.array([[0.8, 0.5], [0.6, 0.0], [0.0, 0.0], [0.7, 0.9]])  # [arms, queries]
    counts = np.array([[1, 1], [1, 0], [0, 0], [1, 1]])
    s = slates_from_rewards(q, a, sums, counts, label_scale=4.0)
    # arm 2 was never pulled: not in the slate; arm 1 was not observed on query 1: padded
    assert s.features.shape == (2, 3, 6) and s.labels.shape == (2, 3)
    np.testing.assert_allclose(s.labels[0], [4.0, 0.0, 2.0])  # 0.8, 0.6, 0.7 min-max scaled to [0, 4]
    np.testing.assert_allclose(s.labels[1], [0.0, PADDED, 4.0])  # 0.5, -, 0.9
    np.testing.assert_allclose(s.features[1, 0], [0, 1, 0, 1, 1, 1])  # [H(v), mean H(demos)]


def synthetic_slates(seed: int, n_q: int = 24, slate: int = 8, d: int = 6) -> tuple[Slates, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n_q, slate, d)).astype(np.float32)
    w = np.linspace(1.0, -1.0, d)
    utility = x @ w
    labels = np.round(4 * (utility - utility.min(1, keepdims=True)) / np.ptp(utility, axis=1, keepdims=True))
    return Slates(x, labels.astype(np.float32)), utility


@pytest.mark.parametrize("loss", sorted(LOSSES))
def test_each_loss_trains_a_ranker_that_recovers_the_order(loss):
    train, _ = synthetic_slates(0)
    test, utility = synthetic_slates(1)
    torch.manual_seed(0)
    model = MLPRanker(6, (32,))
    history = train_ranker(model, loss, train, epochs=60, batch_size=8, lr=1e-2, seed=0)
    assert history[-1] < history[0]
    with torch.no_grad():
        scores = model(torch.as_tensor(test.features)).numpy()
    rho = np.mean([spearmanr(s, u).statistic for s, u in zip(scores, utility)])
    assert rho > 0.7, rho  # an untrained ranker is near 0


def test_transformer_ignores_padded_slate_items():
    torch.manual_seed(0)
    model = SlateTransformer(6, (16,), n_layers=2, d_ff=32, heads=2, dropout=0.3).eval()
    x = torch.randn(1, 5, 6)
    padded = torch.zeros(1, 5, dtype=torch.bool)
    longer = torch.cat([x, torch.randn(1, 3, 6)], dim=1)
    mask = torch.tensor([[False] * 5 + [True] * 3])
    with torch.no_grad():
        np.testing.assert_allclose(model(x, padded)[0].numpy(), model(longer, mask)[0, :5].numpy(), atol=1e-5)


def test_pair_features_layout():
    q, a = np.arange(6, dtype=np.float32).reshape(2, 3), -np.arange(12, dtype=np.float32).reshape(4, 3)
    x = pair_features(q, a)
    assert x.shape == (2, 4, 6)
    np.testing.assert_array_equal(x[1, 2], np.concatenate([q[1], a[2]]))


def test_ltr_data_variants_expand():
    assert expand_methods(["pirank", "knn"], ("own", "dearicl")) == ["pirank", "pirank@dearicl-data", "knn"]
    assert expand_methods(["listnet"], ("dearicl",)) == ["listnet@dearicl-data"]
    everything = expand_methods(["all"])
    assert "pirank" in everything and not any(n.endswith("@dearicl-data") for n in everything)
    assert everything.index("zero-shot") < everything.index("knn") < everything.index("dearicl-dynamic")


LTR_SMALL = {"*": {**SMALL["*"], "train_arms": 3, "negatives": 2, "epochs": 3}}


def test_ltr_selectors_rank_dearicl_candidates(tmp_path, data_dir, monkeypatch):
    backend = FakeBackend(respond=varied, batch_size=8)
    monkeypatch.setattr(runner_mod, "make_backend", lambda spec: backend)
    methods = ["dearicl-dynamic", "pirank", "neuralndcg-norm"]
    cfg = make_config(tmp_path, data_dir, methods=methods, tasks=["gsm8k"], n_test=2, n_val=4, pool_size=40,
                      method_params=LTR_SMALL, ltr_data=("own", "dearicl"))
    results = Runner(cfg).run()
    runs = {r["method"]: r for r in results["runs"]}
    assert set(runs) == {"dearicl-dynamic", "pirank", "pirank@dearicl-data", "neuralndcg-norm",
                         "neuralndcg-norm@dearicl-data"}
    bandit_calls = runs["dearicl-dynamic"]["llm_calls"]["selection"]
    # trained on the DEARICL run's log: exactly the bandit's calls; own data: at most 5 more arms x 4 items
    assert runs["pirank@dearicl-data"]["llm_calls"]["selection"] == bandit_calls
    assert bandit_calls < runs["pirank"]["llm_calls"]["selection"] <= bandit_calls + 5 * 4
    fits = {f["method"]: f for f in lines(tmp_path / "run" / "fits.jsonl")}
    seen = fits["dearicl-dynamic"]["trace"][-1]
    ltr = fits["pirank"]["trace"][-1]
    assert ltr["ltr"] and ltr["epochs"] == 3 and ltr["training_arms"] >= 5
    assert fits["pirank@dearicl-data"]["trace"][-1]["ltr_data"] == "dearicl"
    assert seen["summary"] and fits["pirank"]["trace"][-2]["pulls"] == seen["pulls"]  # the same bandit run
    assert all(len(r["demo_ids"]) == 5 for r in lines(tmp_path / "run" / "records.jsonl"))


def test_ltr_ranks_exactly_dearicl_dynamic_candidates(data_dir, encoder, bertscore):
    from bench.llm.base import GenerationParams
    from bench.llm.client import LLMClient
    from bench.oracle import RewardOracle
    from bench.tasks import make_task
    from methods.base import FitContext, accepted_params, available, create

    task = make_task("gsm8k")
    splits = task.load_splits(data_dir, n_test=2, n_val=4, pool_size=40, seed=3)
    client = LLMClient(FakeBackend(respond=varied, batch_size=8), None, None, GenerationParams(16, 0.0))

    def fitted(name):
        oracle = RewardOracle(client, task, name, bertscore)
        ctx = FitContext(task=task, pool=splits.pool, validation=splits.validation, encoder=encoder, oracle=oracle,
                         seed=3)
        accepted = accepted_params(available()[name])
        return create(name, {k: v for k, v in LTR_SMALL["*"].items() if k in accepted}).fit(ctx)

    dearicl, ndcg = fitted("dearicl-dynamic"), fitted("ndcgloss2pp")
    np.testing.assert_array_equal(dearicl.candidates_, ndcg.candidates_)
    pool_ids = {it.id for it in splits.pool}
    candidate_sets = {tuple(d.id for d in ndcg.demos_of(int(a))) for a in ndcg.candidates_}
    for query in splits.test:
        chosen = tuple(d.id for d in ndcg.select(query))
        assert chosen in candidate_sets and set(chosen) <= pool_ids


class VectorEncoder:
    """Test queries carry their embedding in `meta`."""

    def encode_items(self, items, with_output=False):
        return np.array([it.meta["vec"] for it in items], dtype=np.float32)


def planted_world(seed: int = 0, n_arms: int = 12, d: int = 4):
    """Arm and query embeddings with a query-dependent utility (q W) . a: the best arm differs per query."""
    rng = np.random.default_rng(seed)
    arms = rng.normal(size=(n_arms, d)).astype(np.float32)
    w = rng.normal(size=(d, d))

    def queries(n, start):
        from bench.items import Item

        vecs = rng.normal(size=(n, d)).astype(np.float32)
        return [Item(f"q:{start + i}", "q", "0", meta={"vec": v}) for i, v in enumerate(vecs)]

    def utility(query):
        return (query.meta["vec"] @ w) @ arms.T

    return arms, queries, utility


def test_trained_ranker_follows_a_query_dependent_signal_and_untrained_does_not():
    from bench.items import Item
    from methods.base import create

    arms, queries, utility = planted_world()
    train = queries(40, 0)
    util = np.array([utility(q) for q in train])
    labels = 4 * (util - util.min(1, keepdims=True)) / np.ptp(util, axis=1, keepdims=True)
    slates = Slates(pair_features(np.array([q.meta["vec"] for q in train]), arms), labels.astype(np.float32))

    def ranker(trained: bool):
        sel = create("ndcgloss2pp", {"k": 1})
        torch.manual_seed(0)
        sel.model_ = sel.make_model(slates.features.shape[-1])
        if trained:
            losses = train_ranker(sel.model_, sel.loss(), slates, epochs=60, batch_size=8, lr=1e-3, seed=0)
            assert losses[-1] < losses[0]
        sel.model_.eval()
        sel.arm_emb_, sel.candidates_, sel.shift_, sel.scale_ = arms, np.arange(len(arms)), 0.0, 1.0
        sel.encoder_ = VectorEncoder()
        sel.demos_of = lambda arm: [Item(f"arm:{arm}", "d", "0")]
        return sel

    trained, untrained = ranker(True), ranker(False)
    unseen = queries(20, 100)
    best = [int(np.argmax(utility(q))) for q in unseen]
    pick = [int(trained.select(q)[0].id.split(":")[1]) for q in unseen]
    blind = [int(untrained.select(q)[0].id.split(":")[1]) for q in unseen]
    assert len(set(pick)) >= 3  # the choice depends on the query
    assert np.mean(np.array(pick) == best) >= 0.6 > np.mean(np.array(blind) == best) + 0.3
    assert sum(p != b for p, b in zip(pick, blind)) >= 10


def test_ltr_without_training_data_fails_its_row_and_the_run_exits_3(tmp_path, data_dir, monkeypatch, capsys):
    from bench.cli import main

    backend = FakeBackend(respond=varied, batch_size=8)
    monkeypatch.setattr(runner_mod, "make_backend", lambda spec: backend)
    out = tmp_path / "run"
    # 8 calls: the shared DEARICL bandit spends them (2 pulls x 4 items); pirank's own pulls get nothing
    code = main(["--methods", "dearicl-dynamic,pirank,knn", "--tasks", "gsm8k", "--n-test", "2", "--n-val", "4",
                 "--pool-size", "40", "--llm-budget", "8", "--temperature", "0", "--max-new-tokens", "8",
                 "--bertscore-model", "local", "--data-dir", str(data_dir), "--out", str(out), "--no-progress",
                 "--param", "*.n_arms=16", "--param", "*.m=3", "--param", "*.challengers=2",
                 "--param", "*.cold_start=2", "--param", "*.mc_passes=32", "--param", "*.hidden=[16]",
                 "--param", "pirank.epochs=3"])
    assert code == 3
    err = capsys.readouterr().err
    assert "error: pirank on gsm8k: pirank: no training data: 0 arm(s) observed in its own pulls" in err
    results = json.loads((out / "results.json").read_text())
    runs = {r["method"]: r for r in results["runs"]}
    assert runs["pirank"]["score"] is None and "no training data" in runs["pirank"]["error"]
    assert runs["knn"]["score"] is not None and runs["knn"]["error"] is None and runs["knn"]["n"] == 2
    assert runs["dearicl-dynamic"]["score"] is not None
    assert runs["dearicl-dynamic"]["warnings"][0].startswith("stopped at --llm-budget 8")
    report = (out / "report.md").read_text()
    assert "## Failed fits" in report and "- `pirank` on gsm8k: pirank: no training data" in report
    assert "| pirank " in report and "failed" in report.split("## Accuracy")[1].split("## ")[0]
    assert not [r for r in lines(out / "records.jsonl") if r["method"] == "pirank"]


def test_ltr_models_rank_in_eval_mode_and_all_candidates_option(data_dir, encoder, bertscore):
    from bench.llm.base import GenerationParams
    from bench.llm.client import LLMClient
    from bench.oracle import RewardOracle
    from bench.tasks import make_task
    from methods.base import FitContext, accepted_params, available, create

    task = make_task("gsm8k")
    splits = task.load_splits(data_dir, n_test=2, n_val=4, pool_size=40, seed=3)
    client = LLMClient(FakeBackend(respond=varied, batch_size=8), None, None, GenerationParams(16, 0.0))
    accepted = accepted_params(available()["listnet"])
    params = {k: v for k, v in LTR_SMALL["*"].items() if k in accepted}
    ctx = FitContext(task=task, pool=splits.pool, validation=splits.validation, encoder=encoder,
                     oracle=RewardOracle(client, task, "listnet", bertscore), seed=3)
    sel = create("listnet", {**params, "candidates": "all"}).fit(ctx)
    assert not sel.model_.training and not any(m.training for m in sel.model_.modules())  # dropout off
    assert sel.candidates_.tolist() == list(range(len(sel.prep_.arms)))
    assert sel.trace()[-1]["candidate_set"] == "all"
    first = [d.id for d in sel.select(splits.test[0])]
    assert first == [d.id for d in sel.select(splits.test[0])]  # deterministic at test time


def test_pirank_passes_its_settings_to_the_loss_and_builds_the_authors_mlp():
    """Mutation survivors: PiRank's own settings reach its loss, the shared ones reach the base, and the ranker
    is PiRank's 256-256-128-64 MLP."""
    from torch import nn

    from methods.pirank import PiRank

    ranker = PiRank(k=3, pirank_tau=2.5, ndcg_k=4, ste=False, epochs=7)
    assert ranker.k == 3 and ranker.epochs == 7
    assert ranker.loss().keywords == {"tau": 2.5, "k": 4, "ste": False}
    assert PiRank().loss().keywords == {"tau": 5.0, "k": 15, "ste": True}
    widths = [m.out_features for m in PiRank().make_model(10).modules() if isinstance(m, nn.Linear)]
    assert widths == [256, 256, 128, 64, 1]


# the paper's appendix table of LTR architectures (methods' docstrings): FC stem, layers, d_ff, heads, dropout
ARCHITECTURES = {"listnet": ((768, 128), 4, 512, 2, 0.3), "neuralndcg": ((768, 96), 4, 512, 4, 0.3),
                 "neuralndcg-norm": ((768, 96), 2, 384, 1, 0.1), "ndcgloss2pp": ((256, 512, 1024, 512, 256),)}


@pytest.mark.parametrize("name", sorted(ARCHITECTURES))
def test_each_ltr_ranker_builds_the_papers_architecture(name):
    from torch import nn

    from methods.base import available

    model = available()[name]().make_model(10)
    linears = [m.out_features for m in model.modules() if isinstance(m, nn.Linear)]
    if name == "ndcgloss2pp":  # an MLP
        assert linears == [*ARCHITECTURES[name][0], 1]
        return
    stem, n_layers, d_ff, heads, dropout = ARCHITECTURES[name]
    assert [m.out_features for m in model.stem if isinstance(m, nn.Linear)] == list(stem)
    blocks = list(model.encoder.layers)
    assert len(blocks) == n_layers
    assert {b.linear1.out_features for b in blocks} == {d_ff} and {b.self_attn.num_heads for b in blocks} == {heads}
    assert {b.dropout.p for b in blocks} == {dropout}
