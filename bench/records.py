"""Per-item records, fit summaries and the results file: the data the reports are built from."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

RECORD_CHARS = 400  # a record keeps its query and demonstration questions to this many characters


@dataclass
class ItemRecord:
    """One (method, task, test item): what was shown, what came back, how it scored."""

    method: str
    task: str
    item_id: str
    demo_ids: list[str]
    prompt_hash: str
    output: str
    prediction: str
    gold: str
    score: float
    latency_s: float  # selection for this query + LLM time (the time it took when first computed)
    select_s: float = 0.0
    extra: dict = field(default_factory=dict)  # secondary metrics (chrF for WMT19)
    llm: str = ""  # the LLM that answered this item
    selection_llm: str = ""  # the LLM behind the reward oracle when the demonstrations were selected
    query: str = ""  # the test question (truncated), for the exemplar table
    demo_questions: list[str] = field(default_factory=list)  # the demonstrations' questions (truncated)
    select_info: dict = field(default_factory=dict)  # what select() did for this item (Selector.select_info)
    prompt: str = ""  # the full prompt, with --log-prompts
    full_output: str = ""  # the whole generation when it held a reasoning block (output keeps the answer part)
    label_probs: dict = field(default_factory=dict)  # ranked labels: each label's (calibrated) probability


@dataclass
class FitSummary:
    method: str
    task: str
    level: str
    selection_seconds: float
    selection_calls: int
    budget: int | None
    budget_exhausted: bool
    trace: list[dict] = field(default_factory=list)
    group: str = ""  # row group of the paper's main table (Selector.table_group)
    reused_from: str = ""  # a saved-selection store this run replayed instead of fitting
    selection_key: str = ""  # bench.selections.selection_key: a run with the same key can replay these records
    warnings: list[str] = field(default_factory=list)  # the fit ran degraded (fallbacks, less data than asked)
    error: str = ""  # the fit failed (FitFailed): the row has no score
    llm_seconds: float = 0.0  # of selection_seconds: inside the LLM (pulls, log-likelihoods)
    embedding_seconds: float = 0.0  # of selection_seconds: embedding texts (the pool, queries)
    embedding_reused_seconds: float = 0.0  # of embedding_seconds: texts an earlier method embedded, charged at their cost
    scale: dict = field(default_factory=dict)  # the size the fit ran at (Selector.scale): pulls, steps, beam...


def append_jsonl(path: Path, rows: Iterable) -> None:
    rows = list(rows)
    if not rows:
        return
    with path.open("a", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(asdict(row) if hasattr(row, "__dataclass_fields__") else row,
                                    ensure_ascii=False) + "\n")
        handle.flush()


def round_floats(value, digits: int):
    """Every float in a JSON-like value to `digits` significant digits (NaN and infinities kept): a summary written
    on another CPU, whose vector sums differ in the last bit, reads the same."""
    if isinstance(value, float):
        return float(f"{value:.{digits}g}")
    if isinstance(value, dict):
        return {k: round_floats(v, digits) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [round_floats(v, digits) for v in value]
    return value


def read_jsonl(path: Path) -> Iterator[dict]:
    if not path.exists():
        return
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            line = line.strip()
            if not line:
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue  # the last line of a killed run may be cut; that item is redone


def read_records(path: Path) -> list[ItemRecord]:
    return [ItemRecord(**row) for row in read_jsonl(path)]


def read_fits(path: Path) -> dict[tuple[str, str], FitSummary]:
    """Last complete fit summary per (method, task)."""
    return {(row["method"], row["task"]): FitSummary(**row) for row in read_jsonl(path)}
