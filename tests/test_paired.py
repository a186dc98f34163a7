"""Paired LUCB (dearicl/paired.py): one-sided sequences on paired differences, on the same queries."""
import numpy as np
import pytest

from bench.errors import BudgetExhausted, ConfigError
from dearicl.confidence import LUCB
from dearicl.paired import PairedLUCB, PairSequences


class SharedNoiseEnv:
    """20 queries with per-arm success probabilities p[a, q]; pull s of EVERY arm draws the same uniforms U[s, q]
    (common random numbers, as the harness's per-item sample seeds give) and returns 1[U < p[a, q]]. Two arms'
    rewards then differ only where U falls between their probabilities: paired differences have little variance,
    single arms a lot."""

    def __init__(self, p, seed):
        self.p, self.seed = np.asarray(p), seed
        self.n_arms = len(self.p)
        self.true_means = self.p.mean(axis=1)
        self.pulls_of = np.zeros(self.n_arms, dtype=int)

    def pull(self, arm):
        s = self.pulls_of[arm]
        self.pulls_of[arm] += 1
        u = np.random.default_rng([self.seed, s]).random(self.p.shape[1])
        return (u < self.p[arm]).astype(float)


def shared_difficulty(n_arms=12, seed=0):
    rng = np.random.default_rng(seed)
    ease = rng.uniform(0.1, 0.9, 20)  # the queries' shared difficulty dominates
    skill = np.linspace(0.06, -0.06, n_arms)  # arms a few points apart
    return np.clip(ease[None, :] + skill[:, None], 0, 1)


def test_a_pairs_lower_bound_is_oriented_valid_and_tightens():
    """lower(a, b) bounds mu_a - mu_b from below in both orders (one sequence serves both), and tightens with pulls."""
    p = shared_difficulty(2)
    env = SharedNoiseEnv(p, 0)
    diff = env.true_means[0] - env.true_means[1]
    pairs = PairSequences("query-bernstein", 0.01, None)
    widths = []
    for _ in range(60):
        for arm in (0, 1):
            pairs.add(arm, env.pull(arm))
        ab, ba = pairs.lower(0, 1), pairs.lower(1, 0)
        assert ab <= diff + 1e-12 and ba <= -diff + 1e-12
        widths.append(-ba - ab)  # the two-sided width of mu_0 - mu_1
    assert widths[-1] < 0.5 * widths[5] and diff - pairs.lower(0, 1) < 0.1
    pairs.add(0, env.pull(0))  # a pull without its partner adds nothing to the pair
    assert pairs.lower(0, 1) == ab


def test_paired_lucb_certifies_the_top_m_in_fewer_pulls_when_arms_share_the_noise():
    pulls = {"paired": [], "lucb": []}
    for seed in range(6):
        p = shared_difficulty(12, seed)
        best = np.sort(p.mean(axis=1))[::-1]
        paired = PairedLUCB(SharedNoiseEnv(p, seed), m=3, epsilon=0.02, delta=0.05).run()
        single = LUCB(SharedNoiseEnv(p, seed), m=3, epsilon=0.02, delta=0.05).run()
        assert paired.stopped_by == "certified" and paired.coverage == 1.0
        assert np.all(p.mean(axis=1)[paired.top_m] >= best[2] - 0.02)
        assert paired.trace[-1]["gap_index"] < 0.02
        pulls["paired"].append(paired.pulls)
        pulls["lucb"].append(single.pulls)
    # measured 354 against 2780 (0.13x); pulling both arms of a pair, not the lagging one, takes 459 (0.17x)
    assert np.mean(pulls["paired"]) < 0.145 * np.mean(pulls["lucb"])


def test_the_pairs_level_is_split_between_the_arms_and_the_outside_inside_pairs():
    env = SharedNoiseEnv(shared_difficulty(10), 0)
    run = PairedLUCB(env, m=3, epsilon=0.05, delta=0.06)
    assert run.level == pytest.approx(0.06 / (2 * 3 * 7))
    assert run.arms.log_threshold == pytest.approx(np.log(2.0 / (0.06 / 20)))  # the arms' share: delta / (2K)


