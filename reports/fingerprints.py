"""Fingerprints of a (method, task) cell: what it selected and what the LLM answered, item by item, so that a
regression check sees a changed selector even when its score does not move.

`demos`: a hash of every test item's demonstration ids, in prompt order; `outputs`: a hash of every item's
output (greedy decoding in the CI runs, and seeded sampling otherwise, so both are reproducible). `items` keeps
each item's demonstration ids and a short hash of its output, for naming what changed.
"""
from __future__ import annotations

import hashlib
import json


def _hash(value) -> str:
    return hashlib.sha256(json.dumps(value, ensure_ascii=False).encode("utf-8")).hexdigest()[:16]


def fingerprint(records) -> tuple[dict, dict]:
    """({"demos": hash, "outputs": hash}, {item_id: {"demos": [ids], "output": hash}}) of one cell's records."""
    records = sorted(records, key=lambda r: r.item_id)
    items = {r.item_id: {"demos": list(r.demo_ids), "output": _hash(r.output)[:12]} for r in records}
    return ({"demos": _hash([[r.item_id, list(r.demo_ids)] for r in records]),
             "outputs": _hash([[r.item_id, r.output] for r in records])}, items)


def changes(current: dict, reference: dict) -> list[str]:
    """What differs between two rows' fingerprints, one line each: how many items chose other demonstrations
    (with one example, old and new) and how many answered differently."""
    ours, theirs = current.get("fingerprint"), reference.get("fingerprint")
    if not ours or not theirs or ours == theirs:
        return []
    now, then = current.get("items", {}), reference.get("items", {})
    lines = []
    if ours["demos"] != theirs["demos"]:
        moved = sorted(i for i in set(now) | set(then) if now.get(i, {}).get("demos") != then.get(i, {}).get("demos"))
        example = ""
        if moved:
            first = moved[0]
            example = (f"; e.g. {first}: {_ids(then.get(first, {}).get('demos'))} -> "
                       f"{_ids(now.get(first, {}).get('demos'))}")
        lines.append(f"demonstrations changed for {len(moved)} of {max(len(now), len(then))} items{example}")
    if ours["outputs"] != theirs["outputs"]:
        moved = sorted(i for i in set(now) | set(then) if now.get(i, {}).get("output") != then.get(i, {}).get("output"))
        lines.append(f"outputs changed for {len(moved)} of {max(len(now), len(then))} items"
                     + (f" (e.g. {moved[0]})" if moved else ""))
    return lines


def _ids(demos) -> str:
    return "none" if demos is None else "[" + ", ".join(demos) + "]"
