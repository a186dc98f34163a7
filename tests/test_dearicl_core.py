"""The bandit core: linear algebra, widths, stopping, the relaxed-NDCG loss, budget, top-m correctness."""
import math

import numpy as np
import pytest
import torch

from bench.errors import BudgetExhausted, ConfigError
from dearicl.arms import arm_embeddings, build_arms, slot_similarity_features
from dearicl.bandit import BanditConfig, GapIndexTopM, gaps_covered
from dearicl.environments import LinearEnvironment
from dearicl.losses import neural_sort, relaxed_ndcg_loss
from dearicl.surrogates import LinearSurrogate, NeuralConfig, NeuralSurrogate, Surrogate, sherman_morrison


def test_sherman_morrison_matches_direct_inverse():
    rng = np.random.default_rng(0)
    v = np.eye(4) * 0.7
    v_inv = np.linalg.inv(v)
    for _ in range(25):
        x = rng.normal(size=4)
        v += np.outer(x, x)
        v_inv = sherman_morrison(v_inv, x)
    np.testing.assert_allclose(v_inv, np.linalg.inv(v), rtol=1e-9, atol=1e-12)


def test_linear_estimate_is_least_squares():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(6, 3))
    s = LinearSurrogate(x, reg=0.5)
    ys = []
    for a in [0, 1, 2, 3, 4, 5, 0, 2]:
        y = rng.normal()
        ys.append((a, y))
        s.observe(a, np.array([y]))
    s.update()
    design = np.array([x[a] for a, _ in ys])
    target = np.array([y for _, y in ys])
    ridge = np.linalg.solve(design.T @ design + 0.5 * np.eye(3), design.T @ target)
    np.testing.assert_allclose(s.theta, ridge, atol=1e-10)


@pytest.mark.parametrize("beta", ["heuristic", "frequentist", "lucb1"])
def test_linear_widths_shrink_with_pulls(beta):
    x = np.array([[1.0, 0.0], [0.0, 1.0], [0.7, 0.7]])
    s = LinearSurrogate(x, reg=1.0, beta=beta)
    t = 10
    before = s.widths(np.array([0]), np.array([1]), t)[0, 0]
    for _ in range(20):
        s.observe(0, np.array([1.0]))
        s.observe(1, np.array([0.0]))
    after = s.widths(np.array([0]), np.array([1]), t)[0, 0]
    assert after < before / 3
    assert s.widths(np.array([2]), np.array([2]), t)[0, 0] == pytest.approx(0.0)


def test_heuristic_beta_value():
    s = LinearSurrogate(np.eye(2), sigma=0.5, delta=0.05, beta="heuristic")
    t = 100
    assert s.multiplier(t) == pytest.approx(0.5 * math.sqrt(2 * math.log((math.log(t) + 1) / 0.05)))


def test_lucb1_and_frequentist_multipliers_are_their_published_radii():
    """LUCB1's beta(t) = log(5 K t^4 / (4 delta)); Abbasi-Yadkori's radius sigma sqrt(2 log(1/delta) + d log(1 + t L^2 /
    (lambda d))) + sqrt(lambda) S, with L the largest arm norm (row-wise) and S the theta bound; t is clamped at 1."""
    x = np.array([[3.0, 4.0], [1.0, 0.0], [0.0, 2.0]])  # largest row norm 5 (the whole matrix's norm is sqrt(30))
    lucb1 = LinearSurrogate(x, sigma=0.3, delta=0.1, beta="lucb1")
    assert lucb1.multiplier(7) == pytest.approx(0.3 * math.sqrt(2 * math.log(5 * 3 * 7**4 / (4 * 0.1))))
    assert lucb1.multiplier(0) == pytest.approx(0.3 * math.sqrt(2 * math.log(5 * 3 / (4 * 0.1))))
    radius = 0.3 * math.sqrt(2 * math.log(1 / 0.1) + 2 * math.log(1 + 7 * 25 / (2.0 * 2)))
    frequentist = LinearSurrogate(x, reg=2.0, sigma=0.3, delta=0.1, beta="frequentist", theta_bound=1.5)
    assert frequentist.multiplier(7) == pytest.approx(radius + math.sqrt(2.0) * 1.5)
    default_bound = LinearSurrogate(x, reg=2.0, sigma=0.3, delta=0.1, beta="frequentist")  # S = 1 unless set
    assert default_bound.multiplier(7) == pytest.approx(radius + math.sqrt(2.0))
    heuristic = LinearSurrogate(x, sigma=0.3, delta=0.1)
    assert heuristic.multiplier(0) == heuristic.multiplier(1) == pytest.approx(0.3 * math.sqrt(2 * math.log(10)))
    with pytest.raises(ConfigError, match="^unknown beta 'bayes'; choose one of heuristic, frequentist, lucb1$"):
        LinearSurrogate(x, beta="bayes")


def test_linear_state_before_and_after_pulls():
    """Before any update every estimate is 0; widths are multiplier * ||x_i - x_j||_{V^-1} for every pair; the
    variance rule pulls the pair's arm with the larger ||x||_{V^-1}."""
    rng = np.random.default_rng(5)
    x = rng.normal(size=(6, 3))
    s = LinearSurrogate(x, reg=0.7, beta="lucb1")
    np.testing.assert_array_equal(s.means(np.arange(6)), np.zeros(6))
    for a in (0, 0, 0, 2, 5):
        s.observe(a, rng.random(4))
    v_inv = np.linalg.inv(0.7 * np.eye(3) + sum(np.outer(x[a], x[a]) for a in (0, 0, 0, 2, 5)))
    rows, cols = np.array([0, 3, 5]), np.array([1, 2, 4, 5])
    direct = [[s.multiplier(9) * math.sqrt((x[i] - x[j]) @ v_inv @ (x[i] - x[j])) for j in cols] for i in rows]
    np.testing.assert_allclose(s.widths(rows, cols, 9), direct, rtol=1e-9, atol=1e-12)
    outcomes = set()
    for b in range(6):
        for c in range(6):
            if b != c:
                larger = b if x[b] @ v_inv @ x[b] >= x[c] @ v_inv @ x[c] else c
                assert s.pick(b, c, "variance") == [larger]
                outcomes.add(larger == b)
    assert outcomes == {True, False}  # both sides of the rule were exercised


