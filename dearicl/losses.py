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


# ---------------------------------------------------------------------------------------------------
# allRank 1.4.3-compatible losses (listNet, neuralNDCG, lambdaLoss, approxNDCGLoss) and PiRank's loss.
# Re-implemented from the published formulas; every function takes [batch, slate] tensors with padded
# positions marked by ``padded_value_indicator`` (allRank's PADDED_Y_VALUE = -1) in ``y_true``.
# ---------------------------------------------------------------------------------------------------

DEFAULT_EPS = 1e-10  # allRank's losses.DEFAULT_EPS

_LAMBDA_SCHEMES = (
    "ndcgLoss1_scheme", "ndcgLoss2_scheme", "lambdaRank_scheme", "ndcgLoss2PP_scheme",
    "rankNet_scheme", "rankNetWeightedByGTDiff_scheme", "rankNetWeightedByGTDiffPowed_scheme",
)


def _check_k(k: int | None) -> None:
    """Reject cut-offs below 1, where allRank's slicing silently means something else."""
    if k is not None and k < 1:
        raise ValueError(f"k must be a positive integer or None, got {k}")


def _log2_positions(n: int, dtype: torch.dtype, device) -> torch.Tensor:
    """D_j = log2(1 + j) for 1-based positions j = 1..n (the denominator of DCG)."""
    return torch.log2(torch.arange(2, n + 2, dtype=dtype, device=device))


def _masked_neural_sort(scores: torch.Tensor, mask: torch.Tensor, tau: float) -> tuple[torch.Tensor, torch.Tensor]:
    """allRank's deterministic_neural_sort: NeuralSort over the real items only, padded rows/cols apart.

    scores, mask [N, n] -> (P [N, n, n] rows = ranks, cols = items; row_pad [N, n] ranks >= #real).
    """
    n = scores.shape[-1]
    real_count = (~mask).sum(dim=-1, keepdim=True)  # [N, 1]
    s = scores.masked_fill(mask, 0.0)  # finite stand-in; padded entries are masked out below anyway
    either_item = mask.unsqueeze(-1) | mask.unsqueeze(-2)
    abs_diff = (s.unsqueeze(-1) - s.unsqueeze(-2)).abs().masked_fill(either_item, 0.0)
    b = abs_diff.sum(dim=-1)  # [N, n]: sum over real k of |s_i - s_k|
    rank = torch.arange(1, n + 1, device=scores.device)
    scale = (real_count + 1 - 2 * rank).to(scores.dtype)  # [N, n]: r + 1 - 2j, with r the real count
    logits = scale.unsqueeze(-1) * s.unsqueeze(-2) - b.unsqueeze(-2)  # [N, rank j, item i]
    # Ranks past the real count play the role of allRank's padded rows (identical for trailing padding).
    row_pad = rank.unsqueeze(0) > real_count
    either = row_pad.unsqueeze(-1) | mask.unsqueeze(-2)
    both = row_pad.unsqueeze(-1) & mask.unsqueeze(-2)
    logits = logits.masked_fill(either, float("-inf")).masked_fill(both, 1.0)
    return torch.softmax(logits / tau, dim=-1), row_pad


def _sinkhorn(mat: torch.Tensor, row_pad: torch.Tensor, col_pad: torch.Tensor, tol: float = 1e-6,
              max_iter: int = 50) -> torch.Tensor:
    """allRank's sinkhorn_scaling: alternate column/row normalisation of the real block, batch-wide stop."""
    either = row_pad.unsqueeze(-1) | col_pad.unsqueeze(-2)
    both = row_pad.unsqueeze(-1) & col_pad.unsqueeze(-2)
    # The padded block is set to ones so that its rows/columns already satisfy the stopping test.
    mat = mat.masked_fill(either, 0.0).masked_fill(both, 1.0)
    for _ in range(max_iter):
        mat = mat / mat.sum(dim=1, keepdim=True).clamp(min=DEFAULT_EPS)
        mat = mat / mat.sum(dim=2, keepdim=True).clamp(min=DEFAULT_EPS)
        with torch.no_grad():
            row_err = (mat.sum(dim=2) - 1.0).abs().max()
            col_err = (mat.sum(dim=1) - 1.0).abs().max()
        if row_err < tol and col_err < tol:
            break
    return mat.masked_fill(either, 0.0)


def listnet(y_pred: torch.Tensor, y_true: torch.Tensor, eps: float = DEFAULT_EPS,
            padded_value_indicator: float = PADDED) -> torch.Tensor:
    """ListNet top-1 cross-entropy, matching allRank's ``listNet`` (mean over slates)."""
    mask = y_true == padded_value_indicator
    pred_probs = torch.softmax(y_pred.masked_fill(mask, float("-inf")), dim=1)
    true_probs = torch.softmax(y_true.masked_fill(mask, float("-inf")), dim=1)
    # eps is added to the probabilities (not the logits) exactly as allRank does, so padded log terms stay finite.
    return torch.mean(-torch.sum(true_probs * torch.log(pred_probs + eps), dim=1))