def test_paired_sequences_refuse_a_mismatched_protocol_and_unequal_pulls():
    with pytest.raises(ConfigError, match="cs wor goes with an environment"):
        PairSequences("wor", 0.01, None)
    with pytest.raises(ConfigError, match="paired sequences are query-bernstein, wor"):
        PairSequences("kl", 0.01, None)
    pairs = PairSequences("query-bernstein", 0.01, None)
    pairs.add(0, np.ones(4))
    pairs.add(1, np.ones(5))
    with pytest.raises(ConfigError, match="cover 4 and 5 items"):
        pairs.lower(0, 1)


def test_the_lower_bound_matrix_equals_each_pairs_bound_and_reads_only_pairs_with_new_pulls():
    from dearicl.environments import PopulationEnvironment
    from dearicl.paired import PAIR_BET_CAP

    values = shared_difficulty(6, 1)[:, :, None]
    env = PopulationEnvironment(values, np.arange(values.shape[1]), 5, np.random.default_rng(0))
    pairs = PairSequences("wor", 0.01, env.population)
    n = np.zeros(6, dtype=np.int64)
    for arm in [0, 1, 2, 3, 4, 5, 0, 3, 3]:
        pairs.add(arm, env.pull(arm))
        n[arm] += 1
    rows, cols = np.array([0, 3]), np.array([1, 2, 4, 5])
    matrix = pairs.lower_matrix(rows, cols, n)
    np.testing.assert_array_equal(matrix, [[pairs.lower(j, o) for o in cols] for j in rows])
    assert all(cs.bet_cap == PAIR_BET_CAP for cs, _ in pairs.sequences.values())
    asked = []
    pairs.lower = lambda a, b: asked.append((a, b)) or 0.0
    pairs.add(1, env.pull(1))
    n[1] += 1
    pairs.lower_matrix(rows, cols, n)
    assert asked == [(0, 1), (3, 1)]  # only arm 1's pairs have a new paired pull; (0, 2), (3, 4), ... are kept


def test_one_batch_of_ten_cannot_set_an_outsider_aside():
    """dearicl/README.md's argument that half of lucb-wor's pulls is out of reach on the 0/1 tables (K = 100, m = 10,
    50-item pool, batches of 10, epsilon 0.1): after one batch, neither the outsider's own bound nor the pair's
    can exclude it, so every outsider needs two pulls; after two extreme batches the pair can."""
    from dearicl.confidence import WoRBettingCS
    from dearicl.paired import PAIR_BET_CAP

    k, m, delta = 100, 10, 0.05
    own = WoRBettingCS(1, delta / (2 * k), 50)
    own.add(0, np.zeros(10))  # the best case for the outsider's exclusion: ten rewards of 0
    assert own.all_bounds()[1][0] == pytest.approx(0.67, abs=0.005)
    for cap, after_one in ((PAIR_BET_CAP, -0.26), (0.5, -0.45)):
        pair = WoRBettingCS(1, delta / (2 * m * (k - m)), 50, bet_cap=cap)
        pair.add(0, np.ones(10))  # (X_j - X_o + 1) / 2 = 1 on every item: member right, outsider wrong
        assert 2 * pair.all_bounds()[0][0] - 1 == pytest.approx(after_one, abs=0.005)
        pair.add(0, np.ones(10))
        assert 2 * pair.all_bounds()[0][0] - 1 > -0.1  # two batches can


def test_a_pull_budget_is_never_exceeded_and_says_so():
    env = SharedNoiseEnv(shared_difficulty(12, 0), 0)
    # 12 first pulls; the first round pulls both arms of a pair (equal counts): the second would be pull 14
    res = PairedLUCB(env, m=3, epsilon=0.0, delta=0.05, max_pulls=13).run()
    assert res.pulls == 13 and res.stopped_by == "max_pulls"