def test_lingape_greedy_rule_minimises_the_updated_norm():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(7, 3)) * np.array([0.3, 0.5, 1.0, 1.5, 2.0, 3.0, 5.0])[:, None]  # norms far apart
    # every arm seen once; two arms seen, so x^T V^-1 x differs a lot; none (the first pick, where the 1 + x^T V^-1 x
    # of the rank-one update decides between arms)
    for reg, pulled in ((0.5, range(7)), (0.5, (6, 2)), (1.0, ())):
        s = LinearSurrogate(x, reg=reg)
        for a in pulled:
            s.observe(a, np.array([0.0]))
        for b, c in [(b, c) for b in range(7) for c in range(7) if b != c]:  # every pair: no lucky tie
            y = x[b] - x[c]
            direct = [y @ np.linalg.inv(np.linalg.inv(s.v_inv) + np.outer(x[a], x[a])) @ y for a in range(7)]
            assert s.pick(b, c, "greedy") == [int(np.argmin(direct))]
    assert s.pick(1, 4, "both") == [1, 4]


def separated_instance():
    # 8 arms on the first axis with well separated means, theta = e1: top-3 = arms 0, 1, 2
    means = np.array([1.0, 0.9, 0.8, 0.3, 0.2, 0.1, 0.0, -0.1])
    x = np.stack([means, np.linspace(0, 0.1, 8)], axis=1)
    return x, np.array([1.0, 0.0])


def test_top_m_correct_on_a_well_separated_linear_instance():
    x, theta = separated_instance()
    wrong, pulls = 0, []
    for run in range(20):
        env = LinearEnvironment(x, theta, noise=0.1, rng=np.random.default_rng(run))
        s = LinearSurrogate(x, reg=(0.1 / 20) ** 2, sigma=0.1, beta="heuristic")
        res = GapIndexTopM(env, s, BanditConfig(m=3, challengers=5, epsilon=0.0, cold_start="all", seed=run)).run()
        wrong += set(res.top_m) != {0, 1, 2}
        pulls.append(res.pulls)
        assert res.stopped_by == "gap"
        assert res.top_m == [0, 1, 2]  # ordered by estimate too
    assert wrong == 0 and np.mean(pulls) < 2000


def test_stopping_rule_and_trace():
    x, theta = separated_instance()
    env = LinearEnvironment(x, theta, noise=0.1, rng=np.random.default_rng(0))
    # a huge epsilon stops at the first round, before any adaptive pull
    res = GapIndexTopM(env, LinearSurrogate(x), BanditConfig(m=3, epsilon=1e9, cold_start=2, seed=0)).run()
    assert res.stopped_by == "gap" and res.rounds == 1 and res.pulls == 2
    env = LinearEnvironment(x, theta, noise=0.1, rng=np.random.default_rng(0))
    res = GapIndexTopM(env, LinearSurrogate(x, reg=1e-4, sigma=0.1),
                       BanditConfig(m=3, epsilon=0.0, cold_start="all", seed=0)).run()
    rows = [r for r in res.trace if "gap_index" in r]
    assert rows[-1]["gap_index"] <= 0.0 < rows[0]["gap_index"]
    assert all(r["regret_kind"] == "true" and r["simple_regret"] >= -1e-12 for r in rows)
    assert rows[-1]["simple_regret"] == pytest.approx(0.0)
    assert {"round", "pulls", "llm_calls", "seconds_outside_llm"} <= set(rows[0])


class CappedEnv(LinearEnvironment):
    def __init__(self, *a, cap, **kw):
        super().__init__(*a, **kw)
        self.cap, self.n = cap, 0

    def pull(self, arm):
        if self.n >= self.cap:
            raise BudgetExhausted("cap")
        self.n += 1
        return super().pull(arm)


def test_budget_stops_the_loop_and_keeps_what_it_has():
    x, theta = separated_instance()
    env = CappedEnv(x, theta, noise=0.3, rng=np.random.default_rng(0), cap=10)
    res = GapIndexTopM(env, LinearSurrogate(x, sigma=2.0), BanditConfig(m=3, epsilon=0.0, cold_start="all", seed=0)).run()
    assert res.stopped_by == "budget" and res.pulls == 10 and len(res.top_m) == 3
    env = LinearEnvironment(x, theta, noise=0.3, rng=np.random.default_rng(0))
    res = GapIndexTopM(env, LinearSurrogate(x, sigma=2.0),
                       BanditConfig(m=3, epsilon=0.0, cold_start=2, max_pulls=5, seed=0)).run()
    assert res.stopped_by == "max_pulls" and res.pulls == 5


def test_bad_config():
    with pytest.raises(ConfigError, match="unknown selection rule"):
        BanditConfig(rule="psychic")
    x, theta = separated_instance()
    with pytest.raises(ConfigError, match="top-m needs more arms"):
        GapIndexTopM(LinearEnvironment(x, theta, 0.1, np.random.default_rng(0)), LinearSurrogate(x), BanditConfig(m=8))
    with pytest.raises(ConfigError, match="unknown beta"):
        LinearSurrogate(x, beta="bayes")


# ---- relaxed NDCG ------------------------------------------------------------------------------

def neural_sort_by_hand(s, tau):
    """Grover et al. 2019, eq. (5), written out in float64 loops."""
    n = len(s)
    out = np.zeros((n, n))
    for i in range(1, n + 1):
        logits = [((n + 1 - 2 * i) * s[j] - sum(abs(s[j] - s[l]) for l in range(n))) / tau for j in range(n)]
        e = np.exp(np.array(logits) - max(logits))
        out[i - 1] = e / e.sum()
    return out


@pytest.mark.parametrize("knob, choices", [("estimate", "dropout-off, mc-mean"),
                                           ("width_schedule", "constant, inverse-sqrt, sqrt-log"),
                                           ("log_k", "compared, arms"), ("mc_draws", "per-call, per-round")])
def test_a_bad_neural_knob_is_one_line_naming_its_choices(knob, choices):
    with pytest.raises(ConfigError, match=f"^unknown {knob} 'x'; choose one of {choices}$"):
        NeuralConfig(**{knob: "x"})


def test_neural_sort_matches_formula_and_hard_sort_limit():
    s = np.array([0.3, -1.2, 2.0, 0.9])
    got = neural_sort(torch.tensor(s[None, :]), tau=0.7)[0].numpy()
    np.testing.assert_allclose(got, neural_sort_by_hand(s, 0.7), atol=1e-12)
    np.testing.assert_allclose(got.sum(axis=1), 1.0)
    hard = neural_sort(torch.tensor(s[None, :]), tau=1e-3)[0].numpy()
    np.testing.assert_allclose(hard, np.eye(4)[np.argsort(-s)], atol=1e-6)


