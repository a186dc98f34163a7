"""SIMULATED testbed families for the bandit: known truth, a new random instance per run.

Every family turns real pool and validation embeddings into a table p[a, q] of success probabilities (arm a's
expected reward on validation query q). Each family first builds a latent score from standardised parts, then
calibrates it the same way: p = clip(a + b * latent, 0.01, 0.99), with a and b solved so that the arm means (mean
over queries) span [0.2, 0.9], so that epsilon = 0.1 separates good from bad arms on every family. A pull draws
each query's reward from Beta(kappa p, kappa (1 - p)): bounded in [0, 1] like BERTScore or accuracy, with mean
exactly p, so the true arm means are exact (no clipped noise). kappa = 1 / (4 noise^2) - 1 gives a per-query
standard deviation of `noise` at p = 1/2. Under the population protocol (`bench simulate --protocol population`) an
instance is realized once, one Beta draw per (arm, query) (`realize_population`), and that finite pool, sampled
without replacement, is the population whose mean is the truth.

The families (one paragraph each in dearicl/README.md):
- nonlinear: a random ReLU-net function of the query and the arm's MEAN demonstration embedding (quality,
  diversity gated by relevance, relevance, a query x arm interaction): DEARICL's own input, so its model class.
- slots: exactly linear in CASE's slot features (slot j = mean cosine of the j-th demonstration to the
  validation queries), no intercept, the same for every query: CASE's model is right.
- pairwise: demonstrations interact. Each example and query has a soft profile over 8 random "skills"; the reward
  is the query-weighted coverage of the skills the query needs (max over demonstrations: redundancy adds
  nothing, complementary demonstrations add up) minus a penalty on near-duplicate pairs. Not a function of the
  mean embedding.
- order: the same sets appear in 4 orders. Later positions weigh more (recency), and the most relevant
  demonstration helps most in the last position. Arms with one mean embedding score differently.
- latent: every pool example has a hidden quality drawn independently of its embedding (a wrong rationale, a
  typo); the reward is mostly the arm's mean hidden quality plus a little relevance. No embedding model can
  recover it except by pulling.
- difficulty: the realistic structure of the recorded tables, and the exception to the calibration above: a
  shared per-query difficulty dominates (p = sigmoid(d_q + c s_a)) and the arm means span only 10 points, so
  epsilon 0.02-0.03 is the scale at which arms differ.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bench.errors import ConfigError
from dearicl.arms import ArmSet, build_arms, slot_similarity_features
from dearicl.environments import Simulated

FAMILIES = ("nonlinear", "slots", "pairwise", "order", "latent", "difficulty")
DIFFICULTY_SPREAD = 0.10  # the difficulty family: arm means span 10 points, as arms differ on real tasks
SPREAD = (0.2, 0.9)  # calibrated range of the arm means
ORDERS_PER_SET = 4  # the order family: each set of demonstrations appears in this many orders


@dataclass
class Instance:
    """One random testbed: its arms and the success probability of each (arm, validation query)."""

    family: str
    arms: ArmSet
    p: np.ndarray  # [n_arms, n_queries]

    @property
    def true_means(self) -> np.ndarray:
        return self.p.mean(axis=1)


def check_noise(noise: float) -> None:
    if not 0 < noise < 0.5:
        raise ConfigError(f"--noise must be in (0, 0.5) for Beta rewards in [0, 1], got {noise}")


def beta_concentration(noise: float) -> float:
    """kappa of the Beta(kappa p, kappa (1 - p)) rewards: standard deviation `noise` at p = 1/2."""
    check_noise(noise)
    return 1.0 / (4.0 * noise**2) - 1.0


def realize_population(p: np.ndarray, noise: float, rng: np.random.Generator) -> np.ndarray:
    """One Beta reward per (arm, query), as one pull of every arm would draw: a SIMULATED finite population
    [arms, queries, 1] for the population protocol, whose truth is the mean of these very rewards."""
    kappa = beta_concentration(noise)
    return rng.beta(kappa * p, kappa * (1.0 - p))[:, :, None]


class TableEnvironment(Simulated):
    """A SIMULATED environment over an instance: a pull draws one Beta reward per validation query."""

    def __init__(self, p: np.ndarray, noise: float, rng: np.random.Generator):
        self.p, self.rng = p, rng
        self.kappa = beta_concentration(noise)
        self.n_arms = len(p)
        self.true_means = p.mean(axis=1)

    def pull(self, arm: int) -> np.ndarray:
        return self.rng.beta(self.kappa * self.p[arm], self.kappa * (1.0 - self.p[arm]))


def calibrate(latent: np.ndarray) -> np.ndarray:
    """p = clip(a + b latent, 0.01, 0.99) with (a, b) solved so that the arm means span SPREAD."""
    from scipy.optimize import least_squares

    low, high = SPREAD

    def table(ab):
        return np.clip(ab[0] + ab[1] * latent, 0.01, 0.99)

    def miss(ab):
        means = table(ab).mean(axis=1)
        return [means.min() - low, means.max() - high]

    means = latent.mean(axis=1)
    scale = (high - low) / max(float(np.ptp(means)), 1e-12)
    start = np.array([low - scale * means.min(), scale])  # exact when nothing is clipped
    return table(least_squares(miss, start, x_scale=np.abs(start) + 1e-3).x)


def zscore(table: np.ndarray) -> np.ndarray:
    return (table - table.mean()) / (table.std() + 1e-12)


def relu_net(rng: np.random.Generator, dim: int, hidden: int = 32):
    w, v = rng.normal(0, 1, (dim, hidden)), rng.normal(0, 1, hidden)
    return lambda x: np.maximum(x @ w, 0.0) @ v


def nonlinear_latent(rng, arms: ArmSet, demo: np.ndarray, queries: np.ndarray) -> np.ndarray:
    dim = demo.shape[1]
    members = demo[arms.members]  # [K, k, d]
    mean = members.mean(axis=1)  # [K, d]
    k = members.shape[1]
    quality = relu_net(rng, dim)(mean)  # [K]
    sims = np.einsum("akd,ald->akl", members, members)
    diversity = 1.0 - (sims.sum(axis=(1, 2)) - k) / (k * (k - 1))  # [K]
    relevance = np.einsum("akd,qd->aq", members, queries) / k  # [K, Q]
    interaction = relu_net(rng, dim)(mean[:, None, :] * queries[None, :, :] * np.sqrt(dim))  # [K, Q]
    parts = [np.repeat(quality[:, None], len(queries), 1), diversity[:, None] * (1.0 + relevance), relevance,
             interaction]
    weights = np.array([1.0, 0.6, 0.6, 0.8])
    return sum(w * zscore(part) for w, part in zip(weights, parts))


def slots_table(rng, arms: ArmSet, demo: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """mu_a = theta^T x_a exactly, with x_a CASE's slot features; theta chosen so that mu spans SPREAD."""
    x = slot_similarity_features(arms, demo, queries)  # [K, k]
    s = x @ rng.normal(0, 1, x.shape[1])
    ones = np.linalg.lstsq(x, np.ones(len(x)), rcond=None)[0]  # x @ ones ~ 1: an offset inside the span of x
    c = x @ ones
    low, high = SPREAD
    lo_arm, hi_arm = int(np.argmin(s)), int(np.argmax(s))
    for _ in range(20):  # mu = alpha s + beta c; solve for its lowest and highest arm, until they stay put
        alpha, beta = np.linalg.solve([[s[lo_arm], c[lo_arm]], [s[hi_arm], c[hi_arm]]], [low, high])
        mu = alpha * s + beta * c
        if (int(np.argmin(mu)), int(np.argmax(mu))) == (lo_arm, hi_arm):
            break
        lo_arm, hi_arm = int(np.argmin(mu)), int(np.argmax(mu))
    mu = np.clip(mu, 0.01, 0.99)
    return np.repeat(mu[:, None], len(queries), axis=1)


