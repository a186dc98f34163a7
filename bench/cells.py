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
# the files whose rows carry a "method" (per-rank files exist while a multi-process run is under way)
PER_METHOD_FILES = ("records.jsonl", "records.rank*.jsonl", "fits.jsonl", "calls.jsonl", "calls.rank*.jsonl")


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


def methods_with_rows(out: Path) -> set[str]:
    """Methods that have records in the run folder (finished or partly finished cells)."""
    found = set()
    for pattern in PER_METHOD_FILES[:2]:
        for path in out.glob(pattern):
            for line in path.open(encoding="utf-8"):
                try:
                    found.add(json.loads(line)["method"])
                except (json.JSONDecodeError, KeyError, TypeError):
                    continue  # a cut last line
    return found


def set_aside(out: Path, old_settings: dict[str, dict]) -> Path:
    """Move these methods' rows out of the run's per-method files into OUT/superseded/<UTC time>/.

    `old_settings` maps each method to the settings its rows were made with (written beside them)."""
    dest = out / "superseded" / datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
    dest.mkdir(parents=True)
    (dest / "cells.json").write_text(json.dumps(old_settings, indent=2), encoding="utf-8")
    for pattern in PER_METHOD_FILES:
        for path in sorted(out.glob(pattern)):
            keep, move = [], []
            for line in path.read_text(encoding="utf-8").splitlines(keepends=True):
                try:
                    method = json.loads(line).get("method")
                except (json.JSONDecodeError, AttributeError):
                    method = None  # a cut last line stays where the reader already skips it
                (move if method in old_settings else keep).append(line)
            if move:
                (dest / path.name).write_text("".join(move), encoding="utf-8")
                tmp = path.with_name(path.name + ".tmp")
                tmp.write_text("".join(keep), encoding="utf-8")
                tmp.replace(path)  # atomic: a kill here leaves the old file or the new one
    return dest