def test_relaxed_ndcg_loss_hand_value():
    s = np.array([0.5, 0.1, 0.9])
    y = np.array([0.2, 0.9, 0.4])
    p = neural_sort_by_hand(s, 1.0)
    gains = 2 ** y - 1
    disc = 1 / np.log2(np.arange(2, 5))
    dcg = (p @ gains * disc).sum()
    idcg = (np.sort(gains)[::-1] * disc).sum()
    loss = relaxed_ndcg_loss(torch.tensor(s[None, :]), torch.tensor(y[None, :]), tau=1.0)
    assert loss.item() == pytest.approx(1 - dcg / idcg, abs=1e-12)
    # a perfect ranking at low temperature has loss ~0
    perfect = relaxed_ndcg_loss(torch.tensor([[3.0, 1.0, 2.0]]), torch.tensor([[0.9, 0.1, 0.5]]), tau=1e-3)
    assert perfect.item() == pytest.approx(0.0, abs=1e-6)


def test_relaxed_ndcg_padding_is_ignored():
    s = torch.tensor([[0.5, 0.1, 0.9, 7.0]], dtype=torch.float64)
    y = torch.tensor([[0.2, 0.9, 0.4, -1.0]], dtype=torch.float64)
    unpadded = relaxed_ndcg_loss(s[:, :3], y[:, :3])
    assert relaxed_ndcg_loss(s, y).item() == pytest.approx(unpadded.item(), abs=1e-9)


def test_relaxed_ndcg_gradcheck():
    s = torch.tensor([[0.5, 0.1, 0.9], [0.2, -0.3, 0.0]], dtype=torch.float64, requires_grad=True)
    y = torch.tensor([[0.2, 0.9, 0.4], [0.7, 0.1, -1.0]], dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda t: relaxed_ndcg_loss(t, y, tau=0.8), (s,))


# ---- the neural surrogate ----------------------------------------------------------------------

def small_world(seed=0, n_pool=40, d=8, n_q=6):
    rng = np.random.default_rng(seed)
    demo = rng.normal(size=(n_pool, d))
    demo /= np.linalg.norm(demo, axis=1, keepdims=True)
    q = rng.normal(size=(n_q, d))
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    arms = build_arms(demo, 20, 3, seed)
    return arms, demo, q


def test_arms_one_example_per_cluster_and_features():
    arms, demo, q = small_world()
    assert arms.members.shape == (20, 3) and len({tuple(a) for a in arms.members}) == 20
    for slot in range(3):
        assert len(set(arms.clusters[arms.members[:, slot]])) == 1  # slot j always from cluster j
    feats = slot_similarity_features(arms, demo, q)
    assert feats.shape == (20, 3)
    np.testing.assert_allclose(feats[0, 1], (demo[arms.members[0, 1]] @ q.T).mean())
    np.testing.assert_allclose(arm_embeddings(arms, demo)[2], demo[arms.members[2]].mean(axis=0))


def test_neural_width_terms_and_learning():
    arms, demo, q = small_world()
    cfg = NeuralConfig(hidden=(16,), mc_passes=64, epochs_per_round=20, lr=1e-2, seed=0)
    s = NeuralSurrogate(q, arm_embeddings(arms, demo), delta=0.05, config=cfg)
    rows, cols = np.array([0, 1]), np.array([2, 3, 4])
    w0 = s.widths(rows, cols, 1)
    big_k = 5
    bernstein = 4 * math.log(2 * big_k**2 / 0.05) / (3 * 64)
    assert w0.shape == (2, 3) and np.all(w0 >= bernstein - 1e-12)
    # learn a ranking where arm 0 is good and arm 1 bad on every query
    for _ in range(3):
        s.observe(0, np.full(len(q), 0.9))
        s.observe(1, np.full(len(q), 0.1))
        s.observe(2, np.full(len(q), 0.5))
        s.update()
        s.end_round(np.arange(5))
    mu = s.means(np.array([0, 1, 2]))
    assert mu[0] > mu[2] > mu[1]
    assert s.stability >= 0 and all(v >= 0 for v in s.bias.values())
    # the width is exactly the sum of its terms: MC-dropout variance, stability, both biases, Bernstein
    s.cfg.mc_passes, s.mc_cache = 512, None
    y = s.mc_samples(np.array([0, 1, 2, 3, 4]))
    var = (y[:, rows][:, :, None] - y[:, cols][:, None, :]).var(axis=0)
    log_term = math.log(2 * big_k**2 / 0.05)
    bias = np.array([s._bias(a) for a in rows])[:, None] + np.array([s._bias(a) for a in cols])[None, :]
    expected = np.sqrt(2 * var * log_term / 512) + s.stability + bias + 4 * log_term / (3 * 512)
    np.testing.assert_allclose(s.widths(rows, cols, 1), expected, rtol=1e-9)
    scores = s.rank_scores(q[0], np.array([0, 1, 2]))
    assert np.argmax(scores) == 0


def test_fast_ranking_equals_the_network():
    arms, demo, q = small_world()
    s = NeuralSurrogate(q, arm_embeddings(arms, demo), config=NeuralConfig(hidden=(16, 8), seed=1))
    s.observe(0, np.full(len(q), 0.9))
    s.observe(3, np.full(len(q), 0.2))
    s.update()
    cands = np.arange(len(arms))
    with torch.no_grad():
        reference = s.logits(cands, torch.as_tensor(q[:1], dtype=torch.float32)).squeeze(-1).numpy()
    np.testing.assert_allclose(s.rank_scores(q[0].astype(np.float32), cands), reference, atol=1e-5)
    s.observe(5, np.full(len(q), 0.5))
    s.update()  # a retrained model must not be ranked with stale frozen weights
    with torch.no_grad():
        reference = s.logits(cands, torch.as_tensor(q[:1], dtype=torch.float32)).squeeze(-1).numpy()
    np.testing.assert_allclose(s.rank_scores(q[0].astype(np.float32), cands), reference, atol=1e-5)


def test_neural_width_drops_its_placeholders_but_does_not_shrink_with_pulls():
    """The paper's W_t: placeholders (stability M, biases M/2) until measured; after that its terms measure
    MC-dropout noise and training drift, not estimation error, so more pulls do not narrow it."""
    arms, demo, q = small_world()
    s = NeuralSurrogate(q, arm_embeddings(arms, demo), config=NeuralConfig(hidden=(16,), mc_passes=256, seed=2))
    rows, cols = np.array([0, 1]), np.array([2, 3])
    start = s.widths(rows, cols, 1).mean()
    assert start >= 1.0 + 0.5 + 0.5  # stability M and two unknown biases M/2 before any evidence
    rng = np.random.default_rng(0)
    quality = rng.uniform(0.2, 0.9, len(arms))
    widths = {}
    for t in range(60):
        arm = t % 8
        s.observe(arm, np.clip(quality[arm] + rng.normal(0, 0.05, len(q)), 0, 1))
        s.update()
        s.end_round(np.arange(8))
        widths[t + 1] = s.widths(rows, cols, t + 1).mean()
    assert widths[5] < 0.1 * start and s.stability < 0.01  # measured terms replaced the placeholders
    assert widths[60] > 0.5 * widths[5]  # 12x the evidence, no comparable narrowing


