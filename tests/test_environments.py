"""The bandit's environments, unit by unit and fast: what each pull returns, what truth each one holds, and how a
custom reward module is loaded. (test_simulate runs them end to end, in minutes; these pin each step in seconds.)"""
import numpy as np
import pytest

from bench.errors import ConfigError
from dearicl.arms import ArmSet
from dearicl.environments import (TRUTH_BLOCK, TRUTH_CAP, EmbeddingEnvironment, HiddenNonlinearReward,
                                  LinearEnvironment, PopulationEnvironment, RecordedEnvironment, Simulated,
                                  load_reward_module)


def unit_rows(n, dim, seed):
    x = np.random.default_rng(seed).normal(size=(n, dim))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


# a small world: 6 pool examples in 3 arms of k = 2, and 3 queries, in 4 dimensions
DEMOS = unit_rows(6, 4, 0)
QUERIES = unit_rows(3, 4, 1)
ARMS = ArmSet(members=np.array([[0, 1], [2, 3], [4, 5]]), clusters=np.array([0, 1, 0, 1, 0, 1]))


def mean_dot(q, demos):
    """A noise-free reward in [0, 1]: the mean cosine between the query and the demonstrations, mapped from [-1, 1]."""
    return float((demos @ q).mean() + 1.0) / 2.0


def uniform_noise(q, demos, rng):
    """Mean mean_dot(q, demos), spread +-0.2: a reward whose truth must be estimated from draws."""
    return mean_dot(q, demos) + rng.uniform(-0.2, 0.2)


# --- the simulated base and the linear testbed ---

def test_a_simulated_environment_makes_no_llm_call_and_spends_no_llm_time():
    assert Simulated().llm_calls() == 0 and Simulated().llm_seconds() == 0.0
    recorded = RecordedEnvironment(np.full((2, 3, 1), 0.5), np.array([0, 1]), np.array([0, 1, 2]),
                                   np.random.default_rng(0))
    recorded.pull(0)
    assert recorded.llm_calls() == 0 and recorded.llm_seconds() == 0.0


def test_the_linear_testbed_has_float_means_x_theta_and_unbiased_noise_around_them():
    env = LinearEnvironment([[1, 0], [0, 1], [1, 1]], [2, 3], noise=0.5, rng=np.random.default_rng(0))
    assert env.n_arms == 3 and env.x.dtype == np.float64 and env.true_means.dtype == np.float64
    assert env.true_means.tolist() == [2.0, 3.0, 5.0]
    draws = np.concatenate([env.pull(2) for _ in range(4000)])
    assert abs(draws.mean() - 5.0) < 0.05 and abs(draws.std() - 0.5) < 0.05  # N(0, 0.5^2) noise, centred
    exact = LinearEnvironment([[1.0, 2.0]], [0.5, 0.25], noise=0.0, rng=np.random.default_rng(0))
    assert exact.pull(0).tolist() == [1.0]
    seeded = LinearEnvironment([[1.0, 2.0]], [0.5, 0.25], noise=0.5, rng=np.random.default_rng(3))
    assert seeded.pull(0).tolist() == [1.0 + np.random.default_rng(3).normal(0.0, 0.5)]  # the draw added, not taken


@pytest.mark.parametrize("features, theta", [([1.0, 2.0, 3.0], [1.0, 2.0, 3.0]), ([[1.0, 2.0, 3.0]], [1.0, 2.0])])
def test_features_that_do_not_fit_theta_are_a_config_error(features, theta):
    with pytest.raises(ConfigError) as err:
        LinearEnvironment(features, theta, noise=0.1, rng=np.random.default_rng(0))
    assert str(err.value) == f"features have 3 columns but theta has {len(theta)} entries"


# --- the embedding environment: exact truth, estimated truth, and pulls ---

def test_an_expected_function_gives_the_exact_truth_per_arm_and_query():
    env = EmbeddingEnvironment(ARMS, DEMOS, QUERIES, uniform_noise, np.random.default_rng(0), expected=mean_dot)
    want = np.array([[mean_dot(q, DEMOS[m]) for q in QUERIES] for m in ARMS.members])
    assert env.n_arms == 3 and env.true_per_query.shape == (3, 3)
    np.testing.assert_array_equal(env.true_per_query, want)
    np.testing.assert_array_equal(env.true_means, want.mean(axis=1))
    assert env.truth_se.tolist() == [0.0, 0.0, 0.0] and env.truth_draws == 0


