"""BRIDGE (Wan et al., ICLR 2025, "From Few to Many: Self-Improving Many-Shot Reasoners Through Iterative
Optimization and Generation"), run at k-shot scale.

BRIDGE alternates two steps over a set of candidate demonstrations drawn from the pool:
- optimize: Bayesian optimisation of which candidates to show. A Gaussian process (Matern + white noise) on
  binary inclusion vectors models the objective, the mean BERTScore reward on the validation items; new subsets
  are chosen by expected improvement (or UCB) over random subsets and single-swap neighbours of the incumbent.
- generate: with the best subset as demonstrations, the LLM re-answers every candidate; a candidate it answers
  correctly gets the model-generated rationale in place of its current one (the "self-improving" step).
`rounds` optimize -> generate rounds end with a final optimize; the best subset scored is used for every query.

Adaptation (no public code exists): the paper optimises a variable-size many-shot subset and expands the
demonstrations back to many shots; here every subset has exactly k members and the n_candidates candidates are a
seeded random sample of the pool, so "expanding" means improving the rationales of that fixed candidate set.
A candidate answered wrongly keeps its current rationale; one never sees itself as a demonstration while it is
re-answered (it could copy). Tasks without rationales (translation) skip the generate step. Each optimize keeps
the scores of subsets whose rationales did not change and re-scores the incumbent first if they did.
Demonstrations keep pool order, so the prompt scored on validation is exactly the one used at test time.
Under --llm-budget the best subset scored so far is used (a warning on the result row); with none scored
the fit fails.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, replace

import numpy as np
from scipy.stats import norm
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel
from threadpoolctl import threadpool_limits

from bench.errors import BudgetExhausted, ConfigError, FitFailed
from bench.items import Item
from methods.base import FitContext, Selector, register

ANSWER_MARKER = "[Answer]:"  # where a reasoning demonstration stops explaining (GSM8K and AquaRAT formats)
Subset = tuple[int, ...]  # sorted indices into the candidate list


@dataclass(frozen=True)
class Evaluation:
    subset: Subset
    demos: tuple[Item, ...]  # the item versions (rationales) that were scored
    reward: float


def random_subsets(rng: np.random.Generator, n: int, k: int, count: int) -> list[Subset]:
    """`count` uniformly random k-subsets of range(n), each sorted."""
    picks = np.sort(np.argsort(rng.random((count, n)), axis=1)[:, :k], axis=1)
    return [tuple(int(i) for i in row) for row in picks]


def swap_neighbours(subset: Subset, n: int) -> list[Subset]:
    """Every subset that differs from `subset` by one member swapped for a non-member."""
    members = set(subset)
    return [tuple(sorted(members - {out} | {into})) for out in subset for into in range(n) if into not in members]


def inclusion_vectors(subsets: list[Subset], n: int) -> np.ndarray:
    x = np.zeros((len(subsets), n))
    for row, subset in enumerate(subsets):
        x[row, list(subset)] = 1.0
    return x


def expected_improvement(mean: np.ndarray, std: np.ndarray, best: float) -> np.ndarray:
    std = np.maximum(std, 1e-12)
    z = (mean - best) / std
    return (mean - best) * norm.cdf(z) + std * norm.pdf(z)


def fit_gp(x: np.ndarray, y: np.ndarray, seed: int) -> GaussianProcessRegressor:
    kernel = ConstantKernel(1.0, (1e-2, 1e2)) * Matern(length_scale=1.0, length_scale_bounds=(1e-1, 1e2), nu=2.5) \
        + WhiteKernel(noise_level=1e-2, noise_level_bounds=(1e-6, 1e0))
    gp = GaussianProcessRegressor(kernel=kernel, normalize_y=True, n_restarts_optimizer=2, random_state=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # few noisy points often hit a kernel bound
        return gp.fit(x, y)


def generated_rationale(output: str) -> str:
    """The reasoning part of a truncated output: everything before its last answer marker."""
    cut = output.rfind(ANSWER_MARKER)
    return (output[:cut] if cut != -1 else output).strip()


@register("bridge")
class Bridge(Selector):
    level = "task"

    def __init__(self, k: int = 5, n_candidates: int = 20, n_init: int = 5, n_iter: int = 10,
                 n_proposals: int = 500, rounds: int = 2, acquisition: str = "ei", kappa: float = 2.0):
        super().__init__(k)
        if n_candidates < k:
            raise ConfigError(f"bridge: n_candidates ({n_candidates}) must be at least k ({k})")
        if n_init < 1 or n_iter < 0 or n_proposals < 1 or rounds < 0:
            raise ConfigError("bridge: n_init and n_proposals must be >= 1, n_iter and rounds >= 0")
        if acquisition not in ("ei", "ucb"):
            raise ConfigError(f"bridge: acquisition must be 'ei' or 'ucb', got {acquisition!r}")
        if kappa < 0:
            raise ConfigError(f"bridge: kappa must be >= 0, got {kappa}")
        self.n_candidates, self.n_init, self.n_iter, self.n_proposals = n_candidates, n_init, n_iter, n_proposals
        self.rounds, self.acquisition, self.kappa = rounds, acquisition, kappa

    def fit(self, ctx: FitContext) -> "Bridge":
        self.check_pool(ctx)
        if not ctx.validation:
            raise ConfigError("bridge: needs validation items to score demonstration subsets")
        self.gp_seed_ = ctx.rng("bridge-gp").randrange(2**31)
        self.rng_ = np.random.default_rng(self.gp_seed_)
        n_candidates = min(self.n_candidates, len(ctx.pool))
        picked = sorted(ctx.rng("bridge-candidates").sample(range(len(ctx.pool)), n_candidates))
        self.candidates_: list[Item] = [ctx.pool[i] for i in picked]
        self.cache_: dict[tuple, float] = {}  # keyed by (id, rationale) of every member: new rationales re-score
        self.seen_: dict[Subset, None] = {}  # every subset scored, in order
        self.best_: Evaluation | None = None
        self.trace_: list[dict] = []
        try:
            for round_no in range(self.rounds + 1):
                self.optimize(ctx, round_no)
                if round_no < self.rounds:
                    self.generate(ctx, round_no)
        except BudgetExhausted:
            if self.best_ is None:
                raise FitFailed("bridge: --llm-budget ended before any subset was scored; raise the budget") from None
            self.warn(f"--llm-budget ended the optimisation after {len(self.cache_)} subset evaluations: the best "
                      "subset scored so far is used")
        self.demos_ = list(self.best_.demos)
        return self

    def select(self, query: Item) -> list[Item]:
        return list(self.demos_)

    def scale(self) -> dict:
        return {"candidates": len(self.candidates_), "subsets scored": len(getattr(self, "cache_", {})),
                "rounds": self.rounds} if hasattr(self, "candidates_") else {}

    def trace(self) -> list[dict]:
        return list(getattr(self, "trace_", []))

    # ---- optimize ---------------------------------------------------------------------------------
    def key(self, subset: Subset) -> tuple:
        return tuple((self.candidates_[i].id, self.candidates_[i].rationale) for i in subset)

    def optimize(self, ctx: FitContext, round_no: int) -> None:
        """n_init new subsets (the incumbent first when its rationales changed), then n_iter GP-chosen ones."""
        n = len(self.candidates_)
        # Subsets whose demonstrations did not change since they were scored keep their value.
        observed = {s: self.cache_[self.key(s)] for s in self.seen_ if self.key(s) in self.cache_}
        start = [self.best_.subset] if self.best_ else []
        fresh = [s for s in dict.fromkeys(start + random_subsets(self.rng_, n, self.k, self.n_proposals))
                 if s not in observed]
        for subset in fresh[: self.n_init]:
            self.evaluate(ctx, subset, observed, "init", round_no)
        for _ in range(self.n_iter):
            subset = self.propose(observed)
            if subset is None:
                break  # every proposal has been scored already
            self.evaluate(ctx, subset, observed, "bo", round_no)

    def propose(self, observed: dict[Subset, float]) -> Subset | None:
        """The unscored subset that maximises the acquisition under a GP fitted to this round's scores."""
        n = len(self.candidates_)
        subsets, rewards = list(observed), np.array(list(observed.values()))
        incumbent = subsets[int(np.argmax(rewards))]
        proposals = [s for s in dict.fromkeys(random_subsets(self.rng_, n, self.k, self.n_proposals)
                                              + swap_neighbours(incumbent, n)) if s not in observed]
        if not proposals:
            return None
        with threadpool_limits(1):  # matrices of a few dozen rows: BLAS threads only add overhead
            gp = fit_gp(inclusion_vectors(subsets, n), rewards, self.gp_seed_)
            mean, std = gp.predict(inclusion_vectors(proposals, n), return_std=True)
        if self.acquisition == "ei":
            score = expected_improvement(mean, std, float(rewards.max()))
        else:
            score = mean + self.kappa * std
        return proposals[int(np.argmax(score))]

    def evaluate(self, ctx: FitContext, subset: Subset, observed: dict[Subset, float], step: str,
                 round_no: int) -> float:
        """Mean validation reward of one subset: one LLM call per validation item unless cached."""
        demos = tuple(self.candidates_[i] for i in subset)
        key = self.key(subset)
        if key not in self.cache_:
            self.cache_[key] = float(np.mean(ctx.oracle.pull(demos, ctx.validation)))
        reward = observed[subset] = self.cache_[key]
        self.seen_[subset] = None
        if self.best_ is None or reward > self.best_.reward:
            self.best_ = Evaluation(subset, demos, reward)
        self.trace_.append({"step": step, "round": round_no, "evaluations": len(self.cache_), "reward": reward,
                            "best_reward": self.best_.reward, "llm_calls": ctx.oracle.calls})
        return reward

    # ---- generate ---------------------------------------------------------------------------------
    def generate(self, ctx: FitContext, round_no: int) -> int:
        """Re-answer every candidate with the best subset shown; correct answers bring their rationale."""
        task = ctx.task
        if self.best_ is None or not any(c.rationale for c in self.candidates_):
            return 0  # nothing to show, or no reasoning paths to regenerate (translation)
        best = self.best_.demos
        # A candidate never sees itself as a demonstration, or it could copy its own rationale.
        outputs = ctx.oracle.generate([([d for d in best if d.id != c.id], c) for c in self.candidates_])
        updated = 0
        for i, (candidate, raw) in enumerate(zip(self.candidates_, outputs)):
            output = task.truncate(raw)
            rationale = generated_rationale(output)
            if rationale and task.score([task.extract(output)], [candidate], [output])[0] > 0:
                self.candidates_[i] = replace(candidate, rationale=rationale)
                updated += 1
        self.trace_.append({"step": "generate", "round": round_no, "evaluations": len(self.cache_),
                            "best_reward": self.best_.reward, "llm_calls": ctx.oracle.calls, "regenerated": updated})
        return updated
