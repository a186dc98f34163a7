"""Surrogates behind the gap-index bandit: the same loop, only the estimate and its width differ.

- LinearSurrogate (CASE / GIFA): regularised least squares, Sherman–Morrison updates, gap width
  sqrt(2 beta(t)) * ||x_i - x_j||_{sigma^2 V^-1}.
- NeuralSurrogate (DEARICL): ReLU MLP with dropout on [H(query), mean H(demos)], trained with a
  relaxed-NDCG loss over the arms of each validation query; width W_t of the paper's Theorem 3.3
  from MC-dropout passes. Two points follow the paper's own definitions where earlier code did not:
  each MC pass draws ONE dropout mask shared by every arm and query, so the differences y_i^(k) - y_j^(k)
  in V_ij are paired; and eps_stab is the LARGEST drift of an estimate over a round's update, the bound
  the proof uses, not the mean drift. W_t measures MC noise and training drift, not estimation error:
  it does not shrink as pulls accumulate (tests/test_dearicl_core.py), so B_t <= epsilon is a
  convergence test, not a certificate.

Deviations from the paper that remain in the defaults (each a NeuralConfig knob, swept by `bench simulate
--neural` on recorded reward tables):
- rho_hat (the arm estimate in B_t) is the network's output with dropout OFF (`estimate="dropout-off"`); the paper
  defines it as the mean of the N MC-dropout passes (l.1297; `estimate="mc-mean"`). Reason: one deterministic
  pass is the estimate the LTR ranking uses at test time; the MC mean differs from it by dropout's bias.
- c_t is a constant (`width_schedule="constant"`, c = `width_scale` = 1); the paper calls it "an annealed
  multiplier (user-specified)" (l.1306) and gives no schedule: `inverse-sqrt` (c / sqrt(t)) and `sqrt-log`
  (c sqrt(log(1 + t))) are offered, none is the paper's.
- K in the width's log(2K^2/delta) is the number of arms compared, |U_t u C_t| = 15 (`log_k="compared"`); the
  paper's proof defines K = |A|, every arm (l.1296; `log_k="arms"`, K = 100 in the study), and takes the union
  over K^2 pairs (l.1486). Reason: the width is only ever computed for the compared arms. It is not a
  certificate either way (above), and configs/paper.yaml sets the paper's K.
- The placeholders before anything is measured, eps_stab = M = 1 (`stability_init`) and b_a = M/2
  (`bias_init`), and N = 256 passes (`mc_passes`) are this code's: the paper leaves all three open. Together they
  set DEARICL's 3-round stop (2.05 -> 1.05 -> 0.05) in the study.
- Each MC-dropout estimate draws its own N passes (`mc_draws="per-call"`): rho_hat of U_t, of C_t and the widths of
  one round come from different passes. The paper's surrogate "outputs N stochastic predictions (N MC-dropout forward
  passes) per arm" at round t (l.1296-1297), one set from which rho_hat and V_ij are both taken: `mc_draws="per-round"`
  (one set of N masks per model state, drawn after each update, every arm's passes computed once and reused; ~3x fewer
  MC forwards a round at the paper's settings with estimate="mc-mean"; with "dropout-off" only the widths and pick use
  the passes). Reason: the certification study and the smoke regression were recorded with per-call draws;
  configs/paper.yaml and the knob sweep's stated rows set per-round.
- Training: `epochs_per_round` 4 and lr 1e-3 here by default; configs/paper.yaml sets the paper's one epoch at
  1e-4 (l.396, l.781), which with 10 validation queries and batch 16 is one Adam step a round.
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

from bench.errors import ConfigError

BETAS = ("heuristic", "frequentist", "lucb1")
ESTIMATES = ("dropout-off", "mc-mean")
MC_BUFFER_KEEP_BYTES = 256 * 2**20  # mc_samples keeps its work tensors between calls up to this size
# c_t, "an annealed multiplier (user-specified)" (paper l.1306), left open: constant c, c/sqrt(t), c*sqrt(log(1+t))
WIDTH_SCHEDULES = ("constant", "inverse-sqrt", "sqrt-log")
# K in the width's log(2K^2/delta): the arms compared (|U_t u C_t|, this code's default) or every arm, K = |A| (l.1296)
LOG_KS = ("compared", "arms")
# the MC-dropout passes behind rho_hat and V_ij: drawn afresh for each estimate, or one set a round (l.1296-1297)
MC_DRAWS = ("per-call", "per-round")


class Surrogate(ABC):
    """What the bandit needs from a reward model."""

    n_arms: int

    @abstractmethod
    def observe(self, arm: int, rewards: np.ndarray) -> None:
        """Add one pull: the arm's rewards on each validation query."""

    @abstractmethod
    def update(self) -> None:
        """Refit after the observations of this round."""

    @abstractmethod
    def means(self, arms: np.ndarray) -> np.ndarray:
        """Estimated mean reward of each arm (over validation queries)."""

    @abstractmethod
    def widths(self, rows: np.ndarray, cols: np.ndarray, t: int) -> np.ndarray:
        """Confidence width W_t(i, j) for every (i in rows, j in cols)."""

    @abstractmethod
    def pick(self, b: int, c: int, rule: str) -> list[int]:
        """Arms to pull for the ambiguous pair (b_t, ch_t) under a selection rule."""

    def end_round(self, arms: np.ndarray) -> None:
        """Bookkeeping after a round's update (per-arm bias and stability tracking)."""