def neural_ndcg(y_pred: torch.Tensor, y_true: torch.Tensor, padded_value_indicator: float = PADDED,
                temperature: float = 1.0, powered_relevancies: bool = True, k: int | None = None,
                stochastic: bool = False, n_samples: int = 32, beta: float = 0.1,
                log_scores: bool = True) -> torch.Tensor:
    """NeuralNDCG loss (-mean relaxed NDCG@k), matching allRank's ``neuralNDCG``."""
    _check_k(k)
    batch, n = y_true.shape
    k = n if k is None else k
    mask = y_true == padded_value_indicator
    if stochastic:
        # allRank shifts by the batch-wide minimum, padded entries included, before the optional log.
        shifted = y_pred + y_pred.min().abs()
        noise = torch.rand((n_samples, batch, n), dtype=y_pred.dtype, device=y_pred.device)
        gumbel = -torch.log(-torch.log(noise + DEFAULT_EPS) + DEFAULT_EPS)
        if log_scores:
            shifted = torch.log(shifted + DEFAULT_EPS)
        scores = (shifted.unsqueeze(0) + beta * gumbel).reshape(n_samples * batch, n)
        samples = n_samples
    else:
        scores, samples = y_pred, 1
    flat_mask = mask.unsqueeze(0).expand(samples, batch, n).reshape(samples * batch, n)
    perm, row_pad = _masked_neural_sort(scores, flat_mask, temperature)
    perm = _sinkhorn(perm, row_pad, flat_mask).view(samples, batch, n, n)

    labels = y_true.masked_fill(mask, 0.0)
    gains = torch.pow(2.0, labels) - 1.0 if powered_relevancies else labels
    soft_gains = torch.matmul(perm, gains.unsqueeze(0).unsqueeze(-1)).squeeze(-1)  # [S, B, n] by rank
    disc = dcg_discounts(n, y_pred.dtype, y_pred.device)
    dcg = (soft_gains * disc)[..., :k].sum(dim=-1)  # [S, B]
    ideal = (gains.sort(dim=-1, descending=True).values * disc)[:, :k].sum(dim=-1)  # [B]
    ndcg = dcg / (ideal + DEFAULT_EPS)
    no_ideal = ideal == 0.0
    ndcg = ndcg.masked_fill(no_ideal.unsqueeze(0), 0.0)
    if bool(no_ideal.all()):
        return y_pred.sum() * 0.0  # allRank returns a constant 0 when no slate has any relevant item
    # Slates with zero ideal DCG are left out of the denominator, as in allRank.
    return -ndcg.sum() / ((~no_ideal).sum() * samples)


def _lambda_weights(scheme: str | None, gains: torch.Tensor, disc_den: torch.Tensor, mu: float,
                    labels_sorted: torch.Tensor) -> torch.Tensor | float:
    """Per-pair weights of allRank's lambdaLoss weighing schemes, pairs indexed by predicted positions."""
    def lambda_rank() -> torch.Tensor:
        inv = 1.0 / disc_den
        return (inv[:, :, None] - inv[:, None, :]).abs() * (gains[:, :, None] - gains[:, None, :]).abs()

    def ndcg_loss2() -> torch.Tensor:
        n = gains.shape[1]
        pos = torch.arange(n, device=gains.device)
        dist = (pos[:, None] - pos[None, :]).abs()
        inv = 1.0 / _log2_positions(n + 1, gains.dtype, gains.device)  # 1/log2(1+d) for d = 1..n+1
        # delta_|i-j| = |1/log2(1+|i-j|) - 1/log2(2+|i-j|)|, zero on the diagonal
        delta = (inv[(dist - 1).clamp(min=0)] - inv[dist]).abs().masked_fill(dist == 0, 0.0)
        return delta.unsqueeze(0) * (gains[:, :, None] - gains[:, None, :]).abs()

    if scheme is None or scheme == "rankNet_scheme":
        return 1.0
    if scheme == "ndcgLoss1_scheme":
        return (gains / disc_den)[:, :, None]
    if scheme == "ndcgLoss2_scheme":
        return ndcg_loss2()
    if scheme == "lambdaRank_scheme":
        return lambda_rank()
    if scheme == "ndcgLoss2PP_scheme":
        return mu * ndcg_loss2() + lambda_rank()
    if scheme == "rankNetWeightedByGTDiff_scheme":
        return (labels_sorted[:, :, None] - labels_sorted[:, None, :]).abs()
    if scheme == "rankNetWeightedByGTDiffPowed_scheme":
        return (labels_sorted[:, :, None] ** 2 - labels_sorted[:, None, :] ** 2).abs()
    raise ValueError(f"unknown weighing_scheme {scheme!r}; expected None or one of {_LAMBDA_SCHEMES}")