def by_hand_truth(seed, draws, blocks=1):
    """The estimate EmbeddingEnvironment must make: the truth's own stream seeded from the run's generator, draws in
    the order block, arm, query, draw; per (arm, query) the mean, and per arm sqrt(sum_q s_q^2 / n) / Q with s_q^2
    the unbiased variance."""
    truth_rng = np.random.default_rng(np.random.default_rng(seed).integers(2**32))
    values = np.concatenate([np.array([[[uniform_noise(q, DEMOS[m], truth_rng) for _ in range(draws)] for q in QUERIES]
                                       for m in ARMS.members]) for _ in range(blocks)], axis=2)
    draws *= blocks
    se = np.sqrt(values.var(axis=2, ddof=1).sum(axis=1) / draws) / len(QUERIES)
    return values.mean(axis=2), se


def test_without_expected_the_truth_averages_the_stated_draws_and_reports_its_standard_error():
    env = EmbeddingEnvironment(ARMS, DEMOS, QUERIES, uniform_noise, np.random.default_rng(3), truth_samples=40)
    means, se = by_hand_truth(3, 40)
    assert env.truth_draws == 40
    np.testing.assert_allclose(env.true_per_query, means, rtol=0, atol=1e-12)
    np.testing.assert_allclose(env.true_means, means.mean(axis=1), rtol=0, atol=1e-12)
    np.testing.assert_allclose(env.truth_se, se, rtol=1e-9)
    # uniform +-0.2 has variance 0.04 / 3: each arm's error is sqrt(3 * 0.0133 / 40) / 3, about 0.011
    assert np.all(np.abs(env.truth_se - np.sqrt(3 * 0.04 / 3 / 40) / 3) < 0.003)


def test_the_truth_takes_64_draws_unless_told_and_two_draws_give_the_unbiased_variance():
    env = EmbeddingEnvironment(ARMS, DEMOS, QUERIES, uniform_noise, np.random.default_rng(3))
    means, se = by_hand_truth(3, 64)
    assert env.truth_draws == 64
    np.testing.assert_allclose(env.true_per_query, means, rtol=0, atol=1e-12)
    two = EmbeddingEnvironment(ARMS, DEMOS, QUERIES, uniform_noise, np.random.default_rng(3), truth_samples=2)
    np.testing.assert_allclose(two.truth_se, by_hand_truth(3, 2)[1], rtol=1e-9)  # n - 1 = 1 in the denominator


def test_auto_draws_blocks_until_every_arm_s_error_is_below_the_target():
    # after one block of 64 the error is about 0.0083, after two about 0.0059, after three about 0.0048
    env = EmbeddingEnvironment(ARMS, DEMOS, QUERIES, uniform_noise, np.random.default_rng(3), truth_samples="auto",
                               target_se=0.007)
    means, se = by_hand_truth(3, TRUTH_BLOCK, blocks=2)
    assert env.truth_draws == 2 * TRUTH_BLOCK and se.max() < 0.007
    assert by_hand_truth(3, TRUTH_BLOCK)[1].max() >= 0.007  # one block was not enough
    np.testing.assert_allclose(env.true_per_query, means, rtol=0, atol=1e-12)
    np.testing.assert_allclose(env.truth_se, se, rtol=1e-9)


def test_auto_stops_at_once_on_a_noise_free_reward_and_at_the_cap_on_an_unreachable_target():
    exact = EmbeddingEnvironment(ARMS, DEMOS, QUERIES, lambda q, d, rng: mean_dot(q, d), np.random.default_rng(0),
                                 truth_samples="auto", target_se=1e-6)
    assert exact.truth_draws == TRUTH_BLOCK and exact.truth_se.max() < 1e-6
    one = ArmSet(members=np.array([[0, 1]]), clusters=np.array([0, 1]))
    capped = EmbeddingEnvironment(one, DEMOS, QUERIES[:1], uniform_noise, np.random.default_rng(0),
                                  truth_samples="auto", target_se=1e-6)
    assert capped.truth_draws == TRUTH_CAP  # the last block that fits under the cap, and no more
    assert 0.0 < capped.truth_se.max() < 0.003
    no_target = EmbeddingEnvironment(one, DEMOS, QUERIES[:1], uniform_noise, np.random.default_rng(0),
                                     truth_samples="auto")
    assert no_target.truth_draws == TRUTH_CAP  # no target given: as many draws as the cap allows


