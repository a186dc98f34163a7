"""Anytime-valid confidence sequences and LUCB (dearicl/confidence.py) on simulated streams."""
import math
import numpy as np
import pytest

from bench.errors import BudgetExhausted, ConfigError
from dearicl.confidence import (LUCB, ArmStats, BettingCS, LUCBResult, QuantileLUCB, QueryBernsteinCS, QueryPlugInCS,
                               WoRBettingCS, best_lambda,
                               anytime_radius, certificate_covers, confidence_sequence, empirical_bernstein_radius, hoeffding_radius,
                               quantile_sample_size)


def test_radius_values_by_hand():
    assert hoeffding_radius(50, 0.05) == pytest.approx(np.sqrt(np.log(40) / 100))
    assert empirical_bernstein_radius(10, 0.04, 0.05) == pytest.approx(
        np.sqrt(2 * 0.04 * np.log(80) / 10) + 7 * np.log(80) / 27)
    # anytime: the per-n level is delta / (n (n + 1)), halved for the two bounds; low variance -> Bernstein wins
    n, delta = 200, 0.05
    level = delta / (n * (n + 1)) / 2
    assert anytime_radius(n, 0.0001, delta) == pytest.approx(
        min(hoeffding_radius(n, level), empirical_bernstein_radius(n, 0.0001, level)))
    assert anytime_radius(n, 0.0001, delta) < hoeffding_radius(n, level)
    # high variance -> Hoeffding wins, at the same halved level
    assert anytime_radius(n, 0.25, delta) == pytest.approx(hoeffding_radius(n, level))
    assert anytime_radius(n, 0.25, delta) < empirical_bernstein_radius(n, 0.25, level)
    assert anytime_radius(1, 0.0, delta) == 1.0 and anytime_radius(0, 0.0, delta) == 1.0


@pytest.mark.parametrize("kind", ["bernoulli", "beta"])
def test_anytime_miscoverage_is_at_most_delta(kind):
    """Over many streams, the fraction in which the sequence EVER misses the true mean stays below delta."""
    rng = np.random.default_rng(0)
    streams, length, delta = 1500, 300, 0.1
    mean = 0.3
    if kind == "bernoulli":
        draws = (rng.random((streams, length)) < mean).astype(float)
    else:  # a low-variance law: the empirical-Bernstein part is the one doing the work
        draws = rng.beta(30 * mean, 30 * (1 - mean), size=(streams, length))
    missed = 0
    for row in draws:
        stats = ArmStats(1)
        ever = False
        for value in row:
            stats.add(0, float(value))
            ever |= abs(stats.mean[0] - mean) > stats.radius(0, delta)
        missed += ever
    rate = missed / streams
    assert rate <= delta + 3 * np.sqrt(delta * (1 - delta) / streams)
    # and the sequence is not vacuous: after 300 draws it is far narrower than [0, 1]
    assert stats.radius(0, delta) < (0.35 if kind == "bernoulli" else 0.16)


class MeansEnv:
    """Arms with fixed true means; a pull returns 20 noisy per-query rewards in [0, 1]."""

    def __init__(self, means, rng, cap=None):
        self.true_means, self.rng, self.cap, self.pulled = np.asarray(means), rng, cap, 0
        self.n_arms = len(means)

    def pull(self, arm):
        if self.cap is not None and self.pulled >= self.cap:
            raise BudgetExhausted("cap")
        self.pulled += 1
        return np.clip(self.true_means[arm] + self.rng.normal(0, 0.2, 20), 0, 1)


def streams_missed(make_cs, rng, streams: int, pulls: int) -> int:
    """Bernoulli streams of 20 per-query rewards with unequal query means: how many streams' sequence (a fresh
    `make_cs()`, arm 0) ever excluded the queries' average."""
    missed = 0
    for _ in range(streams):
        p = rng.uniform(0.05, 0.95, 20)
        cs = make_cs()
        for _ in range(pulls):
            cs.add(0, (rng.random(20) < p).astype(float))
            low, high = cs.all_bounds([0])
            if not low[0] <= p.mean() <= high[0]:
                missed += 1
                break
    return missed


def test_lucb_finds_the_top_m_of_a_well_separated_instance():
    means = [0.9, 0.85, 0.8, 0.35, 0.3, 0.25, 0.2, 0.2]
    for seed in range(10):
        res = LUCB(MeansEnv(means, np.random.default_rng(seed)), m=3, epsilon=0.1, delta=0.05).run()
        assert res.stopped_by == "certified" and set(res.top_m) == {0, 1, 2}
        assert res.pulls >= len(means) and res.trace[-1]["gap_index"] < 0.1


def test_lucb_pulls_grow_as_the_gap_shrinks_and_budget_stops_it():
    easy = LUCB(MeansEnv([0.9, 0.2, 0.2, 0.2], np.random.default_rng(0)), m=1, epsilon=0.0).run()
    hard = LUCB(MeansEnv([0.6, 0.5, 0.2, 0.2], np.random.default_rng(0)), m=1, epsilon=0.0).run()
    assert easy.pulls < hard.pulls
    capped = LUCB(MeansEnv([0.6, 0.5, 0.2, 0.2], np.random.default_rng(0), cap=10), m=1, epsilon=0.0).run()
    assert capped.stopped_by == "budget" and capped.pulls == 10
    # LUCB's own pull limit, in the first pass over the arms and in a round (never exceeded, and named as such)
    for limit, pulls in ((2, 2), (9, 8)):
        limited = LUCB(MeansEnv([0.6, 0.5, 0.2, 0.2], np.random.default_rng(0)), m=1, epsilon=0.0, max_pulls=limit).run()
        assert (limited.stopped_by, limited.pulls) == ("max_pulls", pulls)
    with pytest.raises(ConfigError):
        LUCB(MeansEnv([0.5, 0.4], np.random.default_rng(0)), m=2)
    with pytest.raises(ConfigError, match=r"lucb: delta must be in \(0, 1\) and epsilon >= 0, got 0.0, 0.1"):
        LUCB(MeansEnv([0.5, 0.4], np.random.default_rng(0)), m=1, delta=0.0)


