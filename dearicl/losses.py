"""Differentiable sorting and the relaxed-NDCG loss used to train the DEARICL surrogate.

Inputs follow allRank's convention: ``[batch, slate]`` tensors, padded positions marked by ``-1`` in
``y_true``.
"""
from __future__ import annotations

import torch

PADDED = -1.0


def neural_sort(scores: torch.Tensor, tau: float, mask: torch.Tensor | None = None) -> torch.Tensor:
    """NeuralSort (Grover et al. 2019): a row-stochastic relaxation of the sorting permutation.

    scores [B, n] -> P [B, n, n], where row i is a soft one-hot of the item placed at rank i
    (descending). Padded items get -inf-like scores so they sort last and carry no mass above them.
    """
    if mask is not None:
        low = scores.detach().masked_fill(~mask, float("inf")).min(dim=-1, keepdim=True).values
        scores = torch.where(mask, scores, low - 1e4)  # below every real score, finite for gradients
    n = scores.shape[-1]
    s = scores.unsqueeze(-1)  # [B, n, 1]
    pairwise = (s - s.transpose(-1, -2)).abs()  # A_s[j, k] = |s_j - s_k|
    b = pairwise.sum(dim=-1, keepdim=True).transpose(-1, -2)  # [B, 1, n]: (A_s 1)_k
    ranks = torch.arange(1, n + 1, dtype=scores.dtype, device=scores.device)
    scale = (n + 1 - 2 * ranks).view(1, n, 1)  # [1, n, 1]
    logits = (scale * s.transpose(-1, -2) - b) / tau  # [B, n, n]
    return torch.softmax(logits, dim=-1)


def dcg_discounts(n: int, dtype=torch.float32, device=None) -> torch.Tensor:
    return 1.0 / torch.log2(torch.arange(2, n + 2, dtype=dtype, device=device))


def relaxed_ndcg_loss(y_pred: torch.Tensor, y_true: torch.Tensor, tau: float = 1.0, k: int | None = None) -> torch.Tensor:
    """1 - relaxed NDCG@k averaged over slates (PiRank-style: NeuralSort permutation x gains).

    Gains 2^y - 1, log2 discounts. Slates whose ideal DCG is 0 contribute 0.
    """
    mask = y_true != PADDED
    gains = torch.where(mask, torch.pow(2.0, y_true) - 1.0, torch.zeros_like(y_true))
    n = y_pred.shape[-1]
    k = n if k is None else min(k, n)
    perm = neural_sort(y_pred, tau, mask)  # [B, n, n]
    sorted_gains = torch.bmm(perm, gains.unsqueeze(-1)).squeeze(-1)  # soft gains by rank
    disc = dcg_discounts(n, y_pred.dtype, y_pred.device)
    disc = torch.where(torch.arange(n, device=y_pred.device) < k, disc, torch.zeros_like(disc))
    dcg = (sorted_gains * disc).sum(dim=-1)
    ideal = (gains.sort(dim=-1, descending=True).values * disc).sum(dim=-1)
    valid = ideal > 0
    ndcg = torch.where(valid, dcg / ideal.clamp_min(1e-12), torch.zeros_like(dcg))
    return (1.0 - ndcg)[valid].mean() if valid.any() else y_pred.sum() * 0.0
