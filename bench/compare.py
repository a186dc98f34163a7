"""`bench compare`: the CI regression check of a run against a reference results.json."""
from __future__ import annotations

import json
from dataclasses import dataclass

from tabulate import tabulate

from reports.fingerprints import changes


@dataclass
class Check:
    method: str
    task: str
    what: str
    reference: float
    current: float | None
    ok: bool
    details: tuple[str, ...] = ()  # what changed, for a fingerprint check


# settings two runs must share for their scores to be compared: the items, the LLM, its decoding, the scoring
SHARED_SETTINGS = ("tasks", "n_test", "n_val", "pool_size", "seed", "k", "llm", "generation", "selection_llm",
                   "selection_generation", "scoring", "calibration", "reward")


def differing_settings(current: dict, reference: dict) -> list[str]:
    """'n_test 5 here, 2 in the reference' for each shared setting the two runs' results.json disagree on."""
    ours, theirs = current.get("config", {}), reference.get("config", {})
    return [f"{key} {_plain(ours.get(key))} here, {_plain(theirs.get(key))} in the reference"
            for key in SHARED_SETTINGS if ours.get(key) != theirs.get(key)]


def _plain(value) -> str:
    text = json.dumps(value, sort_keys=True) if not isinstance(value, str) else value
    return text if len(text) <= 50 else text[:49] + "…"


def compare(current: dict, reference: dict, tolerance: float, calls_tolerance: float) -> list[Check]:
    """Scores may not drop by more than `tolerance` (absolute, metric units 0-1); total LLM calls may
    not rise by more than `calls_tolerance` (relative); a reference row with a fingerprint fails when the run
    selected or answered any item differently. A reference row missing from the run fails, and so does a row
    whose selection was replayed from a saved store instead of fitted."""
    have = {(r["method"], r["task"]): r for r in current.get("runs", [])}
    checks = []
    for ref in reference.get("runs", []):
        cur = have.get((ref["method"], ref["task"]))
        if cur is None:
            checks.append(Check(ref["method"], ref["task"], "present", 1, None, False))
            continue
        if cur.get("selection_reused_from") and not ref.get("selection_reused_from"):
            # a replayed selection made no selection call: the check would compare nothing
            checks.append(Check(ref["method"], ref["task"], "fitted", True, False, False))
            continue
        if cur.get("error") or ref.get("error"):  # a fit that failed: it must fail (or succeed) as before
            checks.append(Check(ref["method"], ref["task"], "failed", bool(ref.get("error")), bool(cur.get("error")),
                                bool(cur.get("error")) == bool(ref.get("error"))))
            continue
        if ref.get("fingerprint"):  # what was selected and answered, item by item: any change is one
            changed = tuple(changes(cur, ref))
            checks.append(Check(ref["method"], ref["task"], "fingerprint", ref["fingerprint"]["demos"][:8],
                                (cur.get("fingerprint") or {}).get("demos", "none")[:8], not changed, changed))
        if ref.get("metric") and cur.get("metric") and cur["metric"] != ref["metric"]:
            # two metrics' scores do not compare (WMT19: BERTScore, then chrF): the reference must be renewed
            checks.append(Check(ref["method"], ref["task"], "metric", ref["metric"], cur["metric"], False,
                                (f"scored by {cur['metric']} here and by {ref['metric']} in the reference: the "
                                 "scores do not compare",)))
        else:
            checks.append(Check(ref["method"], ref["task"], "score", ref["score"], cur["score"],
                                cur["score"] >= ref["score"] - tolerance - 1e-12))
        ref_calls = sum(ref["llm_calls"].values())
        cur_calls = sum(cur["llm_calls"].values())
        checks.append(Check(ref["method"], ref["task"], "llm_calls", ref_calls, cur_calls,
                            cur_calls <= ref_calls * (1 + calls_tolerance) + 1e-9))
    return checks


def format_checks(checks: list[Check], accept: str | None = "python -m bench compare RUN --to REFERENCE --accept") -> str:
    """The checks as a table; `accept`: the command that makes the run the new reference (the user's own paths;
    None when it is being accepted)."""
    rows = [[c.method, c.task, c.what, c.reference, "missing" if c.current is None else c.current,
             "ok" if c.ok else ("CHANGED" if c.what in ("fingerprint", "metric") else "REGRESSION")] for c in checks]
    table = tabulate(rows, headers=["method", "task", "check", "reference", "current", "status"], tablefmt="github")
    changed = [c for c in checks if c.details]
    lines = [table]
    if changed:
        lines += ["", f"{len(changed)} cell(s) select, answer or score differently from the reference:"]
        for c in changed:
            lines += [f"- {c.method} on {c.task}: {detail}" for detail in c.details]
    higher = [c for c in checks if c.what == "score" and c.current is not None and c.current > c.reference]
    if higher:  # a rise passes; the reference keeps the old, lower bar until it is accepted
        lines += ["", f"{len(higher)} cell(s) score higher than the reference ("
                  + ", ".join(f"{c.method} on {c.task}" for c in higher) + "): they pass; accepting raises the bar."]
    if accept and (changed or any(not c.ok for c in checks) or higher):
        lines.append(f"If the change is intended, accept it: {accept}")
    return "\n".join(lines)
