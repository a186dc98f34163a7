"""The decoding loop of a shared-prefix pull: transformers' forward pass, step by step, without generate().

Why not `model.generate` (what this replaced): profiled on a recording step, generate() costs per call a
validation and set-up pass, and per step a causal mask, a stopping-criteria list and `unfinished.max() == 0`, a
host sync that stalls a GPU between every two steps. Here a step is one forward pass, one pick and a few
device-side updates; the host looks at the batch only every `chunk` steps, where finished rows leave it.

The attention masks are built here as transformers builds them for SDPA and eager attention (the same values,
and None where it would skip the mask), but from the rows' padding known on the host, so no step reads the device;
transformers' own builder checks `padding_mask.all()`, a sync per step.

Outputs equal generate()'s (tested against it, greedy and sampled): the same forward pass with the same
positions and mask, the same pick (argmax of the logits, after a sampler's noise when sampling), the same
end-of-sequence handling (later tokens of a finished row are padding and do not count). A stop string is
matched on token ids every step (transformers' StopStringCriteria); the host confirms a match at the chunk's end
(a reasoning model's think block may hold one) and the row keeps its tokens up to the first confirmed match.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

# generation-config fields that make generate() add a logits processor this loop does not apply
PROCESSOR_FIELDS = {"repetition_penalty": 1.0, "no_repeat_ngram_size": 0, "encoder_no_repeat_ngram_size": 0,
                    "bad_words_ids": None, "suppress_tokens": None, "begin_suppress_tokens": None,
                    "forced_bos_token_id": None, "forced_eos_token_id": None, "min_new_tokens": None,
                    "min_length": 0, "sequence_bias": None, "exponential_decay_length_penalty": None}


def plain_generation_config(generation_config) -> bool:
    """Whether greedy generate() applies no processor besides ours (else the caller falls back to generate)."""
    return all(getattr(generation_config, name, default) in (default, None, [], 0)
               for name, default in PROCESSOR_FIELDS.items())


@dataclass
class DecodeStats:
    """What one decode call did: for the profiler (bench perf) and the tests."""

    steps: int = 0
    syncs: int = 0  # host reads of device state (one per chunk)
    rows_left_early: int = 0  # rows that finished before max tokens and left the batch
    row_steps: int = 0  # rows decoded, summed over steps (padding rows of finished ones included)
    step_rows: list[int] = field(default_factory=list)


def decode(model, input_ids, mask, cache, *, max_new_tokens: int, end_ids: Sequence[int], pad_id: int,
           noise=None, stop=None, confirm_stop: Callable | None = None, chunk: int = 16,
           stats: DecodeStats | None = None) -> list[list[int]]:
    """New tokens per row (the row's end-of-sequence token kept; a stopped row's tokens up to its stop).

    input_ids, mask: [rows, width], left-padded; `cache` holds every column but the last, which the first step
    feeds. `noise(seq, scores)` is a sampler (RowSeededGumbel, HashedGumbel) or None for greedy; `stop(seq)` a
    token-id stop check (called as stop(seq, None), a StoppingCriteria), True where a stop string ends a row's sequence; `confirm_stop(prompt_tail, new_ids)` the
    host's veto at chunk ends (False: the match is inside a think block and the row goes on).
    """
    import torch

    stats = stats if stats is not None else DecodeStats()
    device = input_ids.device
    rows, width = input_ids.shape
    total = width + max_new_tokens
    seq = torch.full((rows, total), pad_id, dtype=torch.long, device=device)
    seq[:, :width] = input_ids
    full_mask = torch.ones((rows, total), dtype=mask.dtype, device=device)
    full_mask[:, :width] = mask
    positions = (mask.sum(dim=-1) - 1)[:, None]  # the last input token's position in its row
    ends = torch.tensor(sorted(set(end_ids)), dtype=torch.long, device=device)
    unfinished = torch.ones(rows, dtype=torch.bool, device=device)
    fired = torch.zeros((rows, max_new_tokens), dtype=torch.bool, device=device)
    masks = StepMasks(model, mask)
    live = list(range(rows))
    done: dict[int, list[int]] = {}
    step = 0
    while live:
        span = min(chunk, max_new_tokens - step)
        for _ in range(span):
            col = width + step
            with torch.inference_mode():
                logits = model(input_ids=seq[:, col - 1:col], attention_mask=masks.at(full_mask, col),
                               position_ids=positions, past_key_values=cache,
                               cache_position=torch.arange(col - 1, col, device=device), use_cache=True,
                               logits_to_keep=1).logits[:, -1].float()
                scores = noise(seq[:, :col], logits) if noise is not None else logits
                tokens = torch.where(unfinished, scores.argmax(dim=-1), pad_id)
                seq[:, col] = tokens
                if stop is not None:  # a row that ended earlier decodes padding: no match there
                    fired[:, step] = stop(seq[:, :col + 1], None) & unfinished
                unfinished &= ~torch.isin(tokens, ends)
            positions = positions + 1
            step += 1
            stats.steps += 1
            stats.row_steps += len(live)
            stats.step_rows.append(len(live))
        # the chunk's end: the host reads which rows finished
        stats.syncs += 1
        running = unfinished.tolist()
        fired_rows = fired[:, :step].nonzero().tolist() if stop is not None else []
        first_stop: dict[int, int] = {}
        for i, at in fired_rows:  # ascending (row, step)
            if i in first_stop:
                continue
            tail = seq[i, max(0, width - 8):width].tolist()
            if confirm_stop is None or confirm_stop(tail, seq[i, width:width + at + 1].tolist()):
                first_stop[i] = at
        keep = []
        for i, row in enumerate(live):
            if i in first_stop:
                done[row] = seq[i, width:width + first_stop[i] + 1].tolist()
            elif not running[i] or step >= max_new_tokens:
                done[row] = _until_end(seq[i, width:width + step].tolist(), ends.tolist())
            else:
                keep.append(i)
                continue
            if step < max_new_tokens:
                stats.rows_left_early += 1
        if not keep:
            break
        if len(keep) < len(live):
            index = torch.tensor(keep, device=device)
            cache.batch_select_indices(index)
            if noise is not None and hasattr(noise, "keep_rows"):
                noise.keep_rows(keep)
            seq, full_mask, positions = seq[index], full_mask[index], positions[index]
            masks.keep_rows(keep)
            unfinished, fired = unfinished[index], fired[index]
            live = [live[i] for i in keep]
    return [done[row] for row in range(rows)]


def _until_end(tokens: list[int], ends: list[int]) -> list[int]:
    """A row's tokens up to and with its first end-of-sequence token (generate pads after it)."""
    for n, token in enumerate(tokens):
        if token in ends:
            return tokens[:n + 1]
    return tokens