def test_observed_simple_regret_hand_example():
    class NoTruth:
        n_arms, true_means = 6, None

    loop = GapIndexTopM(NoTruth(), LinearSurrogate(np.eye(6)), BanditConfig(m=2, challengers=1))
    loop.pulled = {0: 2, 1: 1, 3: 1, 4: 1}
    loop.observed_sum = {0: 1.2, 1: 0.4, 3: 0.9, 4: 0.1}  # observed means 0.6, 0.4, 0.9, 0.1
    # U = {1, 2}: one pulled member (0.4) against the best single observed mean (0.9)
    assert loop.simple_regret(np.array([1, 2])) == pytest.approx(0.5)
    # U = {0, 4}: mean(0.6, 0.1) against the best two observed (0.9, 0.6)
    assert loop.simple_regret(np.array([0, 4])) == pytest.approx(0.4)
    assert loop.simple_regret(np.array([0, 3])) == pytest.approx(0.0)  # U holds the two best observed arms
    assert np.isnan(loop.simple_regret(np.array([2, 5])))  # nothing of U observed yet
    assert loop.regret_kind() == "observed"


def test_mc_dropout_masks_are_paired_across_arms():
    """One mask per pass for every arm and query: two arms with the same features differ by exactly 0."""
    arms, demo, q = small_world()
    emb = arm_embeddings(arms, demo)
    emb[1] = emb[0]  # arm 1 is a copy of arm 0
    s = NeuralSurrogate(q, emb, config=NeuralConfig(hidden=(16, 8), dropout=0.3, mc_passes=64, seed=0))
    y = s.mc_samples(np.array([0, 1, 2]))
    np.testing.assert_array_equal(y[:, 0], y[:, 1])
    assert y[:, 0].std() > 0 and not np.allclose(y[:, 0], y[:, 2])  # passes differ; arms differ
    w = s.widths(np.array([0]), np.array([1, 2]), 1)
    bernstein = 4 * math.log(2 * 3**2 / 0.05) / (3 * 64)
    assert w[0, 0] == pytest.approx(s.stability + 2 * s._bias(0) + bernstein)  # no variance term left
    assert w[0, 1] > w[0, 0]


def test_stability_is_the_largest_drift_of_the_round():
    arms, demo, q = small_world()
    s = NeuralSurrogate(q, arm_embeddings(arms, demo), config=NeuralConfig(hidden=(8,), seed=0))
    s._before = {0: 0.5, 1: 0.5, 2: 0.4}
    s.means = lambda chosen: np.array([0.6, 0.45, 0.4])[: len(chosen)]
    s.end_round(np.array([0, 1, 2]))
    assert s.stability == pytest.approx(0.1)  # max(|0.1|, |-0.05|, 0), not their mean


def test_neural_training_sees_each_arms_mean_reward_per_query_once_an_epoch(monkeypatch):
    """update(): the loss gets, per batch, the network's scores of the batch's queries (in the batch's order) and each
    pulled arm's MEAN reward per query over its pulls; every query once an epoch; tau as configured."""
    import dearicl.losses as losses

    arms, demo, q = small_world(n_q=6)
    s = NeuralSurrogate(q, arm_embeddings(arms, demo),
                        config=NeuralConfig(hidden=(8,), dropout=0.0, epochs_per_round=2, batch_size=4, tau=0.5))
    rng = np.random.default_rng(1)
    first, second, other = rng.random(6), rng.random(6), rng.random(6)
    s.observe(3, first)
    s.observe(3, second)
    s.observe(7, other)  # pulled once: trained on too
    means = np.stack([(first + second) / 2, other], axis=1)  # [n_q, pulled arms 3 and 7]
    seen = []
    real = losses.relaxed_ndcg_loss

    def spy(scores, target, tau):
        queries = [int(np.argmin(np.abs(means - row).sum(axis=1))) for row in target.numpy()]
        np.testing.assert_allclose(target.numpy(), means[queries], rtol=1e-6)
        with torch.no_grad():  # dropout 0: the scores are the network's, for these queries in this order
            expected = s.model(s.pairs(np.array([3, 7]), s.q[queries])).squeeze(-1).T
        np.testing.assert_allclose(scores.detach().numpy(), expected.numpy(), rtol=1e-5, atol=1e-6)
        seen.append((queries, tau))
        return real(scores, target, tau=tau)

    monkeypatch.setattr(losses, "relaxed_ndcg_loss", spy)
    s.update()
    assert [len(batch) for batch, _ in seen] == [4, 2, 4, 2]  # 2 epochs of batches of 4 over 6 queries
    for epoch in (seen[:2], seen[2:]):
        assert sorted(sum((batch for batch, _ in epoch), [])) == list(range(6))
    assert {tau for _, tau in seen} == {0.5}


def test_neural_calibration_term_pulls_outputs_to_the_mean_rewards(monkeypatch):
    """With the ranking loss switched off, the MSE calibration term alone fits sigmoid(score) to the mean rewards."""
    import dearicl.losses as losses

    arms, demo, q = small_world(n_q=6)
    s = NeuralSurrogate(q, arm_embeddings(arms, demo), config=NeuralConfig(hidden=(16,), dropout=0.0, lr=0.02,
                                                                            epochs_per_round=300, batch_size=6))
    target = np.array([0.2, 0.8])
    s.observe(1, np.full(6, target[0]))
    s.observe(2, np.full(6, target[1]))
    monkeypatch.setattr(losses, "relaxed_ndcg_loss", lambda scores, truth, tau: 0.0 * scores.sum())
    s.update()
    np.testing.assert_allclose(s.means(np.array([1, 2])), target, atol=0.03)


def test_neural_training_draws_from_its_own_generator():
    """The batches' order comes from the surrogate's own seeded generator: two surrogates of one seed train alike
    whatever else draws from torch's global generator in between (dropout 0 here: training's dropout masks are drawn
    from the global generator, which the constructor seeds)."""
    arms, demo, q = small_world()
    outputs = []
    for noise in (0, 5):
        s = NeuralSurrogate(q, arm_embeddings(arms, demo),
                            config=NeuralConfig(hidden=(8,), dropout=0.0, batch_size=2, seed=3))
        s.observe(0, np.linspace(0, 1, len(q)))
        s.observe(4, np.linspace(1, 0, len(q)))
        torch.rand(noise)  # another user of the global generator
        s.update()
        outputs.append(s.means(np.arange(6)))
    np.testing.assert_array_equal(outputs[0], outputs[1])