def sherman_morrison(v_inv: np.ndarray, x: np.ndarray) -> np.ndarray:
    """(V + x x^T)^-1 from V^-1 in O(d^2)."""
    vx = v_inv @ x
    return v_inv - np.outer(vx, vx) / (1.0 + x @ vx)


class LinearSurrogate(Surrogate):
    def __init__(self, features: np.ndarray, *, reg: float = 1.0, sigma: float = 0.5, delta: float = 0.05,
                 beta: str = "heuristic", theta_bound: float = 1.0):
        if beta not in BETAS:
            raise ConfigError(f"unknown beta '{beta}'; choose one of {', '.join(BETAS)}")
        self.x = np.asarray(features, dtype=np.float64)
        self.n_arms, self.d = self.x.shape
        self.reg, self.sigma, self.delta, self.beta_kind, self.theta_bound = reg, sigma, delta, beta, theta_bound
        self.v_inv = np.eye(self.d) / reg
        self.b = np.zeros(self.d)
        self.theta = np.zeros(self.d)
        self.max_norm = float(np.linalg.norm(self.x, axis=1).max())

    def observe(self, arm: int, rewards: np.ndarray) -> None:
        x = self.x[arm]
        self.v_inv = sherman_morrison(self.v_inv, x)
        self.b += float(np.mean(rewards)) * x  # CASE: one scalar reward per pull (mean over validation)

    def update(self) -> None:
        self.theta = self.v_inv @ self.b

    def means(self, arms: np.ndarray) -> np.ndarray:
        return self.x[np.asarray(arms)] @ self.theta

    def multiplier(self, t: int) -> float:
        """The factor in front of ||x_i - x_j||_{V^-1}: sigma * sqrt(2 beta(t)), or Abbasi-Yadkori's radius."""
        t = max(t, 1)
        if self.beta_kind == "heuristic":
            beta = math.log((math.log(t) + 1) / self.delta)
        elif self.beta_kind == "lucb1":
            beta = math.log(5 * self.n_arms * t**4 / (4 * self.delta))
        else:  # frequentist (Abbasi-Yadkori et al. 2011, Thm 2 with the determinant bound)
            radius = self.sigma * math.sqrt(2 * math.log(1 / self.delta)
                                             + self.d * math.log(1 + t * self.max_norm**2 / (self.reg * self.d)))
            return radius + math.sqrt(self.reg) * self.theta_bound
        return self.sigma * math.sqrt(2 * beta)

    def widths(self, rows: np.ndarray, cols: np.ndarray, t: int) -> np.ndarray:
        diff = self.x[np.asarray(rows)][:, None, :] - self.x[np.asarray(cols)][None, :, :]  # [R, C, d]
        norms = np.sqrt(np.maximum(np.einsum("rcd,de,rce->rc", diff, self.v_inv, diff), 0.0))
        return self.multiplier(t) * norms

    def pick(self, b: int, c: int, rule: str) -> list[int]:
        if rule == "both":
            return [b, c]
        if rule == "variance":
            norms = [float(self.x[a] @ self.v_inv @ self.x[a]) for a in (b, c)]
            return [(b, c)[int(np.argmax(norms))]]
        # greedy (LinGapE): the arm whose pull most shrinks ||x_b - x_c|| in the updated V^-1 norm
        y = self.x[b] - self.x[c]
        vx = self.x @ self.v_inv  # [K, d]
        shrink = (vx @ y) ** 2 / (1.0 + np.einsum("kd,kd->k", vx, self.x))
        return [int(np.argmax(shrink))]  # argmin of y^T V^-1 y - shrink