class StepMasks:
    """The attention mask of each decoding step, as transformers would build it for this model, from the rows'
    left padding (a host-side list: it never changes while a row decodes).

    transformers (masking_utils) gives SDPA no mask (None) where no kv column is padding and the layer's window
    does not reach past its keys, and otherwise a boolean [rows, 1, 1, kv] mask of the padding columns among
    the layer's keys (its last `window` columns for a sliding layer, every column for a full one); eager attention
    gets that mask as 0 / the dtype's minimum, always. Other kernels (flash attention's 2D mask), and models whose
    forward takes no per-layer-type masks, get the 2D mask and transformers' builder."""

    def __init__(self, model, mask):
        config = model.config
        self.kind = getattr(config, "_attn_implementation", None)
        types = list(getattr(config, "layer_types", None) or [])
        self.window = getattr(config, "sliding_window", None) if "sliding_attention" in types else None
        self.types = sorted(set(types)) if types else []
        self.dtype = model.dtype
        self.pads = (mask.shape[1] - mask.sum(dim=-1)).tolist()  # once, before the loop
        known = set(self.types) <= {"full_attention", "sliding_attention"}
        self.built_here = self.kind in ("sdpa", "eager") and known and (not self.window or takes_mask_mapping(model))

    def keep_rows(self, keep: list[int]) -> None:
        self.pads = [self.pads[i] for i in keep]

    def at(self, full_mask, col: int):
        """The mask for the step whose query sits at column col - 1 (col columns of keys seen)."""
        if not self.built_here:
            return full_mask[:, :col]
        padded = max(self.pads) > 0
        full = self._layer_mask(full_mask, col, col, skip=not padded)
        if not self.window:
            return full
        kv = min(col, self.window)
        # transformers never skips a sliding layer's mask once its keys fill the window
        sliding = self._layer_mask(full_mask, col, kv, skip=kv < self.window and max(self.pads) <= col - kv)
        return {"full_attention": full, "sliding_attention": sliding}

    def _layer_mask(self, full_mask, col: int, kv: int, skip: bool):
        import torch

        if skip and self.kind == "sdpa":
            return None
        keys = full_mask[:, None, None, col - kv:col].bool()
        if self.kind == "sdpa":
            return keys
        return torch.where(keys, 0.0, torch.finfo(self.dtype).min).to(self.dtype)


def takes_mask_mapping(model) -> bool:
    """Whether the model's forward accepts a dict of masks per layer type (Gemma 3, Qwen 2, ... do)."""
    import inspect

    base = model.get_decoder() if hasattr(model, "get_decoder") else model
    try:
        return "causal_mask_mapping" in inspect.getsource(type(base).forward)
    except (OSError, TypeError):
        return False