def test_paired_lucb_pp_splits_the_arms_half_one_sided_and_certifies_on_the_same_instances():
    """split="lucb++": the arms' own sequences read members' lower sides (delta / (4 (K - m)) each) and outsiders' upper
    sides (delta / (4 m) each); the pairs keep their level. Certified, covered, and no more pulls than uniform."""
    import math

    env = SharedNoiseEnv(shared_difficulty(10), 0)
    run = PairedLUCB(env, m=3, epsilon=0.05, delta=0.06, split="lucb++")
    assert run.level == pytest.approx(0.06 / (2 * 3 * 7))
    assert run.arms.log_threshold == pytest.approx(math.log(1 / (0.06 / (4 * 7))))
    assert run.arms_upper.log_threshold == pytest.approx(math.log(1 / (0.06 / (4 * 3))))
    pulls = {"uniform": [], "lucb++": []}
    for seed in range(4):
        p = shared_difficulty(12, seed)
        best = np.sort(p.mean(axis=1))[::-1]
        for split in pulls:
            res = PairedLUCB(SharedNoiseEnv(p, seed), m=3, epsilon=0.02, delta=0.05, split=split).run()
            assert res.stopped_by == "certified" and res.coverage == 1.0 and res.event_held
            assert np.all(p.mean(axis=1)[res.top_m] >= best[2] - 0.02)
            pulls[split].append(res.pulls)
    assert np.mean(pulls["lucb++"]) <= np.mean(pulls["uniform"])
    with pytest.raises(ConfigError, match="split must be one of"):
        PairedLUCB(env, m=3, split="lucb+")


def test_paired_lucb_counts_its_rounds_and_names_each_way_it_ends():
    env = SharedNoiseEnv(shared_difficulty(12, 0), 0)
    res = PairedLUCB(env, m=3, epsilon=0.02, delta=0.05).run()
    assert res.stopped_by == "certified" and res.rounds == len(res.trace) >= 2
    assert [row["round"] for row in res.trace] == list(range(1, res.rounds + 1))
    pulls = [row["pulls"] for row in res.trace]
    assert pulls[0] == 12 and all(1 <= b - a <= 2 for a, b in zip(pulls, pulls[1:])) and pulls[-1] == res.pulls
    # the pull limit met between rounds (12 first pulls, none left for the round's pull) and inside the first pass
    for limit in (12, 5):
        capped = PairedLUCB(SharedNoiseEnv(shared_difficulty(12, 0), 0), m=3, epsilon=0.0, max_pulls=limit).run()
        assert (capped.stopped_by, capped.pulls, capped.rounds) == ("max_pulls", limit, 1 if limit == 12 else 0)

    class Closing(SharedNoiseEnv):
        def pull(self, arm):
            if self.pulls_of.sum() >= 20:
                raise BudgetExhausted("no calls left")
            return super().pull(arm)

    broke = PairedLUCB(Closing(shared_difficulty(12, 0), 0), m=3, epsilon=0.0).run()
    assert (broke.stopped_by, broke.pulls) == ("budget", 20)

    class NoTruth:  # a live environment: no true means, no coverage, the same loop
        n_arms = 12

        def __init__(self):
            self.env = SharedNoiseEnv(shared_difficulty(12, 0), 0)

        def pull(self, arm):
            return self.env.pull(arm)

    live = PairedLUCB(NoTruth(), m=3, epsilon=0.02, delta=0.05).run()
    assert (live.top_m, live.pulls) == (res.top_m, res.pulls) and "covered" not in live.trace[0]


def test_paired_lucb_stops_only_once_every_member_outsider_pair_is_within_epsilon():
    """The stop recomputed at the end: for every j in the returned top and o outside it, the larger of the pair's
    lower bound and L_j - U_o (the arms' sequences; under lucb++ U from the upper-side one) is above -epsilon."""
    for split in ("uniform", "lucb++"):
        run = PairedLUCB(SharedNoiseEnv(shared_difficulty(12, 1), 1), m=3, epsilon=0.03, delta=0.05, split=split)
        res = run.run()
        top = np.array(res.top_m)
        rest = np.setdiff1d(np.arange(12), top)
        lower = run.arms.all_bounds()[0]
        upper = run.arms_upper.all_bounds()[1]
        bound = np.maximum(run.pairs.lower_matrix(top, rest, run.n), lower[top][:, None] - upper[rest][None, :])
        assert res.stopped_by == "certified" and bound.min() > -0.03
        assert res.trace[-1]["gap_index"] == pytest.approx(-bound.min())


