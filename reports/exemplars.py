"""The qualitative exemplar table (the paper's appendix): where two methods disagree in correctness,
the test question and each method's demonstrations (questions only, truncated)."""
from __future__ import annotations

from tabulate import tabulate

from bench.errors import ConfigError
from bench.records import ItemRecord

PAPER_PAIR = ("dearicl-dynamic", "neuralndcg")  # the pair shown in the paper's qualitative table


def _short(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def pick_methods(records: list[ItemRecord], requested: tuple[str, str] | None) -> tuple[str, str]:
    methods = list(dict.fromkeys(r.method for r in records))
    pair = requested or (PAPER_PAIR if all(m in methods for m in PAPER_PAIR) else tuple(methods[:2]))
    missing = [m for m in pair if m not in methods]
    if len(pair) != 2 or missing:
        raise ConfigError(f"--exemplar-methods needs two methods of this run (missing: {', '.join(missing) or '-'}; "
                          f"run has: {', '.join(methods)})")
    return pair[0], pair[1]


RIGHT_AT = 0.5  # an item is right when its score is at least this


def exemplar_table(records: list[ItemRecord], n: int, methods: tuple[str, str] | None = None,
                   limit: int = 160) -> tuple[tuple[str, str], str, int]:
    """((method A, method B), Markdown table of up to n disagreements, number of disagreements found).

    Correct means score >= 0.5: exact match (GSM8K, AquaRAT) is 0 or 1; a continuous metric
    (WMT19 BERTScore) rarely falls on both sides, so translation items seldom appear.
    """
    a, b = pick_methods(records, methods)
    by = {(r.method, r.task, r.item_id): r for r in records}
    rows, found = [], 0
    for rec in records:
        if rec.method != a or (b, rec.task, rec.item_id) not in by:
            continue
        other = by[(b, rec.task, rec.item_id)]
        right_a, right_b = rec.score >= RIGHT_AT, other.score >= RIGHT_AT
        if right_a == right_b:
            continue
        found += 1
        if len(rows) < n:
            demos = lambda r: "<br>".join(f"{i + 1}. {_short(q, limit)}" for i, q in enumerate(r.demo_questions))
            rows.append([rec.task, _short(rec.query, 2 * limit), demos(rec), demos(other), a if right_a else b])
    table = tabulate(rows, headers=["Task", "Test question", f"{a} demonstrations", f"{b} demonstrations", "Right"],
                     tablefmt="github", disable_numparse=True)
    return (a, b), table, found
