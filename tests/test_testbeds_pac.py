"""SIMULATED testbed families, width coverage and the certified dearicl-pac stop."""
import numpy as np
import pytest

from bench.errors import BudgetExhausted, ConfigError
from dearicl.arms import arm_embeddings, cluster_labels, slot_similarity_features
from dearicl.bandit import BanditConfig, GapIndexTopM, gaps_covered
from dearicl.confidence import intervals_cover
from dearicl.pac import CertifiedTopM, PacConfig
from dearicl.surrogates import NeuralConfig, NeuralSurrogate
from dearicl.testbeds import FAMILIES, TableEnvironment, make_instance, realize_population


def unit(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


@pytest.fixture(scope="module")
def world():
    rng = np.random.default_rng(3)
    centres = unit(rng.normal(size=(5, 32)))
    demo = unit(np.repeat(centres, 16, axis=0) + 0.6 * rng.normal(size=(80, 32)) / np.sqrt(32))
    queries = unit(rng.normal(size=(8, 32)))
    return demo, queries, cluster_labels(demo, 5, 0)


@pytest.mark.parametrize("family", FAMILIES)
def test_family_spread_is_calibrated_and_instances_are_fresh_and_seeded(world, family):
    demo, queries, labels = world
    one = make_instance(family, demo, queries, labels, 40, 5, seed=[0, 0])
    again = make_instance(family, demo, queries, labels, 40, 5, seed=[0, 0])
    other = make_instance(family, demo, queries, labels, 40, 5, seed=[0, 1])
    mu = one.true_means
    if family == "difficulty":  # 10 points between arms; the queries' difficulty varies far more
        assert np.ptp(mu) == pytest.approx(0.10, abs=1e-6)
        assert one.p.mean(axis=0).std() > 3 * mu.std()
    else:
        assert mu.min() == pytest.approx(0.2, abs=0.03) and 0.78 <= mu.max() <= 0.92
    assert np.array_equal(one.p, again.p) and np.array_equal(one.arms.members, again.arms.members)
    assert not np.allclose(one.true_means, other.true_means)  # a new random instance per run
    assert ((one.p >= 0.01) & (one.p <= 0.99)).all()


# Seed [0, 0]'s instance of each family in the `world` fixture: its first four arm means, arm 1's first three query
# probabilities, arm 0's demonstrations, and the whole p table's sum and cos-weighted sum (a change to any entry
# shows). Every published SIMULATED number rests on these formulas, constants and seed uses, so a change to a
# family's definition (a constant, a sign, a draw) shows here and must be deliberate.
PINNED = {
    "nonlinear": ([0.6081143172, 0.4690372489, 0.7511936105, 0.831706844], [0.4388794267, 0.01, 0.6826584606], [37, 53, 29, 10, 79], (190.93531145364108, 1.2253107521531057)),
    "slots": ([0.7943508431, 0.478469546, 0.57991928, 0.766362643], [0.478469546, 0.478469546, 0.478469546], [37, 53, 29, 10, 79], (159.67416995870477, 3.002467188668237)),
    "pairwise": ([0.6493020966, 0.4830717427, 0.5642643899, 0.5346246327], [0.01, 0.8545739415, 0.99], [37, 53, 29, 10, 79], (159.5925759238641, 4.451810921328555)),
    "order": ([0.6449197738, 0.2911635852, 0.4657708474, 0.6468113747], [0.550104648, 0.3882411386, 0.2855284305], [10, 29, 37, 53, 79], (149.04911279258346, 0.7440287707765767)),
    "latent": ([0.2921982333, 0.4609419073, 0.4045733526, 0.6142794614], [0.4595025409, 0.3856503278, 0.5268453172], [37, 53, 29, 10, 79], (152.12371227085055, -0.10075786770877437)),
    "difficulty": ([0.5683020797, 0.5551537921, 0.5938878487, 0.608438908], [0.4271240736, 0.7037452393, 0.5154732707], [37, 53, 29, 10, 79], (183.7377268300422, 0.033082455689360746)),
}


@pytest.mark.parametrize("family", FAMILIES)
def test_a_seeded_instance_of_each_family_is_pinned(world, family):
    demo, queries, labels = world
    inst = make_instance(family, demo, queries, labels, 40, 5, seed=[0, 0])
    means, row, first, sums = PINNED[family]
    np.testing.assert_allclose(inst.true_means[:4], means, rtol=1e-6)
    np.testing.assert_allclose(inst.p[1, :3], row, rtol=1e-6)
    assert inst.arms.members[0].tolist() == first
    weights = np.cos(np.arange(inst.p.size)).reshape(inst.p.shape)  # fixed, unequal weights: no change cancels out
    np.testing.assert_allclose([inst.p.sum(), (inst.p * weights).sum()], sums, rtol=1e-7, atol=1e-7)


def test_difficulty_family_is_additive_on_the_logit_scale(world):
    """logit p[a, q] = d_q + c s_a: every interaction contrast between two arms and two queries is 0 (unclipped cells)."""
    demo, queries, labels = world
    p = make_instance("difficulty", demo, queries, labels, 40, 5, seed=[4, 0]).p
    logit = np.log(p / (1 - p))
    inside = (p > 0.01) & (p < 0.99)
    a, q = np.nonzero(inside[1:, 1:] & inside[:1, 1:] & inside[1:, :1] & inside[0, 0])
    contrast = logit[a + 1, q + 1] - logit[a + 1, 0] - logit[0, q + 1] + logit[0, 0]
    assert len(contrast) > 100 and np.abs(contrast).max() < 1e-9


def test_order_family_arms_hold_one_example_of_each_cluster(world):
    demo, queries, labels = world
    arms = make_instance("order", demo, queries, labels, 40, 5, seed=[2, 0]).arms
    assert arms.clusters is labels and arms.members.dtype == np.int64
    assert all(sorted(labels[row].tolist()) == list(range(5)) for row in arms.members)


def test_slots_family_is_exactly_linear_in_case_features(world):
    demo, queries, labels = world
    inst = make_instance("slots", demo, queries, labels, 40, 5, seed=[1, 0])
    x = slot_similarity_features(inst.arms, demo, queries)
    theta, residual, *_ = np.linalg.lstsq(x, inst.true_means, rcond=None)
    assert np.allclose(x @ theta, inst.true_means, atol=1e-9)  # no intercept needed: CASE's model is right


def test_order_family_separates_orders_that_the_mean_embedding_cannot(world):
    demo, queries, labels = world
    inst = make_instance("order", demo, queries, labels, 40, 5, seed=[2, 0])
    members = inst.arms.members
    assert len(members) == 40 and len({tuple(sorted(r)) for r in members}) == 10  # 10 sets x 4 orders
    emb = arm_embeddings(inst.arms, demo)
    same = [i for i in range(40) if sorted(members[i]) == sorted(members[0])]
    assert len(same) == 4 and np.allclose(emb[same], emb[same[0]], atol=1e-6)
    assert np.ptp(inst.true_means[same]) > 0.01  # same set, other order, another mean


def test_table_environment_rewards_are_bounded_with_exact_means():
    p = np.array([[0.2, 0.5], [0.9, 0.7]])
    env = TableEnvironment(p, 0.1, np.random.default_rng(0))
    draws = np.array([env.pull(1) for _ in range(4000)])
    assert ((draws >= 0) & (draws <= 1)).all()
    assert draws.mean(axis=0) == pytest.approx([0.9, 0.7], abs=0.01)
    half = TableEnvironment(np.full((1, 1), 0.5), 0.1, np.random.default_rng(1))
    assert np.std([half.pull(0)[0] for _ in range(4000)]) == pytest.approx(0.1, abs=0.01)
    with pytest.raises(ConfigError, match="--noise must be in"):
        TableEnvironment(p, 0.6, np.random.default_rng(0))


def test_a_realized_population_is_one_beta_draw_per_arm_and_query():
    p = np.tile(np.array([[0.2], [0.9]]), (1, 3000))
    values = realize_population(p, 0.1, np.random.default_rng(0))
    assert values.shape == (2, 3000, 1) and ((values >= 0) & (values <= 1)).all()
    assert values[:, :, 0].mean(axis=1) == pytest.approx([0.2, 0.9], abs=0.01)  # mean p, as a pull's draws
    assert values[0, :, 0].std() == pytest.approx(TableEnvironment(p, 0.1, np.random.default_rng(1)).pull(0).std(),
                                                  rel=0.1)
    assert np.array_equal(values, realize_population(p, 0.1, np.random.default_rng(0)))


def test_gap_coverage_on_a_hand_built_case():
    est, truth = np.array([0.5, 0.3, 0.1]), np.array([0.6, 0.3, 0.2])
    # gap errors: (0,1) |0.2 - 0.3| = 0.1, (0,2) |0.4 - 0.4| = 0, (1,2) |0.2 - 0.1| = 0.1
    assert gaps_covered(est, truth, np.full((3, 3), 0.1))
    assert not gaps_covered(est, truth, np.full((3, 3), 0.09))
    widths = np.full((3, 3), 0.2)
    widths[1, 2] = widths[2, 1] = 0.05  # only the (1, 2) gap is missed
    assert not gaps_covered(est, truth, widths)
    assert intervals_cover(np.array([0.1, 0.5]), np.array([0.3, 0.7]), np.array([0.3, 0.5]))
    assert not intervals_cover(np.array([0.1, 0.5]), np.array([0.3, 0.7]), np.array([0.31, 0.5]))
    lower = np.array([0.1, 0.5])  # the tolerance of float rounding, on the lower side too, and no more
    assert intervals_cover(lower, np.array([0.3, 0.7]), lower - 1e-12)
    assert not intervals_cover(lower, np.array([0.3, 0.7]), lower - 1e-9)


class FixedSurrogate:
    """Means and widths set by hand; the bandit loop's coverage is then known in advance."""

    def __init__(self, means, width):
        self.mu, self.width, self.n_arms = np.asarray(means), width, len(means)

    def observe(self, arm, rewards):
        pass

    def update(self):
        pass

    def means(self, arms):
        return self.mu[np.asarray(arms)]

    def widths(self, rows, cols, t):
        return np.full((len(rows), len(cols)), self.width)

    def pick(self, b, c, rule):
        return [b]

    def end_round(self, arms):
        pass


@pytest.mark.parametrize("width, coverage", [(0.25, 1.0), (0.05, 0.0)])
def test_bandit_coverage_counts_rounds_whose_width_covers_every_true_gap(width, coverage):
    truth = np.linspace(0.9, 0.2, 8)
    p = np.repeat(truth[:, None], 2, axis=1)
    env = TableEnvironment(p, 0.1, np.random.default_rng(0))
    est = truth + np.array([0.1, -0.1, 0, 0, 0, 0, 0, 0])  # arm 0 and 1's gap is off by 0.2
    cfg = BanditConfig(m=3, challengers=5, epsilon=-1.0, cold_start=1, max_pulls=6, seed=0)  # U_t u C_t = all
    res = GapIndexTopM(env, FixedSurrogate(est, width), cfg).run()
    assert res.coverage == coverage
    assert all("covered" in row for row in res.trace)


def small_surrogate(instance, demo, queries, seed=0):
    return NeuralSurrogate(queries, arm_embeddings(instance.arms, demo),
                           config=NeuralConfig(hidden=(32,), mc_passes=8, seed=seed))


def test_pac_never_stops_before_its_certificate_holds(world):
    demo, queries, labels = world
    inst = make_instance("nonlinear", demo, queries, labels, 24, 5, seed=[5, 0])
    env = TableEnvironment(inst.p, 0.1, np.random.default_rng(0))
    pac = CertifiedTopM(env, small_surrogate(inst, demo, queries), PacConfig(m=3, epsilon=0.15, seed=0))
    res = pac.run()
    assert res.stopped_by == "certified"
    rows = [r for r in res.trace]
    assert all(r["gap_index"] > 0.15 for r in rows[:-1]) and rows[-1]["gap_index"] <= 0.15
    # the certificate itself, recomputed from the confidence sequences alone: min LCB(S) >= max UCB(rest) - epsilon
    lo, hi = pac.cs.all_bounds()
    rest = np.setdiff1d(np.arange(env.n_arms), res.top_m)
    assert lo[res.top_m].min() >= hi[rest].max() - 0.15 - 1e-12
    assert len(res.seen) == env.n_arms  # an unpulled arm's sequence is [0, 1]: no certificate without it
    truth = env.true_means
    assert truth[res.top_m].min() >= np.sort(truth)[::-1][2] - 0.15  # epsilon-good on this instance
    assert res.coverage is not None and 0 <= res.coverage <= 1


class LyingSurrogate(FixedSurrogate):
    """A network sure of its estimates (its features are the estimates themselves), however wrong they are."""

    def features(self, arms):
        return np.column_stack([self.mu[np.asarray(arms)], np.zeros(len(arms))])


def lying_network_case(world, seed: int):
    """A latent instance of 16 arms and a network estimate right about every arm but the two best, rated 0."""
    demo, queries, labels = world
    inst = make_instance("latent", demo, queries, labels, 16, 5, seed=[8, seed])
    estimate = inst.true_means.copy()
    estimate[np.argsort(-inst.true_means)[:2]] = 0.0
    return inst, inst.true_means, estimate, dict(m=2, epsilon=0.02, seed=seed, cold_start=2, audits_at_start=2)


@pytest.mark.parametrize("seed", [0, 2])
def test_pac_certificate_does_not_rest_on_the_network(world, seed):
    """A network right about every arm but the two best, which it rates 0: stop="sequences" still certifies the
    right arms with every sequence holding in every round; the model intervals miss the truth in some rounds
    (coverage < 1, not a valid bound), so stop="model" says "model-stop", never certified."""
    inst, truth, estimate, settings = lying_network_case(world, seed)
    pac = CertifiedTopM(TableEnvironment(inst.p, 0.1, np.random.default_rng(seed)), LyingSurrogate(estimate, 0.0),
                        PacConfig(**settings))
    res = pac.run()
    assert res.stopped_by == "certified" and res.coverage == 1.0
    assert truth[res.top_m].min() >= np.sort(truth)[::-1][1] - 0.02
    lo, hi = pac.cs.all_bounds()
    assert lo[res.top_m].min() >= hi[np.setdiff1d(np.arange(16), res.top_m)].max() - 0.02 - 1e-12
    model = CertifiedTopM(TableEnvironment(inst.p, 0.1, np.random.default_rng(seed)), LyingSurrogate(estimate, 0.0),
                          PacConfig(**settings, stop="model")).run()
    assert model.stopped_by == "model-stop" and model.coverage < 1.0


def test_pac_stop_setting_is_checked():
    with pytest.raises(ConfigError, match="stop must be one of sequences, model"):
        PacConfig(stop="network")


def test_pac_out_of_pulls_is_not_certified(world):
    demo, queries, labels = world
    inst = make_instance("latent", demo, queries, labels, 24, 5, seed=[6, 0])
    env = TableEnvironment(inst.p, 0.1, np.random.default_rng(0))
    res = CertifiedTopM(env, small_surrogate(inst, demo, queries),
                        PacConfig(m=3, epsilon=0.05, max_pulls=30, seed=0)).run()
    assert res.stopped_by == "max_pulls" and res.pulls == 30
    assert all(r["gap_index"] > 0.05 for r in res.trace)
    assert len(res.top_m) == 3


def test_pac_keeps_audit_arms_out_of_the_network(world):
    demo, queries, labels = world
    inst = make_instance("pairwise", demo, queries, labels, 24, 5, seed=[7, 0])
    env = TableEnvironment(inst.p, 0.1, np.random.default_rng(0))
    surrogate = small_surrogate(inst, demo, queries)
    pac = CertifiedTopM(env, surrogate, PacConfig(m=3, epsilon=0.1, max_pulls=40, seed=0))
    pac.run()
    trained = np.flatnonzero(surrogate.reward_count.sum(axis=1) > 0)
    assert len(pac.audits) >= 10 and not set(pac.audits) & set(trained.tolist())


def test_pac_delta_goes_to_the_sequences_that_decide_the_stop(world):
    """stop="sequences": each arm's sequence at delta/K (the whole delta); stop="model": delta/(2K), half left to the
    model intervals. The selectors pass the stop on, and name it in their settings."""
    import math

    from methods.base import create

    demo, queries, labels = world
    inst = make_instance("latent", demo, queries, labels, 16, 5, seed=[9, 0])
    for stop, share in (("sequences", 1), ("model", 2)):
        pac = CertifiedTopM(TableEnvironment(inst.p, 0.1, np.random.default_rng(0)), small_surrogate(inst, demo, queries),
                            PacConfig(m=2, delta=0.05, stop=stop))
        assert pac.cs.log_threshold == pytest.approx(math.log(2.0 / (0.05 / (share * 16))))
    assert create("dearicl-pac-static", {}).settings()["stop_rule"].startswith("certified: ")
    assert create("dearicl-pac-static", {"stop": "model"}).settings()["stop_rule"].startswith("model stop (not a ")


@pytest.mark.parametrize("seed", [0, 2])
def test_pac_lucb_pp_split_certifies_on_its_one_sided_event_without_the_network(world, seed):
    """split="lucb++": the members' lower sides at delta / (2 (K - m)), the outsiders' upper sides at delta / (2 m),
    one-sided. With a network that rates the two best arms 0, the stop still returns epsilon-good arms, the one-sided
    event holds at every round, and it stops no later than the uniform split on the same pulls' stream."""
    import math

    inst, truth, estimate, settings = lying_network_case(world, seed)
    runs = {}
    for split in ("uniform", "lucb++"):
        pac = CertifiedTopM(TableEnvironment(inst.p, 0.1, np.random.default_rng(seed)), LyingSurrogate(estimate, 0.0),
                            PacConfig(**settings, split=split))
        runs[split] = (pac, pac.run())
    pac, res = runs["lucb++"]
    assert pac.cs.log_threshold == pytest.approx(math.log(1 / (0.05 / (2 * 14))))  # built at twice the side's level
    assert pac.upper_cs.log_threshold == pytest.approx(math.log(1 / (0.05 / (2 * 2))))
    assert res.stopped_by == "certified" and res.coverage == 1.0 and res.event_held
    assert truth[res.top_m].min() >= np.sort(truth)[::-1][1] - 0.02
    lower, upper = pac.cs.all_bounds()[0], pac.upper_cs.all_bounds()[1]
    assert lower[res.top_m].min() >= upper[np.setdiff1d(np.arange(16), res.top_m)].max() - 0.02 - 1e-12
    assert res.pulls <= runs["uniform"][1].pulls
    with pytest.raises(ConfigError, match="split must be uniform or lucb"):
        PacConfig(split="lucb++", stop="model")


class CountingEnvironment:
    """An environment's pulls counted, passed through."""

    def __init__(self, env):
        self.env, self.calls = env, 0

    def __getattr__(self, name):
        return getattr(self.env, name)

    def pull(self, arm):
        self.calls += 1
        return self.env.pull(arm)


class RefreshLog(LyingSurrogate):
    """A fixed network that records the pull count at each retraining (`update`)."""

    def __init__(self, means, pac_ref: list):
        super().__init__(means, 0.0)
        self.pac_ref, self.at = pac_ref, []

    def update(self):
        self.at.append(self.pac_ref[0].pulls)


def test_pac_counts_every_pull_and_retrains_the_network_on_its_cadence(world):
    """res.pulls is the environment's count of pulls; the network retrains once `refresh_every` pulls (10 here; 10%
    of the pulls so far once that is more) have come since the last time, never sooner; the per-pull noise bound
    before repeat pulls is 1 / (2 sqrt(queries a pull))."""
    inst, truth, estimate, settings = lying_network_case(world, 0)
    env = CountingEnvironment(TableEnvironment(inst.p, 0.1, np.random.default_rng(0)))
    ref: list = []
    network = RefreshLog(estimate, ref)
    pac = CertifiedTopM(env, network, PacConfig(**{**settings, "epsilon": 0.0}, max_pulls=70))
    ref.append(pac)
    fresh = CertifiedTopM(TableEnvironment(inst.p, 0.1, np.random.default_rng(0)), LyingSurrogate(estimate, 0.0),
                          PacConfig(**settings))
    fresh._pull(0)
    assert fresh.n_queries == inst.p.shape[1] and fresh._sigma() == pytest.approx(0.5 / np.sqrt(inst.p.shape[1]))
    res = pac.run()
    assert res.stopped_by == "max_pulls" and res.pulls == env.calls == 70
    gaps = np.diff(network.at[:-1])  # the last retraining is the one after the loop ends
    assert len(gaps) >= 4 and all(10 <= g <= 11 for g in gaps), network.at
    ref.clear()
    network = RefreshLog(estimate, ref)
    ref.append(CertifiedTopM(TableEnvironment(inst.p, 0.1, np.random.default_rng(0)), network,
                             PacConfig(**{**settings, "epsilon": 0.0}, max_pulls=220)))
    ref[0].run()
    at = network.at[:-1]
    # past 100 pulls the cadence is 10% of the pulls so far (a round's one or two pulls may overshoot it)
    assert all(max(10, 0.1 * b) <= b - a <= max(10, 0.1 * b) + 2 for a, b in zip(at, at[1:])), at
    assert at[-1] - at[-2] >= 18, at


# ---- dearicl-pac's model interval and loop, by hand (the network only says where to look; these pin how) ----------

class ScriptedEnvironment:
    """Each pull of an arm returns its next scripted row of per-query rewards; no true means."""

    def __init__(self, rows_by_arm):
        self.rows, self.n_arms, self.true_means = rows_by_arm, len(rows_by_arm), None
        self.count = np.zeros(len(rows_by_arm), dtype=int)

    def pull(self, arm):
        row = self.rows[arm][self.count[arm]]
        self.count[arm] += 1
        return np.asarray(row, dtype=float)


class FeatureSurrogate(LyingSurrogate):
    """A network whose last-layer features are given by hand."""

    def __init__(self, means, raw):
        super().__init__(means, 0.0)
        self.raw = np.asarray(raw, dtype=float)

    def features(self, arms):
        return self.raw[np.asarray(arms)]


def hand_pac(pull_means, **config):
    """A dearicl-pac on 4-query pulls whose means are `pull_means[arm]` (one pull per listed mean), all pulled."""
    rows = [[[v] * 4 for v in means] for means in pull_means]
    pac = CertifiedTopM(ScriptedEnvironment(rows), LyingSurrogate(np.zeros(len(rows)), 0.0),
                        PacConfig(**{"m": 1, **config}))
    for arm, means in enumerate(pull_means):
        for _ in means:
            pac._pull(arm)
    return pac


class FixedSequence:
    """A confidence sequence whose bounds are set by hand."""

    def __init__(self, lower, upper):
        self.bounds = np.array(lower), np.array(upper)

    def all_bounds(self, arms=None):
        return self.bounds


def lying_pac(inst, estimate, settings, **extra):
    """dearicl-pac on the lying-network case (lying_network_case), its settings updated by `extra`."""
    return CertifiedTopM(TableEnvironment(inst.p, 0.1, np.random.default_rng(0)), LyingSurrogate(estimate, 0.0),
                         PacConfig(**{**settings, **extra}))


def test_pac_noise_level_is_the_range_bound_until_five_repeat_pulls_then_the_chi2_bound():
    """sigma: 1 / (2 sqrt(queries)) (0.5 before any pull); from 5 degrees of freedom of repeat pulls on, the smaller
    of that and sqrt of the pooled variance's one-sided (1 - delta/4) chi-square upper bound."""
    from scipy.stats import chi2

    assert hand_pac([[], []])._sigma() == 0.5
    four = hand_pac([[0.50, 0.52, 0.48, 0.51, 0.49], [0.3]], delta=0.05)  # 4 degrees of freedom
    assert four._sigma() == pytest.approx(0.25)
    means = [0.50, 0.52, 0.48, 0.51, 0.49, 0.50]
    five = hand_pac([means, [0.3]], delta=0.05)  # 5 degrees of freedom: the bound applies
    expected = np.sqrt(np.var(means, ddof=1) * 5 / chi2.ppf(0.05 / 4, 5))
    assert expected < 0.25 and five._sigma() == pytest.approx(expected)


def test_pac_model_interval_is_the_ridge_head_widened_by_the_audits_leave_one_out_error_and_beta():
    """f = phi theta (ridge on pulled arms' means, one row an arm); xi = the largest error of the head refitted
    without each audit arm; width = xi + sigma sqrt(2 log(4K / delta)) ||phi_a||_{G^-1}."""
    rng = np.random.default_rng(3)
    pull_means = [[0.2, 0.3], [0.6], [0.5, 0.7, 0.6], [0.1], [0.9], [], []]  # arms 5 and 6 unpulled
    pac = hand_pac(pull_means, delta=0.1, ridge=0.5)
    k = len(pull_means)
    pac.phi = np.hstack([np.ones((k, 1)), rng.normal(size=(k, 2))])
    pac.audits = [1, 3]
    lower, upper, xi, sigma = pac.model_intervals()

    pulled = np.array([len(m) > 0 for m in pull_means])
    y = np.array([np.mean(m) if m else 0.0 for m in pull_means])

    def ridge(rows):
        x = pac.phi[rows]
        return np.linalg.solve(0.5 * np.eye(3) + x.T @ x, x.T @ y[rows])

    loo = [abs(y[a] - pac.phi[a] @ ridge(pulled & (np.arange(k) != a))) for a in (1, 3)]
    assert xi == pytest.approx(max(loo))
    assert sigma == pytest.approx(0.5 / np.sqrt(4))  # 3 degrees of freedom: the range bound
    gram = 0.5 * np.eye(3) + pac.phi[pulled].T @ pac.phi[pulled]
    norms = np.array([np.sqrt(p @ np.linalg.solve(gram, p)) for p in pac.phi])
    width = max(loo) + 0.25 * np.sqrt(2 * np.log(4 * k / 0.1)) * norms
    centre = pac.phi @ ridge(pulled)
    np.testing.assert_allclose(lower, centre - width, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(upper, centre + width, rtol=1e-9, atol=1e-12)
    pac.audits = []
    assert pac.model_intervals()[2] == 1.0  # no audit arm yet: xi is the whole range


def test_pac_combined_interval_meets_the_sequence_and_falls_back_to_it_on_a_conflict():
    pac = hand_pac([[0.5], [0.5], [0.5], [0.5]])
    pac.cs = pac.upper_cs = FixedSequence([0.1, 0.3, 0.1, 0.1], [0.6, 0.5, 0.4, 0.4])
    pac.model_intervals = lambda: (np.array([0.2, 0.5, 0.8, 0.0]), np.array([0.9, 0.7, 0.9, 0.05]), 0.05, 0.2)
    lo, hi, info = pac.intervals()
    # arm 0: the intersection; arm 1: a single point, no conflict; arms 2 and 3: disjoint (above, below), the
    # sequence's interval
    np.testing.assert_allclose(lo, [0.2, 0.5, 0.1, 0.1])
    np.testing.assert_allclose(hi, [0.6, 0.5, 0.4, 0.4])
    assert info == {"xi": 0.05, "sigma": 0.2, "conflicts": 2}


def test_pac_features_are_the_centred_features_top_directions_at_unit_variance_beside_the_recalibrated_estimate():
    """phi = [1, standardised network estimate, the top min(feature_dim, rank) left singular directions of the
    features centred over arms, scaled to unit variance across arms]; the rank is relative to the largest singular
    value, so the features' scale does not matter."""
    rng = np.random.default_rng(1)
    k = 12
    raw = rng.normal(size=(k, 2)) @ rng.normal(size=(2, 6)) + 5.0  # rank 2 after centring, off-centre
    pred = rng.uniform(0.2, 0.8, k)
    for scale, dim, width in ((1.0, 4, 2), (1e-9, 4, 2), (1.0, 1, 1)):
        rows = [[[0.5] * 4]] * k
        pac = CertifiedTopM(ScriptedEnvironment(rows), FeatureSurrogate(pred, raw * scale),
                            PacConfig(m=2, feature_dim=dim))
        pac._refresh_features()
        assert pac.phi.shape == (k, 2 + width), (scale, dim)
        np.testing.assert_array_equal(pac.phi[:, 0], 1.0)
        np.testing.assert_allclose(pac.phi[:, 1], (pred - pred.mean()) / pred.std(), rtol=1e-6)
        z = pac.phi[:, 2:]
        np.testing.assert_allclose(z.mean(axis=0), 0.0, atol=1e-9)
        np.testing.assert_allclose(z.T @ z, k * np.eye(width), atol=1e-8)  # orthogonal, unit variance
        centred = raw - raw.mean(axis=0)
        vectors = np.linalg.eigh(centred @ centred.T)[1][:, ::-1][:, :width]  # the top directions, found apart
        np.testing.assert_allclose(z @ z.T / k, vectors @ vectors.T, atol=1e-8)


def test_pac_frontier_breaks_the_outsiders_tie_by_the_highest_model_upper_bound():
    """Every unpulled outsider has the sequence's upper bound 1: the network's interval picks which is pulled."""
    pac = hand_pac([[0.7], [], [], []])
    pac.cs = pac.upper_cs = FixedSequence([0.6, 0.0, 0.0, 0.0], [0.8, 1.0, 1.0, 1.0])
    top, weakest, strongest, gap, _, _ = pac.frontier(np.array([0.6, 0.1, 0.2, 0.0]), np.array([0.8, 0.5, 0.9, 0.3]))
    assert list(top) == [0] and weakest == 0 and strongest == 2 and gap == pytest.approx(0.4)


def test_pac_loop_counts_its_rounds_pulls_one_arm_per_audit_and_names_each_way_it_ends(world):
    inst, truth, estimate, settings = lying_network_case(world, 0)
    res = lying_pac(inst, estimate, settings).run()
    assert res.stopped_by == "certified" and res.rounds == len(res.trace) >= 2
    steps = np.diff([row["pulls"] for row in res.trace] + [res.pulls])[:-1]
    assert set(steps) <= {1, 2} and 1 in steps  # an audit round pulls its audit arm alone
    capped = lying_pac(inst, estimate, settings, epsilon=0.0, max_rounds=3).run()
    assert (capped.stopped_by, capped.rounds, len(capped.trace)) == ("max_rounds", 3, 3)

    class Closed:
        n_arms, true_means = 16, None

        def pull(self, arm):
            raise BudgetExhausted("no calls left")

    broke = CertifiedTopM(Closed(), LyingSurrogate(estimate, 0.0), PacConfig(**settings)).run()
    assert (broke.stopped_by, broke.pulls, broke.top_m, broke.certificate) == ("budget", 0, [0, 1], {})


@pytest.mark.parametrize("settings, message", [
    ({"delta": 0.0}, r"delta must be in \(0, 1\) and epsilon >= 0, got 0.0, 0.1$"),
    ({"delta": 1.0}, "delta must be in"), ({"delta": 1.5}, "delta must be in"),
    ({"epsilon": -0.1}, r"epsilon >= 0, got 0.05, -0.1$"),
    ({"audits_at_start": 1}, r"^dearicl-pac: audits_at_start must be >= 2 and audit_share in \[0, 1\)$"),
    ({"audit_share": 1.0}, "audit_share in"), ({"audit_share": 1.5}, "audit_share in"),
    ({"audit_share": -0.1}, "audit_share in"),
    ({"cs": "nope"}, r"^dearicl-pac: cs must be one of query-bernstein, query-plugin, betting, bernstein, kl, got 'nope'$"),
])
def test_pac_settings_out_of_range_are_config_errors_that_say_which(settings, message):
    with pytest.raises(ConfigError, match=message):
        PacConfig(**settings)
    PacConfig(audit_share=0.0, delta=0.5, epsilon=0.0)  # the edges inside the ranges are settings like any other


def test_pac_m_must_leave_an_outsider_and_the_seed_decides_the_run(world):
    inst, truth, estimate, settings = lying_network_case(world, 0)

    def run(**extra):
        return lying_pac(inst, estimate, settings, **extra).run()

    for m in (0, 16):
        with pytest.raises(ConfigError, match=rf"^dearicl-pac: m must be in \[1, 15\], got {m}$"):
            run(m=m)
    first, again, other = run(seed=4), run(seed=4), run(seed=5)
    assert first.seen == again.seen and [r["pulls"] for r in first.trace] == [r["pulls"] for r in again.trace]
    assert first.trace[0]["audits"] == again.trace[0]["audits"]
    assert (first.seen, first.top_m, first.pulls) != (other.seen, other.top_m, other.pulls) or \
        [r["gap_index"] for r in first.trace] != [r["gap_index"] for r in other.trace]


def test_pac_trace_rows_audit_cap_and_the_certificate_of_a_run_cut_short(world, monkeypatch):
    import dearicl.pac as pac_module

    inst, truth, estimate, settings = lying_network_case(world, 0)

    pac = lying_pac(inst, estimate, settings, epsilon=0.0, max_audits=3, audit_share=0.5, max_pulls=60)
    res = pac.run()
    assert [row["round"] for row in res.trace] == list(range(1, len(res.trace) + 1))
    assert all({"gap_index", "audits", "xi", "sigma", "conflicts"} <= set(row) for row in res.trace)
    assert len(pac.audits) == 3 and res.trace[-1]["audits"] == 3  # never more than max_audits
    assert res.seen == sorted(int(a) for a in np.flatnonzero(pac.stats.n))
    # stopped by the pull limit: the certificate is the state after the last pull, not the last round's
    lo, hi, _ = pac.intervals()
    assert res.certificate["gap_index"] == pac.frontier(lo, hi)[3] and res.certificate["audits"] == 3
    # cut short before the network was ever trained: its features are computed for the certificate
    early = lying_pac(inst, estimate, settings, max_pulls=3)
    cut = early.run()
    assert (cut.stopped_by, cut.pulls, cut.rounds) == ("max_pulls", 3, 0) and early.phi is not None
    assert {"gap_index", "audits", "xi"} <= set(cut.certificate)
    # the coverage each split reads: the one-sided event (m) under lucb++, every interval otherwise
    seen_m = []
    real = pac_module.truth_fields
    monkeypatch.setattr(pac_module, "truth_fields", lambda *a, m=None: seen_m.append(m) or real(*a, m=m))
    lying_pac(inst, estimate, settings, max_pulls=30).run()
    lying_pac(inst, estimate, settings, max_pulls=30, split="lucb++").run()
    assert set(seen_m) == {None, 2}
    assert seen_m.index(2) > 0 and all(m is None for m in seen_m[:seen_m.index(2)])


def test_pac_stops_when_the_gap_reaches_epsilon_exactly(world, monkeypatch):
    inst, truth, estimate, settings = lying_network_case(world, 0)
    pac = lying_pac(inst, estimate, settings)
    real = pac.frontier
    monkeypatch.setattr(pac, "frontier", lambda lo, hi: (*real(lo, hi)[:3], settings["epsilon"], *real(lo, hi)[4:]))
    res = pac.run()
    assert (res.stopped_by, res.rounds) == ("certified", 1)
