"""The llama.cpp engine process: one GGUF model, several sequences decoded as one batch.

Run by `bench.llm.llamacpp.LlamaCppBackend` as `python -m bench.llm.llamacpp_engine GGUF [options]`; it speaks
JSON lines on stdin/stdout (one request, then heartbeats and one answer) and logs to stderr. A shared-prefix
pull prefills the prefix once into sequence 0, shares its cells with one sequence per row (a unified
key/value cache: no copy), prefills every row's suffix in the same batches, then decodes the active rows
together, dropping each row as it finishes (end of generation, a stop string outside a think block, or max
tokens). Sampling is Gumbel-max with one generator per row seeded by the row's call, so a row's output does
not depend on which rows share its batch; greedy is argmax.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from bench.llm.base import common_length
from bench.reasoning import cut_at_stop, stop_in_answer

HEARTBEAT_S = 2.0  # the parent's hang detector hears from a busy engine at least this often


@dataclass
class Row:
    """One sequence being decoded."""

    index: int  # position in the request
    seq: int  # llama.cpp sequence id
    tokens: list[int]  # the row's own tokens after the shared part
    pos: int = 0  # position of the next token
    new: list[int] = field(default_factory=list)
    text: bytes = b""
    rng: np.random.Generator | None = None
    done: bool = False


class Engine:
    def __init__(self, model_path: str, *, n_ctx: int, n_seq: int, n_batch: int, threads: int | None):
        import llama_cpp as L

        self.L = L
        L.llama_backend_init()
        self._quiet = L.llama_log_callback(lambda level, text, data: None)  # kept alive: llama.cpp holds it
        L.llama_log_set(self._quiet, None)
        mparams = L.llama_model_default_params()
        self.model = L.llama_model_load_from_file(model_path.encode(), mparams)
        if not self.model:
            raise RuntimeError(f"llama.cpp could not load {model_path}")
        self.vocab = L.llama_model_get_vocab(self.model)
        self.n_vocab = L.llama_vocab_n_tokens(self.vocab)
        cparams = L.llama_context_default_params()
        cparams.n_ctx = n_ctx
        cparams.n_batch = cparams.n_ubatch = n_batch
        cparams.n_seq_max = n_seq + 1  # sequence 0 holds the shared prefix
        # one cell pool: rows share the prefix's cells instead of copying them, and flash attention (on by
        # default) skips the cells a row's mask hides (measured: 14 s vs 18 s for a 20-item pull, either off)
        cparams.kv_unified = True
        cparams.swa_full = True  # sliding-window layers keep every cell, so shared cells are never pruned
        # llama.cpp's default is 4 threads: on 2 cores that oversubscribes and runs ~1.3x slower
        threads = threads or len(os.sched_getaffinity(0))
        cparams.n_threads = cparams.n_threads_batch = threads
        self.ctx = L.llama_init_from_model(self.model, cparams)
        if not self.ctx:
            raise RuntimeError("llama.cpp could not create a context (n_ctx too large for memory?)")
        self.mem = L.llama_get_memory(self.ctx)
        self.n_ctx, self.n_seq, self.n_batch = n_ctx, n_seq, n_batch
        self.batch = L.llama_batch_init(n_batch, 0, 1)
        self.prefix: list[int] = []  # tokens held by sequence 0
        self.add_bos = bool(L.llama_vocab_get_add_bos(self.vocab))
        self.last_beat = time.monotonic()

    # ---- text <-> tokens ------------------------------------------------------------------------
    def tokenize(self, text: str) -> list[int]:
        raw = text.encode("utf-8")
        size = len(raw) + 16
        buf = (self.L.llama_token * size)()
        n = self.L.llama_tokenize(self.vocab, raw, len(raw), buf, size, self.add_bos, True)
        if n < 0:
            buf = (self.L.llama_token * -n)()
            n = self.L.llama_tokenize(self.vocab, raw, len(raw), buf, -n, self.add_bos, True)
        return list(buf[:n])

    def piece(self, token: int) -> bytes:
        buf = ctypes.create_string_buffer(64)
        n = self.L.llama_token_to_piece(self.vocab, token, buf, 64, 0, False)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = self.L.llama_token_to_piece(self.vocab, token, buf, -n, 0, False)
        return buf.raw[:n]

    def template_info(self) -> dict:
        """The GGUF's chat template (Jinja source, rendered by the parent) and the tokens it refers to."""
        L = self.L
        template = L.llama_model_chat_template(self.model, None)

        def special(token: int) -> str:
            buf = ctypes.create_string_buffer(256)
            n = L.llama_token_to_piece(self.vocab, token, buf, 256, 0, True)
            return buf.raw[:max(0, n)].decode("utf-8", "replace")

        return {"chat_template": template.decode("utf-8") if template else None,
                "bos_token": special(L.llama_vocab_bos(self.vocab)), "eos_token": special(L.llama_vocab_eos(self.vocab)),
                "add_bos": self.add_bos}

    # ---- batches --------------------------------------------------------------------------------
    def _decode(self, entries: list[tuple[int, int, int, bool]]) -> None:
        """Run (token, position, sequence, wants logits) entries in one llama_decode."""
        b = self.batch
        for i, (token, pos, seq, logits) in enumerate(entries):
            b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = token, pos, 1, logits
            b.seq_id[i][0] = seq
        b.n_tokens = len(entries)
        status = self.L.llama_decode(self.ctx, b)
        if status != 0:
            raise RuntimeError(f"llama_decode returned {status} (key/value cache full? lower the batch or n_ctx use)")
        self.beat()

    def _feed(self, entries: list[tuple[int, int, int, bool]]) -> dict[int, np.ndarray]:
        """Decode entries in batches of n_batch; logits of the flagged entries, by entry index."""
        out = {}
        for start in range(0, len(entries), self.n_batch):
            chunk = entries[start:start + self.n_batch]
            self._decode(chunk)
            for i, entry in enumerate(chunk):
                if entry[3]:
                    ptr = self.L.llama_get_logits_ith(self.ctx, i)
                    out[start + i] = np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)).copy()
        return out

    def beat(self) -> None:
        now = time.monotonic()
        if now - self.last_beat >= HEARTBEAT_S:
            send({"beat": True})
            self.last_beat = now

    # ---- requests -------------------------------------------------------------------------------
    def generate_with_prefix(self, prefix: str, suffixes: list[str], max_new_tokens: int, temperature: float,
                             stop: list[str], seeds: list[int]) -> list[dict]:
        full = [self.tokenize(prefix + s) for s in suffixes]
        shared = self.tokenize(prefix)
        shared = shared[:min(common_length(shared, ids) for ids in full)]
        if len(shared) and any(len(ids) == len(shared) for ids in full):
            shared = shared[:-1]  # every row needs one token of its own to produce logits
        charge = 0
        if shared != self.prefix:
            L = self.L
            L.llama_memory_seq_rm(self.mem, 0, -1, -1)
            self.prefix = []
            self._feed([(t, p, 0, False) for p, t in enumerate(shared)])
            self.prefix, charge = shared, len(shared)
        rows = [Row(i, 0, ids[len(shared):], rng=None if temperature <= 0 else np.random.default_rng(seeds[i]))
                for i, ids in enumerate(full)]
        results: list[dict | None] = [None] * len(suffixes)
        for row in self._decode_rows(rows, len(shared), max_new_tokens, temperature, stop):
            results[row.index] = {"text": cut_at_stop(row.text.decode("utf-8", "replace"), stop),
                                  "prompt_tokens": len(full[row.index]), "completion_tokens": len(row.new),
                                  "prefilled_tokens": len(row.tokens) + charge}
            charge = 0  # a prefix prefilled by this call is charged to the first row that finished
        return results

    def _decode_rows(self, rows: list[Row], start: int, max_new_tokens: int, temperature: float,
                     stop: list[str]) -> list[Row]:
        """Continuous batching: up to n_seq rows decode together; a finished row's sequence goes at once to
        the next waiting row, whose suffix is prefilled in the same llama_decode as the others' next tokens.
        Rows are admitted while the cells they may need (own tokens + max new tokens) fit the context."""
        L = self.L
        worst = max(len(r.tokens) for r in rows) + max_new_tokens
        if start + worst > self.n_ctx:
            raise ValueError(f"a prompt of {start + worst - max_new_tokens} tokens plus {max_new_tokens} new tokens "
                             f"does not fit the engine's {self.n_ctx}-token context (raise --llamacpp-ctx)")
        pending, active, finished = list(rows), [], []
        free = list(range(self.n_seq, 0, -1))
        reserved = start
        while pending or active:
            entries, owners = [], {}
            while pending and free and reserved + len(pending[0].tokens) + max_new_tokens <= self.n_ctx:
                row = pending.pop(0)
                row.seq = free.pop()
                reserved += len(row.tokens) + max_new_tokens
                L.llama_memory_seq_rm(self.mem, row.seq, -1, -1)
                if start:
                    L.llama_memory_seq_cp(self.mem, 0, row.seq, -1, -1)
                for j, token in enumerate(row.tokens):
                    entries.append((token, start + j, row.seq, j == len(row.tokens) - 1))
                owners[len(entries) - 1] = row
                row.pos = start + len(row.tokens)
                active.append(row)
            for row in active:
                if row.new:  # admitted earlier: feed its last sampled token
                    entries.append((row.new[-1], row.pos - 1, row.seq, True))
                    owners[len(entries) - 1] = row
            for i, logits in self._feed(entries).items():
                self._step(owners[i], logits, temperature, stop, max_new_tokens)
            for row in [r for r in active if r.done]:
                L.llama_memory_seq_rm(self.mem, row.seq, -1, -1)
                free.append(row.seq)
                reserved -= len(row.tokens) + max_new_tokens
                finished.append(row)
            active = [r for r in active if not r.done]
        return finished

    def _step(self, row: Row, logits: np.ndarray, temperature: float, stop: list[str], max_new_tokens: int) -> None:
        """Pick the row's next token from its logits; mark the row done when it should stop."""
        if row.rng is None:
            token = int(np.argmax(logits))
        else:
            noise = -np.log(-np.log(np.clip(row.rng.random(self.n_vocab), 1e-20, 1.0)))
            token = int(np.argmax(logits / temperature + noise))
        if self.L.llama_vocab_is_eog(self.vocab, token):
            row.done = True
            return
        row.new.append(token)
        row.pos += 1
        row.text += self.piece(token)
        if len(row.new) >= max_new_tokens:
            row.done = True
        elif stop and stop_in_answer(row.text.decode("utf-8", "ignore"), stop):
            row.done = True

    def loglik(self, contexts: list[str], continuations: list[str]) -> list[dict]:
        out = []
        for context, continuation in zip(contexts, continuations):
            ctx_ids = self.tokenize(context)
            full = self.tokenize(context + continuation)
            n = common_length(ctx_ids, full)
            cont = full[n:]
            if not cont:
                raise ValueError("loglik: empty continuation")
            self.L.llama_memory_seq_rm(self.mem, 1, -1, -1)
            entries = [(t, p, 1, p >= n - 1) for p, t in enumerate(full[:-1])]
            fed = self._feed(entries)
            total = 0.0
            for k, token in enumerate(cont):
                row = fed[n - 1 + k]
                row = row - row.max()
                total += float(row[token] - np.log(np.exp(row).sum()))
            self.L.llama_memory_seq_rm(self.mem, 1, -1, -1)
            out.append({"logprob": total, "n_tokens": len(cont), "prompt_tokens": len(full)})
        return out


