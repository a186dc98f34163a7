"""Environments for the bandit: the LLM (through the counted oracle) and simulated testbeds.

Simulated environments know their truth (true mean reward per arm), so regret and top-m errors
are exact. Everything they produce is labelled "simulated" by the simulate command.
"""
from __future__ import annotations

import copy
import importlib.util
from pathlib import Path
from typing import Callable

import numpy as np

from bench.errors import ConfigError
from dearicl.arms import ArmSet
from dearicl.confidence import snap_rounding


class OracleEnvironment:
    """A pull = the arm's demonstrations evaluated on every validation item (one LLM call each)."""

    true_means = None

    def __init__(self, oracle, pool: list, arms: ArmSet, validation: list):
        self.oracle, self.pool, self.arm_set, self.validation = oracle, pool, arms, validation
        self.n_arms = len(arms)

    def demos(self, arm: int) -> list:
        return [self.pool[i] for i in self.arm_set.members[arm]]

    def pull(self, arm: int) -> np.ndarray:
        return self.oracle.pull(self.demos(arm), self.validation)

    def llm_calls(self) -> int:
        return self.oracle.calls

    def llm_seconds(self) -> float:
        return self.oracle.llm_seconds


class Simulated:
    """Base of the simulated environments: no LLM behind them."""

    true_means: np.ndarray

    def llm_calls(self) -> int:
        return 0

    def llm_seconds(self) -> float:
        return 0.0


class LinearEnvironment(Simulated):
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
TRUTH_BLOCK = 64  # draws per (arm, query) added at a time by truth_samples="auto"
TRUTH_CAP = 4096  # the most draws per (arm, query) "auto" takes


class EmbeddingEnvironment(Simulated):
    """Arms from real pool examples; per-query reward from a function of the embeddings.

    reward(query_embedding [d], demo_embeddings [k, d], rng) -> float, noise included. True means come from
    `expected` when given (noise-free, exact: truth_se 0), else from averaging draws: `truth_samples` of them per
    (arm, query), or with "auto" blocks of TRUTH_BLOCK until every arm's standard error is below `target_se` (at most
    TRUTH_CAP). `truth_se` is each arm's standard error of its true mean: the truth's own noise, which a judgement of
    eps-error at epsilon must be far below (bench simulate marks it not judged otherwise).
    """

    def __init__(self, arms: ArmSet, demo_embeddings: np.ndarray, query_embeddings: np.ndarray, reward: RewardFn,
                 rng: np.random.Generator, expected: Callable[[np.ndarray, np.ndarray], float] | None = None,
                 truth_samples: int | str = 64, target_se: float = 0.0):
        self.arm_set, self.demo_emb, self.q = arms, demo_embeddings, query_embeddings
        self.n_arms = len(arms)
        self.reward, self.rng = reward, rng
        if expected is not None:
            self.true_per_query = np.array([[float(expected(q, self.demo_emb[arms.members[a]])) for q in self.q]
                                            for a in range(self.n_arms)])  # [n_arms, n_queries]
            self.truth_se, self.truth_draws = np.zeros(self.n_arms), 0
        else:
            self._estimate_truth(np.random.default_rng(rng.integers(2**32)), truth_samples, target_se)
        self.true_means = self.true_per_query.mean(axis=1)

    def _estimate_truth(self, truth_rng: np.random.Generator, samples: int | str, target_se: float) -> None:
        """Per (arm, query) means of draws; an arm's standard error sqrt(sum_q s_q^2 / n) / Q."""
        auto = samples == "auto"
        block = TRUTH_BLOCK if auto else int(samples)
        sums = np.zeros((self.n_arms, len(self.q)))
        squares = np.zeros_like(sums)
        drawn = 0
        while True:
            for a in range(self.n_arms):
                demos = self.demo_emb[self.arm_set.members[a]]
                for j, q in enumerate(self.q):
                    values = np.array([float(self.reward(q, demos, truth_rng)) for _ in range(block)])
                    sums[a, j] += values.sum()
                    squares[a, j] += np.square(values).sum()
            drawn += block
            means = sums / drawn
            variance = np.maximum(squares / drawn - means**2, 0.0) * drawn / max(drawn - 1, 1)
            self.truth_se = np.sqrt(variance.sum(axis=1) / drawn) / len(self.q)
            if not auto or self.truth_se.max() < target_se or drawn + block > TRUTH_CAP:
                break
        self.true_per_query, self.truth_draws = means, drawn

    def with_rng(self, rng: np.random.Generator) -> "EmbeddingEnvironment":
        """The same arms and truth with fresh noise (one simulated run)."""
        twin = copy.copy(self)
        twin.rng = rng
        return twin

    def pull(self, arm: int) -> np.ndarray:
        demos = self.demo_emb[self.arm_set.members[arm]]
        return np.array([float(self.reward(q, demos, self.rng)) for q in self.q])