def test_a_pull_scores_the_arm_s_demonstrations_on_every_query_and_a_twin_has_the_same_truth_and_fresh_noise():
    env = EmbeddingEnvironment(ARMS, DEMOS, QUERIES, uniform_noise, np.random.default_rng(0), expected=mean_dot)
    pulled = env.pull(1)
    exact = np.array([mean_dot(q, DEMOS[[2, 3]]) for q in QUERIES])
    assert pulled.shape == (3,) and np.all(np.abs(pulled - exact) <= 0.2) and not np.array_equal(pulled, exact)
    a, b = env.with_rng(np.random.default_rng(7)), env.with_rng(np.random.default_rng(7))
    assert a is not env and a.rng is not env.rng and a.true_means is env.true_means
    np.testing.assert_array_equal(a.pull(2), b.pull(2))  # the noise is the twin's own generator's
    again = env.with_rng(np.random.default_rng(8)).pull(2)
    assert not np.array_equal(again, env.with_rng(np.random.default_rng(7)).pull(2))
    exactly = EmbeddingEnvironment(ARMS, DEMOS, QUERIES, lambda q, d, rng: mean_dot(q, d), np.random.default_rng(0),
                                   expected=mean_dot)
    np.testing.assert_array_equal(exactly.pull(0), exactly.true_per_query[0])


# --- the nonlinear landscape ---

def test_the_landscape_is_fixed_by_its_seed():
    a, b, c = HiddenNonlinearReward(4, seed=1), HiddenNonlinearReward(4, seed=1), HiddenNonlinearReward(4, seed=2)
    assert a.parts(QUERIES[0], DEMOS[:3]).tolist() == b.parts(QUERIES[0], DEMOS[:3]).tolist()
    assert not np.allclose(a.parts(QUERIES[0], DEMOS[:3]), c.parts(QUERIES[0], DEMOS[:3]))
    assert a.w_arm.shape == (4, 32) and a.v_arm.shape == (32,) and a.w_int.shape == (4, 32) and a.v_int.shape == (32,)
    assert a.noise == 0.1 and a.gain == 1.5 and a.center.tolist() == [0.0] * 4 and a.scale.tolist() == [1.0] * 4
    wide = HiddenNonlinearReward(4, seed=1, noise=0.3, hidden=8, gain=2.0)
    assert wide.w_arm.shape == (4, 8) and wide.noise == 0.3 and wide.gain == 2.0
    # every weight drawn N(0, 1): over 50 x 200 and 200 draws, each one's mean is near 0 and its spread near 1
    big = HiddenNonlinearReward(50, seed=3, hidden=200)
    for weights in (big.w_arm, big.v_arm, big.w_int, big.v_int):
        assert abs(weights.mean()) < 0.25 and 0.85 < weights.std() < 1.15
    assert not np.allclose(a.w_arm, a.w_int) and not np.allclose(a.v_arm, a.v_int)


def test_its_four_parts_are_quality_gated_diversity_relevance_and_the_query_interaction():
    reward = HiddenNonlinearReward(4, seed=0)
    q, demos = QUERIES[0], DEMOS[:3]
    m = demos.mean(axis=0)
    quality, gated, relevance, interaction = reward.parts(q, demos)
    assert quality == pytest.approx(np.maximum(m @ reward.w_arm, 0) @ reward.v_arm)
    assert relevance == pytest.approx(np.mean([d @ q for d in demos]))
    assert interaction == pytest.approx(np.maximum((q * m * 2.0) @ reward.w_int, 0) @ reward.v_int)  # sqrt(dim) = 2
    off_diagonal = np.mean([demos[i] @ demos[j] for i in range(3) for j in range(3) if i != j])
    assert gated == pytest.approx((1.0 - off_diagonal) * (1.0 + relevance))
    # identical unit demonstrations have no diversity; orthonormal ones have diversity 1, gated by relevance
    same = reward.parts(q, np.repeat(DEMOS[:1], 3, axis=0))
    assert same[1] == pytest.approx(0.0, abs=1e-12)
    basis = np.eye(4)[:3]
    assert reward.parts(q, basis)[1] == pytest.approx(1.0 + q[:3].mean())


