"""Check a GPU's batched shared-prefix paths against one call at a time, per attention kernel, before recording.

    python3 scripts/batching_check.py GGUF OUT.json PLAN.json [PLAN.json ...] [--attention sdpa eager] [--arms 0 1]

For each attention kernel (the model loaded once per kernel) and each plan of `bench table build --plan`, runs
`bench.reward_table.check_batching` on the given arms (log-likelihoods of one item per suffix length, and their
first greedy tokens for generation tasks) and writes what it found, a disagreement included, to OUT.json. Why:
SST-2's table answered on an H200 had every item of one suffix length wrong in the batched path; this tells which
kernel answers right on that machine, at the cost of a few seconds per plan.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.errors import LLMError  # noqa: E402
from bench.llm import CallCache, CallLog, LLMClient  # noqa: E402
from bench.llm.embedded import EmbeddedModel  # noqa: E402
from bench.reward_table import check_batching, plan_parts, read_plan  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("gguf", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("plans", type=Path, nargs="+")
    ap.add_argument("--attention", nargs="+", default=["sdpa", "eager"], choices=["auto", "sdpa", "eager"])
    ap.add_argument("--arms", type=int, nargs="+", default=[0])
    args = ap.parse_args()
    plans = [read_plan(p) for p in args.plans]
    found = []
    for attention in args.attention:
        backend = EmbeddedModel(plans[0]["llm"], gguf=args.gguf, attention=attention)
        for path, plan in zip(args.plans, plans):
            task, params, arm_demos, items = plan_parts(plan)
            client = LLMClient(backend, CallCache(Path(tempfile.mkdtemp()) / "check.sqlite"), CallLog(None), params, "auto")
            for arm in args.arms:
                began = time.perf_counter()
                row = {"plan": path.name, "task": plan["task"], "arm": arm, "attention": attention,
                       "kernel": backend.model.config._attn_implementation, "device": str(backend.device)}
                try:
                    row.update(ok=True, **check_batching(client, task, arm_demos[arm], items))
                except LLMError as exc:
                    row.update(ok=False, error=str(exc))
                row["seconds"] = round(time.perf_counter() - began, 1)
                print(json.dumps(row), flush=True)
                found.append(row)
                args.out.write_text(json.dumps(found, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
