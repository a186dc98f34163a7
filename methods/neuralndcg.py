"""NeuralNDCG (Pobrotyn & Bialobrzeski 2021) with allRank's context-aware transformer over the slate.

Paper's appendix table lists two NeuralNDCG configurations; this one is FC stem (768, 96), N = 4
layers, d_ff = 512, h = 4 heads, dropout 0.3 (the other is used by `neuralndcg-norm`).
"""
from __future__ import annotations

from dearicl.ltr import SlateTransformer
from methods.ltr_base import LTRSelector, register_ltr


@register_ltr("neuralndcg")
class NeuralNDCG(LTRSelector):
    loss_name = "neural_ndcg"

    def make_model(self, d_in: int) -> SlateTransformer:
        return SlateTransformer(d_in, (768, 96), n_layers=4, d_ff=512, heads=4, dropout=0.3)
