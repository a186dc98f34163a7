"""NeuralNDCG on standardised features ("NeuralNDCG with normalized data" in the paper's tables).

Paper's appendix table: FC stem (768, 96), N = 2 layers, d_ff = 384, h = 1 head, dropout 0.1.
Features are z-scored per dimension with the training slates' mean and std.
"""
from __future__ import annotations

from dearicl.ltr import SlateTransformer
from methods.ltr_base import LTRSelector, register_ltr


@register_ltr("neuralndcg-norm")
class NeuralNDCGNorm(LTRSelector):
    loss_name = "neural_ndcg"

    def __init__(self, k: int = 5, normalise: bool = True, **ltr):
        super().__init__(k, normalise=normalise, **ltr)

    def make_model(self, d_in: int) -> SlateTransformer:
        return SlateTransformer(d_in, (768, 96), n_layers=2, d_ff=384, heads=1, dropout=0.1)
