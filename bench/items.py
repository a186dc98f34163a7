"""The one record type that crosses every boundary: a task item."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Item:
    """One example of a task: a pool demonstration, a validation item or a test item.

    `id` is unique across splits of a task (``<task>/<file>:<line>``), so overlap checks are exact.
    """

    id: str
    question: str
    answer: str
    rationale: str = ""
    options: tuple[str, ...] = ()
    split: str = ""
    meta: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def gold_output(self) -> str:
        """What the reward compares an LLM output against: rationale plus final answer."""
        return f"{self.rationale}\n{self.answer}".strip() if self.rationale else self.answer