def test_bias_of_an_arm_without_history_and_a_round_without_drift():
    """b_a of an arm never estimated twice is the largest bias seen (bias_init before any); a round whose arms had no
    estimate before the update leaves eps_stab as it was."""
    arms, demo, q = small_world()
    s = NeuralSurrogate(q, arm_embeddings(arms, demo), config=NeuralConfig(hidden=(8,), bias_init=0.3, seed=0))
    assert s._bias(5) == 0.3
    s.bias = {0: 0.1, 1: 0.2}
    assert (s._bias(0), s._bias(5)) == (0.1, 0.2)
    s.stability, s._before = 0.7, {}
    s.end_round(np.array([2, 3]))
    assert s.stability == 0.7


@pytest.mark.parametrize("schedule, factor", [("constant", lambda t: 1.0), ("inverse-sqrt", lambda t: 1 / math.sqrt(t)),
                                               ("sqrt-log", lambda t: math.sqrt(math.log(1 + t)))])
def test_the_open_knobs_of_the_width_set_its_starting_values_and_c_t(schedule, factor):
    """The paper leaves c_t ("annealed, user-specified") and the placeholders of eps_stab and b_a open: each is a
    NeuralConfig knob, and the width is exactly c_t * variance term + eps_stab + b_i + b_j + Bernstein term."""
    arms, demo, q = small_world()
    cfg = NeuralConfig(hidden=(16,), mc_passes=64, width_scale=2.0, width_schedule=schedule, stability_init=0.25,
                       bias_init=0.125, seed=0)
    s = NeuralSurrogate(q, arm_embeddings(arms, demo), config=cfg)
    rows, cols = np.array([0, 1]), np.array([2, 3])
    y = s.mc_samples(np.array([0, 1, 2, 3]))
    var = (y[:, rows][:, :, None] - y[:, cols][:, None, :]).var(axis=0)
    log_term = math.log(2 * 4**2 / 0.05)
    for t in (1, 9, 100):
        expected = (2.0 * factor(t) * np.sqrt(2 * var * log_term / 64) + 0.25 + 2 * 0.125
                    + 4 * log_term / (3 * 64))
        np.testing.assert_allclose(s.widths(rows, cols, t), expected, rtol=1e-9)
    with pytest.raises(ConfigError, match="width_schedule"):
        NeuralConfig(width_schedule="cosine")


def test_the_papers_k_in_the_width_is_every_arm_not_the_arms_compared():
    """log(2K^2/delta) with K = |A| (the paper's l.1295, log_k="arms") or K = the arms compared (the default): the
    variance and Bernstein terms scale by their log terms' ratio, and nothing else moves."""
    arms, demo, q = small_world()
    rows, cols = np.array([0, 1]), np.array([2, 3])
    widths = {}
    for log_k in ("compared", "arms"):
        cfg = NeuralConfig(hidden=(16,), mc_passes=64, stability_init=0.0, bias_init=0.0, log_k=log_k, seed=0)
        s = NeuralSurrogate(q, arm_embeddings(arms, demo), config=cfg)
        y = s.mc_samples(np.array([0, 1, 2, 3]))
        var = (y[:, rows][:, :, None] - y[:, cols][:, None, :]).var(axis=0)
        big_k = len(arms) if log_k == "arms" else 4
        log_term = math.log(2 * big_k**2 / 0.05)
        widths[log_k] = s.widths(rows, cols, 1)
        np.testing.assert_allclose(widths[log_k], np.sqrt(2 * var * log_term / 64) + 4 * log_term / (3 * 64),
                                   rtol=1e-9)
    assert len(arms) > 4 and np.all(widths["arms"] > widths["compared"])
    with pytest.raises(ConfigError, match="log_k"):
        NeuralConfig(log_k="all")


@pytest.mark.parametrize("hidden", [(16,), (16, 8), (16, 16, 8, 4)])
def test_buffered_mc_forward_equals_the_plain_forward_to_the_last_bits(hidden):
    """mc_samples' in-place, buffered forward gives the floats of the layer-by-layer forward with one mask per pass,
    for every depth and for arm sets that grow and shrink between calls (buffers reused), to 1e-6: bit for bit on
    AVX2, but MKL's AVX-512 kernels sum a contiguous W^T and nn.Linear's transposed view in different orders (1-ulp
    differences, 6e-8, seen on an AVX-512 machine); a wrong mask, scale or layer moves outputs by far more."""
    arms, demo, q = small_world()
    cfg = NeuralConfig(hidden=hidden, dropout=0.3, mc_passes=32, seed=3)

    def trained():  # built and trained one after the other: training's dropout draws from torch's global stream
        s = NeuralSurrogate(q, arm_embeddings(arms, demo), config=cfg)
        s.observe(0, np.full(len(q), 0.8))
        s.observe(2, np.full(len(q), 0.3))
        s.update()
        return s

    fast, plain = trained(), trained()

    def plain_forward(s, chosen):
        with torch.no_grad():
            x = s.model[:2](s.pairs(chosen)).unsqueeze(0)
            for layer in s.model[2:]:
                if isinstance(layer, torch.nn.Dropout):
                    keep = torch.rand((s.cfg.mc_passes, 1, 1, x.shape[-1]), generator=s.gen) >= layer.p
                    x = x * keep / (1.0 - layer.p)
                else:
                    x = layer(x)
            return torch.sigmoid(x.squeeze(-1)).mean(dim=-1).numpy().astype(np.float64)

    for chosen in (np.arange(6), np.array([1, 4]), np.arange(len(arms)), np.array([3, 0, 5])):
        fast.mc_cache = None
        np.testing.assert_allclose(fast.mc_samples(chosen), plain_forward(plain, chosen), rtol=0, atol=1e-6)