@pytest.mark.parametrize("kind", ["bernoulli", "beta"])
def test_betting_sequence_is_anytime_valid_and_tighter(kind):
    rng = np.random.default_rng(1)
    streams, length, delta, mean = 400, 200, 0.1, 0.3
    if kind == "bernoulli":
        draws = (rng.random((streams, length)) < mean).astype(float)
    else:
        draws = rng.beta(30 * mean, 30 * (1 - mean), size=(streams, length))
    missed = 0
    for row in draws:
        cs = BettingCS(1, delta, grid=500)
        ever = False
        for value in row:
            cs.add(0, float(value))
            low, high = cs.bounds(0)
            ever |= not low <= mean <= high
        missed += ever
    assert missed / streams <= delta + 3 * np.sqrt(delta * (1 - delta) / streams)
    stats = ArmStats(1)
    for value in draws[-1]:
        stats.add(0, float(value))
    low, high = cs.bounds(0)
    assert (high - low) / 2 < (0.7 if kind == "bernoulli" else 0.3) * stats.radius(0, delta)


def test_lucb_with_every_sequence_certifies_and_query_bernstein_needs_fewest_pulls():
    means = [0.7, 0.65, 0.6, 0.45, 0.4, 0.35]
    pulls = {}
    for cs in ("query-bernstein", "betting", "bernstein"):
        res = LUCB(MeansEnv(means, np.random.default_rng(3)), m=3, epsilon=0.05, delta=0.05, cs=cs).run()
        assert res.stopped_by == "certified" and set(res.top_m) == {0, 1, 2}
        pulls[cs] = res.pulls
    assert pulls["query-bernstein"] < pulls["betting"] < pulls["bernstein"]
    with pytest.raises(ConfigError, match="confidence sequence must be one of"):
        LUCB(MeansEnv(means, np.random.default_rng(3)), m=3, cs="hoeffding")


@pytest.mark.parametrize("kind", ["bernoulli", "beta"])
def test_query_bernstein_sequence_is_anytime_valid_with_unequal_query_means(kind):
    """Each pull gives 20 per-query rewards whose means differ; the sequence targets their average."""
    rng = np.random.default_rng(2)
    streams, pulls, delta = 300, 60, 0.1
    missed = 0
    for _ in range(streams):
        p = rng.uniform(0.05, 0.95, 20)
        cs = QueryBernsteinCS(2, delta)
        for _ in range(pulls):
            x = (rng.random(20) < p).astype(float) if kind == "bernoulli" else rng.beta(24 * p, 24 * (1 - p))
            cs.add(0, x)
            low, high = cs.all_bounds([0])
            if not low[0] <= p.mean() <= high[0]:
                missed += 1
                break
    assert missed / streams <= delta + 3 * np.sqrt(delta * (1 - delta) / streams)
    low, high = cs.all_bounds()
    assert (low[1], high[1]) == (0.0, 1.0)  # never pulled: uninformative


def test_query_bernstein_is_far_narrower_than_betting_on_pull_means():
    rng = np.random.default_rng(1)
    p = rng.uniform(0.2, 0.9, 20)
    query_cs, betting = QueryBernsteinCS(1, 2.5e-4), BettingCS(1, 2.5e-4)
    for _ in range(20):
        x = rng.beta(24 * p, 24 * (1 - p))
        query_cs.add(0, x)
        betting.add(0, float(x.mean()))
    low, high = query_cs.all_bounds()
    b_low, b_high = betting.bounds(0)
    assert low[0] <= p.mean() <= high[0]
    assert high[0] - low[0] < 0.12 and high[0] - low[0] < 0.3 * (b_high - b_low)


@pytest.mark.parametrize("cs", ["query-bernstein", "betting", "bernstein"])
@pytest.mark.parametrize("bad", [1.07, -0.01, float("nan")])
def test_a_reward_outside_the_unit_interval_is_an_error_not_clipped(cs, bad):
    """Raw BERTScore, a log-likelihood or a Gaussian reward would void every sequence's guarantee."""

    class Env:
        n_arms, true_means = 3, None

        def pull(self, arm):
            return np.array([0.5, bad if arm == 2 else 0.4])

    with pytest.raises(ConfigError,
                       match=r"a reward of arm 2 is .*, outside \[0, 1\].*map the reward into \[0, 1\] first$"):
        LUCB(Env(), 1, epsilon=0.1, delta=0.05, cs=cs, max_pulls=50).run()
    edges = confidence_sequence(cs, 2, 0.05)
    edges.add(0, np.array([0.0, 1.0]))  # the ends of the interval are rewards like any other
    edges.add(1, np.array([1.0000001, -1e-7]))  # float32 rounding of identical texts' BERTScore: clipped, not refused


def test_kl_sequence_is_anytime_valid_on_unequal_query_means_and_tight_near_the_edges():
    """KL-LUCB's Chernoff-KL bounds on per-query 0/1 rewards whose means differ: they target the average, never miss
    more often than delta, and near a mean of 0.95 they are narrower than Hoeffding's at the same level."""
    streams, delta = 300, 0.1
    missed = streams_missed(lambda: confidence_sequence("kl", 2, delta), np.random.default_rng(4), streams, 60)
    assert missed / streams <= delta + 3 * np.sqrt(delta * (1 - delta) / streams)
    assert tuple(np.concatenate(confidence_sequence("kl", 2, delta).all_bounds([1]))) == (0.0, 1.0)  # never pulled
    edge = confidence_sequence("kl", 1, delta)
    edge.add(0, np.r_[np.ones(95), np.zeros(5)])  # one pull of 100 rewards, mean 0.95
    low, high = edge.all_bounds()
    assert low[0] < 0.95 < high[0] and high[0] - low[0] < 2 * hoeffding_radius(100, delta / 2 / 2)


def test_kl_lucb_certifies_the_top_m_of_a_0_1_instance():
    class Bernoulli01:
        true_means = np.array([0.9, 0.85, 0.6, 0.5, 0.3])
        n_arms = 5

        def __init__(self):
            self.rng = np.random.default_rng(5)

        def pull(self, arm):
            return (self.rng.random(20) < self.true_means[arm]).astype(float)

    res = LUCB(Bernoulli01(), m=2, epsilon=0.05, delta=0.05, cs="kl").run()
    assert res.stopped_by == "certified" and set(res.top_m) == {0, 1} and res.coverage == 1.0