def test_paired_lucb_reads_the_upper_sides_from_their_own_sequence_under_lucb_pp():
    run = PairedLUCB(SharedNoiseEnv(shared_difficulty(10, 0), 0), m=3, epsilon=0.05, delta=0.05, split="lucb++")
    reads = []
    real = run.arms_upper.all_bounds
    run.arms_upper.all_bounds = lambda *a: reads.append(1) or real(*a)
    res = run.run()
    assert len(reads) == res.rounds


def test_paired_lucb_ranks_arms_by_their_mean_pull_and_its_coverage_reads_the_outside_inside_pairs():
    run = PairedLUCB(SharedNoiseEnv(shared_difficulty(4, 0), 0), m=2)
    run.n[:] = [4, 1, 2, 0]
    run.sums[:] = [2.0, 0.6, 1.1, 0.0]  # means 0.5, 0.6, 0.55; an unpulled arm ranks at 0
    assert list(run._top()) == [1, 2, 0, 3]
    truth = np.array([0.9, 0.8, 0.3, 0.2])
    top, rest = np.array([0, 2]), np.array([1, 3])  # arm 2 is outside the true top 2, arm 1 inside it
    lowers = np.array([[5.0, 5.0], [-0.6, 5.0]])  # only (2, 1) is read: its truth is 0.3 - 0.8 = -0.5
    row = run._truth_row(truth, top, rest, lowers)
    assert row == {"covered": True, "simple_regret": pytest.approx(0.85 - 0.6)}
    lowers[1, 0] = -0.5  # on the truth: covered (the bound holds with equality)
    assert run._truth_row(truth, top, rest, lowers)["covered"]
    lowers[1, 0] = -0.4
    assert not run._truth_row(truth, top, rest, lowers)["covered"]
    lowers[1, 0], lowers[0, 0] = -0.6, -9.0  # (0, 1): both in the true top, not an error the certificate covers
    assert run._truth_row(truth, top, rest, lowers)["covered"]


def test_paired_lucb_settings_and_pull_counts():
    env = SharedNoiseEnv(shared_difficulty(6, 0), 0)
    assert (PairedLUCB(env, m=1).epsilon, PairedLUCB(env, m=5).delta) == (0.1, 0.05)  # the paper's epsilon, delta
    for m in (0, 6):
        with pytest.raises(ConfigError, match=rf"^paired lucb: m must be in \[1, 5\], got {m}$"):
            PairedLUCB(env, m=m)
    for delta, epsilon in ((0.0, 0.1), (1.0, 0.1), (1.5, 0.1), (0.05, -0.1)):
        with pytest.raises(ConfigError, match=rf"^paired lucb: delta must be in \(0, 1\) and epsilon >= 0, got "
                                              rf"{delta}, {epsilon}$"):
            PairedLUCB(env, m=2, delta=delta, epsilon=epsilon)
    run = PairedLUCB(SharedNoiseEnv(shared_difficulty(6, 0), 0), m=1, epsilon=0.05)
    res = run.run()
    np.testing.assert_array_equal(run.n, run.env.pulls_of)  # each arm's count is its pulls
    assert run.n.sum() == res.pulls


def test_a_pairs_per_query_sequence_puts_each_side_at_the_pairs_level():
    """One two-sided sequence serves both orders of a pair: at 2 x level, so that each side alone is at level."""
    import math

    pairs = PairSequences("query-bernstein", 0.01, None)
    assert pairs._sequence(0, 1).log_threshold == pytest.approx(math.log(1 / 0.01))
    assert pairs.lower_matrix(np.array([0]), np.array([1]), np.array([1, 0]))[0, 0] == -1.0  # no paired pull: no bound
