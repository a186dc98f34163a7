"""Imports every built-in selector so that its @register runs."""
from methods import (bm25, bridge, case_dynamic, ceil, case_static, dearicl_dynamic, dearicl_noexplore,  # noqa: F401
                     dearicl_pac_dynamic, dearicl_pac_static, dearicl_random, dearicl_static, dpp, dq_lore, epr,
                     explora, few_shot, influence, knn, lens, listnet, lucb_static, mdl, mmr, ndcgloss2pp, neuralndcg,
                     neuralndcg_norm, pirank, set_bsr, topk_cone, udr, votek, zero_shot)

# The paper's Table 1 order: task level, instance level, bandit, bandit + LTR, then beyond the paper
# (used by --methods all).
PAPER_ORDER = ("zero-shot", "few-shot", "lens", "explora", "bridge", "case-static", "dearicl-static", "knn", "mmr",
               "pirank", "neuralndcg", "listnet", "udr", "ndcgloss2pp", "neuralndcg-norm", "case-dynamic",
               "dearicl-dynamic", "dearicl-noexplore", "dearicl-random", "dearicl-pac-static", "dearicl-pac-dynamic",
               "lucb-static", "bm25", "dpp", "votek", "ceil", "set-bsr", "topk-cone", "mdl", "epr", "influence", "dq-lore")