def pairwise_latent(rng, arms: ArmSet, demo: np.ndarray, queries: np.ndarray, skills: int = 8) -> np.ndarray:
    w = rng.normal(0, 1, (demo.shape[1], skills)) * 3.0

    def profile(x):
        z = x @ w
        z = np.exp(z - z.max(axis=-1, keepdims=True))
        return z / z.sum(axis=-1, keepdims=True)

    members = demo[arms.members]  # [K, k, d]
    best = profile(members).max(axis=1)  # [K, S]: the best demonstration per skill
    coverage = best @ profile(queries).T  # [K, Q]
    cos = np.einsum("akd,ald->akl", members, members)
    pool_cos = demo @ demo.T
    threshold = np.quantile(pool_cos[np.triu_indices(len(demo), 1)], 0.9)
    upper = np.triu(np.ones(cos.shape[1:], dtype=bool), 1)
    redundancy = np.maximum(cos[:, upper] - threshold, 0.0).sum(axis=1)  # [K]
    return zscore(coverage) - 0.5 * zscore(np.repeat(redundancy[:, None], len(queries), 1))


def order_latent(rng, arms: ArmSet, demo: np.ndarray, queries: np.ndarray) -> np.ndarray:
    members = demo[arms.members]  # [K, k, d] in prompt order
    k = members.shape[1]
    position = 2.0 ** np.arange(k)
    position /= position.sum()  # recency: the last demonstration weighs most
    quality = np.tanh(3.0 * members @ rng.normal(0, 1, demo.shape[1]) / np.sqrt(demo.shape[1]) * 4)  # [K, k]
    relevance = np.einsum("akd,qd->aqk", members, queries)  # [K, Q, k]
    last_is_best = relevance[:, :, -1] - relevance.max(axis=2)  # <= 0; 0 when the most relevant comes last
    weighted = np.repeat((quality @ position)[:, None], len(queries), 1)
    return zscore(weighted) + zscore(last_is_best)


