"""Classification tasks: the answer is one of a fixed set of labels.

Two ways to answer an item (Task.configure):
- `rank` (the field's standard for in-context classification: Zhao et al. 2021, LENS, CEIL, OpenICL's PPL
  inferencer): every label word is scored by its log-likelihood after the prompt; a label's probability is the
  sum over its words (Zhao et al.'s `label_dict`, e.g. AG News' Technology/Science), normalised over the labels.
  With `calibration="contextual"` the probabilities are divided by those the same demonstrations give three
  content-free inputs ("N/A", "", "[MASK]", averaged before normalising) and normalised again: Zhao et al.'s
  diagonal W with b = 0 (tonyzhaozh/few-shot-learning, `get_p_content_free` and `eval_accuracy`).
- `generate`: the model writes a few tokens and the first label word it names is the prediction (no label
  named: wrong).

The metric is accuracy; results add macro-F1 over the labels beside it. Selection rewards are in [0, 1]: 0/1
correctness (`metric`, the default: what accuracy averages), or, when ranking, the gold label's (calibrated)
probability (`label-prob`, a smoother signal; in the pilot, studies/pilots/classification-2026-11/, it separated
random arms far less than correctness did on SST-2 and more on TREC).
"""
from __future__ import annotations

import re
from typing import Sequence

import numpy as np
from scipy.special import logsumexp, softmax

from bench.items import Item
from bench.tasks.base import Task

CONTENT_FREE_INPUTS = ("N/A", "", "[MASK]")  # Zhao et al. 2021's content-free inputs
WORD = re.compile(r"[\w/'&.-]+")


class ClassificationTask(Task):
    metric_name = "accuracy"
    metric_label = "Acc"
    stop = ("\n",)
    max_new_tokens = 8
    instruction = ""
    #: answer -> every word that names its class, the answer first (ranking sums them, generation accepts any)
    aliases: dict[str, tuple[str, ...]] = {}

    def words_of(self, label: str) -> tuple[str, ...]:
        return self.aliases.get(label, (label,))

    def choice_words(self) -> list[str]:
        """Every label word, label by label: what rank scoring asks the LLM to score after each prompt."""
        return [word for label in self.labels for word in self.words_of(label)]

    def content_free_items(self) -> list[Item]:
        return [Item(id=f"content-free/{i}", question=text, answer="") for i, text in enumerate(CONTENT_FREE_INPUTS)]

    # ---- judging ----------------------------------------------------------------------------
    def extract(self, output: str) -> str:
        """The label a generation names: its first word if that is (or starts with) a label word, else the first
        label word found anywhere as a whole word; '' when none is named."""
        text = output.strip().lower()
        words = [(word.lower(), label) for label in self.labels for word in self.words_of(label)]
        first = WORD.match(text)
        if first:
            token = first.group(0).rstrip(".")
            for word, label in sorted(words, key=lambda w: -len(w[0])):
                if token == word or (len(word) >= 2 and token.startswith(word)):
                    return label
        found = [(m.start(), label) for word, label in words
                 for m in [re.search(rf"(?<!\w){re.escape(word)}(?!\w)", text)] if m]
        return min(found)[1] if found else ""

    def score(self, predictions: Sequence[str], items: Sequence[Item], outputs: Sequence[str]) -> list[float]:
        return [float(p == it.answer) for p, it in zip(predictions, items)]

    def label_probs(self, logliks: Sequence[float], content_free: Sequence[Sequence[float]] | None = None
                    ) -> np.ndarray:
        """Probabilities over `labels` from the log-likelihoods of `choice_words()`; with the content-free inputs'
        log-likelihoods, contextually calibrated (Zhao et al. 2021: divide by their mean probabilities)."""
        log_p = self._label_logp(logliks)
        if content_free:
            rows = np.array([self._label_logp(row, normalise=False) for row in content_free])
            log_cf = logsumexp(rows, axis=0) - np.log(len(rows))  # the mean of unnormalised probabilities
            log_p = log_p - (log_cf - logsumexp(log_cf))
        return softmax(log_p)

    def _label_logp(self, logliks: Sequence[float], normalise: bool = True) -> np.ndarray:
        values, out, start = np.asarray(logliks, dtype=np.float64), [], 0
        for label in self.labels:
            n = len(self.words_of(label))
            out.append(logsumexp(values[start:start + n]))
            start += n
        out = np.array(out)
        return out - logsumexp(out) if normalise else out