def send(message: dict) -> None:
    sys.stdout.write(json.dumps(message, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.llm.llamacpp_engine")
    p.add_argument("model")
    p.add_argument("--n-ctx", type=int, default=16384)
    p.add_argument("--n-seq", type=int, default=16)
    p.add_argument("--n-batch", type=int, default=512)
    p.add_argument("--threads", type=int, default=None)
    args = p.parse_args(argv)
    engine = Engine(args.model, n_ctx=args.n_ctx, n_seq=args.n_seq, n_batch=args.n_batch, threads=args.threads)
    send({"ready": True, "n_vocab": engine.n_vocab, **engine.template_info()})
    for line in sys.stdin:
        request = json.loads(line)
        op = request.pop("op")
        if op == "quit":
            break
        try:
            if op == "generate_with_prefix":
                send({"rows": engine.generate_with_prefix(**request)})
            elif op == "forget_prefix":
                engine.L.llama_memory_seq_rm(engine.mem, 0, -1, -1)
                engine.prefix = []
                send({"rows": []})
            elif op == "loglik":
                send({"rows": engine.loglik(**request)})
            else:
                send({"error": f"unknown op '{op}'"})
        except Exception as exc:  # the request fails, the engine lives on
            send({"error": f"{type(exc).__name__}: {exc}"})
        engine.last_beat = time.monotonic()
    return 0


if __name__ == "__main__":
    sys.exit(main())