@dataclass
class NeuralConfig:
    hidden: tuple[int, ...] = (256, 128)
    dropout: float = 0.1
    lr: float = 1e-3
    epochs_per_round: int = 4  # one epoch over a tiny D is only a couple of Adam steps
    batch_size: int = 16  # validation queries (slates) per step
    tau: float = 1.0  # NeuralSort temperature
    calibration: float = 1.0  # weight of an MSE term that keeps outputs on the reward scale
    mc_passes: int = 256  # N in the width; the Bernstein term 4M log(2K^2/delta)/(3N) needs N large
    width_scale: float = 1.0  # c (the base of c_t), the user-set multiplier of the variance term
    width_schedule: str = "constant"  # c_t = c (constant), c / sqrt(t) or c * sqrt(log(1 + t)), t = pulls so far
    stability_init: float = 1.0  # eps_stab before any retraining is measured (M: no stability evidence yet)
    bias_init: float = 0.5  # b_a of an arm with no history before any bias is measured (M / 2)
    bias_decay: float = 0.9  # moving average for the per-arm bias b_a
    estimate: str = "dropout-off"  # the arm estimate mu_hat: "dropout-off" or "mc-mean" (mean of the MC passes)
    log_k: str = "compared"  # K of log(2K^2/delta): "compared" (|U_t u C_t|) or "arms" (K = |A|, the paper's l.1296)
    mc_draws: str = "per-call"  # "per-call" (fresh passes per estimate) or "per-round" (one set a round, l.1296-1297)
    seed: int = 0

    def __post_init__(self):
        if self.estimate not in ESTIMATES:
            raise ConfigError(f"unknown estimate '{self.estimate}'; choose one of {', '.join(ESTIMATES)}")
        if self.width_schedule not in WIDTH_SCHEDULES:
            raise ConfigError(f"unknown width_schedule '{self.width_schedule}'; choose one of "
                              f"{', '.join(WIDTH_SCHEDULES)}")
        if self.log_k not in LOG_KS:
            raise ConfigError(f"unknown log_k '{self.log_k}'; choose one of {', '.join(LOG_KS)}")
        if self.mc_draws not in MC_DRAWS:
            raise ConfigError(f"unknown mc_draws '{self.mc_draws}'; choose one of {', '.join(MC_DRAWS)}")