class HiddenNonlinearReward:
    """The `--env nonlinear` landscape: query-dependent, with interactions between demonstrations.

    A latent score adds four standardised parts: a random ReLU net of the arm's mean embedding (arm
    quality no linear model of slot similarities can express), the arm's diversity gated by its
    relevance to the query (an interaction between demonstrations), the mean relevance cos(q, d_j),
    and a random net of q * mean(S) (which arm is good depends on the query). expected(q, S) =
    sigmoid(gain * latent); rewards add Gaussian noise and are clipped to [0, 1] like BERTScore.
    `calibrate` standardises each part on random subsets of the real pool, so the spread of rewards
    is the same whatever the encoder or task.
    """

    def __init__(self, dim: int, seed: int, noise: float = 0.1, hidden: int = 32, gain: float = 1.5):
        rng = np.random.default_rng(seed)
        self.w_arm = rng.normal(0, 1, (dim, hidden))
        self.v_arm = rng.normal(0, 1, hidden)
        self.w_int = rng.normal(0, 1, (dim, hidden))
        self.v_int = rng.normal(0, 1, hidden)
        self.noise, self.gain = noise, gain
        self.center = np.zeros(4)
        self.scale = np.ones(4)

    def parts(self, q: np.ndarray, demos: np.ndarray) -> np.ndarray:
        m = demos.mean(axis=0)
        quality = np.maximum(m @ self.w_arm, 0.0) @ self.v_arm
        k = len(demos)
        sims = demos @ demos.T
        diversity = 1.0 - (sims.sum() - np.trace(sims)) / (k * (k - 1))
        relevance = float((demos @ q).mean())
        interaction = np.maximum((q * m * np.sqrt(len(q))) @ self.w_int, 0.0) @ self.v_int
        return np.array([quality, diversity * (1.0 + relevance), relevance, interaction])

    def calibrate(self, demo_embeddings: np.ndarray, query_embeddings: np.ndarray, k: int,
                  rng: np.random.Generator, samples: int = 400) -> "HiddenNonlinearReward":
        draws = np.array([self.parts(query_embeddings[rng.integers(len(query_embeddings))],
                                     demo_embeddings[rng.choice(len(demo_embeddings), k, replace=False)])
                          for _ in range(samples)])
        self.center, self.scale = draws.mean(axis=0), draws.std(axis=0) + 1e-9
        return self

    def expected(self, q: np.ndarray, demos: np.ndarray) -> float:
        z = (self.parts(q, demos) - self.center) / self.scale
        latent = z @ np.array([1.0, 0.6, 0.6, 0.8]) / np.sqrt(1.0 + 0.36 + 0.36 + 0.64)
        return float(1.0 / (1.0 + np.exp(-self.gain * latent)))

    def __call__(self, q: np.ndarray, demos: np.ndarray, rng: np.random.Generator) -> float:
        return float(np.clip(self.expected(q, demos) + rng.normal(0.0, self.noise), 0.0, 1.0))


def load_reward_module(path: str | Path) -> tuple[RewardFn, Callable | None]:
    """A user's Python file defining reward(query_embedding, demo_embeddings, rng) -> float, and optionally
    expected(query_embedding, demo_embeddings) -> float, the noise-free mean (then the truth is exact)."""
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
    expected = getattr(module, "expected", None)
    return fn, expected if callable(expected) else None


