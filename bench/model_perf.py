"""`python -m bench perf --model-config NAME --random-weights`: a registered model's speed and memory, measured on a
randomly initialised copy (transformers' `from_config`: no download). Speed, memory and the batching identity do
not depend on the weights' values, so the paper's Llama 3.2 3B is measured here without its weights.

Per batch size: prefill tokens/s, ms per decoding step (the suite's own decoding loop, bench/llm/decoding.py, on a
preallocated cache as a pull decodes), decoded tokens/s, peak memory, and the step's fraction of the
memory-bandwidth roofline: the bytes a step must read (every weight once, each row's keys and values) over the
device's bandwidth, against the step's measured time. The bandwidth is measured (a large device-to-device copy)
and, on known GPUs, also given as the vendor's peak.

Projections (labelled as such): wall time of named workloads from the measured step times and prefill rates,
under stated assumptions (each workload's prompt and answer lengths). Nothing here is a measured run of them.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

# vendors' peak memory bandwidth, bytes/s (spec sheets); a measured copy is reported beside it
PEAK_BANDWIDTH = {"H200": 4.8e12, "H100 SXM": 3.35e12, "H100 PCIe": 2.0e12, "H100": 3.35e12, "A100-SXM4-80GB": 2.04e12,
                  "A100 80GB PCIe": 1.94e12, "A100": 1.55e12, "L40S": 0.864e12, "A10": 0.6e12, "L4": 0.3e12}


@dataclass(frozen=True)
class Workload:
    """A selection or recording job as pulls of rows decoded after one shared prefix."""

    name: str
    pulls: int
    rows: int  # rows of a pull decoded together
    prefix_tokens: int
    suffix_tokens: int
    new_tokens: int  # decoded per row (the mean answer length assumed)
    note: str


WORKLOADS = (
    Workload("case-gsm8k", 510, 20, 700, 60, 200,
             "the paper's CASE selection on GSM8K: 10,200 calls as 510 pulls of 20 validation items; 5 demonstrations "
             "(~700 tokens), ~200-token answers (max 1000, l.778)"),
    Workload("table-gsm8k", 100, 750, 700, 60, 200,
             "one GSM8K reward table: 100 arms x (250 items x 3 samples) = 75,000 generations; rows of an arm decoded "
             "together"),
    Workload("paper-rq1-rq3", 33_255, 20, 700, 60, 200,
             "the paper's whole run, Table 1's 30 selectors on GSM8K, AquaRAT and WMT19: the 114,300 calls that "
             "`bench --config configs/paper.yaml --dry-run` bounds, plus 10,200 (CASE's count) for each of the 18 "
             "selectors x 3 tasks that stop by their own rule: 665,100 calls in pulls of 20"),
)


def measure(name: str, *, batch_sizes: list[int], prompt_tokens: int = 512, steps: int = 32,
            layers: int | None = None, dtype: str = "auto", seed: int = 0) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    from bench.llm.registry import architecture_config

    config = architecture_config(name, layers)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch_dtype = {"auto": torch.bfloat16 if device.type == "cuda" else torch.float32,
                   "float32": torch.float32, "bfloat16": torch.bfloat16}[dtype]
    torch.manual_seed(seed)
    began = time.perf_counter()
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch_dtype, attn_implementation="sdpa")
    model.eval()
    init_s = time.perf_counter() - began
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    bandwidth = measured_bandwidth(device)
    peak = nominal_bandwidth(device)
    full_layers = architecture_config(name).num_hidden_layers
    out = {"model_config": name, "random_weights": True, "layers": config.num_hidden_layers, "full_layers": full_layers,
           "parameters": sum(p.numel() for p in model.parameters()), "weight_bytes": weight_bytes,
           "dtype": str(torch_dtype).replace("torch.", ""), "device": _device_name(device),
           "bandwidth_measured_bytes_per_s": bandwidth, "bandwidth_peak_bytes_per_s": peak, "init_seconds": init_s,
           "prompt_tokens": prompt_tokens, "steps": steps, "batches": []}
    for rows in batch_sizes:
        try:
            out["batches"].append(_one_batch(model, config, device, rows, prompt_tokens, steps, weight_bytes,
                                             peak or bandwidth))
        except torch.cuda.OutOfMemoryError:
            out["batches"].append({"rows": rows, "error": "out of memory"})
            torch.cuda.empty_cache()
            break
    out["projections"] = project(out)
    return out


def _one_batch(model, config, device, rows: int, prompt_tokens: int, steps: int, weight_bytes: int,
               bandwidth: float) -> dict:
    import torch

    from bench.llm.decoding import DecodeStats, decode
    from bench.llm.hf import _reserve

    generator = torch.Generator(device="cpu").manual_seed(rows)
    ids = torch.randint(3, config.vocab_size, (rows, prompt_tokens), generator=generator).to(device)
    mask = torch.ones_like(ids)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    _sync(device)
    began = time.perf_counter()
    with torch.inference_mode():
        cache = model(ids[:, :-1], use_cache=True, logits_to_keep=1).past_key_values
    _sync(device)
    prefill_s = time.perf_counter() - began
    warm = 2  # the first steps pay one-time costs (kernel choice, allocator growth)
    _reserve(cache, prompt_tokens - 1 + warm + steps)  # the prefill's columns and every step's: no copy mid-decode
    stats = DecodeStats()
    _sync(device)
    began = time.perf_counter()
    decode(model, ids, mask, cache, max_new_tokens=warm + steps, end_ids=[], pad_id=0, chunk=warm + steps,
           stats=stats)
    _sync(device)
    total = time.perf_counter() - began
    from transformers.cache_utils import DynamicLayer

    # layers whose reservation ran out (they fell back to torch.cat, copying the cache): 0 when the reserve is right
    regrown = sum(type(layer) is DynamicLayer for layer in cache.layers)
    # the mean over the warm-up steps too: timing them apart would need a second prefill (their share is 2 of N)
    step_s = total / (warm + steps)
    kv_read = _kv_bytes_per_step(config, model.dtype, rows, prompt_tokens + (warm + steps) // 2)
    roofline_s = (weight_bytes + kv_read) / bandwidth
    return {"rows": rows, "prefill_tokens_per_s": rows * (prompt_tokens - 1) / prefill_s, "prefill_seconds": prefill_s,
            "ms_per_step": 1000 * step_s, "decode_tokens_per_s": rows / step_s,
            "bytes_read_per_step": weight_bytes + kv_read, "roofline_ms_per_step": 1000 * roofline_s,
            "roofline_fraction": roofline_s / step_s, "host_syncs": stats.syncs, "cache_regrown_layers": regrown,
            "peak_memory_bytes": torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None}


def _kv_bytes_per_step(config, dtype, rows: int, context: int) -> int:
    """Keys and values a decoding step reads: every layer's, per row, over its window (a sliding layer's) or all."""
    import torch

    size = torch.tensor([], dtype=dtype).element_size()
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    types = getattr(config, "layer_types", None) or ["full_attention"] * config.num_hidden_layers
    window = getattr(config, "sliding_window", None)
    columns = sum(min(context, window) if kind == "sliding_attention" and window else context for kind in types)
    return 2 * rows * heads * head_dim * size * columns


def project(measured: dict) -> list[dict]:
    """Each workload's projected wall time from the measured step times (interpolated linearly in rows between
    the measured batch sizes, the largest one's rate beyond them) and prefill rate. A projection, not a run."""
    batches = [b for b in measured["batches"] if "ms_per_step" in b]
    if not batches:
        return []
    out = []
    for work in WORKLOADS:
        step_ms = _interpolate(batches, work.rows, "ms_per_step")
        prefill = _interpolate(batches, work.rows, "prefill_tokens_per_s")
        per_pull = (work.prefix_tokens + work.rows * work.suffix_tokens) / prefill + work.new_tokens * step_ms / 1000
        out.append({"workload": work.name, "note": work.note, "pulls": work.pulls, "rows": work.rows,
                    "projected_hours": work.pulls * per_pull / 3600, "ms_per_step_used": step_ms,
                    "extrapolated": work.rows > max(b["rows"] for b in batches)})
    return out