def test_without_replacement_sequence_covers_a_finite_pool_mean_and_ends_exact():
    """Waudby-Smith & Ramdas 2020 on 0/1 pools of 50: misses the pool mean at most delta of the time at ANY batch,
    ends on the exact mean once all 50 are seen, and near the end is far narrower than betting as if i.i.d."""
    rng = np.random.default_rng(6)
    streams, size, delta = 300, 50, 0.1
    missed, wor_width, iid_width = 0, [], []
    for _ in range(streams):
        pool = (rng.random(size) < rng.uniform(0.1, 0.9)).astype(float)
        order = rng.permutation(size)
        cs, iid = confidence_sequence("wor", 1, delta, population=size), BettingCS(1, delta)
        ever = False
        for batch in range(5):
            x = pool[order[10 * batch:10 * (batch + 1)]]
            cs.add(0, x)
            for value in x:
                iid.add(0, float(value))
            low, high = cs.all_bounds()
            ever |= not low[0] - 1e-12 <= pool.mean() <= high[0] + 1e-12
            if batch == 3:  # 40 of 50 seen
                wor_width.append(high[0] - low[0])
                iid_width.append(np.subtract(*iid.bounds(0)[::-1]))
        missed += ever
        assert low[0] == high[0] == pool.mean()  # all seen: exact
        cs.add(0, pool[order[:10]])  # a second pass adds nothing
        assert cs.all_bounds()[0][0] == pool.mean()
    assert missed / streams <= delta + 3 * np.sqrt(delta * (1 - delta) / streams)
    assert np.mean(wor_width) < 0.7 * np.mean(iid_width)


def test_population_protocol_pulls_the_same_batches_for_every_arm_without_replacement():
    from dearicl.environments import PopulationEnvironment

    values = np.random.default_rng(0).random((3, 8, 2))  # 3 arms, 8 items (6 in the pool), 2 samples
    pool = np.array([0, 1, 2, 4, 5, 7])
    env = PopulationEnvironment(values, pool, 4, np.random.default_rng(1))
    assert env.population == 12
    first = [env.pull(0) for _ in range(3)]  # 12 rewards: the whole population once
    np.testing.assert_array_equal(np.sort(np.concatenate(first)), np.sort(values[0, pool].ravel()))
    pairs = [(i, s) for i, s in zip(env.order_items, env.order_samples)]
    assert len(set(pairs)) == 12  # one shuffle of every (item, sample) pair
    np.testing.assert_array_equal(env.pull(1), values[1, env.order_items[:4], env.order_samples[:4]])  # batch 1 again
    np.testing.assert_array_equal(env.pull(0), first[0])  # a fourth pull starts the same order again
    assert env.true_means[2] == pytest.approx(values[2, pool].mean()) and env.true_means.dtype == np.float64
    assert env.harness_calls() == 4 * 4 + 1 * 4  # two samples: every pull asks anew
    with pytest.raises(ConfigError, match=r"--batch must be in \[1, 12\]"):
        PopulationEnvironment(values, pool, 13, np.random.default_rng(1))
    with pytest.raises(ConfigError, match="cs query-bernstein assumes independent rewards"):
        LUCB(env, 1, cs="query-bernstein")
    res = LUCB(PopulationEnvironment(values, pool, 4, np.random.default_rng(2)), 1, epsilon=0.01, delta=0.1,
               cs="wor").run()
    assert res.stopped_by == "certified" and res.coverage == 1.0
    assert int(np.argmax(values[:, pool].mean(axis=(1, 2)))) == res.top_m[0]
    with pytest.raises(ConfigError, match="needs an environment that samples a finite population"):
        LUCB(MeansEnv([0.2, 0.5], np.random.default_rng(0)), 1, cs="wor")


def test_a_recorded_reward_a_hair_above_one_is_the_same_value_in_the_truth_and_in_the_sequences():
    """BERTScore F1 of identical texts is 1.0000001 in float32: the sequences clip it to 1, so the truth must too, or
    an exact interval (an arm that saw its whole population) misses the truth by the excess."""
    from bench.reward_table import RewardTable
    from dearicl.confidence import WoRBettingCS, snap_rounding
    from dearicl.environments import PopulationEnvironment

    values = np.random.default_rng(0).uniform(0.6, 0.9, (2, 5, 3)).astype(np.float32)
    values[:, :, 0] = np.float32(1.0) + np.float32(1.2e-7)  # identical texts: a hair above 1
    env = PopulationEnvironment(values, np.arange(5), 5, np.random.default_rng(1))
    cs = WoRBettingCS(2, 0.05, env.population)
    for _ in range(3):
        for arm in range(2):
            cs.add(arm, env.pull(arm))
    lower, upper = cs.all_bounds()
    np.testing.assert_array_equal(lower, upper)  # every reward seen: exact
    np.testing.assert_allclose(lower, env.true_means, rtol=0, atol=1e-12)
    assert snap_rounding(np.array([1.0 + 5e-7, -5e-7, 1.5, -0.5])).tolist() == [1.0, 0.0, 1.5, -0.5]  # rounding only
    from dearicl.confidence import ROUNDING

    assert snap_rounding(np.array([1.0 + ROUNDING, -ROUNDING])).tolist() == [1.0, 0.0]  # the excess's edge is snapped
    assert snap_rounding(values).dtype == np.float32  # a table's float32 stays float32, as the sequences read it
    # the replay's truth: the same snapped values, averaged in float64
    Table = type("Table", (RewardTable,), {"validation": np.arange(5), "values": lambda self, what: values})
    table = Table.__new__(Table)
    np.testing.assert_allclose(table.true_means(), env.true_means, rtol=0, atol=1e-12)
    assert table.true_means().dtype == np.float64


def test_the_per_query_sequence_refuses_pulls_over_other_items():
    cs = confidence_sequence("query-bernstein", 2, 0.05)
    cs.add(0, np.full(5, 0.5))
    with pytest.raises(ConfigError, match="needs every pull to cover the same validation items: a pull of arm 1 "
                                          "returned 4 rewards after pulls of 5"):
        cs.add(1, np.full(4, 0.5))