def test_mc_work_tensors_are_kept_only_while_small_and_until_ranking(monkeypatch):
    import dearicl.surrogates as surrogates

    arms, demo, q = small_world()
    s = NeuralSurrogate(q, arm_embeddings(arms, demo), config=NeuralConfig(hidden=(16, 8), mc_passes=16, seed=0))
    kept = s.mc_samples(np.arange(4))
    held = {name: t.data_ptr() for name, t in s._mc_buffers.items()}
    assert {name[0] for name in held} == {"drop", "linear"}  # small: held for the next call
    for narrower_or_equal in (np.arange(3), np.arange(4)):  # later calls write into the same tensors
        s.mc_cache = None
        s.mc_samples(narrower_or_equal)
        assert {name: t.data_ptr() for name, t in s._mc_buffers.items()} == held
    s.rank_scores(q[0].astype(np.float32), np.arange(4))
    assert not s._mc_buffers  # ranking: released
    s.mc_cache = None
    s.mc_samples(np.arange(4))
    held_bytes = 4 * sum(t.numel() for t in s._mc_buffers.values())  # float32
    monkeypatch.setattr(surrogates, "MC_BUFFER_KEEP_BYTES", held_bytes)  # exactly the limit: still held
    s.mc_cache = None
    s.mc_samples(np.arange(4))
    assert 4 * sum(t.numel() for t in s._mc_buffers.values()) == held_bytes
    monkeypatch.setattr(surrogates, "MC_BUFFER_KEEP_BYTES", held_bytes - 1)  # one byte over: released after the call
    s.mc_cache = None
    again = s.mc_samples(np.arange(4))
    assert s._mc_buffers == {} and again.shape == kept.shape
    s.mc_cache = None
    assert s.mc_samples(np.arange(4)).shape == kept.shape  # and the next call allocates afresh


def test_per_round_draws_give_every_estimate_of_a_round_the_same_passes_and_new_ones_after_an_update():
    """mc_draws="per-round" (the paper's l.1296-1297: N passes per arm at round t, rho_hat and V_ij from them): an arm's
    passes are the same in every call until the model changes, its first call equals a per-call draw (same masks),
    and an update draws new ones; per-call draws new masks for each new arm set."""
    arms, demo, q = small_world()
    made = {}
    for draws in ("per-call", "per-round"):
        cfg = NeuralConfig(hidden=(16, 8), dropout=0.3, mc_passes=64, mc_draws=draws, estimate="mc-mean", seed=0)
        made[draws] = NeuralSurrogate(q, arm_embeddings(arms, demo), config=cfg)
    first = {d: s.mc_samples(np.array([0, 1, 2])) for d, s in made.items()}
    np.testing.assert_allclose(first["per-round"], first["per-call"], rtol=0, atol=1e-6)  # the same masks drawn first
    s = made["per-round"]
    later = s.mc_samples(np.array([2, 4, 0]))  # arms 0 and 2 again, arm 4 new: all under the round's masks
    np.testing.assert_allclose(later[:, [2, 0]], first["per-round"][:, [0, 2]], rtol=0, atol=1e-6)
    np.testing.assert_allclose(s.means(np.array([4])), s.mc_samples(np.array([4])).mean(axis=0), rtol=0, atol=0)
    fresh_call = made["per-call"].mc_samples(np.array([2, 4, 0]))
    assert not np.allclose(fresh_call[:, [2, 0]], first["per-call"][:, [0, 2]])  # per-call: new passes
    with torch.no_grad():  # the same masks again, through a plain forward: arm 4's passes are right, not only cached
        x = s.model[:2](s.pairs(np.array([4]))).unsqueeze(0)
        masks = iter(s._round_masks)
        for layer in s.model[2:]:
            x = x * next(masks).unsqueeze(1) / (1 - layer.p) if isinstance(layer, torch.nn.Dropout) else layer(x)
        plain = torch.sigmoid(x.squeeze(-1)).mean(dim=-1).numpy()
    np.testing.assert_allclose(later[:, 1], plain[:, 0], rtol=0, atol=1e-6)
    s.observe(0, np.full(len(q), 0.8))
    s.update()
    after = s.mc_samples(np.array([0, 1, 2]))
    assert not np.allclose(after, first["per-round"])  # a new model state: new passes
    np.testing.assert_array_equal(s.mc_samples(np.array([1])), after[:, [1]])
    with pytest.raises(ConfigError, match="mc_draws"):
        NeuralConfig(mc_draws="per-epoch")


# ---- the loop, step by step, against Algorithm 1 written out by hand ------------------------------------------

class CountingSurrogate(Surrogate):
    """A surrogate whose state is plain counts, so a run's every number can be recomputed: the mean of each arm's
    pulled rewards after a prior pull of 0.5, and a width of 0.3 * sqrt(log(1 + t)) * (1/sqrt(1 + n_i) + 1/sqrt(1 +
    n_j)). It logs what the loop asks of it, in order."""

    def __init__(self, n_arms: int):
        self.n_arms = n_arms
        self.sums, self.counts = np.full(n_arms, 0.5), np.ones(n_arms)
        self.log: list[tuple] = []
        self.dtypes: set = set()

    def observe(self, arm, rewards):
        self.dtypes.add(rewards.dtype)
        self.sums[arm] += rewards.mean()
        self.counts[arm] += 1
        self.log.append(("observe", arm))

    def update(self):
        self.log.append(("update",))

    def means(self, arms):
        arms = np.asarray(arms)
        return self.sums[arms] / self.counts[arms]

    def widths(self, rows, cols, t):
        self.log.append(("widths", t, tuple(np.asarray(rows).tolist()), tuple(np.asarray(cols).tolist())))
        inv = 1 / np.sqrt(self.counts)
        return 0.3 * np.sqrt(np.log(1 + t)) * (inv[np.asarray(rows)][:, None] + inv[np.asarray(cols)][None, :])

    def pick(self, b, c, rule):
        if rule == "both":
            return [b, c]
        fewer = b if self.counts[b] <= self.counts[c] else c  # greedy: the less pulled of the pair
        return [fewer] if rule == "greedy" else [c if fewer == b else b]

    def end_round(self, arms):
        self.log.append(("end_round", tuple(np.asarray(arms).tolist())))


class CoinEnvironment:
    """Arm a pays 0/1 with probability p[a] on each of 3 queries (integers, as a table of 0/1 answers would); 2 LLM
    calls and 100 s of (counted, not spent) LLM time a pull; a cap raises BudgetExhausted as a live LLM budget does."""

    def __init__(self, p, seed, known_truth=True, cap=None):
        self.p, self.n_arms = np.asarray(p), len(p)
        self.true_means = self.p if known_truth else None
        self.rng, self.cap, self.pulls = np.random.default_rng(seed), cap, 0

    def pull(self, arm):
        if self.cap is not None and self.pulls >= self.cap:
            raise BudgetExhausted("cap")
        self.pulls += 1
        return (self.rng.random(3) < self.p[arm]).astype(int).tolist()

    def llm_calls(self):
        return 2 * self.pulls

    def llm_seconds(self):
        return 100.0 * self.pulls


