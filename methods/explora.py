"""EXPLORA (Purohit et al., EMNLP 2024): static exemplar subset selection with a linear loss surrogate.

Follows the authors' code (kiranpurohit/EXPLORA, GSM8K/explora+SC.py):
- arms are CASE's k-subsets (one pool example per KMeans cluster, 100 arms);
- a random working set U (10 subsets) and probe set V (5 subsets) are evaluated by the LLM;
- the surrogate gives each pool example a weight alpha_i; the predicted loss of subset S on validation
  item v is sum_{i in S} alpha_i cos(e_i, v), with alpha fit by least squares on the rows of the CURRENT
  U and V only (|U| x |val| + |V| x |val| rows), unregularised (numpy's minimum-norm `lstsq`);
- each of 15 iterations swaps the U subset with the worst PREDICTED loss for the best predicted subset
  outside U, evaluates the newcomer with the LLM, and re-draws V as the |V| subsets outside U with the
  highest predicted loss, all evaluated with the LLM (an arm seen before is evaluated again: new samples);
- at the end U is evaluated once more on validation and its best subset by that evaluation serves every
  query.

Deviations, with reasons:
- loss = 1 - BERTScore reward of the generated rationale (the DEARICL paper's reward for every selector),
  not the authors' 0/1 self-consistency error (10 samples at temperature 0.5);
- embeddings are the project's encoder, not the authors' precomputed pickles or bert-base mean pooling;
- pool items are embedded as question + gold output (`bandit_base.prepare`: `encode_items(pool,
  with_output=True)`), for the KMeans arms and for cos(e_i, v); validation items as the question. The
  authors embed the `question` field only (GSM8K/explora+SC.py l.228-232 loads `transfer_emb.pkl` and
  `val_emb.pkl`; AquaRat/explora+SC.py l.467/477 and FinQA/explora+SC.py l.569/579 compute them from
  `val_data["question"]` and `train_data["question"]`). Reason: the DEARICL paper's H(v; w) (its x_a(v))
  embeds a demonstration's input and output, and CASE, EXPLORA and DEARICL share that one pool embedding
  and so the same arms;
- the authors also evaluate every arm outside U at the start and the swapped-out arm each iteration, for
  diagnostic plots only; those calls do not affect the result and are not made here;
- `reg` (default 0, the authors' setting) adds an optional ridge term.
Under `--llm-budget` the loop stops where the budget ends and keeps the best observed subset of U (a
warning on the result row); with no subset evaluated the fit fails.
"""
from __future__ import annotations

import numpy as np

from bench.errors import BudgetExhausted, ConfigError, FitFailed
from bench.items import Item
from methods.bandit_base import prepare
from methods.base import FitContext, Selector, register