def test_quantile_pac_certifies_an_arm_of_the_top_rho_at_a_cost_independent_of_the_arms():
    """(epsilon, rho, delta)-quantile PAC on 2,000 and 20,000 Bernoulli arms: the returned arm is within epsilon of
    the ceil(rho K)-th best mean in at least 1 - delta of the runs, after the same n = ceil(log(2/delta)/rho)
    sampled arms whatever K."""
    from dearicl.confidence import QuantileLUCB, quantile_sample_size, quantile_target

    assert quantile_sample_size(0.1, 0.05) == 37 and quantile_sample_size(0.05, 0.2) == 47
    assert quantile_target(np.array([0.1, 0.9, 0.5, 0.7]), 0.5) == 0.7  # the 2nd best of 4

    class ManyArms:
        def __init__(self, k, seed):
            self.true_means = np.linspace(0.05, 0.95, k)
            self.n_arms, self.rng = k, np.random.default_rng(seed)

        def pull(self, arm):
            return (self.rng.random(20) < self.true_means[arm]).astype(float)

    rho, epsilon, delta, runs = 0.05, 0.1, 0.2, 60
    for k in (2_000, 20_000):
        errors = 0
        for run in range(runs):
            env = ManyArms(k, run)
            pac = QuantileLUCB(env, rho, epsilon=epsilon, delta=delta, seed=run)
            res = pac.run()
            assert len(pac.sample) == 47 and res.stopped_by == "certified"
            errors += env.true_means[res.top_m[0]] < quantile_target(env.true_means, rho) - epsilon
        assert errors / runs <= delta + 3 * np.sqrt(delta * (1 - delta) / runs), (k, errors)
    with pytest.raises(ConfigError, match=r"rho must be in \(0, 1\]"):
        QuantileLUCB(ManyArms(10, 0), 0.0)


def test_kl_sequence_takes_its_union_over_the_pull_counts():
    """After the t-th pull the KL bound is at log(2 t (t + 1) / delta): without the union over t it is too narrow."""
    from dearicl.confidence import kl_bounds

    cs = confidence_sequence("kl", 1, 0.05)
    x = np.r_[np.ones(6), np.zeros(4)]
    for t in (1, 2, 3):
        cs.add(0, x)
    low, high = cs.all_bounds()
    assert (low[0], high[0]) == pytest.approx(kl_bounds(0.6, 30, np.log(2 * 3 * 4 / 0.05)))


def test_a_batch_of_bets_is_the_same_sums_as_its_observations_one_at_a_time():
    """place_bets runs a pull's observations as one array: the capital, counts and plug-in variance must equal, bit
    for bit, feeding them one at a time; past the whole population a batch is cut, as single observations stop."""
    from dearicl.confidence import BettingCS, WoRBettingCS

    rng = np.random.default_rng(0)
    xs = rng.uniform(0, 1, 37)
    batched, single = WoRBettingCS(1, 0.05, 30), WoRBettingCS(1, 0.05, 30)
    for chunk in np.array_split(xs, 4):
        batched.add(0, chunk)
    for x in xs:
        single.add(0, np.array([x]))
    for name in ("log_up", "log_down", "possible", "n", "sum", "sq"):
        np.testing.assert_array_equal(getattr(batched, name), getattr(single, name), err_msg=name)
    assert batched.n[0] == 30
    np.testing.assert_allclose(batched.all_bounds(), [[xs[:30].mean()]] * 2, rtol=0, atol=1e-15)  # seen all: exact
    iid = BettingCS(1, 0.05)
    for x in xs[:5]:
        iid.add(0, float(x))
    assert iid.n[0] == 5 and iid.sum[0] == pytest.approx(xs[:5].sum())


def test_the_bet_cap_keeps_the_capital_positive_and_a_higher_cap_narrows_a_low_variance_sequence():
    from dearicl.confidence import WoRBettingCS

    for cap in (0.0, 1.0, 1.5):
        with pytest.raises(ConfigError, match="bet_cap must be in"):
            WoRBettingCS(1, 0.05, 100, bet_cap=cap)
    xs = 0.5 + np.random.default_rng(1).normal(0, 0.02, 2000).clip(-0.5, 0.5)  # concentrated near 1/2
    widths = {}
    for cap in (0.5, 0.9):
        cs = WoRBettingCS(1, 1e-4, 2000, bet_cap=cap)
        cs.add(0, xs[:300])
        lower, upper = cs.all_bounds()
        assert lower[0] <= xs.mean() <= upper[0]
        widths[cap] = upper[0] - lower[0]
    assert widths[0.9] < 0.8 * widths[0.5]


def test_arm_stats_welford_pooled_variance_and_clipped_bounds():
    """Welford's running mean and variance, the within-arm variance pooled over arms (dearicl-pac's sigma), and
    bounds clipped to [0, 1]: [0, 1] for an unpulled arm, 0 and 1 exactly where the radius reaches past them."""
    values = {0: [0.0, 0.1, 0.0], 1: [0.9, 1.0, 1.0, 0.8], 2: [0.5]}
    stats = ArmStats(4)
    assert stats.pooled_variance() == (pytest.approx(float("nan"), nan_ok=True), 0)
    for arm, xs in values.items():
        for x in xs:
            stats.add(arm, x)
    for arm in (0, 1):
        assert stats.mean[arm] == pytest.approx(np.mean(values[arm]))
        assert stats.var(arm) == pytest.approx(np.var(values[arm], ddof=1))
    assert stats.var(2) == 0.25  # one pull: the largest variance of a [0, 1] reward
    squares = sum(((np.asarray(values[a]) - np.mean(values[a])) ** 2).sum() for a in values)
    assert stats.pooled_variance() == (pytest.approx(squares / (2 + 3)), 5)
    lower, upper = stats.bounds(0.05)
    radius = [anytime_radius(len(values[a]), stats.var(a), 0.05) for a in range(3)]
    assert lower[0] == 0.0 and upper[0] == pytest.approx(min(1.0, stats.mean[0] + radius[0]))
    assert upper[1] == 1.0 and lower[1] == pytest.approx(max(0.0, stats.mean[1] - radius[1]))
    assert stats.mean[0] - radius[0] < 0 < 1 < stats.mean[1] + radius[1]  # both clips were needed
    assert (lower[3], upper[3]) == (0.0, 1.0)