def lambda_loss(y_pred: torch.Tensor, y_true: torch.Tensor, eps: float = DEFAULT_EPS,
                padded_value_indicator: float = PADDED, weighing_scheme: str | None = "ndcgLoss2PP_scheme",
                k: int | None = None, sigma: float = 1.0, mu: float = 10.0, reduction: str = "sum",
                reduction_log: str = "binary") -> torch.Tensor:
    """LambdaLoss framework (RankNet, LambdaRank, NDCGLoss1/2/2++), matching allRank's ``lambdaLoss``."""
    # The default scheme is NDCGLoss2++ by this project's choice; allRank's own default is None (RankNet).
    _check_k(k)
    if reduction_log not in ("binary", "natural"):
        raise ValueError("Reduction logarithm base can be either natural or binary")
    if reduction not in ("sum", "mean"):
        raise ValueError("Reduction method can be either sum or mean")
    n = y_true.shape[1]
    mask = y_true == padded_value_indicator
    # Stable descending sort so tied predictions keep their input order (allRank's sort is unstable).
    order = torch.sort(y_pred.detach().masked_fill(mask, float("-inf")), dim=-1, descending=True, stable=True).indices
    pred_sorted = torch.gather(y_pred.masked_fill(mask, 0.0), 1, order)
    true_sorted = torch.gather(y_true, 1, order)
    pad_sorted = torch.gather(mask, 1, order)

    pairs = ~pad_sorted[:, :, None] & ~pad_sorted[:, None, :]
    if weighing_scheme != "ndcgLoss1_scheme":
        pairs = pairs & (true_sorted[:, :, None] > true_sorted[:, None, :])
    top = n if k is None else k
    in_top = torch.arange(n, device=y_pred.device) < top
    pairs = pairs & (in_top[:, None] & in_top[None, :]).unsqueeze(0)  # both positions must be within k

    # Padded and negative labels count as zero gain, like allRank's clamp(min=0) of -inf-filled labels.
    labels_sorted = true_sorted.masked_fill(pad_sorted, 0.0).clamp(min=0.0)
    ideal_labels = y_true.masked_fill(mask, 0.0).clamp(min=0.0).sort(dim=-1, descending=True).values
    disc_den = _log2_positions(n, y_pred.dtype, y_pred.device).unsqueeze(0)  # [1, n]
    max_dcg = ((torch.pow(2.0, ideal_labels) - 1.0) / disc_den)[:, :top].sum(dim=-1).clamp(min=eps)
    gains = (torch.pow(2.0, labels_sorted) - 1.0) / max_dcg[:, None]
    weights = _lambda_weights(weighing_scheme, gains, disc_den, mu, labels_sorted)

    diffs = (pred_sorted[:, :, None] - pred_sorted[:, None, :]).clamp(min=-1e8, max=1e8)
    probas = (torch.sigmoid(sigma * diffs).clamp(min=eps) ** weights).clamp(min=eps)
    logs = torch.log2(probas) if reduction_log == "binary" else torch.log(probas)
    selected = logs[pairs]
    # An empty selection gives 0 for "sum" and NaN for "mean", exactly like allRank.
    return -selected.sum() if reduction == "sum" else -selected.mean()


def approx_ndcg(y_pred: torch.Tensor, y_true: torch.Tensor, eps: float = DEFAULT_EPS,
                padded_value_indicator: float = PADDED, alpha: float = 1.0) -> torch.Tensor:
    """ApproxNDCG loss (-mean over slates, no truncation), matching allRank's ``approxNDCGLoss``."""
    n = y_true.shape[1]
    mask = y_true == padded_value_indicator
    labels = y_true.masked_fill(mask, 0.0).clamp(min=0.0)
    disc_den = _log2_positions(n, y_pred.dtype, y_pred.device).unsqueeze(0)
    ideal = labels.sort(dim=-1, descending=True).values
    max_dcg = ((torch.pow(2.0, ideal) - 1.0) / disc_den).sum(dim=-1).clamp(min=eps)
    gains = (torch.pow(2.0, labels) - 1.0) / max_dcg[:, None]
    # The sum over items is permutation invariant, so allRank's sort by prediction is not needed here.
    pairs = ~mask[:, :, None] & ~mask[:, None, :] & ~torch.eye(n, dtype=torch.bool, device=y_pred.device)
    s = y_pred.masked_fill(mask, 0.0)
    diffs = (s[:, :, None] - s[:, None, :]).masked_fill(~pairs, 0.0)
    approx_pos = 1.0 + (pairs.to(y_pred.dtype) * torch.sigmoid(-alpha * diffs).clamp(min=eps)).sum(dim=-1)
    ndcg = (gains / torch.log2(1.0 + approx_pos)).sum(dim=-1)
    return -ndcg.mean()