def latent_latent(rng, arms: ArmSet, demo: np.ndarray, queries: np.ndarray) -> np.ndarray:
    hidden = rng.normal(0, 1, len(demo))  # per-example quality, independent of the embedding
    quality = hidden[arms.members].mean(axis=1)  # [K]
    relevance = np.einsum("akd,qd->aq", demo[arms.members], queries) / arms.members.shape[1]
    return zscore(np.repeat(quality[:, None], len(queries), 1)) + 0.3 * zscore(relevance)


def difficulty_table(rng, arms: ArmSet, demo: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """p[a, q] = sigmoid(d_q + c s_a): a per-query difficulty d_q ~ N(0, 1.5^2) shared by every arm, which dominates as
    on the recorded tables (sd of the items' mean reward 0.29-0.38 on the 0/1 tasks), plus an arm effect s_a (the
    nonlinear family's embedding-driven latent, averaged over queries), scaled so the arm means span 10 points."""
    from scipy.optimize import brentq

    d = rng.normal(0.0, 1.5, len(queries))
    s = zscore(nonlinear_latent(rng, arms, demo, queries).mean(axis=1))

    def table(c: float) -> np.ndarray:
        return 1.0 / (1.0 + np.exp(-(d[None, :] + c * s[:, None])))

    c = brentq(lambda c: float(np.ptp(table(c).mean(axis=1))) - DIFFICULTY_SPREAD, 1e-6, 50.0)
    return np.clip(table(c), 0.01, 0.99)


def order_arms(labels: np.ndarray, demo: np.ndarray, n_arms: int, k: int, rng: np.random.Generator) -> ArmSet:
    """n_arms / ORDERS_PER_SET sets, each in ORDERS_PER_SET distinct random orders."""
    sets = build_arms(demo, max(1, n_arms // ORDERS_PER_SET), k, int(rng.integers(2**31)), labels=labels)
    rows = []
    for members in sets.members:
        orders: set[tuple[int, ...]] = set()
        while len(orders) < ORDERS_PER_SET:
            orders.add(tuple(int(v) for v in rng.permutation(members)))
        rows.extend(sorted(orders))
    return ArmSet(members=np.array(rows, dtype=np.int64), clusters=labels)


LATENTS = {"nonlinear": nonlinear_latent, "pairwise": pairwise_latent, "order": order_latent,
           "latent": latent_latent}


def make_instance(family: str, demo: np.ndarray, queries: np.ndarray, labels: np.ndarray, n_arms: int, k: int,
                  seed: int | list[int]) -> Instance:
    """A new random instance of a family: arms (one example per KMeans cluster) and its p table."""
    if family not in FAMILIES:
        raise ConfigError(f"unknown testbed family '{family}'; choose one of {', '.join(FAMILIES)}")
    rng = np.random.default_rng(seed)
    if family == "order":
        arms = order_arms(labels, demo, n_arms, k, rng)
    else:
        arms = build_arms(demo, n_arms, k, int(rng.integers(2**31)), labels=labels)
    if family == "slots":
        p = slots_table(rng, arms, demo, queries)
    elif family == "difficulty":
        p = difficulty_table(rng, arms, demo, queries)
    else:
        p = calibrate(LATENTS[family](rng, arms, demo, queries))
    return Instance(family, arms, p)