def test_quantile_pac_runs_lucb_at_half_delta_on_its_sample_and_maps_the_arm_back(monkeypatch):
    """The union of the sample's event (delta / 2) and LUCB's (delta / 2) is the guarantee: LUCB gets delta / 2, the
    budget and the sequence; the sample's truth and pulls are the original arms'; one arm needs no pull."""
    import dearicl.confidence as confidence

    class Env:
        n_arms, true_means = 60, np.linspace(0.0, 0.59, 60)

        def pull(self, arm):
            return np.array([self.true_means[arm]])

    seen = {}

    class RecordingLUCB:
        def __init__(self, env, m, **kwargs):
            seen.update(env=env, m=m, **kwargs)

        def run(self):
            return LUCBResult(top_m=[2], pulls=5, rounds=3, stopped_by="certified")

    monkeypatch.setattr(confidence, "LUCB", RecordingLUCB)
    q = QuantileLUCB(Env(), 0.1, epsilon=0.05, delta=0.04, max_pulls=77, cs="kl", seed=1)
    res = q.run()
    assert seen["m"] == 1 and seen["delta"] == pytest.approx(0.02) and seen["max_pulls"] == 77 and seen["cs"] == "kl"
    assert seen["epsilon"] == 0.05
    assert (seen["split"], seen["sampling"]) == ("uniform", "both")
    subset = seen["env"]
    assert subset.n_arms == len(q.sample) == quantile_sample_size(0.1, 0.04)
    np.testing.assert_array_equal(subset.true_means, Env.true_means[q.sample])
    assert subset.pull(3)[0] == Env.true_means[q.sample[3]]
    assert res.top_m == [int(q.sample[2])]
    QuantileLUCB(Env(), 0.1, split="lucb++", sampling="wider").run()  # LUCB++ on the sample: its options reach LUCB
    assert (seen["split"], seen["sampling"]) == ("lucb++", "wider") and seen["epsilon"] == 0.1  # the paper's epsilon
    # the sample is the seed's: the same seed draws the same arms, another seed others
    np.testing.assert_array_equal(QuantileLUCB(Env(), 0.1, seed=5).sample, QuantileLUCB(Env(), 0.1, seed=5).sample)
    assert not np.array_equal(QuantileLUCB(Env(), 0.1, seed=5).sample, QuantileLUCB(Env(), 0.1, seed=6).sample)
    Env.n_arms = 1
    alone = QuantileLUCB(Env(), 0.1).run()
    assert (alone.top_m, alone.pulls, alone.stopped_by) == ([0], 0, "certified")
    for bad in (1.5, 0.0):
        with pytest.raises(ConfigError, match="quantile-PAC: delta"):
            QuantileLUCB(Env(), 0.1, delta=bad)


def test_without_replacement_bounds_are_the_unit_interval_unpulled_and_the_mean_once_all_is_seen():
    cs = WoRBettingCS(2, 0.05, 1)  # a population of one reward per arm
    cs.add(0, np.array([0.3]))
    lower, upper = cs.all_bounds()
    assert (lower[0], upper[0]) == (pytest.approx(0.3), pytest.approx(0.3))  # the whole population seen: exact
    assert (lower[1], upper[1]) == (0.0, 1.0)


def test_kl_bounds_at_the_edges_by_hand():
    """mean 0: kl(0, q) = -log(1 - q), so the upper end is 1 - exp(-threshold / n) and the lower end 0; mean 1 mirrors it."""
    from dearicl.confidence import kl_bounds

    level = math.log(40.0) / 10
    assert kl_bounds(0.0, 10, math.log(40.0)) == (0.0, pytest.approx(1 - math.exp(-level), abs=1e-9))
    assert kl_bounds(1.0, 10, math.log(40.0)) == (pytest.approx(math.exp(-level), abs=1e-9), 1.0)


def test_without_replacement_rules_out_means_no_remaining_population_can_reach():
    """Population 10: before the fifth reward, four 1s were seen, so the mean is at least 0.4 whatever the rest are
    (the mask checks each reward's conditional mean (10 m - 4) / 6 before adding it); four 0s: at most 0.6. The
    sequence drops those candidates itself, whatever delta, before any betting evidence could."""
    ones, zeros = WoRBettingCS(1, 1e-6, 10), WoRBettingCS(1, 1e-6, 10)
    ones.add(0, np.ones(5))
    zeros.add(0, np.zeros(5))
    assert ones.all_bounds()[0][0] >= 0.4 - 1e-3 and zeros.all_bounds()[1][0] <= 0.6 + 1e-3


@pytest.mark.parametrize("cs", ["query-bernstein", "query-plugin", "kl", "betting"])
def test_lucb_pp_reads_each_side_from_a_sequence_at_its_own_level(cs):
    """LUCB++: the lower sides at delta / (2 (K - m)) each, the upper sides at delta / (2 m) each; a sequence whose sides
    are separate unions (the per-query Bernstein, KL) is built at twice the level, a betting one bets each side on its
    own capital at the level."""
    env = MeansEnv(np.linspace(0.2, 0.8, 12), np.random.default_rng(0))
    lucb = LUCB(env, m=3, delta=0.06, cs=cs, split="lucb++")
    lower_level, upper_level = 0.06 / (2 * 9), 0.06 / (2 * 3)
    if cs.startswith("query-"):  # log(2 / built level) per side = log(1 / side level)
        assert lucb.sequence.log_threshold == pytest.approx(math.log(1 / lower_level))
        assert lucb.upper_sequence.log_threshold == pytest.approx(math.log(1 / upper_level))
    elif cs == "kl":
        assert (lucb.sequence.delta, lucb.upper_sequence.delta) == pytest.approx((2 * lower_level, 2 * upper_level))
    else:
        assert (lucb.sequence.inner.delta, lucb.upper_sequence.inner.delta) == pytest.approx((lower_level, upper_level))
        assert lucb.sequence.inner.one_sided and lucb.upper_sequence.inner.one_sided
    for arm in range(12):
        lucb._pull(arm)
    lower, upper = lucb.bounds()
    np.testing.assert_array_equal(lower, lucb.sequence.all_bounds()[0])
    np.testing.assert_array_equal(upper, lucb.upper_sequence.all_bounds()[1])
    uniform = LUCB(env, m=3, delta=0.06, cs=cs)
    assert uniform.upper_sequence is uniform.sequence
    with pytest.raises(ConfigError, match="split must be one of"):
        LUCB(env, m=3, split="lucb+")


def test_lucb_pp_certifies_in_fewer_pulls_and_covers_its_one_sided_event():
    """Many outsiders, few members: the outsiders' upper sides at delta / (2m) shrink faster than at delta / K."""
    means = np.r_[np.linspace(0.75, 0.7, 4), np.linspace(0.62, 0.3, 36)]
    pulls = {"uniform": [], "lucb++": []}
    for seed in range(4):
        for split in pulls:
            res = LUCB(MeansEnv(means, np.random.default_rng(seed)), m=4, epsilon=0.05, split=split).run()
            assert res.stopped_by == "certified" and set(res.top_m) == {0, 1, 2, 3}
            assert res.coverage == 1.0
            pulls[split].append(res.pulls)
    assert np.mean(pulls["lucb++"]) < 0.9 * np.mean(pulls["uniform"])


