"""GSM8K: grade-school math word problems; final metric exact match on the final number."""
from __future__ import annotations

import re
from typing import Sequence

from bench.items import Item
from bench.metrics import numbers_equal, parse_number
from bench.tasks.base import MATH_INSTRUCTION, SplitSpec, Task, iter_numbers, require_str

CALCULATOR = re.compile(r"<<[^>]*>>")
# the paper's format, GSM8K's own, then chat-model styles ("The answer is", LaTeX \boxed{})
ANSWER_MARKERS = ("[Answer]:", "\\boxed{", "Answer:", "####", "answer is")


def strip_calculator(text: str) -> str:
    """Drop GSM8K's <<48/2=24>> calculator annotations."""
    return CALCULATOR.sub("", text)


def extract_number(output: str) -> str:
    """The final number: the first number after the last answer marker, else the last number.
    Markdown emphasis (a chat model's **Answer:** 42) is ignored."""
    output = output.replace("**", "")
    for marker in ANSWER_MARKERS:
        pos = output.rfind(marker)
        if pos != -1:
            found = next(iter_numbers(output[pos + len(marker):]), None)
            if found is not None:
                return _canonical(found)
    numbers = list(iter_numbers(output))
    return _canonical(numbers[-1]) if numbers else ""


def _canonical(raw: str) -> str:
    value = parse_number(raw)
    if value is None:
        return ""
    return str(int(value)) if value.is_integer() else repr(value)


class GSM8K(Task):
    name = "gsm8k"
    metric_name = "exact_match"
    metric_label = "EM"
    spec = SplitSpec(folder="gsm8k", pool="train.jsonl", validation=None, test="test.jsonl")
    instruction = MATH_INSTRUCTION

    def parse_row(self, row: dict, row_id: str) -> Item:
        solution = require_str(row, "answer")
        if "####" not in solution:
            raise ValueError("field 'answer' has no '#### <number>' final answer")
        rationale, answer = solution.rsplit("####", 1)
        answer = answer.strip()
        if parse_number(answer) is None:
            raise ValueError(f"final answer {answer!r} is not a number")
        return Item(id=f"gsm8k/{row_id}", question=require_str(row, "question").strip(),
                    answer=answer, rationale=strip_calculator(rationale).strip())

    def format_demo(self, item: Item) -> str:
        return f"[Question]: {item.question}\n[Explanation]: {item.rationale}\n[Answer]: {item.answer}"

    def format_query(self, item: Item) -> str:
        return f"[Question]: {item.question}\n[Explanation]:"

    def extract(self, output: str) -> str:
        return extract_number(output)

    def score(self, predictions: Sequence[str], items: Sequence[Item], outputs: Sequence[str]) -> list[float]:
        return [float(numbers_equal(p, it.answer)) for p, it in zip(predictions, items)]