def pirank_loss(y_pred: torch.Tensor, y_true: torch.Tensor, tau: float = 5.0, k: int | None = None,
                padded_value_indicator: float = PADDED, ste: bool = False) -> torch.Tensor:
    """PiRank relaxed NDCG@k loss (1 - batch NDCG via NeuralSort), matching PiRank's ``pirank_simple_loss``.

    Matched semantics (ermongroup/pirank, pirank_simple.py / pirank_simple_rebased.py):
    * padded items get label 0 and score ``min(row of y_pred, padded raw scores included) - 1e-6``; they stay
      in the NeuralSort (n = full slate length), so the relaxed value is not exactly padding invariant;
    * gains 2^y - 1; discounts 1/ln(1 + position) (PiRank uses the natural log; the ratio equals log2 NDCG up
      to the 1e-10 terms); the ideal DCG adds 1e-10 to each discount denominator;
    * NOT a mean of per-slate NDCGs: NDCG = sum_b DCG_b / (1e-10 + sum_b IDCG_b) over the whole batch, so an
      all-zero slate adds nothing to either sum, and an all-zero batch gives loss 1;
    * ``ste=True`` reproduces PiRank's straight-through option (its script default): value from a hard sort
      (temperature 1e-10), gradient from temperature ``tau``. ``k=None`` means the full slate (PiRank's flag
      default is 15). Padding is ``y_true == padded_value_indicator`` (TF-Ranking's test is label >= 0).
    """
    _check_k(k)
    n = y_true.shape[1]
    valid = y_true != padded_value_indicator
    labels = torch.where(valid, y_true, torch.zeros_like(y_true))
    floor = y_pred.amin(dim=1, keepdim=True) - 1e-6
    logits = torch.where(valid, y_pred, floor)
    perm = neural_sort(logits, tau)
    if ste:
        hard = neural_sort(logits, 1e-10)
        perm = perm + (hard - perm).detach()  # forward value of the hard sort, gradient of the soft one
    den = torch.log(torch.arange(2, n + 2, dtype=y_pred.dtype, device=y_pred.device))
    top = n if k is None else k
    dcg = (torch.bmm(perm, (torch.pow(2.0, labels) - 1.0).unsqueeze(-1)).squeeze(-1) / den)[:, :top].sum(dim=1)
    ideal_labels = labels.sort(dim=-1, descending=True).values  # PiRank's hard NeuralSort of the labels
    ideal = ((torch.pow(2.0, ideal_labels) - 1.0) / (1e-10 + den))[:, :top].sum(dim=1)
    return 1.0 - dcg.sum() / (1e-10 + ideal.sum())


def lambda_mrr_loss(y_pred: torch.Tensor, y_true: torch.Tensor, padded_value_indicator: float = PADDED,
                    clamp: float = 50.0) -> torch.Tensor:
    """UDR's list-wise ranking loss (Li et al. 2023, `lambda_mrr_loss` in their DPR fork).

    For every pair of one slate with y_true[i] > y_true[j]: |1/pos_i - 1/pos_j| * log(1 + exp(-(s_i - s_j))),
    where pos are 1-based ranks under the PREDICTED order (a LambdaRank weight on the reciprocal rank, not
    differentiated) and s_i - s_j is clamped to [-clamp, clamp]. Mean over all valid pairs of the batch.
    """
    mask = y_true != padded_value_indicator
    scores = y_pred.masked_fill(~mask, float("-inf"))
    order = scores.detach().argsort(dim=-1, descending=True)
    positions = torch.empty_like(order).scatter_(-1, order, torch.arange(1, y_pred.shape[-1] + 1,
                                                                          device=y_pred.device).expand_as(order))
    reciprocal = 1.0 / positions.to(y_pred.dtype)
    weight = (reciprocal[:, :, None] - reciprocal[:, None, :]).abs()
    pairs = (y_true[:, :, None] > y_true[:, None, :]) & mask[:, :, None] & mask[:, None, :]
    diff = (y_pred[:, :, None] - y_pred[:, None, :]).clamp(-clamp, clamp)
    terms = weight * torch.nn.functional.softplus(-diff)
    if not pairs.any():
        return y_pred.sum() * 0.0
    return terms[pairs].mean()
