"""Saved selections: the demonstrations each selector chose per test item, reusable across runs.

A selection depends on the selector, its parameters, the data, the seed and the LLM behind the
reward oracle, never on the LLM that answers the test items. Saving it under a key of exactly
those inputs lets a run that only changes `--llm` (the transfer setting of the paper's appendix)
reuse every selection without a single selection-phase LLM call.
"""
from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from bench.items import Item
from bench.llm.cache import call_key
from bench.records import read_jsonl
from methods.base import Selector


def selection_key(identity: dict) -> str:
    """Hash of everything a selection depends on (method, params, data, seed, selection LLM, ...)."""
    return call_key("selection", "", identity)


class SelectionStore:
    """One JSON file per (key, process rank): {"meta": ..., "fit": ..., "demos": {item_id: [Item fields]}}."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def save(self, key: str, meta: dict, fit: dict, demos: dict[str, list[Item]], rank: int = 0) -> Path:
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / f"{key[:24]}.rank{rank}.json"
        previous = json.loads(path.read_text()) if path.exists() else {"demos": {}}
        chosen = {**previous["demos"], **{item: [asdict(d) for d in ds] for item, ds in demos.items()}}
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"meta": meta, "fit": fit, "demos": chosen}), encoding="utf-8")
        tmp.replace(path)  # never a half-written file
        return path

    def load(self, key: str) -> tuple[dict, dict[str, list[Item]]] | None:
        """(the original fit summary, demonstrations per test item) merged over ranks, or None."""
        fit, demos = None, {}
        for path in sorted(self.root.glob(f"{key[:24]}.rank*.json")):
            data = json.loads(path.read_text(encoding="utf-8"))
            fit = fit or data["fit"]
            for item, rows in data["demos"].items():
                demos[item] = [_item(row) for row in rows]
        return None if fit is None else (fit, demos)


def published_selection(run_dirs: list[Path], key: str, method: str, task: str, pool: list[Item]
                        ) -> tuple[dict, dict[str, list[Item]], Path] | None:
    """The selection with this key in a run folder's fits.jsonl (its `selection_key`) and records.jsonl (the demo
    ids per test item, looked up in `pool`): (fit summary, demonstrations per test item, folder), or None.
    A published run keeps no selection store; its records are the selection."""
    by_id = {item.id: item for item in pool}
    for run_dir in map(Path, run_dirs):
        fits = [row for row in read_jsonl(run_dir / "fits.jsonl") if row.get("selection_key") == key
                and row.get("method") == method and row.get("task") == task and not row.get("error")]
        if not fits:
            continue
        demos: dict[str, list[Item]] = {}
        for row in read_jsonl(run_dir / "records.jsonl"):
            if row.get("method") == method and row.get("task") == task:
                if not all(demo in by_id for demo in row["demo_ids"]):
                    break  # another pool: not this selection
                demos[row["item_id"]] = [by_id[demo] for demo in row["demo_ids"]]
        else:
            if demos:
                return fits[-1], demos, run_dir
    return None


def _item(row: dict) -> Item:
    return Item(**{**row, "options": tuple(row.get("options", ()))})


class ReplaySelector(Selector):
    """Plays back saved selections under the original selector's name, level and table group."""

    def __init__(self, original: Selector, demos: dict[str, list[Item]]):
        super().__init__(original.k)
        self.name = original.name
        self.level = original.level
        self.table_group = original.table_group
        self.demos = demos

    def fit(self, ctx) -> "ReplaySelector":
        return self

    def select(self, query: Item) -> list[Item]:
        return list(self.demos[query.id])