class NeuralSurrogate(Surrogate):
    """F_theta(x_a(v)) with x_a(v) = [H(v), mean_l H(demo_l)]; one output in [0, 1] per (arm, query)."""

    def __init__(self, query_embeddings: np.ndarray, arm_embeddings: np.ndarray, *, delta: float = 0.05,
                 config: NeuralConfig = NeuralConfig()):
        import torch

        self.torch = torch
        self.cfg = config
        self.delta = delta
        self.q = torch.as_tensor(np.asarray(query_embeddings), dtype=torch.float32)  # [n_q, d]
        self.arms = torch.as_tensor(np.asarray(arm_embeddings), dtype=torch.float32)  # [K, d]
        self.n_arms = len(self.arms)
        self.n_q = len(self.q)
        gen = torch.Generator().manual_seed(config.seed)
        torch.manual_seed(config.seed)
        self.model = mlp(self.q.shape[1] + self.arms.shape[1], config.hidden, config.dropout)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=config.lr)
        self.gen = gen
        self.reward_sum = np.zeros((self.n_arms, self.n_q))
        self.reward_count = np.zeros((self.n_arms, self.n_q))
        self.ema: dict[int, float] = {}
        self.bias: dict[int, float] = {}
        self.stability = config.stability_init  # M by default until a retraining has been measured
        self._before: dict[int, float] = {}
        self.mc_cache: tuple | None = None
        self._mc_buffers: dict = {}  # work tensors of mc_samples, reused
        self._round_masks: list | None = None  # mc_draws="per-round": this model state's N dropout masks per layer
        self._round_samples: dict[int, np.ndarray] = {}  # and each arm's N passes under them
        self._frozen = None  # numpy snapshot for fast ranking, rebuilt after each update

    # ---- data and training --------------------------------------------------------------------
    def observe(self, arm: int, rewards: np.ndarray) -> None:
        self.reward_sum[arm] += rewards
        self.reward_count[arm] += 1

    def pairs(self, arms, queries=None):
        """x_a(v) = [H(v), mean H(demos of a)] for every (arm, query): [len(arms), n_q, 2d]."""
        torch = self.torch
        q = self.q if queries is None else queries
        a = self.arms[torch.as_tensor(np.asarray(arms))]
        return torch.cat([q.unsqueeze(0).expand(len(a), -1, -1), a.unsqueeze(1).expand(-1, len(q), -1)], dim=-1)

    def logits(self, arms, queries=None, train: bool = False):
        """Scores before the sigmoid for every (arm, query): [len(arms), n_q]."""
        self.model.train(train)
        return self.model(self.pairs(arms, queries)).squeeze(-1)

    def update(self) -> None:
        from dearicl.losses import relaxed_ndcg_loss

        torch = self.torch
        pulled = np.flatnonzero(self.reward_count.sum(axis=1) > 0)
        if len(pulled) == 0:
            return
        self._before = dict(zip(pulled.tolist(), self.means(pulled).tolist()))
        target = torch.as_tensor((self.reward_sum[pulled] / np.maximum(self.reward_count[pulled], 1)).T,
                                 dtype=torch.float32)  # [n_q, n_pulled]: slate of arms per query
        for _ in range(self.cfg.epochs_per_round):
            order = torch.randperm(self.n_q, generator=self.gen)
            for start in range(0, self.n_q, self.cfg.batch_size):
                rows = order[start:start + self.cfg.batch_size]
                scores = self.logits(pulled, self.q[rows], train=True).T  # [B, n_pulled]
                loss = relaxed_ndcg_loss(scores, target[rows], tau=self.cfg.tau)
                if self.cfg.calibration:
                    loss = loss + self.cfg.calibration * torch.mean((torch.sigmoid(scores) - target[rows]) ** 2)
                self.opt.zero_grad()
                loss.backward()
                self.opt.step()
        self.mc_cache = None
        self._round_masks, self._round_samples = None, {}  # a new model state: new passes (l.1296, "at round t")
        self._frozen = None

    def means(self, arms: np.ndarray) -> np.ndarray:
        if self.cfg.estimate == "mc-mean":
            return self.mc_samples(arms).mean(axis=0)
        torch = self.torch
        with torch.no_grad():
            return torch.sigmoid(self.logits(arms)).mean(dim=1).numpy().astype(np.float64)

    def features(self, arms: np.ndarray) -> np.ndarray:
        """The last hidden layer (dropout off), averaged over validation queries: [len(arms), h].

        The output is sigmoid(h . w + b) per query, so the mean reward is close to linear in these features
        where the sigmoid is near-linear: the basis of dearicl-pac's linear head.
        """
        torch = self.torch
        self.model.eval()
        with torch.no_grad():
            hidden = self.model[:-1](self.pairs(arms))  # [arms, queries, h]
        return hidden.mean(dim=1).numpy().astype(np.float64)

    def mc_samples(self, arms: np.ndarray) -> np.ndarray:
        """N stochastic (dropout-on) estimates of each arm's mean reward: [N, len(arms)].

        One mask per pass, shared by every arm and query, so y_i^(k) - y_j^(k) are paired (V_ij). per-call draws new
        masks for each call (the last call is cached); per-round draws them once per model state and computes each
        arm's passes once under them, so every MC estimate (estimate="mc-mean") and width of a round comes from the
        same N passes.
        """
        if self.cfg.mc_draws == "per-round":
            return self._per_round_samples(np.asarray(arms))
        key = tuple(np.asarray(arms).tolist())
        if self.mc_cache is not None and self.mc_cache[0] == key:
            return self.mc_cache[1]
        samples = self._mc_forward(arms)
        self.mc_cache = (key, samples)
        return samples

    def _per_round_samples(self, arms: np.ndarray) -> np.ndarray:
        if self._round_masks is None:  # drawn in the order, and with the shapes, that a per-call forward draws them
            n, p = self.cfg.mc_passes, self.cfg.dropout
            self._round_masks = [(self.torch.rand((n, 1, h), generator=self.gen) >= p).to(self.torch.float32)
                                 for h in self.cfg.hidden]
        missing = [a for a in dict.fromkeys(arms.tolist()) if a not in self._round_samples]
        if missing:
            fresh = self._mc_forward(np.array(missing), masks=self._round_masks)
            self._round_samples.update({a: fresh[:, j] for j, a in enumerate(missing)})
        return np.stack([self._round_samples[int(a)] for a in arms], axis=1)

    def _mc_forward(self, arms: np.ndarray, masks: list | None = None) -> np.ndarray:
        """The N dropout-on passes over `arms`, with new masks from the generator or the given ones (one per dropout
        after the first Linear+ReLU). Computed in reused buffers with in-place steps: the same floats as the plain
        layer-by-layer forward (a test checks it bit for bit) at under half the time, as a fresh
        [N, arms, queries, h] tensor per step page-faults.
        """
        torch = self.torch
        n, p = self.cfg.mc_passes, self.cfg.dropout
        masks = iter(masks) if masks is not None else None
        with torch.no_grad():
            # Linear+ReLU before the first dropout is the same in every pass: compute it once.
            x = self.model[:2](self.pairs(arms))  # [arms, queries, h]
            n_arms, n_q = x.shape[0], x.shape[1]
            x = x.reshape(1, n_arms * n_q, -1) / (1.0 - p)  # (x * keep) / (1 - p) == (x / (1 - p)) * keep exactly
            layers = list(self.model[2:])
            for i, layer in enumerate(layers):
                if isinstance(layer, torch.nn.Dropout):
                    keep = (next(masks) if masks is not None
                            else (torch.rand((n, 1, x.shape[-1]), generator=self.gen) >= p).to(torch.float32))
                    if x.shape[0] == 1:  # the first dropout: broadcast the shared activations over the passes
                        x = torch.mul(x, keep, out=self._buffer(("drop", i), (n, n_arms * n_q, x.shape[-1])))
                    else:
                        x.mul_(keep).div_(1.0 - p)
                elif isinstance(layer, torch.nn.ReLU):
                    x.relu_()
                elif i < len(layers) - 1:  # a hidden Linear: one [N * arms * queries, h] product into a buffer
                    # W^T made contiguous: MKL's product is ~25% faster and gives the same floats (tested)
                    flat = torch.addmm(layer.bias, x.reshape(-1, x.shape[-1]), layer.weight.t().contiguous(),
                                       out=self._buffer(("linear", i), (n * n_arms * n_q, layer.out_features)))
                    x = flat.view(n, n_arms * n_q, -1)
                else:
                    x = layer(x.view(n, n_arms, n_q, -1))
            y = torch.sigmoid(x.squeeze(-1)).mean(dim=-1)  # [N, arms]
        samples = y.numpy().astype(np.float64)
        if sum(b.numel() for b in self._mc_buffers.values()) * 4 > MC_BUFFER_KEEP_BYTES:
            self._mc_buffers = {}  # a wide call (many arms or queries): its buffers are not held past it
        return samples

    def _buffer(self, name: tuple, shape: tuple):
        """A float32 work tensor of `shape`, kept between calls (allocating ~40 MB afresh costs more than the math)."""
        size = math.prod(shape)
        held = self._mc_buffers.get(name)
        if held is None or held.numel() < size:
            held = self._mc_buffers[name] = self.torch.empty(size, dtype=self.torch.float32)
        return held[:size].view(shape)

    # ---- the width of Theorem 3.3 -------------------------------------------------------------
    def widths(self, rows: np.ndarray, cols: np.ndarray, t: int) -> np.ndarray:
        rows, cols = np.asarray(rows), np.asarray(cols)
        union = np.unique(np.concatenate([rows, cols]))
        y = self.mc_samples(union)
        pos = {int(a): i for i, a in enumerate(union)}
        yr, yc = y[:, [pos[int(a)] for a in rows]], y[:, [pos[int(a)] for a in cols]]
        diff = yr[:, :, None] - yc[:, None, :]  # [N, R, C]
        var = diff.var(axis=0)  # 1/N normalisation, as V_ij in the paper
        n = self.cfg.mc_passes
        big_k = self.n_arms if self.cfg.log_k == "arms" else len(union)
        log_term = math.log(2 * big_k**2 / self.delta)
        bound_m = 1.0  # sigmoid outputs: |y| <= M = 1
        bias = np.array([self._bias(a) for a in rows])[:, None] + np.array([self._bias(a) for a in cols])[None, :]
        return (self.width_multiplier(t) * np.sqrt(2 * var * log_term / n) + self.stability + bias
                + 4 * bound_m * log_term / (3 * n))

    def width_multiplier(self, t: int) -> float:
        """c_t of the variance term at time t (pulls so far), by the configured schedule."""
        c, t = self.cfg.width_scale, max(int(t), 1)
        if self.cfg.width_schedule == "inverse-sqrt":
            return c / math.sqrt(t)
        if self.cfg.width_schedule == "sqrt-log":
            return c * math.sqrt(math.log(1 + t))
        return c

    def _bias(self, arm: int) -> float:
        if int(arm) in self.bias:
            return self.bias[int(arm)]
        # no history for this arm yet: the largest bias seen so far, bias_init (M/2) before any
        return max(self.bias.values()) if self.bias else self.cfg.bias_init

    def end_round(self, arms: np.ndarray) -> None:
        """b_a: deviation of the arm's estimate from its moving average; eps_stab: the largest drift of an
        estimate over this round's update (a bound on every arm's drift, as the proof uses it)."""
        now = dict(zip(np.asarray(arms).tolist(), self.means(arms).tolist()))
        drift = [abs(now[a] - self._before[a]) for a in now if a in self._before]
        self.stability = float(np.max(drift)) if drift else self.stability  # eps_stab: the largest drift
        for a, value in now.items():
            if a in self.ema:
                self.bias[a] = abs(value - self.ema[a])
                self.ema[a] = self.cfg.bias_decay * self.ema[a] + (1 - self.cfg.bias_decay) * value
            else:
                self.ema[a] = value

    def pick(self, b: int, c: int, rule: str) -> list[int]:
        if rule == "both":
            return [b, c]
        # greedy and variance coincide here: pulling the member of {b, c} with the larger MC-dropout
        # variance shrinks Var(y_b - y_c) the most (to first order).
        y = self.mc_samples(np.array([b, c]))
        return [(b, c)[int(np.argmax(y.var(axis=0)))]]

    def rank_scores(self, query_embedding: np.ndarray, arms: np.ndarray) -> np.ndarray:
        """Deterministic scores of candidate arms for one (test) query: higher is better.

        The first layer is linear in [H(q), mean H(demos)], so its arm half is computed once per arm
        after training (`_frozen`); a query then costs one d x h product, a broadcast add and the
        small later layers, all in numpy.
        """
        if self._frozen is None:
            self._frozen = self._freeze()
        w_q, arm_part, rest = self._frozen
        h = np.maximum(arm_part[np.asarray(arms)] + query_embedding.astype(np.float32) @ w_q, 0.0)
        for weight, bias, relu in rest:
            h = h @ weight + bias
            if relu:
                h = np.maximum(h, 0.0)
        return h[:, 0]

    def _freeze(self):
        torch = self.torch
        self._mc_buffers = {}  # ranking now: the MC work tensors are not needed until the next update
        linears = [m for m in self.model if isinstance(m, torch.nn.Linear)]
        first = linears[0]
        d_q = self.q.shape[1]
        w = first.weight.detach().numpy().T  # [d_q + d_a, h]
        arm_part = self.arms.numpy() @ w[d_q:] + first.bias.detach().numpy()
        rest = [(lin.weight.detach().numpy().T.copy(), lin.bias.detach().numpy().copy(), i < len(linears) - 2)
                for i, lin in enumerate(linears[1:])]
        return w[:d_q].copy(), arm_part.astype(np.float32), rest


def mlp(d_in: int, hidden: tuple[int, ...], dropout: float):
    import torch.nn as nn

    layers, width = [], d_in
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU(), nn.Dropout(dropout)]
        width = h
    layers.append(nn.Linear(width, 1))
    return nn.Sequential(*layers)
