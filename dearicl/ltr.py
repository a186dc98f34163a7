"""Learning-to-rank baselines over arms (the paper's Table 1 LTR rows and Table 3 data ablation).

A slate is one validation query with the arms whose rewards were observed on it; an arm's
features for a query are DEARICL's x_a(v) = [H(v), mean H(demos of a)]. Rankers score each
(query, arm) pair; the transformer rankers (allRank's context-aware ranker) also see the slate.
Losses come from `dearicl.losses` (allRank 1.4.3 / PiRank semantics).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
from torch import nn

from bench.errors import BudgetExhausted, ConfigError, FitFailed
from bench.items import Item
from dearicl.arms import arm_embeddings, slot_similarity_features
from dearicl.losses import PADDED, lambda_loss, listnet, neural_ndcg, pirank_loss
from dearicl.selection import BanditSelector
from dearicl.surrogates import mlp
from methods.base import FitContext, register

LOSSES: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    # PiRank's script defaults: tau 5, NDCG cutoff 15, straight-through estimator on (pirank_simple.py flags)
    "pirank": lambda y_pred, y_true: pirank_loss(y_pred, y_true, tau=5.0, k=15, ste=True),
    "neural_ndcg": lambda y_pred, y_true: neural_ndcg(y_pred, y_true, temperature=1.0),
    "listnet": listnet,
    "ndcgloss2pp": lambda y_pred, y_true: lambda_loss(y_pred, y_true, weighing_scheme="ndcgLoss2PP_scheme"),
}


@dataclass
class Slates:
    """Training data: features [n_queries, slate, d] and labels [n_queries, slate] (PADDED = unobserved)."""

    features: np.ndarray
    labels: np.ndarray


def pair_features(query_emb: np.ndarray, arm_emb: np.ndarray) -> np.ndarray:
    """x_a(v) for every (query, arm): [n_queries, n_arms, d_q + d_a]."""
    q = np.broadcast_to(query_emb[:, None, :], (len(query_emb), len(arm_emb), query_emb.shape[1]))
    a = np.broadcast_to(arm_emb[None, :, :], (len(query_emb), len(arm_emb), arm_emb.shape[1]))
    return np.concatenate([q, a], axis=-1).astype(np.float32)


def slates_from_rewards(query_emb: np.ndarray, arm_emb: np.ndarray, reward_sum: np.ndarray,
                        reward_count: np.ndarray, label_scale: float = 4.0) -> Slates:
    """One slate per query over the arms observed on it; labels are graded relevance in [0, label_scale].

    Rewards (BERTScore F1) of one query sit in a narrow band, so each query's mean rewards are
    min-max scaled, as graded labels (0-4) in classical LTR datasets.
    reward_sum, reward_count: [n_arms, n_queries] sums and counts of observed rewards.
    """
    observed = reward_count > 0  # [n_arms, n_q]
    arms = np.flatnonzero(observed.any(axis=1))
    if len(arms) == 0:
        return Slates(np.zeros((len(query_emb), 0, query_emb.shape[1] + arm_emb.shape[1]), np.float32),
                      np.zeros((len(query_emb), 0), np.float32))
    means = np.where(observed[arms], reward_sum[arms] / np.maximum(reward_count[arms], 1), np.nan).T  # [n_q, arms]
    low, high = np.nanmin(means, axis=1, keepdims=True), np.nanmax(means, axis=1, keepdims=True)
    spread = np.where(high > low, high - low, 1.0)
    labels = np.where(np.isnan(means), PADDED, label_scale * (means - low) / spread).astype(np.float32)
    return Slates(pair_features(query_emb, arm_emb[arms]), labels)


def standardiser(features: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(mean, std) per feature dimension over all training pairs ("normalised data")."""
    flat = features.reshape(-1, features.shape[-1])
    return flat.mean(axis=0), np.maximum(flat.std(axis=0), 1e-6)


class MLPRanker(nn.Module):
    """Pointwise scorer: an MLP applied to every slate item (PiRank, NDCGLoss2++ architectures)."""

    def __init__(self, d_in: int, hidden: tuple[int, ...], dropout: float = 0.0):
        super().__init__()
        self.net = mlp(d_in, hidden, dropout)  # the same stack as DEARICL's surrogate

    def forward(self, x: torch.Tensor, padded: torch.Tensor | None = None) -> torch.Tensor:
        return self.net(x).squeeze(-1)