def test_the_certificate_event_needs_only_the_top_arms_upper_sides_and_the_others_lower_sides():
    truth = np.array([0.9, 0.5, 0.1])
    lower, upper = np.array([0.8, 0.4, 0.0]), np.array([1.0, 0.6, 0.2])
    assert certificate_covers(lower, upper, truth, m=1)
    assert certificate_covers(np.array([0.95, 0.4, 0.0]), upper, truth, m=1)  # a top arm's lower side: not needed
    assert certificate_covers(lower, np.array([1.0, 0.45, 0.05]), truth, m=1)  # the others' upper sides: not needed
    assert not certificate_covers(lower, np.array([0.85, 0.6, 0.2]), truth, m=1)
    assert not certificate_covers(np.array([0.8, 0.55, 0.0]), upper, truth, m=1)
    assert not certificate_covers(lower, np.array([1.0, 0.45, 0.2]), truth, m=2)  # arm 1 is in the top 2 now


def test_wider_sampling_pulls_the_critical_arm_with_the_larger_one_sided_radius():
    env = MeansEnv(np.linspace(0.2, 0.8, 6), np.random.default_rng(0))
    lucb = LUCB(env, m=2, sampling="wider")
    lucb.stats.mean[:] = [0.5, 0.4, 0.3, 0.3, 0.3, 0.3]
    lower, upper = np.array([0.3, 0.35, 0, 0, 0, 0]), np.array([1, 1, 0.6, 0.45, 0.5, 0.5])
    assert lucb._critical_pulls(0, 2, lower, upper) == [2]  # 0.3 above the mean against 0.2 below it
    assert lucb._critical_pulls(1, 3, lower, upper) == [3]  # 0.05 below against 0.15 above
    assert lucb._critical_pulls(0, 4, lower, upper) == [0, 4]  # equal: both
    lucb.stats.mean[1] = 0.6  # now 0.25 below against 0.15 above
    assert lucb._critical_pulls(1, 3, lower, upper) == [1]
    res = LUCB(MeansEnv(np.linspace(0.2, 0.8, 8), np.random.default_rng(1)), m=2, epsilon=0.05,
               sampling="wider").run()
    assert res.stopped_by == "certified" and set(res.top_m) == {6, 7}
    assert res.pulls - 8 < 2 * (res.rounds - 1)  # mostly one pull a round


def test_lucb_pp_coverage_reads_the_one_sided_event_its_certificate_needs():
    """A top arm whose rewards sit above its stated truth breaks its lower side only: LUCB++'s traced coverage (the
    event it needs) stays 1, while the two-sided coverage of the uniform split drops."""
    class Shifted(MeansEnv):
        def pull(self, arm):
            return np.clip([1.3, 0.5, 0.45, 0.4, 0.35][arm] + self.rng.normal(0, 0.2, 20), 0, 1)

    def env():
        return Shifted([0.6, 0.5, 0.45, 0.4, 0.35], np.random.default_rng(0))  # arm 0: mostly 1, stated 0.6
    assert LUCB(env(), m=1, epsilon=0.0, split="lucb++").run().coverage == 1.0
    assert LUCB(env(), m=1, epsilon=0.0).run().coverage < 1.0


@pytest.mark.parametrize("kind", ["iid", "wor"])
def test_a_one_sided_betting_bound_fails_at_most_its_level_and_is_narrower_than_the_hedged_one(kind):
    """Each side from its own capital: the lower bound exceeds the mean in at most delta of the streams at any time
    (and the upper bound falls below it as rarely), and each bound is tighter than the hedged sequence's at delta."""
    rng = np.random.default_rng(4)
    delta, streams, size = 0.1, 300, 60
    population = (rng.random(size) < 0.3).astype(float)
    misses = {"lower": 0, "upper": 0}
    for _ in range(streams):
        draws = rng.permutation(population) if kind == "wor" else (rng.random(size) < 0.3).astype(float)
        truth = population.mean() if kind == "wor" else 0.3
        make = ((lambda one: WoRBettingCS(1, delta, size, grid=400, one_sided=one)) if kind == "wor" else
                (lambda one: BettingCS(1, delta, grid=400, one_sided=one)))
        one, hedged = make(True), make(False)
        low_missed = up_missed = False
        for x in draws[:40]:
            for cs in (one, hedged):
                if kind == "wor":
                    cs.add(0, np.array([x]))
                else:
                    cs.add(0, float(x))
            (lower,), (upper,) = one.all_bounds(np.array([0]))
            low_missed |= lower > truth + 1e-12
            up_missed |= upper < truth - 1e-12
        misses["lower"] += low_missed
        misses["upper"] += up_missed
        (h_lower,), (h_upper,) = hedged.all_bounds(np.array([0]))
        assert lower >= h_lower and upper <= h_upper
    for side in misses.values():
        assert side / streams <= delta + 3 * np.sqrt(delta * (1 - delta) / streams)
    assert upper - lower < h_upper - h_lower


def test_one_sided_sequences_are_built_as_asked_and_each_bound_reads_its_own_capital_at_one_over_delta():
    assert confidence_sequence("wor", 2, 0.1, population=5, one_sided=True).one_sided
    assert not confidence_sequence("wor", 2, 0.1, population=5).one_sided
    assert confidence_sequence("betting", 2, 0.1, one_sided=True).inner.one_sided
    assert confidence_sequence("kl", 2, 0.1, one_sided=True).delta == pytest.approx(0.2)
    assert confidence_sequence("bernstein", 2, 0.1, one_sided=True).delta == pytest.approx(0.1)
    cs = BettingCS(1, 0.1, grid=200, one_sided=True)
    for x in (0.9, 1.0, 0.8, 1.0, 0.95):
        cs.add(0, x)
    (lower,), (upper,) = cs.all_bounds(np.array([0]))
    low_kept, up_kept = cs.log_up[0] < math.log(1 / 0.1), cs.log_down[0] < math.log(1 / 0.1)
    assert lower == pytest.approx(max(0.0, cs.m[low_kept][0] - cs.step))
    assert upper == pytest.approx(min(1.0, cs.m[up_kept][-1] + cs.step))
    assert 0.0 < lower < 0.9 and upper == 1.0


