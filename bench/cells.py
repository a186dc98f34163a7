"""A run's cells (one selector on one task) and the settings each was run with.

A run's identity (tasks, data, seed, LLMs) is shared by all its cells and must match for --resume; a
selector's own parameters and cap on selection calls concern its cells only. config.json records them per
method ("cells"), so changing one selector's settings redoes that selector's cells, not the whole run: its
old records, fit summaries and logged calls move to OUT/superseded/ (nothing computed is deleted).
"""
from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

CELL_KEYS = ("method_params", "method_budgets")  # an identity's per-cell settings in config.json before "cells"
# the files whose rows carry a "method" (per-rank files exist while a multi-process run is under way); records
# last, so that a set-aside cut short leaves the method's records behind and is done again by the next --resume
PER_METHOD_FILES = ("fits.jsonl", "calls.jsonl", "calls.rank*.jsonl", "records.jsonl", "records.rank*.jsonl")


def settings_diff(old: dict, new: dict, prefix: str = "") -> list[str]:
    """Dotted names of the settings that differ, e.g. ['params.pulls_per_query']."""
    out = []
    for key in sorted(set(old) | set(new), key=str):
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            out += settings_diff(a, b, f"{prefix}{key}.")
        elif a != b:
            out.append(f"{prefix}{key}")
    return out


def describe_diff(old: dict, new: dict) -> str:
    """'params.pulls_per_query 5 -> 13' for each differing setting."""
    def value(settings: dict, dotted: str):
        for part in dotted.split("."):
            settings = settings.get(part) if isinstance(settings, dict) else None
        return settings
    return ", ".join(f"{d} {value(old, d)!r} -> {value(new, d)!r}" for d in settings_diff(old, new))


def jsonl_lines(path: Path) -> list[bytes]:
    """A JSONL file's rows, split on newlines only (a row's text may hold U+2028, which str.splitlines splits)."""
    return [line for line in path.read_bytes().split(b"\n") if line.strip()]


def row_method(line: bytes) -> str | None:
    try:
        row = json.loads(line)
    except json.JSONDecodeError:
        return None  # a cut last line: the readers skip it
    return row.get("method") if isinstance(row, dict) else None


def methods_with_rows(out: Path) -> set[str]:
    """Methods with any row in the run folder: records, a fit summary or logged calls (a cell cut before its
    first records has the other two)."""
    return {row_method(line) for pattern in PER_METHOD_FILES for path in out.glob(pattern)
            for line in jsonl_lines(path)} - {None}


def set_aside(out: Path, old_settings: dict[str, dict]) -> Path:
    """Move these methods' rows out of the run's per-method files into OUT/superseded/<UTC time>/.

    `old_settings` maps each method to the settings its rows were made with (written beside them)."""
    dest = out / "superseded" / datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
    dest.mkdir(parents=True)
    (dest / "cells.json").write_text(json.dumps(old_settings, indent=2), encoding="utf-8")
    for pattern in PER_METHOD_FILES:
        for path in sorted(out.glob(pattern)):
            keep, move = [], []
            for line in jsonl_lines(path):
                (move if row_method(line) in old_settings else keep).append(line + b"\n")  # a cut line ends too
            if move:
                (dest / path.name).write_bytes(b"".join(move))
                tmp = path.with_name(path.name + ".tmp")
                tmp.write_bytes(b"".join(keep))
                tmp.replace(path)  # atomic: a kill here leaves the old file or the new one
    return dest