class SlateTransformer(nn.Module):
    """allRank's context-aware ranker: an FC stem, a transformer encoder over the slate, a linear head."""

    def __init__(self, d_in: int, stem: tuple[int, ...], n_layers: int, d_ff: int, heads: int, dropout: float):
        super().__init__()
        layers: list[nn.Module] = []
        width = d_in
        for h in stem:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        self.stem = nn.Sequential(*layers)
        block = nn.TransformerEncoderLayer(width, heads, d_ff, dropout, batch_first=True)
        self.encoder = nn.TransformerEncoder(block, n_layers, enable_nested_tensor=False)
        self.head = nn.Linear(width, 1)

    def forward(self, x: torch.Tensor, padded: torch.Tensor | None = None) -> torch.Tensor:
        h = self.encoder(self.stem(x), src_key_padding_mask=padded)
        return self.head(h).squeeze(-1)


def train_ranker(model: nn.Module, loss: str | Callable, slates: Slates, *, epochs: int, batch_size: int, lr: float,
                 seed: int) -> list[float]:
    """Adam over mini-batches of slates (loss: a name in LOSSES or a callable); returns the mean loss per epoch."""
    loss_fn = LOSSES[loss] if isinstance(loss, str) else loss
    gen = torch.Generator().manual_seed(seed)
    x, y = torch.as_tensor(slates.features), torch.as_tensor(slates.labels)
    keep = (y != PADDED).sum(dim=1) >= 2  # a slate needs two observed arms to say anything about order
    x, y = x[keep], y[keep]
    if len(y) == 0:
        return []
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    history = []
    model.train()
    for _ in range(epochs):
        order = torch.randperm(len(y), generator=gen)
        total = 0.0
        for start in range(0, len(y), batch_size):
            rows = order[start:start + batch_size]
            scores = model(x[rows], y[rows] == PADDED)
            loss = loss_fn(scores, y[rows])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(rows)
        history.append(total / len(y))
    model.eval()
    return history


# ---- the selectors' shared part ----------------------------------------------------------------
LTR_DATA = ("own", "dearicl")
CANDIDATES = ("dearicl", "all")  # test-time candidates: DEARICL's U_t/C_t shortlist, or every arm
DEARICL_DATA = "@dearicl-data"  # name suffix of the data-ablation variant


def register_ltr(name: str):
    """@register(name) for an LTR selector, plus NAME@dearicl-data: the same model trained on the
    DEARICL run's logged observations (the paper's Table 3), run when --ltr-data asks for it."""

    def wrap(cls: type[LTRSelector]) -> type[LTRSelector]:
        register(name)(cls)

        def __init__(self, k: int = 5, ltr_data: str = "dearicl", **params):
            cls.__init__(self, k, ltr_data=ltr_data, **params)

        variant = type(f"{cls.__name__}OnDearIclData", (cls,),
                       {"__init__": __init__, "in_all": False, "__module__": cls.__module__,
                        "__doc__": f"{name} trained on the DEARICL run's (arm, query, reward) log."})
        register(name + DEARICL_DATA)(variant)
        return cls

    return wrap