def surrogate_features(members: np.ndarray, sims: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Design rows of every arm: phi[a, v, j] = cos(e_i, v) when pool item i = used[j] is in arm a, else 0.

    Only pool items that sit in some arm get a column: no observation can identify the others' weights.
    members: [n_arms, k] pool indices; sims: [n_pool, n_val] cosines. Returns (used, phi [n_arms, n_val, n_used]).
    """
    used = np.unique(members)
    phi = np.zeros((len(members), sims.shape[1], len(used)))
    for arm, items in enumerate(members):
        phi[arm][:, np.searchsorted(used, items)] = sims[items].T
    return used, phi


def fit_alpha(design: np.ndarray, losses: np.ndarray, reg: float) -> np.ndarray:
    """Least squares min ||X a - y||^2 (+ reg ||a||^2): numpy's lstsq, minimum-norm when underdetermined."""
    n_cols = design.shape[1]
    stacked = np.vstack([design, np.sqrt(reg) * np.eye(n_cols)]) if reg > 0 else design
    target = np.concatenate([losses, np.zeros(n_cols)]) if reg > 0 else losses
    return np.linalg.lstsq(stacked, target, rcond=None)[0]


def choose_swap(working: list[int], predicted: np.ndarray) -> tuple[int, int] | None:
    """(arm of U with the worst predicted loss, arm outside U with the best); None if U holds every arm."""
    outside = [a for a in range(len(predicted)) if a not in working]
    if not outside:
        return None
    worst = max(working, key=lambda a: predicted[a])
    best = min(outside, key=lambda a: predicted[a])
    return worst, best


def highest_predicted(working: list[int], predicted: np.ndarray, size: int) -> list[int]:
    """The `size` arms outside U with the highest predicted loss (EXPLORA's probe set V)."""
    outside = [a for a in np.argsort(-predicted, kind="stable") if a not in working]
    return [int(a) for a in outside[:size]]


@register("explora")
class Explora(Selector):
    level = "task"

    def __init__(self, k: int = 5, n_arms: int = 100, u_size: int = 10, v_size: int = 5, iterations: int = 15,
                 reg: float = 0.0):
        super().__init__(k)
        if n_arms < 1 or u_size < 1 or v_size < 0 or iterations < 0:
            raise ConfigError("explora: n_arms and u_size must be >= 1, v_size and iterations >= 0")
        if reg < 0:
            raise ConfigError(f"explora: reg must be >= 0, got {reg}")
        self.n_arms, self.u_size, self.v_size, self.iterations, self.reg = n_arms, u_size, v_size, iterations, reg

    def fit(self, ctx: FitContext) -> "Explora":
        self.check_pool(ctx)
        self.prep_ = prep = prepare(ctx, self.n_arms)
        n_arms = len(prep.arms)
        self.used_, self.phi_ = surrogate_features(prep.arms.members, prep.demo_emb @ prep.val_emb.T)
        self.pulls_: list[tuple[int, np.ndarray]] = []  # (arm, per-validation-item loss) of every pull
        self.latest_: dict[int, np.ndarray] = {}  # the last evaluation of each arm (the surrogate's rows)
        self.trace_: list[dict] = []
        rng = np.random.default_rng(ctx.seed)
        order = [int(a) for a in rng.permutation(n_arms)]
        u_size = min(self.u_size, n_arms)
        self.working_ = order[:u_size]
        self.probes_ = order[u_size:u_size + self.v_size]
        self.stopped_by_ = "iterations"
        self.final_loss_: dict[int, float] = {}
        try:
            for arm in self.working_ + self.probes_:
                self._evaluate(arm)
            self._record(ctx, 0)
            for iteration in range(1, self.iterations + 1):
                predicted = self.predicted_losses()
                swap = choose_swap(self.working_, predicted)
                if swap is None:
                    break
                worst, best = swap
                self._evaluate(best)
                self.working_ = [best if a == worst else a for a in self.working_]
                self.probes_ = highest_predicted(self.working_, predicted, self.v_size)
                for arm in self.probes_:
                    self._evaluate(arm)
                self._record(ctx, iteration, swapped_out=worst, swapped_in=best)
            for arm in self.working_:  # the final evaluation of U picks the subset that is used
                self.final_loss_[arm] = float(self._evaluate(arm).mean())
        except BudgetExhausted:
            self.stopped_by_ = "budget"
        self.best_arm_ = self._best()
        return self

    def _evaluate(self, arm: int) -> np.ndarray:
        loss = 1.0 - np.asarray(self.prep_.env.pull(arm), dtype=np.float64)
        self.pulls_.append((arm, loss))
        self.latest_[arm] = loss
        return loss

    def observed_losses(self) -> dict[int, float]:
        """Mean validation loss per arm over all its pulls."""
        by_arm: dict[int, list[float]] = {}
        for arm, losses in self.pulls_:
            by_arm.setdefault(arm, []).append(float(losses.mean()))
        return {arm: float(np.mean(values)) for arm, values in by_arm.items()}

    def predicted_losses(self) -> np.ndarray:
        """Refit alpha on the current U and V (their latest evaluations); mean predicted loss of each arm."""
        current = [a for a in dict.fromkeys(self.working_ + self.probes_) if a in self.latest_]
        design = np.concatenate([self.phi_[arm] for arm in current])
        losses = np.concatenate([self.latest_[arm] for arm in current])
        self.alpha_ = fit_alpha(design, losses, self.reg)
        return (self.phi_ @ self.alpha_).mean(axis=1)

    def _best(self) -> int:
        """U's best subset by the final evaluation; under a budget, the best observed (with a warning)."""
        if len(self.final_loss_) == len(self.working_):
            return min(self.working_, key=lambda a: self.final_loss_[a])
        observed = self.observed_losses()
        scored = [a for a in self.working_ if a in observed] or list(observed)
        if not scored:
            raise FitFailed("explora: --llm-budget ended before any subset was evaluated; raise the budget")
        self.warn(f"the budget ended after {len(self.pulls_)} evaluations, before the final evaluation of U: "
                  "the subset with the best mean observed loss is used")
        return min(scored, key=lambda a: observed[a])

    def _record(self, ctx: FitContext, iteration: int, swapped_out: int | None = None,
                swapped_in: int | None = None) -> None:
        observed = self.observed_losses()
        self.trace_.append({"iteration": iteration, "best_loss": min(observed[a] for a in self.working_),
                            "pulls": len(self.pulls_), "llm_calls": ctx.oracle.calls, "swapped_out": swapped_out,
                            "swapped_in": swapped_in})

    def select(self, query: Item) -> list[Item]:
        return self.prep_.env.demos(self.best_arm_)

    def scale(self) -> dict:
        return {"subsets evaluated": len(self.pulls_), "iterations": len(self.trace_)} if hasattr(self, "trace_") else {}

    def trace(self) -> list[dict]:
        if not hasattr(self, "trace_"):
            return []
        return self.trace_ + [{"summary": True, "pulls": len(self.pulls_), "rounds": len(self.trace_),
                               "stopped_by": self.stopped_by_, "best_arm": self.best_arm_}]