@pytest.mark.parametrize("one_sided", [False, True])
def test_a_finite_pool_whose_feasible_means_fall_between_grid_points_keeps_its_truth(one_sided):
    """After 2999 of 3000 rewards the pool mean is known to 1/3000, finer than the grid: no candidate is possible,
    and the bounds must come from the seen sum (the running mean would miss the truth on one side)."""
    rng = np.random.default_rng(5)
    empty = 0
    for _ in range(8):
        pool = (rng.random(3000) < 0.3).astype(float)
        cs = WoRBettingCS(1, 0.2, 3000, one_sided=one_sided)
        cs.add(0, rng.permutation(pool)[:2999])
        (lower,), (upper,) = cs.all_bounds(np.array([0]))
        assert lower <= pool.mean() <= upper
        if not cs.possible[0].any():  # the mask checks a reward before adding it: some draws keep one candidate
            empty += 1
            assert upper - lower == pytest.approx(1 / 3000)
    assert empty >= 2
    iid = BettingCS(2, 0.1, grid=50, one_sided=one_sided)
    iid.log_up[0], iid.log_down[0] = 10.0, 10.0  # every candidate rejected on both sides: nothing but [0, 1] is sure
    (lower, _), (upper, _) = iid.all_bounds()
    assert (lower, upper) == (0.0, 1.0)


def test_lucb1_pulls_both_arms_of_the_critical_pair_every_round_by_default():
    res = LUCB(MeansEnv(np.linspace(0.2, 0.8, 8), np.random.default_rng(1)), m=2, epsilon=0.05).run()
    assert res.stopped_by == "certified" and res.pulls - 8 == 2 * (res.rounds - 1)


def test_lucb_pp_on_a_finite_pool_builds_its_one_sided_sequences_over_that_pool():
    class Pool:
        n_arms, population = 4, 6
        true_means = np.array([0.8, 0.6, 0.4, 0.2])

        def pull(self, arm):
            return np.full(2, self.true_means[arm])

    lucb = LUCB(Pool(), m=1, cs="wor", split="lucb++")
    for seq in (lucb.sequence, lucb.upper_sequence):
        assert isinstance(seq, WoRBettingCS) and seq.population == 6 and seq.one_sided


def test_an_invalid_threshold_is_caught_by_the_every_round_event_rate_and_not_by_eps_error():
    """An audit control: LUCB whose intervals are a third of their valid width. On well-separated arms it still
    returns an epsilon-good set nearly always, so eps-error stays below delta; the event its proof needs (every
    true mean inside its interval at every round) fails in most runs, and the rate's 95% upper bound is far below
    1 - delta. The valid sequences hold it in every run (95% lower bound >= 1 - delta)."""
    from bench.simulate import lower_bound95, upper_bound95
    from dearicl.confidence import trace_event_held

    class Overconfident(LUCB):
        def bounds(self):
            lower, upper = super().bounds()
            mean = self.stats.mean
            return mean - (mean - lower) / 3, mean + (upper - mean) / 3

    means = [0.9, 0.85, 0.8, 0.35, 0.3, 0.25, 0.2, 0.2]
    delta, runs = 0.05, 100
    rates = {}
    for name, cls in (("valid", LUCB), ("invalid", Overconfident)):
        held, eps_error, shares = [], [], []
        for seed in range(runs):
            res = cls(MeansEnv(means, np.random.default_rng(seed)), m=3, epsilon=0.1, delta=delta).run()
            held.append(trace_event_held(res.trace))
            shares.append(res.coverage)
            eps_error.append(float(min(np.asarray(means)[res.top_m]) < 0.8 - 0.1))
        rates[name] = (np.mean(held), lower_bound95(held), upper_bound95(held), np.mean(eps_error), np.mean(shares))
    valid, invalid = rates["valid"], rates["invalid"]
    assert valid[0] == 1.0 and valid[1] >= 1 - delta
    assert invalid[3] <= delta  # eps-error does not see the bad threshold
    assert invalid[2] < 1 - delta and invalid[0] < 0.8  # the every-round rate does: its 95% upper bound < 1 - delta
    assert invalid[4] >= invalid[0]  # a run's share of rounds is never below its every-round indicator


def test_the_event_holds_in_a_run_only_if_it_holds_at_every_round():
    from dearicl.confidence import trace_coverage, trace_event_held

    trace = [{"covered": True}, {"covered": False}, {"covered": True}, {"covered": True}]
    assert trace_event_held(trace) is False and trace_coverage(trace) == 0.75
    assert trace_event_held([{"covered": True}] * 3) is True
    assert trace_event_held([{"round": 1}]) is None  # no known truth: nothing to judge


@pytest.mark.parametrize("one_sided", [False, True])
def test_betting_bounds_keep_the_running_maximum_of_the_capital(one_sided):
    """Ville's inequality bounds the capital's supremum over time, so a candidate mean rejected once stays out: each
    bound is the intersection of every earlier one (nested), tighter than the current capital's where the capital fell
    back, and the truth still inside in every run at every time (anytime validity, 200 streams at delta = 0.1)."""
    from dearicl.confidence import grid_interval

    def current_capital(cs):  # the set from the current capital alone: what the bounds were before
        saved = cs.peak_up.copy(), cs.peak_down.copy(), cs.peak_hedged.copy()
        cs.peak_up[:], cs.peak_down[:] = cs.log_up, cs.log_down
        cs.peak_hedged[:] = np.logaddexp(cs.log_up, cs.log_down)
        try:
            return grid_interval(cs, np.arange(1))
        finally:
            cs.peak_up[:], cs.peak_down[:], cs.peak_hedged[:] = saved

    misses, tighter = 0, 0
    for seed in range(200):
        rng = np.random.default_rng(seed)
        cs = BettingCS(1, 0.1, grid=200, one_sided=one_sided)
        previous, missed = (0.0, 1.0), False
        for _ in range(60):
            cs.add(0, float(rng.beta(2, 3)))  # mean 0.4
            lower, upper = (float(b[0]) for b in cs.all_bounds())
            now_lower, now_upper = (float(b[0]) for b in current_capital(cs))
            assert lower >= previous[0] - 1e-12 and upper <= previous[1] + 1e-12  # nested
            assert lower >= now_lower - 1e-12 and upper <= now_upper + 1e-12
            tighter += (lower > now_lower + 1e-12) or (upper < now_upper - 1e-12)
            missed |= not lower <= 0.4 <= upper
            previous = (lower, upper)
        misses += missed
    assert tighter > 0
    assert misses / 200 <= 0.1 + 2 * math.sqrt(0.1 * 0.9 / 200)