def algorithm_1_by_hand(env, s, cfg):
    """Algorithm 1 with plain lists and loops (drawing from a generator seeded as the loop's, in the same order):
    what GapIndexTopM must do, step by step. Returns (top m, seen, pulls, rounds, stopped by, per-arm pulls, rows)."""
    rng, k = np.random.default_rng(cfg.seed), env.n_arms
    order = [int(a) for a in rng.permutation(k)]
    n_ch = min(cfg.challengers, k - cfg.m)
    upper, chall = order[:cfg.m], order[cfg.m:cfg.m + n_ch]
    seen, pulled, sums, rows, t = set(upper) | set(chall), {}, {}, [], 0

    def pull(arm):
        rewards = np.asarray(env.pull(arm), dtype=np.float64)
        s.observe(arm, rewards)
        pulled[arm] = pulled.get(arm, 0) + 1
        sums[arm] = sums.get(arm, 0.0) + rewards.mean()

    def n_pulls():
        return sum(pulled.values())

    def mean(a):
        return float(s.means(np.array([a]))[0])

    def regret():
        if env.true_means is not None:
            best = sorted(env.true_means, reverse=True)[:cfg.m]
            return sum(best) / cfg.m - sum(env.true_means[a] for a in upper) / cfg.m
        mine = [sums[a] / pulled[a] for a in upper if a in pulled]
        if not mine:
            return float("nan")
        best = sorted((sums[a] / pulled[a] for a in pulled), reverse=True)[:len(mine)]
        return sum(best) / len(best) - sum(mine) / len(mine)

    stopped, unchanged, previous = "max_rounds", 0, None
    try:
        cold = list(range(k)) if cfg.cold_start == "all" else [int(a) for a in rng.choice(k, cfg.cold_start, replace=False)]
        for arm in cold:
            if cfg.max_pulls is not None and n_pulls() >= cfg.max_pulls:
                break
            pull(arm)
        s.update()
        while t < cfg.max_rounds:
            t += 1
            weak = min(range(cfg.m), key=lambda i: (mean(upper[i]), i))  # the first of equal minima, as argmin
            strong = max(range(n_ch), key=lambda i: (mean(chall[i]), -i))
            if mean(chall[strong]) >= mean(upper[weak]):
                upper[weak], chall[strong] = chall[strong], upper[weak]
            outside = [a for a in range(k) if a not in upper and a not in chall]
            if outside:
                fresh = [int(a) for a in rng.choice(np.array(outside), min(n_ch, len(outside)), replace=False)]
                pool = chall + fresh
                chall = sorted(pool, key=lambda a: -mean(a))[:n_ch]  # Python's sort is stable, as kind="stable"
            seen |= set(chall)
            unchanged = unchanged + 1 if frozenset(upper) == previous else 0
            previous = frozenset(upper)
            w = s.widths(np.array(chall), np.array(upper), max(n_pulls(), 1))
            gap = [[mean(c) - mean(b) + w[i, j] for j, b in enumerate(upper)] for i, c in enumerate(chall)]
            b_idx = max(range(cfg.m), key=lambda j: (max(gap[i][j] for i in range(n_ch)), -j))
            c_idx = max(range(n_ch), key=lambda i: (gap[i][b_idx], -i))
            row = {"round": t, "gap_index": gap[c_idx][b_idx], "b": upper[b_idx], "ch": chall[c_idx],
                   "pulls": n_pulls(), "simple_regret": regret()}
            if env.true_means is not None:
                arms = sorted(set(upper) | set(chall))
                ww = s.widths(np.array(arms), np.array(arms), max(n_pulls(), 1))
                row["covered"] = all(abs((mean(a) - mean(b)) - (env.true_means[a] - env.true_means[b])) <= ww[i, j] + 1e-12
                                     for i, a in enumerate(arms) for j, b in enumerate(arms) if i != j)
            if row["gap_index"] <= cfg.epsilon and n_pulls() > 0 and unchanged >= cfg.patience:
                stopped = "gap"
                rows.append(row)
                break
            if cfg.max_pulls is not None and n_pulls() >= cfg.max_pulls:
                stopped = "max_pulls"
                rows.append(row)
                break
            for arm in ([int(rng.integers(k))] if cfg.rule == "random" else s.pick(row["b"], row["ch"], cfg.rule)):
                pull(arm)
            s.update()
            s.end_round(np.array(sorted(set(upper) | set(chall))))
            rows.append(row)
    except BudgetExhausted:
        stopped = "budget"
        if n_pulls():
            s.update()
    top = sorted(upper, key=lambda a: -mean(a))
    return top, sorted(seen), n_pulls(), t, stopped, pulled, rows


LOOP_CASES = {  # (arms' p, BanditConfig, environment options): each reaches another branch of the loop
    "greedy, known truth": (np.linspace(0.05, 0.95, 12), dict(m=3, challengers=4, epsilon=0.3, seed=0), {}),
    "no one outside U and C, cold start all, both": (np.linspace(0.1, 0.9, 9),
                                                     dict(m=4, challengers=5, epsilon=0.4, cold_start="all",
                                                          rule="both", seed=1), {}),
    "patience, variance, observed regret": (np.linspace(0.0, 1.0, 10), dict(m=2, challengers=3, epsilon=0.5,
                                                                            patience=3, rule="variance", seed=2),
                                            dict(known_truth=False)),
    "random rule, pull cap": (np.linspace(0.2, 0.8, 10), dict(m=3, challengers=2, epsilon=0.0, rule="random",
                                                               max_pulls=15, seed=3), {}),
    "the LLM budget runs out": (np.linspace(0.2, 0.8, 10), dict(m=3, challengers=2, epsilon=0.0, seed=4),
                                dict(cap=12)),
    "cold start 0": (np.linspace(0.2, 0.8, 7), dict(m=2, challengers=2, epsilon=1e9, cold_start=0, seed=5), {}),
    "round limit, tied arms": (np.full(8, 0.5), dict(m=3, challengers=3, epsilon=-1.0, max_rounds=6, seed=6), {}),
    "pull cap inside the cold start": (np.linspace(0.2, 0.8, 8), dict(m=3, challengers=2, epsilon=0.0,
                                                                       cold_start="all", max_pulls=3, seed=7), {}),
    "no LLM budget at all": (np.linspace(0.2, 0.8, 8), dict(m=3, challengers=2, seed=8), dict(cap=0)),
    # any gap passes, so the stop waits for U_t to stay the same for `patience` rounds after it last changed
    "patience decides the stop": (np.linspace(0.1, 0.9, 12), dict(m=3, challengers=3, epsilon=1e9, patience=4,
                                                                   seed=10), {}),
    # 0/1 arms: pulled members share a mean of 0.25 or 0.75 and unpulled ones the prior 0.5, so the final order
    # among U's ties is the stable one (U's own order), as Algorithm 1's output is read
    "ties in the final order": (np.tile([0.0, 1.0], 7), dict(m=10, challengers=2, epsilon=-1.0, max_rounds=3,
                                                             seed=11), {}),
}


