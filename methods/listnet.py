"""ListNet (Cao et al. 2007) with allRank's context-aware transformer over the slate of candidate arms.

Paper's appendix table: FC stem (768, 128), N = 4 layers, d_ff = 512, h = 2 heads, dropout 0.3.
"""
from __future__ import annotations

from dearicl.ltr import SlateTransformer
from methods.ltr_base import LTRSelector, register_ltr


@register_ltr("listnet")
class ListNet(LTRSelector):
    loss_name = "listnet"

    def make_model(self, d_in: int) -> SlateTransformer:
        return SlateTransformer(d_in, (768, 128), n_layers=4, d_ff=512, heads=2, dropout=0.3)
