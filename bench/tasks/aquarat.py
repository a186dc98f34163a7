"""AQuA-RAT: algebra word problems with five options; final metric exact match on the letter."""
from __future__ import annotations

import re
from typing import Sequence

from bench.items import Item
from bench.tasks.base import MATH_INSTRUCTION, SplitSpec, Task, require_str

OPTION = re.compile(r"^\s*([A-E])\s*\)\s*(.*)$", re.S)
LETTER_PATTERNS = (
    re.compile(r"\\boxed\{\s*\(?([A-E])\b"),
    re.compile(r"option is\s*\(?([A-E])\b"),
    re.compile(r"answer is\s*:?\s*\(?([A-E])\b", re.I),
    re.compile(r"\[?Answer\]?\s*:\s*(?:The option is\s*)?\(?([A-E])\b"),
)


def format_options(options: Sequence[str]) -> str:
    """['A)21', 'B)21.5'] -> 'A) 21, B) 21.5' as in the paper's prompt."""
    parts = []
    for opt in options:
        m = OPTION.match(opt)
        parts.append(f"{m.group(1)}) {m.group(2).strip()}" if m else opt.strip())
    return ", ".join(parts)


def option_text(option: str) -> str:
    """'B)21.5' -> '21.5': an option's answer text without its letter."""
    m = OPTION.match(option)
    return m.group(2).strip() if m else option.strip()


def extract_letter(output: str) -> str:
    """The chosen option letter: an explicit answer phrase first, else the last 'X)' mention. Markdown
    emphasis (a chat model's **Answer: (C)**) is ignored."""
    output = output.replace("**", "")
    for pattern in LETTER_PATTERNS:
        found = pattern.findall(output)
        if found:
            return found[-1].upper()
    found = re.findall(r"\b([A-E])\)", output)
    return found[-1] if found else ""


class AquaRat(Task):
    name = "aquarat"
    metric_name = "exact_match"
    metric_label = "EM"
    spec = SplitSpec(folder="aqua_rat", pool="train_subset_dqlore_1000.json", validation="dev.json", test="test.json")
    instruction = MATH_INSTRUCTION

    def parse_row(self, row: dict, row_id: str) -> Item:
        options = row.get("options")
        if not isinstance(options, list) or len(options) != 5 or not all(isinstance(o, str) for o in options):
            raise ValueError("field 'options' must be a list of 5 strings")
        correct = require_str(row, "correct").strip().upper()
        if correct not in "ABCDE" or len(correct) != 1:
            raise ValueError(f"field 'correct' must be a letter A-E, got {correct!r}")
        return Item(id=f"aquarat/{row_id}", question=require_str(row, "question").strip(), answer=correct,
                    rationale=str(row.get("rationale", "")).strip(), options=tuple(options))

    def format_demo(self, item: Item) -> str:
        return (f"[Question]: {item.question}\n[Options]: {format_options(item.options)}\n"
                f"[Explanation]: {item.rationale}\n[Answer]: The option is {item.answer}")

    def format_query(self, item: Item) -> str:
        return f"[Question]: {item.question}\n[Options]: {format_options(item.options)}\n[Explanation]:"

    def reward_reference(self, item: Item) -> str:
        return f"{item.rationale}\nThe option is {item.answer}".strip()

    def extract(self, output: str) -> str:
        return extract_letter(output)

    def score(self, predictions: Sequence[str], items: Sequence[Item], outputs: Sequence[str]) -> list[float]:
        return [float(p == it.answer) for p, it in zip(predictions, items)]

    def option_ranking(self) -> "AquaRatOptions":
        return AquaRatOptions()


class AquaRatOptions(AquaRat):
    """AQuA-RAT answered by ranking its five options (reward tables' `option_*` columns), the cloze way
    lm-evaluation-harness scores multiple choice: each option's answer text is scored after "[Question]: ...
    [Answer]:", the options not shown, and the demonstrations are the same items as question and gold option text
    (as classification tasks show a label word). An option's score is its summed log-likelihood, as a ranked label
    word's is (bench/tasks/classification.py); the probabilities are those scores normalised over the five."""

    name = "aquarat-options"
    instruction = ""
    stop = ("\n",)

    def format_demo(self, item: Item) -> str:
        gold = item.options["ABCDE".index(item.answer)] if item.options and item.answer in "ABCDE" else item.answer
        return f"[Question]: {item.question}\n[Answer]: {option_text(gold)}"

    def format_query(self, item: Item) -> str:
        return f"[Question]: {item.question}\n[Answer]:"

    def option_words(self, item: Item) -> list[str]:
        return [option_text(o) for o in item.options]
