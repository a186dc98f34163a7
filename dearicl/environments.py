"""Environments for the bandit: the LLM (through the counted oracle) and simulated testbeds.

Simulated environments know their truth (true mean reward per arm), so regret and top-m errors
are exact. Everything they produce is labelled "simulated" by the simulate command.
"""
from __future__ import annotations

import importlib.util
import time
from pathlib import Path
from typing import Callable

import numpy as np

from bench.errors import ConfigError
from dearicl.arms import ArmSet


class OracleEnvironment:
    """A pull = the arm's demonstrations evaluated on every validation item (one LLM call each)."""

    true_means = None

    def __init__(self, oracle, pool: list, arms: ArmSet, validation: list):
        self.oracle, self.pool, self.arm_set, self.validation = oracle, pool, arms, validation
        self.n_arms = len(arms)
        self._seconds = 0.0

    def demos(self, arm: int) -> list:
        return [self.pool[i] for i in self.arm_set.members[arm]]

    def pull(self, arm: int) -> np.ndarray:
        began = time.perf_counter()
        try:
            return self.oracle.pull(self.demos(arm), self.validation)
        finally:
            self._seconds += time.perf_counter() - began

    def llm_calls(self) -> int:
        return self.oracle.calls

    def llm_seconds(self) -> float:
        return self._seconds


class _Simulated:
    true_means: np.ndarray

    def llm_calls(self) -> int:
        return 0

    def llm_seconds(self) -> float:
        return 0.0


class LinearEnvironment(_Simulated):
    """Arms = rows of a feature matrix; reward = x^T theta + N(0, noise^2) (one 'query')."""

    def __init__(self, features: np.ndarray, theta: np.ndarray, noise: float, rng: np.random.Generator):
        self.x = np.asarray(features, dtype=np.float64)
        theta = np.asarray(theta, dtype=np.float64)
        if self.x.ndim != 2 or self.x.shape[1] != len(theta):
            raise ConfigError(f"features have {self.x.shape[-1]} columns but theta has {len(theta)} entries")
        self.n_arms = len(self.x)
        self.true_means = self.x @ theta
        self.noise, self.rng = noise, rng

    def pull(self, arm: int) -> np.ndarray:
        return np.array([self.true_means[arm] + self.rng.normal(0.0, self.noise)])


RewardFn = Callable[[np.ndarray, np.ndarray, np.random.Generator], float]


class EmbeddingEnvironment(_Simulated):
    """Arms from real pool examples; per-query reward from a function of the embeddings.

    reward(query_embedding [d], demo_embeddings [k, d], rng) -> float, noise included. True means
    come from `expected` when given (noise-free), else from averaging `truth_samples` draws.
    """

    def __init__(self, arms: ArmSet, demo_embeddings: np.ndarray, query_embeddings: np.ndarray, reward: RewardFn,
                 rng: np.random.Generator, expected: Callable[[np.ndarray, np.ndarray], float] | None = None,
                 truth_samples: int = 64):
        self.arm_set, self.demo_emb, self.q = arms, demo_embeddings, query_embeddings
        self.n_arms = len(arms)
        self.reward, self.rng = reward, rng
        truth_rng = np.random.default_rng(rng.integers(2**32))
        self.true_per_query = np.array([
            [expected(q, self.demo_emb[arms.members[a]]) if expected is not None else
             np.mean([reward(q, self.demo_emb[arms.members[a]], truth_rng) for _ in range(truth_samples)])
             for q in self.q] for a in range(self.n_arms)])  # [n_arms, n_queries]
        self.true_means = self.true_per_query.mean(axis=1)

    def pull(self, arm: int) -> np.ndarray:
        demos = self.demo_emb[self.arm_set.members[arm]]
        return np.array([float(self.reward(q, demos, self.rng)) for q in self.q])


class HiddenNonlinearReward:
    """The `--env nonlinear` landscape: query-dependent, with interactions between demonstrations.

    expected(q, S) = sigmoid(2-layer random net on [q, mean S, q * mean S]) blended with a diversity
    bonus (1 - mean pairwise cosine inside S) that only pays off when S is relevant to q. Rewards are
    the expectation plus Gaussian noise, clipped to [0, 1] like BERTScore.
    """

    def __init__(self, dim: int, seed: int, noise: float = 0.1, hidden: int = 32):
        rng = np.random.default_rng(seed)
        self.w1 = rng.normal(0, 1 / np.sqrt(3 * dim), (3 * dim, hidden))
        self.w2 = rng.normal(0, 2 / np.sqrt(hidden), hidden)
        self.noise = noise

    def expected(self, q: np.ndarray, demos: np.ndarray) -> float:
        m = demos.mean(axis=0)
        h = np.maximum(np.concatenate([q, m, q * m * np.sqrt(len(q))]) @ self.w1, 0.0)
        net = 1.0 / (1.0 + np.exp(-(h @ self.w2)))
        sims = demos @ demos.T
        k = len(demos)
        diversity = 1.0 - (sims.sum() - np.trace(sims)) / (k * (k - 1))
        relevance = float(np.clip(demos @ q, 0, 1).mean())
        return float(np.clip(0.6 * net + 0.4 * diversity * relevance * 2, 0.0, 1.0))

    def __call__(self, q: np.ndarray, demos: np.ndarray, rng: np.random.Generator) -> float:
        return float(np.clip(self.expected(q, demos) + rng.normal(0.0, self.noise), 0.0, 1.0))


def load_reward_module(path: str | Path) -> RewardFn:
    """A user's Python file defining reward(query_embedding, demo_embeddings, rng) -> float."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"reward module not found: {path}")
    spec = importlib.util.spec_from_file_location(f"user_reward_{abs(hash(str(path)))}", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise ConfigError(f"reward module {path} failed to import: {type(exc).__name__}: {exc}") from None
    fn = getattr(module, "reward", None)
    if not callable(fn):
        raise ConfigError(f"reward module {path} defines no function reward(query_embedding, demo_embeddings, rng)")
    return fn