def _interpolate(batches: list[dict], rows: int, key: str) -> float:
    """A per-step time (or a rate) at `rows`, linear between the measured sizes; beyond the largest, time grows
    with rows at the largest size's per-row cost (a rate stays)."""
    points = sorted((b["rows"], b[key]) for b in batches)
    if rows <= points[0][0]:
        return points[0][1]
    for (r0, v0), (r1, v1) in zip(points, points[1:]):
        if r0 <= rows <= r1:
            return v0 + (v1 - v0) * (rows - r0) / (r1 - r0)
    last_rows, last = points[-1]
    return last * rows / last_rows if key == "ms_per_step" else last


def measured_bandwidth(device, gib: float = 1.0) -> float:
    """Bytes/s of a device-to-device copy of `gib` GiB (read + write counted), the best of three."""
    import torch

    n = int(gib * 2**30) // 4 if device.type == "cuda" else int(min(gib, 0.25) * 2**30) // 4
    src = torch.empty(n, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    best = float("inf")
    for _ in range(3):
        _sync(device)
        began = time.perf_counter()
        dst.copy_(src)
        _sync(device)
        best = min(best, time.perf_counter() - began)
    del src, dst
    return 2 * n * 4 / best


def nominal_bandwidth(device) -> float | None:
    """The vendor's peak for a known GPU, else None."""
    if device.type != "cuda":
        return None
    name = _device_name(device)
    for key in sorted(PEAK_BANDWIDTH, key=len, reverse=True):
        if key in name:
            return PEAK_BANDWIDTH[key]
    return None


def _device_name(device) -> str:
    import platform

    import torch

    return torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu ({platform.processor() or 'cpu'})"


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def render(result: dict) -> str:
    """The measurement as a plain-text table and the projections."""
    from tabulate import tabulate

    gb = 1e9
    head = (f"{result['model_config']} ({result['layers']} layers, {result['parameters'] / 1e9:.2f}B parameters, "
            f"random weights, {result['dtype']}) on {result['device']}; bandwidth measured "
            f"{result['bandwidth_measured_bytes_per_s'] / gb:.0f} GB/s"
            + (f", peak {result['bandwidth_peak_bytes_per_s'] / gb:.0f} GB/s" if result["bandwidth_peak_bytes_per_s"]
               else "") + f"; prompts of {result['prompt_tokens']} tokens, ms per step the mean of {result['steps']} + 2 "
               "warm-up decoding steps")
    rows = []
    for b in result["batches"]:
        if "error" in b:
            rows.append([b["rows"], b["error"], "", "", "", "", ""])
            continue
        rows.append([b["rows"], f"{b['ms_per_step']:.2f}", f"{b['decode_tokens_per_s']:.0f}",
                     f"{b['prefill_tokens_per_s']:.0f}", f"{b['roofline_ms_per_step']:.2f}",
                     f"{b['roofline_fraction']:.2f}",
                     f"{b['peak_memory_bytes'] / gb:.1f}" if b["peak_memory_bytes"] else "n/a"])
    table = tabulate(rows, headers=["rows", "ms/step", "decode tok/s", "prefill tok/s", "roofline ms",
                                    "of roofline", "peak GB"])
    cut = result["layers"] < result["full_layers"]
    lines = [head, table, "", "Projections (from the measured rates; not runs"
             + (f"; of this {result['layers']}-layer cut, not of the whole {result['full_layers']}-layer model"
                if cut else "") + "):"]
    for p in result["projections"]:
        lines.append(f"  {p['workload']}: {p['projected_hours']:.2f} h ({p['note']}"
                     + ("; rows beyond the largest measured batch" if p["extrapolated"] else "") + ")")
    return "\n".join(lines)