def test_the_tuning_knobs_move_only_the_levels_and_weights_they_name():
    """--upper-share s: LUCB++'s lower sides at (1 - s) delta / (K - m), upper sides at s delta / m; --mixture-weight w:
    the per-query sequence's weight on lambda = 0.95, the rest in proportion, summing to 1. Both stay valid: a
    sequence with w = 0.9 covers at its level on unequal query means (300 streams, as the default's test)."""
    env = MeansEnv(np.linspace(0.2, 0.8, 12), np.random.default_rng(0))
    lucb = LUCB(env, m=3, delta=0.06, split="lucb++", upper_share=0.8, first_weight=0.8)
    assert lucb.sequence.log_threshold == pytest.approx(math.log(1 / (0.2 * 0.06 / 9)))
    assert lucb.upper_sequence.log_threshold == pytest.approx(math.log(1 / (0.8 * 0.06 / 3)))
    weights = np.exp(lucb.sequence.LOG_WEIGHTS)
    assert weights[0] == pytest.approx(0.8) and weights.sum() == pytest.approx(1.0)
    assert np.all(np.diff(weights[1:]) < 0)
    assert np.exp(QueryBernsteinCS.LOG_WEIGHTS[0]) == pytest.approx(0.6312, abs=1e-4)  # the default: 1 / sum_{j<=16} j^-2
    with pytest.raises(ConfigError, match="upper_share"):
        LUCB(env, m=3, split="lucb++", upper_share=1.0)
    with pytest.raises(ConfigError, match="first weight"):
        QueryBernsteinCS(2, 0.05, first_weight=1.2)
    streams, delta = 300, 0.1
    missed = streams_missed(lambda: QueryBernsteinCS(1, delta, first_weight=0.9), np.random.default_rng(2), streams, 60)
    assert missed / streams <= delta + 3 * np.sqrt(delta * (1 - delta) / streams)


@pytest.mark.parametrize("delta", [0.1, 0.3])
def test_plug_in_sequence_is_anytime_valid_on_unequal_query_means(delta):
    """One predictable lambda a pull (QueryPlugInCS): over 300 Bernoulli streams of 20 unequal query means, the
    running intersection excludes the queries' average in at most delta of them (3 standard errors), at the default
    lookahead and at lookahead 1, whose lambdas are the largest."""
    for lookahead in (1.0, 2.0):
        missed = streams_missed(lambda: QueryPlugInCS(1, delta, lookahead), np.random.default_rng(5), 300, 40)
        assert missed / 300 <= delta + 3 * np.sqrt(delta * (1 - delta) / 300)


def test_plug_in_lambda_is_chosen_before_the_pull_and_the_bounds_follow_the_formula():
    """lambda_p comes from what was known before pull p; the bounds are (A -+ (B + log(2 / delta))) / (n sum lambda),
    intersected over time; with no mixture weight to pay, a low-noise arm's interval is narrower than the mixture's."""
    rng = np.random.default_rng(0)
    p = rng.uniform(0.2, 0.8, 20)
    cs, mixture = QueryPlugInCS(3, 0.01), QueryBernsteinCS(3, 0.01)
    threshold = math.log(2 / 0.01)
    a = b = lam_sum = 0.0
    low_max, high_min, lambdas, squared = -np.inf, np.inf, [], []
    for pull in range(6):
        x = np.clip(p + rng.normal(0, 0.1, 20), 0, 1)
        lam = cs.next_lambda(0, 20)
        predicted = cs.query_sum[0] / cs.pulls[0] if pull else np.full(20, 0.5)
        cs.add(0, x)
        mixture.add(0, x)
        a, lam_sum = a + lam * x.sum(), lam_sum + lam
        b += (-math.log1p(-lam) - lam) * ((x - predicted) ** 2).sum()
        low_max = max(low_max, (a - b - threshold) / (20 * lam_sum))
        high_min = min(high_min, (a + b + threshold) / (20 * lam_sum))
        low, high = cs.all_bounds([0])
        assert (low[0], high[0]) == pytest.approx((max(low_max, 0.0), min(high_min, 1.0)), abs=1e-12)
        lambdas.append(lam)
        squared.append(float(((x - predicted) ** 2).sum()))
    assert lambdas[0] == pytest.approx(best_lambda(threshold, 2 * 0.25 * 20))  # no data yet: the bound 1/4 a query
    assert cs.first_error == pytest.approx([squared[0], 1]) and cs.repeat_error == pytest.approx([sum(squared[1:]), 5])
    assert low[0] <= p.mean() <= high[0]
    assert all(0 < lam < 1 for lam in lambdas) and lambdas[1] > lambdas[-1]  # larger bets while the variance is small
    m_low, m_high = mixture.all_bounds([0])
    assert high[0] - low[0] < 0.95 * (m_high[0] - m_low[0])
    # the rule: the best constant lambda for the variance term after lookahead x (pulls + 1), from the arm's own v and
    # the pooled v of a later pull (first pulls apart)
    repeat = cs.repeat_error[0] / cs.repeat_error[1]
    assert cs.repeat_error[1] == 5 and cs.first_error[1] == 1
    assert cs.next_lambda(0, 20) == pytest.approx(best_lambda(threshold, cs.v[0] + repeat + (2 - 1) * 7 * repeat))
    assert cs.next_lambda(1, 20) == pytest.approx(best_lambda(threshold, cs.first_error[0] + repeat))
    other = np.clip(p + rng.normal(0, 0.1, 20), 0, 1)  # a second arm's first pull: the first pulls' mean error
    cs.add(1, other)
    first_mean = (squared[0] + float(((other - cs.query_sum[0] / 6) ** 2).sum())) / 2
    assert cs.first_error[1] == 2 and cs.next_lambda(2, 20) == pytest.approx(best_lambda(threshold, first_mean + repeat))
    assert best_lambda(9.1, 1.0) == pytest.approx(0.921, abs=2e-3) and best_lambda(5.0, 1e-6) == 0.99
    for bad in (0.5, math.inf, math.nan):
        with pytest.raises(ConfigError, match="lookahead must be finite and >= 1"):
            QueryPlugInCS(2, 0.05, lookahead=bad)
