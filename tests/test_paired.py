"""Paired LUCB (dearicl/paired.py): one-sided sequences on paired differences, on the same queries."""
import numpy as np
import pytest

from bench.errors import ConfigError
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