def test_calibration_standardises_each_part_on_random_subsets_of_the_pool():
    pool, queries = unit_rows(40, 4, 5), unit_rows(10, 4, 6)
    reward = HiddenNonlinearReward(4, seed=0)
    assert reward.calibrate(pool, queries, k=3, rng=np.random.default_rng(9), samples=200) is reward
    rng = np.random.default_rng(9)
    draws = np.array([reward.parts(queries[rng.integers(10)], pool[rng.choice(40, 3, replace=False)])
                      for _ in range(200)])
    np.testing.assert_allclose(reward.center, draws.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(reward.scale, draws.std(axis=0) + 1e-9, rtol=1e-12)
    by_default = HiddenNonlinearReward(4, seed=0).calibrate(pool, queries, k=3, rng=np.random.default_rng(9))
    rng = np.random.default_rng(9)  # 400 samples by default
    draws = np.array([reward.parts(queries[rng.integers(10)], pool[rng.choice(40, 3, replace=False)])
                      for _ in range(400)])
    np.testing.assert_allclose(by_default.center, draws.mean(axis=0), rtol=1e-12)


def test_the_expected_reward_is_a_sigmoid_of_the_weighted_standardised_parts():
    reward = HiddenNonlinearReward(4, seed=0, gain=2.0)
    weights = np.array([1.0, 0.6, 0.6, 0.8]) / np.sqrt(2.36)
    for i in range(4):  # each part alone, one standard deviation above its centre
        reward.parts = lambda q, demos, i=i: np.eye(4)[i]
        assert reward.expected(QUERIES[0], DEMOS[:2]) == pytest.approx(1 / (1 + np.exp(-2.0 * weights[i])))
    reward.parts = lambda q, demos: np.array([3.0, 1.0, 5.0, -1.0])
    reward.center, reward.scale = np.array([1.0, 1.0, 1.0, 1.0]), np.array([2.0, 1.0, 4.0, 2.0])
    latent = np.array([1.0, 0.0, 1.0, -1.0]) @ weights
    assert reward.expected(QUERIES[0], DEMOS[:2]) == pytest.approx(1 / (1 + np.exp(-2.0 * latent)))
    assert isinstance(reward.expected(QUERIES[0], DEMOS[:2]), float)


def test_a_draw_is_the_expected_reward_plus_gaussian_noise_clipped_to_the_unit_interval():
    reward = HiddenNonlinearReward(4, seed=0, noise=0.1)
    reward.expected = lambda q, demos: 0.5
    draws = np.array([reward(QUERIES[0], DEMOS[:2], np.random.default_rng(s)) for s in range(3000)])
    assert abs(draws.mean() - 0.5) < 0.01 and abs(draws.std() - 0.1) < 0.01
    reward.expected = lambda q, demos: 0.97
    near_top = np.array([reward(QUERIES[0], DEMOS[:2], np.random.default_rng(s)) for s in range(3000)])
    assert near_top.max() == 1.0 and near_top.min() < 0.97 and (near_top == 1.0).mean() > 0.3
    reward.expected = lambda q, demos: 0.03
    near_bottom = np.array([reward(QUERIES[0], DEMOS[:2], np.random.default_rng(s)) for s in range(3000)])
    assert near_bottom.min() == 0.0 and (near_bottom == 0.0).mean() > 0.3
    reward.expected = lambda q, demos: 0.5
    for seed in range(5):  # the draw is the expected reward plus the generator's next normal, not minus it
        assert reward(QUERIES[0], DEMOS[:2], np.random.default_rng(seed)) == pytest.approx(
            0.5 + np.random.default_rng(seed).normal(0.0, 0.1))
    quiet = HiddenNonlinearReward(4, seed=0, noise=0.0)
    assert quiet(QUERIES[0], DEMOS[:2], np.random.default_rng(0)) == quiet.expected(QUERIES[0], DEMOS[:2])


# --- a user's reward module ---

def test_a_reward_module_gives_its_reward_and_its_expected_when_it_defines_one(tmp_path):
    with_expected = tmp_path / "a" / "reward.py"
    with_expected.parent.mkdir()
    with_expected.write_text("def reward(q, d, rng):\n    return 0.25\n\ndef expected(q, d):\n    return 0.5\n")
    alone = tmp_path / "b" / "reward.py"  # the same file name: each must load as its own module
    alone.parent.mkdir()
    alone.write_text("def reward(q, d, rng):\n    return 0.75\n\nexpected = 0.5  # not callable: no exact truth\n")
    bare = tmp_path / "bare.py"
    bare.write_text("def reward(q, d, rng):\n    return 1.0\n")
    fn, expected = load_reward_module(with_expected)
    assert fn(None, None, None) == 0.25 and expected(None, None) == 0.5
    other, expected = load_reward_module(str(alone))
    assert other(None, None, None) == 0.75 and expected is None
    assert fn.__module__ != other.__module__  # each file under its own module name, whatever its file name
    fn, expected = load_reward_module(bare)
    assert fn(None, None, None) == 1.0 and expected is None


@pytest.mark.parametrize("text, message", [
    (None, "reward module not found: {path}"),
    ("def reward(q, d, rng:\n", "reward module {path} failed to import: SyntaxError: "),
    ("raise ValueError('no table')\n", "reward module {path} failed to import: ValueError: no table"),
    ("def score(q, d, rng):\n    return 0.0\n",
     "reward module {path} defines no function reward(query_embedding, demo_embeddings, rng)"),
    ("reward = 0.5\n", "reward module {path} defines no function reward(query_embedding, demo_embeddings, rng)"),
])
def test_a_bad_reward_module_is_a_one_line_config_error(tmp_path, text, message):
    path = tmp_path / "reward.py"
    if text is not None:
        path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_reward_module(path)
    assert str(err.value).startswith(message.format(path=path)) and "\n" not in str(err.value)
    assert err.value.__context__ is None or err.value.__suppress_context__  # no chained traceback


# --- the recorded table's two protocols ---

def recorded_values(arms=2, items=4, samples=2):
    """values[a, i, s] = a + i / 10 + s / 100, in float32 as a table stores them (scaled into [0, 1])."""
    a, i, s = np.meshgrid(np.arange(arms), np.arange(items), np.arange(samples), indexing="ij")
    return ((a + i / 10 + s / 100) / 4).astype(np.float32)


def test_a_recorded_pull_draws_one_sample_per_row_independently_in_float64():
    values = recorded_values(samples=2)
    env = RecordedEnvironment(values, np.array([0, 2]), np.arange(4), np.random.default_rng(0))
    assert env.n_arms == 2 and env.target == "fixed set" and env.pool_means.dtype == np.float64 and env.true_means.dtype == np.float64
    np.testing.assert_allclose(env.true_means, values[:, [0, 2]].astype(np.float64).reshape(2, -1).mean(axis=1))
    np.testing.assert_allclose(env.pool_means, values.astype(np.float64).reshape(2, -1).mean(axis=1))
    pulls = np.array([env.pull(1) for _ in range(200)])
    assert pulls.dtype == np.float64 and pulls.shape == (200, 2)
    samples = np.rint((pulls * 4 - 1 - np.array([0.0, 0.2])) * 100)  # which sample each row drew
    assert set(np.unique(samples)) == {0.0, 1.0}
    assert (samples[:, 0] != samples[:, 1]).any()  # rows draw their samples independently
    assert env.harness_calls() == 200 * 2  # sampled answers: each pull asks anew
    one = RecordedEnvironment(recorded_values(samples=1), np.arange(4), np.arange(4), np.random.default_rng(0))
    for arm in (0, 0, 1, 0):
        one.pull(arm)
    assert one.target == "pool" and one.harness_calls() == 2 * 4  # deterministic answers: a repeat is cached


def test_the_population_batch_must_lie_between_one_and_the_population():
    values = recorded_values(items=3, samples=2)  # 6 rewards an arm
    for batch in (1, 6):
        assert PopulationEnvironment(values, np.arange(3), batch, np.random.default_rng(0)).batch == batch
    for batch in (0, 7):
        with pytest.raises(ConfigError, match=r"--batch must be in \[1, 6\] \(the pool's items x samples\), got"):
            PopulationEnvironment(values, np.arange(3), batch, np.random.default_rng(0))


def test_population_pulls_walk_one_shared_order_in_float64_and_calls_count_what_was_asked():
    values = recorded_values(arms=2, items=3, samples=2)
    env = PopulationEnvironment(values, np.arange(3), 4, np.random.default_rng(0))
    first, second = env.pull(0), env.pull(0)
    assert first.dtype == np.float64 and first.shape == (4,)
    seen = np.concatenate([first, second])[:6]  # the first 6 of 8 rewards: the whole population once
    np.testing.assert_allclose(np.sort(seen), np.sort(values[0].astype(np.float64).ravel()))
    np.testing.assert_array_equal(np.concatenate([first, second])[6:], first[:2])  # then the same order again
    np.testing.assert_allclose(env.pull(1) - 0.25, first, atol=1e-6)  # arm 1's first batch: the same (item, sample) pairs
    assert env.pulls_of.dtype.kind == "i" and env.pulls_of.tolist() == [2, 1] and env.harness_calls() == 3 * 4  # sampled answers: every pull asks
    cached = PopulationEnvironment(recorded_values(arms=2, items=3, samples=1), np.arange(3), 2,
                                   np.random.default_rng(0))
    for _ in range(5):  # 10 rewards asked of a population of 3: 3 calls, the rest cached
        cached.pull(0)
    cached.pull(1)
    assert cached.harness_calls() == 3 + 2