@pytest.mark.parametrize("case", LOOP_CASES)
def test_the_loop_is_algorithm_1_step_by_step(case):
    """Every round's swap, challenger refresh, frontier (b_t, ch_t), gap index, stop test and pulls, and every number
    the result and trace report, against Algorithm 1 written out by hand on the same draws."""
    p, options, env_options = LOOP_CASES[case]
    cfg = BanditConfig(**options)
    loop_s, hand_s = CountingSurrogate(len(p)), CountingSurrogate(len(p))
    loop_env, hand_env = CoinEnvironment(p, seed=9, **env_options), CoinEnvironment(p, seed=9, **env_options)
    res = GapIndexTopM(loop_env, loop_s, cfg).run()
    top, seen, pulls, rounds, stopped, pulled, rows = algorithm_1_by_hand(hand_env, hand_s, cfg)
    assert (res.top_m, res.seen, res.pulls, res.rounds, res.stopped_by) == (top, seen, pulls, rounds, stopped)
    assert res.pulled == pulled and sum(res.pulled.values()) == res.pulls
    assert loop_s.log == hand_s.log  # the same pulls, refits, widths (at t = max(pulls, 1)) and round ends, in order
    assert loop_s.dtypes <= {np.dtype(np.float64)}  # integer answers reach the surrogate as floats
    assert len(res.trace) == len(rows)
    for got, want in zip(res.trace, rows):
        assert got["round"] == want["round"] and (got["b"], got["ch"]) == (want["b"], want["ch"])
        assert got["gap_index"] == pytest.approx(want["gap_index"], abs=1e-12)
        assert got["pulls"] == want["pulls"]
        assert got["simple_regret"] == pytest.approx(want["simple_regret"], abs=1e-12, nan_ok=True)
        assert got["regret_kind"] == ("true" if "covered" in want else "observed")
        assert got.get("covered") == want.get("covered")
        # the round's own LLM calls (2 a pull), the running total, and wall time outside the LLM: each pull counts
        # 100 s of LLM time, more than any round's wall time, so the time outside it is floored at 0
        assert got["llm_calls"] == 2 * (got["pulls_after"] - got["pulls"])
        assert got["seconds"] >= 0 and got["seconds_outside_llm"] == (0.0 if got["pulls_after"] > got["pulls"]
                                                                      else got["seconds"])
    assert [r["llm_calls_total"] for r in res.trace] == [2 * r["pulls_after"] for r in res.trace]
    covered = [r["covered"] for r in rows if "covered" in r]
    assert res.coverage == (pytest.approx(np.mean(covered)) if covered else None)
    assert res.event_held == (all(covered) if covered else None)
    if case == "cold start 0":  # no pull before round 1, so it cannot stop there: one pull, then the stop
        assert (res.rounds, res.pulls, res.stopped_by) == (2, 1, "gap")
    if case == "pull cap inside the cold start":  # 3 of the 8 cold pulls, one refit, then the cap at round 1
        assert (res.rounds, res.pulls, res.stopped_by, loop_s.log.count(("update",))) == (1, 3, "max_pulls", 1)
    if case == "no LLM budget at all":  # nothing pulled, so nothing to refit
        assert (res.rounds, res.pulls, res.stopped_by, loop_s.log) == (0, 0, "budget", [])
    if case == "patience decides the stop":  # U_t changed after round 1, so the stop came later than patience allows
        assert res.stopped_by == "gap" and res.rounds > cfg.patience + 1
    if case == "ties in the final order":  # ties that an unstable sort would reorder
        means = loop_s.means(np.array(res.top_m))
        assert len(set(means.tolist())) < len(means)


def test_the_loop_stops_when_the_gap_index_reaches_epsilon_exactly():
    """Algorithm 1 stops once B(b_t, ch_t) <= epsilon: a run whose epsilon is round 1's gap index stops there."""
    p, cfg = np.linspace(0.1, 0.9, 10), dict(m=3, challengers=3, seed=12)
    hand_env = CoinEnvironment(p, seed=9)
    rows = algorithm_1_by_hand(hand_env, CountingSurrogate(10), BanditConfig(epsilon=-1.0, max_rounds=1, **cfg))[-1]
    index = rows[0]["gap_index"]
    res = GapIndexTopM(CoinEnvironment(p, seed=9), CountingSurrogate(10), BanditConfig(epsilon=index, **cfg)).run()
    assert (res.rounds, res.stopped_by, res.trace[0]["gap_index"]) == (1, "gap", index)
    res = GapIndexTopM(CoinEnvironment(p, seed=9), CountingSurrogate(10),
                       BanditConfig(epsilon=np.nextafter(index, -1.0), **cfg)).run()
    assert res.rounds > 1  # a hair below it does not stop there


def test_the_loop_defaults_are_the_papers_and_m_must_leave_an_outsider():
    cfg = BanditConfig()  # l.780: m = |U_t| = 10, |C_t| = 5, delta 0.05, epsilon 0.1; the greedy rule (l.415)
    assert (cfg.m, cfg.challengers, cfg.delta, cfg.epsilon, cfg.rule) == (10, 5, 0.05, 0.1, "greedy")
    assert (cfg.cold_start, cfg.max_pulls, cfg.max_rounds, cfg.patience, cfg.seed) == (5, None, 10_000, 0, 0)
    with pytest.raises(ConfigError, match="^unknown selection rule 'x'; choose one of greedy, variance, both, random$"):
        BanditConfig(rule="x")
    for rule in ("greedy", "variance", "both", "random"):
        BanditConfig(rule=rule)
    env = CoinEnvironment(np.full(4, 0.5), seed=0)
    with pytest.raises(ConfigError, match=r"^top-m needs more arms than m=4 \(have 4\)$"):
        GapIndexTopM(env, CountingSurrogate(4), BanditConfig(m=4))
    GapIndexTopM(env, CountingSurrogate(4), BanditConfig(m=3))  # one outsider is enough


def test_gaps_covered_reads_every_off_diagonal_pair_and_only_those():
    est, truth = np.array([0.5, 0.3, 0.1]), np.array([0.6, 0.3, 0.1])  # gap errors: 0.1 on pairs with arm 0, else 0
    widths = np.full((3, 3), 0.1)
    np.fill_diagonal(widths, np.nan)  # a pair of an arm with itself is never read
    assert gaps_covered(est, truth, widths)
    widths[2, 0] = 0.0999  # one pair's width a hair short of its error
    assert not gaps_covered(est, truth, widths)
