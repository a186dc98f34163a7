"""NDCGLoss2++ (LambdaLoss framework, Wang et al. 2018) over DEARICL's candidate arms, sigma 1, mu 10.

Architecture from the paper's appendix table: an MLP (256, 512, 1024, 512, 256).
"""
from __future__ import annotations

from dearicl.ltr import MLPRanker
from methods.ltr_base import LTRSelector, register_ltr


@register_ltr("ndcgloss2pp")
class NDCGLoss2PP(LTRSelector):
    loss_name = "ndcgloss2pp"

    def make_model(self, d_in: int) -> MLPRanker:
        return MLPRanker(d_in, (256, 512, 1024, 512, 256))
