"""Regenerate some of a recorded cache's sampled outputs here, with the sampler that answered them, and count
how many come out the same.

    python scripts/replay_outputs.py PLAN.json CACHE.sqlite [--arm 0] [--items 40 | --at 133 140] [--sample 0]

A GPU answers a table's samples with `HashedGumbel`, whose noise depends only on (row seed, step, token), so a
CPU run of the same rows with `--sampler hashed` draws the same noise: its outputs differ from the recorded ones
only where the logits do, by float noise (a near-tie flips a token, and the rest of the text follows) or by a
fault of the machine that answered. Run it on a cache answered by a kernel known to be right for a baseline.
Prints per row whether the text is identical and, if not, at which character the two first part.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.answering import answer_keys, ask  # noqa: E402
from bench.llm import CallCache, CallLog, CallScope, LLMClient  # noqa: E402
from bench.llm.embedded import EmbeddedModel  # noqa: E402
from bench.reward_table import plan_parts, read_plan  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("plan", type=Path)
    ap.add_argument("cache", type=Path)
    ap.add_argument("--arm", type=int, default=0)
    ap.add_argument("--items", type=int, default=40)
    ap.add_argument("--sample", type=int, default=0)
    ap.add_argument("--at", type=int, nargs="+", default=None, help="these item positions instead of the first --items")
    args = ap.parse_args()
    plan = read_plan(args.plan)
    task, params, arm_demos, items = plan_parts(plan)
    demos = arm_demos[args.arm]
    items = [items[i] for i in args.at] if args.at else items[:args.items]
    indices = [args.sample] * len(items)
    backend = EmbeddedModel(plan["llm"], sampler="hashed", prefix_batch_size=len(items), kv_cache_gib=8)
    if backend.model_id != plan["model"]:
        raise SystemExit(f"error: the plan is for {plan['model']}, this model is {backend.model_id}")
    here = LLMClient(backend, CallCache(Path(tempfile.mkdtemp()) / "here.sqlite"), CallLog(None), params, "auto")
    there = CallCache(args.cache)
    keys = answer_keys(here, task, demos, items, here.params_for(task), indices)
    recorded = there.get_many(keys)
    missing = sum(k not in recorded for k in keys)
    if missing:
        raise SystemExit(f"error: {missing} of {len(keys)} rows are not in {args.cache}")
    gens, _ = ask(here, task, [demos] * len(items), items, scope=CallScope("replay", task.name, "selection"),
                  params=here.params_for(task), sample_indices=indices)
    same = 0
    for item, key, gen in zip(items, keys, gens):
        old, new = recorded[key]["text"], gen.text
        part = next((i for i, (a, b) in enumerate(zip(old, new)) if a != b), min(len(old), len(new)))
        same += old == new
        print(json.dumps({"item": item.id, "same": old == new, "parts_at_char": None if old == new else part,
                          "recorded_chars": len(old), "here_chars": len(new)}))
    print(f"{same} of {len(items)} outputs identical (arm {args.arm}, sample {args.sample}, {plan['task']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