class RecordedEnvironment:
    """A pull replayed from a recorded reward table (bench/reward_table.py): REAL LLM rewards, recorded once.

    The bandit sees a fixed set of validation items (its `rows` of the table's validation pool, as a run with
    --n-val sees its items); a pull returns the arm's recorded reward on each of them, one of the recorded samples
    drawn at random per item. Two targets, both exact:
    - `true_means`, the FIXED SET's: each arm's mean over the rows pulled and every recorded sample. It is what a
      pull estimates without bias, so the gap rule and every certificate on this protocol estimate it: eps-error,
      regret and width coverage are judged against it;
    - `pool_means`, the POOL's: the mean over the whole validation pool. Ten items cannot tell it exactly, so even an
      oracle that knows `true_means` misses it (simulate reports that oracle's eps-error as the protocol's floor);
      the population protocol (PopulationEnvironment) is the one that estimates it."""

    def __init__(self, values: np.ndarray, rows: np.ndarray, pool: np.ndarray, rng: np.random.Generator):
        # a pull's rewards are snapped into [0, 1] before any sequence sees them (BERTScore F1 1.0000001): the truth is
        # the mean of the same values, or an exact interval would miss it by the excess (coverage 0.2 on WMT19)
        values = snap_rounding(values)
        self.values, self.rows, self.rng = values, np.asarray(rows), rng  # values: [arms, items, samples]
        self.n_arms = len(values)
        # in float64: a float32 mean (0.42 -> 0.41999998) would fail exact coverage checks against exact intervals
        self.pool_means = values[:, pool].reshape(len(values), -1).astype(np.float64).mean(axis=1)
        self.true_means = values[:, self.rows].reshape(len(values), -1).astype(np.float64).mean(axis=1)
        self.target = "pool" if set(self.rows.tolist()) == set(np.asarray(pool).tolist()) else "fixed set"
        self.sampled_pulls, self.arms_pulled = 0, set()

    def pull(self, arm: int) -> np.ndarray:
        samples = self.rng.integers(self.values.shape[2], size=len(self.rows))
        self.sampled_pulls += 1
        self.arms_pulled.add(int(arm))
        return self.values[arm, self.rows, samples].astype(np.float64)

    def harness_calls(self) -> int:
        """The LLM calls these pulls would cost the harness: with sampled answers every pull asks anew; with
        deterministic ones (one recorded sample) a repeat is answered from the cache."""
        pulls = self.sampled_pulls if self.values.shape[2] > 1 else len(self.arms_pulled)
        return pulls * len(self.rows)

    def llm_calls(self) -> int:
        return 0

    def llm_seconds(self) -> float:
        return 0.0


class PopulationEnvironment(RecordedEnvironment):
    """The population protocol on a recorded table: the target is each arm's mean over the WHOLE validation pool and
    every recorded sample (N = items x samples rewards per arm), and pulls sample that population without
    replacement, with common random numbers. One seeded shuffle of the N (item, sample) pairs is drawn per run; the
    t-th pull of ANY arm returns batch t of it (the same items for every arm, so arms are compared on the same
    queries), and an arm that has seen all N starts the same order again. A without-replacement confidence sequence
    (`cs="wor"`) then targets the pool mean, and is exact once an arm has seen the whole population."""

    def __init__(self, values: np.ndarray, pool: np.ndarray, batch: int, rng: np.random.Generator):
        super().__init__(values, pool, pool, rng)
        samples = values.shape[2]
        self.population = len(pool) * samples
        if not 1 <= batch <= self.population:
            raise ConfigError(f"--batch must be in [1, {self.population}] (the pool's items x samples), got {batch}")
        order = rng.permutation(self.population)
        self.order_items, self.order_samples = np.asarray(pool)[order // samples], order % samples
        self.batch = batch
        self.pulls_of = np.zeros(len(values), dtype=np.int64)

    def pull(self, arm: int) -> np.ndarray:
        start = int(self.pulls_of[arm]) * self.batch
        idx = np.arange(start, start + self.batch) % self.population
        self.pulls_of[arm] += 1  # harness_calls counts from pulls_of alone
        return self.values[arm, self.order_items[idx], self.order_samples[idx]].astype(np.float64)

    def harness_calls(self) -> int:
        """Each (arm, item, sample) asked once is one LLM call; an arm's second pass over the population is cached
        when answers are deterministic (one sample), asked anew otherwise."""
        if self.values.shape[2] > 1:
            return int(self.pulls_of.sum()) * self.batch
        return int(np.minimum(self.pulls_of * self.batch, self.population).sum())
