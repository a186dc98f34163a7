"""WMT19 English->Chinese news translation; final metric sentence chrF, BERTScore F1 reported beside it.

chrF is the primary metric (since 2026-11-27; the paper reports BERTScore): the only BERTScore encoder installable
offline, all-MiniLM-L6-v2, has an English WordPiece vocabulary that maps ~65% of the Chinese characters of the
references to [UNK] (4745 of the 7821 tokens of the 200 test references), so its F1 compares mostly unknown
tokens. chrF compares characters and sees every one. BERTScore F1 stays beside it (`extra["bertscore_f1"]`) for
comparison with the paper, and stays the selection reward (`--reward auto`, the paper's), whose [UNK] problem
the reward tables' chrF columns let a reader check. Run folders written before the change (no `task_info` in
their config.json) hold BERTScore F1 as their score: reports/results.py reads them so.
"""
from __future__ import annotations

from typing import Sequence

from bench.items import Item
from bench.metrics import BertScore, ChrF
from bench.tasks.base import require_str, SplitSpec, Task

WMT_INSTRUCTION = (
    "You are a helpful, respectful and honest assistant helping to translate news sentences from English "
    "to Chinese. Follow the given examples and answer with the Chinese translation only."
)


class WMT19(Task):
    name = "wmt19"
    metric_name = "chrf"
    metric_label = "chrF"
    spec = SplitSpec(folder="wmt19_en_zh", pool="train_pool.jsonl", validation="dev.jsonl", test="test.jsonl")
    instruction = WMT_INSTRUCTION
    lang = "zh"
    stop = ("\n", "[English]")

    def __init__(self, bertscore: BertScore | None = None):
        self.bertscore = bertscore or BertScore()
        self.chrf = ChrF()

    def parse_row(self, row: dict, row_id: str) -> Item:
        return Item(id=f"wmt19/{row_id}", question=require_str(row, "en").strip(), answer=require_str(row, "zh").strip())

    def format_demo(self, item: Item) -> str:
        return f"[English]: {item.question}\n[Chinese]: {item.answer}"

    def format_query(self, item: Item) -> str:
        return f"[English]: {item.question}\n[Chinese]:"

    def cut(self, output: str) -> str:
        # The translation is the first non-empty line.
        for line in output.strip().splitlines():
            for stop in self.stop[1:]:
                line = line.split(stop)[0]
            if line.strip():
                return line.strip()
        return ""

    def extract(self, output: str) -> str:
        return output.strip()

    def score(self, predictions: Sequence[str], items: Sequence[Item], outputs: Sequence[str]) -> list[float]:
        return [self.chrf.sentence(p, it.answer) for p, it in zip(predictions, items)]

    def extra_metrics(self, outputs: Sequence[str], items: Sequence[Item]) -> dict[str, list[float]]:
        return {"bertscore_f1": self.bertscore.f1(list(outputs), [it.answer for it in items], lang="zh")}