class LTRSelector(BanditSelector):
    """Rank DEARICL's candidate arms per test query with a learning-to-rank model.

    Candidates are the arms of DEARICL's U_t and C_t (a DEARICL bandit run with the same settings
    and seed), so every LTR baseline ranks what dearicl-dynamic ranks. Training data:
    ``ltr_data="own"``: a classical LTR pipeline, `train_arms` random arms plus `negatives` arms whose
    examples are least similar to the validation set, each pulled once on all validation queries;
    ``ltr_data="dearicl"``: the (arm, query, reward) observations logged by the DEARICL run (Table 3).
    ``candidates="all"`` ranks every arm at test time instead of DEARICL's shortlist.
    A fit with no slate of two observed arms fails (FitFailed): it never ranks with an untrained model.
    """

    level = "instance"
    table_group = "instance"
    loss_name: str = ""

    def __init__(self, k: int = 5, ltr_data: str = "own", train_arms: int = 20, negatives: int = 10,
                 label_scale: float = 4.0, epochs: int = 100, batch_size: int = 16, ltr_lr: float = 1e-4,
                 normalise: bool = False, candidates: str = "dearicl", **bandit):
        super().__init__(k, **bandit)
        if ltr_data not in LTR_DATA:
            raise ConfigError(f"ltr_data must be one of {', '.join(LTR_DATA)}, got '{ltr_data}'")
        if candidates not in CANDIDATES:
            raise ConfigError(f"candidates must be one of {', '.join(CANDIDATES)}, got '{candidates}'")
        self.candidates = candidates
        self.ltr_data, self.train_arms, self.negatives, self.label_scale = ltr_data, train_arms, negatives, label_scale
        self.epochs, self.ltr_batch_size, self.ltr_lr, self.normalise = epochs, batch_size, ltr_lr, normalise

    def make_model(self, d_in: int) -> nn.Module:
        raise NotImplementedError

    def test_candidates(self, result) -> np.ndarray:
        """The arms ranked at test time: DEARICL's U_t/C_t shortlist, or every arm (`candidates="all"`)."""
        return np.array(result.seen) if self.candidates == "dearicl" else np.arange(len(self.prep_.arms))

    def loss(self) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
        return LOSSES[self.loss_name]

    def fit(self, ctx: FitContext) -> "LTRSelector":
        result = self.fit_neural(ctx)  # the candidate set (and, for ltr_data="dearicl", the training data)
        prep = self.prep_
        self.candidates_ = self.test_candidates(result)
        self.arm_emb_ = arm_embeddings(prep.arms, prep.demo_emb)
        if self.ltr_data == "dearicl":
            sums, counts = self.surrogate_.reward_sum, self.surrogate_.reward_count
            asked = None
        else:
            sums, counts = self._own_pulls(ctx)
            asked = self.train_arms + self.negatives
        self.training_arms_ = int((counts.sum(axis=1) > 0).sum())
        slates = slates_from_rewards(prep.val_emb, self.arm_emb_, sums, counts, self.label_scale)
        usable = int(((slates.labels != PADDED).sum(axis=1) >= 2).sum()) if slates.labels.size else 0
        source = "the DEARICL run's log" if self.ltr_data == "dearicl" else "its own pulls"
        if usable == 0:
            raise FitFailed(f"{self.name}: no training data: {self.training_arms_} arm(s) observed in {source}, and a "
                            "slate needs two; raise --llm-budget (the shared DEARICL bandit spends it first)")
        if asked is not None and self.training_arms_ < asked:
            self.warn(f"trained on {self.training_arms_} of the {asked} arms asked for (the budget ran out)")
        if usable < len(ctx.validation):
            self.warn(f"trained on {usable} of {len(ctx.validation)} validation slates (the others had < 2 arms)")
        self.shift_, self.scale_ = standardiser(slates.features) if self.normalise else (0.0, 1.0)
        slates.features = (slates.features - self.shift_) / self.scale_
        torch.manual_seed(ctx.seed)
        self.model_ = self.make_model(slates.features.shape[-1])
        self.losses_ = train_ranker(self.model_, self.loss(), slates, epochs=self.epochs,
                                    batch_size=self.ltr_batch_size, lr=self.ltr_lr, seed=ctx.seed)
        self.model_.eval()  # dropout off at test time
        return self

    def _own_pulls(self, ctx: FitContext) -> tuple[np.ndarray, np.ndarray]:
        """Random arms plus heuristic negatives, each pulled once on all validation queries."""
        prep = self.prep_
        n_arms = len(prep.arms)
        rng = np.random.default_rng(ctx.seed + 1)
        sampled = rng.permutation(n_arms)[: self.train_arms].tolist()
        similarity = slot_similarity_features(prep.arms, prep.demo_emb, prep.val_emb).mean(axis=1)
        negatives = [a for a in np.argsort(similarity, kind="stable").tolist() if a not in sampled][: self.negatives]
        sums = np.zeros((n_arms, len(ctx.validation)))
        counts = np.zeros_like(sums)
        for arm in sampled + negatives:
            try:
                sums[arm] += prep.env.pull(arm)
            except BudgetExhausted:
                break
            counts[arm] += 1
        return sums, counts

    def select(self, query: Item) -> list[Item]:
        query_emb = self.encoder_.encode_items([query])
        x = (pair_features(query_emb, self.arm_emb_[self.candidates_]) - self.shift_) / self.scale_
        with torch.no_grad():
            scores = self.model_(torch.as_tensor(x, dtype=torch.float32))[0].numpy()
        return self.demos_of(int(self.candidates_[int(np.argmax(scores))]))

    def trace(self) -> list[dict]:
        losses = getattr(self, "losses_", [])
        ltr = {"ltr": True, "loss": self.loss_name, "ltr_data": self.ltr_data, "candidate_set": self.candidates,
               "epochs": len(losses),
               "first_loss": losses[0] if losses else None, "last_loss": losses[-1] if losses else None,
               "training_arms": getattr(self, "training_arms_", 0), "candidates": len(getattr(self, "candidates_", []))}
        return super().trace() + [ltr]
