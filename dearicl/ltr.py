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

from dearicl.losses import PADDED, lambda_loss, listnet, neural_ndcg, pirank_loss
from dearicl.surrogates import mlp

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
