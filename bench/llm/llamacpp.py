"""`--backend llamacpp`: a managed llama.cpp engine (llama-cpp-python) in a child process.

The engine (`bench/llm/llamacpp_engine.py`) decodes a pull's rows as parallel sequences of one batch, with
the shared prefix prefilled once and continuous batching. This side starts it, waits for it to report ready,
talks JSON lines over its pipes and stops it at exit. If the engine dies, or says nothing for `timeout_s` (it
sends a heartbeat every 2 s while busy) and uses no CPU meanwhile, the call fails with one LLMError line that
names the signal that ended it: answered calls are already in the cache, and `--resume` continues from there.
An engine that is paused (SIGSTOP) or starved by another job is waited for.

Weights: an embedded model's GGUF is re-encoded once as Q8_0 (cached, keyed by the GGUF's sha256). On AVX2
CPUs llama.cpp's batched kernels are 1.4-1.7x faster on Q8_0 than on Q4_1 (16-row decode, prefill), and Q8_0 is all but lossless on top
of a 4-bit file (its step is 1/127 of a block's largest weight; Q4_1's is 1/15 of its range). `weights=
"native"` keeps the file as it is. Outputs differ numerically from the transformers path, which runs the
de-quantised float32 weights; `python -m bench perf --engines hf,llamacpp` measures how much.

Determinism: greedy outputs are the same run after run for the same pulls, but a row's output can depend
on which rows share its batch (llama.cpp's kernels differ by batch size), so a resumed run may answer its
remaining items differently from an uninterrupted one. The transformers path has no such dependence; it
stays the default and produces the CI smoke reference.
"""
from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

from bench.errors import LLMError
from bench.llm.base import Backend, GenerationParams, RawGeneration, RawLoglik

WEIGHTS = ("q8_0", "native")


def transcoded(gguf: Path, sha: str, weights: str) -> Path:
    """The GGUF the engine loads: the file itself, or its Q8_0 re-encoding (made once, cached by sha)."""
    if weights == "native":
        return gguf
    from bench.llm.embedded import cache_root

    target = cache_root() / f"llamacpp-{sha[:12]}-{weights}.gguf"
    if not target.exists():
        import llama_cpp as L

        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + f".tmp{os.getpid()}")
        params = L.llama_model_quantize_default_params()
        params.ftype = L.LLAMA_FTYPE_MOSTLY_Q8_0
        params.allow_requantize = True
        if L.llama_model_quantize(str(gguf).encode(), str(tmp).encode(), params) != 0:
            raise LLMError(f"llama.cpp could not re-encode {gguf.name} as {weights}")
        tmp.rename(target)
    return target


SILENT_LIMIT = 10  # silent timeouts in a row a computing engine is allowed before it counts as hung
BUSY_SHARE = 0.1  # CPU seconds per second of silence that count as computing (a job beside it may take most)


def _proc_stat(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields after the command name (Linux); None elsewhere or once the process is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def engine_state(pid: int) -> str | None:
    """The process's state letter: R running, S sleeping, T stopped (SIGSTOP), Z zombie."""
    fields = _proc_stat(pid)
    return fields[0] if fields else None


def engine_cpu_seconds(pid: int) -> float | None:
    """User plus system CPU time the process has used."""
    fields = _proc_stat(pid)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK") if fields else None


def _signal_name(number: int) -> str:
    try:
        return f"{signal.Signals(number).name} (signal {number})"
    except ValueError:
        return f"signal {number}"


class LlamaCppBackend(Backend):
    def __init__(self, model: str, *, weights: str = "q8_0", parallel: int = 16, n_ctx: int = 32768,
                 threads: int | None = None, timeout_s: float = 120.0, startup_timeout_s: float = 300.0):
        if weights not in WEIGHTS:
            raise LLMError(f"unknown llama.cpp weights '{weights}' ({', '.join(WEIGHTS)})")
        import importlib.util

        from bench.llm.embedded import EMBEDDED

        if importlib.util.find_spec("llama_cpp") is None:
            raise LLMError("--backend llamacpp needs llama-cpp-python (scripts/setup.sh builds it)")
        if model in EMBEDDED:
            spec = EMBEDDED[model]
            self.gguf, sha = spec.locate()
            quant = spec.quant if weights == "native" else f"{spec.quant}>{weights}"
            self.model_id = f"{model}-{quant}@{sha[:12]}:llamacpp"
        else:
            self.gguf, sha = Path(model), ""
            if not self.gguf.is_file():
                raise LLMError(f"--backend llamacpp needs an embedded model name or a GGUF file, not '{model}'")
            weights = "native"
            self.model_id = f"{self.gguf.name}:llamacpp"
        self.name, self.sha, self.weights = model, sha, weights
        self.parallel, self.n_ctx, self.threads = parallel, n_ctx, threads
        self.timeout_s, self.startup_timeout_s = timeout_s, startup_timeout_s
        self.batch_size = 4
        self.prefix_batch_size = 2 * parallel  # a call's rows queue in the engine, parallel at a time
        self.proc: subprocess.Popen | None = None
        self._template = None
        self._log = None
        self._unread = b""  # what the engine sent past the last whole line read

    # ---- the engine process ---------------------------------------------------------------------
    def warm(self) -> None:
        if self.proc is not None:
            return
        path = transcoded(self.gguf, self.sha, self.weights)
        cmd = [sys.executable, "-m", "bench.llm.llamacpp_engine", str(path), "--n-ctx", str(self.n_ctx),
               "--n-seq", str(self.parallel)]
        if self.threads:
            cmd += ["--threads", str(self.threads)]
        self._log = tempfile.TemporaryFile()  # a file, not a pipe: a full pipe would block the engine
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self._unread = b""
        atexit.register(self.close)
        self._template = self._receive(self.startup_timeout_s, "starting")

    def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            if proc.poll() is None:
                proc.stdin.write(b'{"op": "quit"}\n')
                proc.stdin.flush()
                proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait(timeout=10)
        finally:
            for pipe in (proc.stdin, proc.stdout):
                try:
                    pipe.close()
                except OSError:
                    pass

    def _fail(self, what: str, grace_s: float = 5.0) -> LLMError:
        proc = self.proc
        if proc is not None and proc.poll() is None:
            try:  # a dying engine closes its pipes before it exits: its own exit code says why, not our kill
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        tail = self._tail()
        code = proc.returncode if proc is not None else None
        self.proc = None  # the next call would start a fresh engine
        how = f"exited with code {code}" if code is not None and code >= 0 else f"was killed by {_signal_name(-code)}" \
            if code is not None else "is gone"
        last = f"; its last words: {tail}" if tail else ""
        return LLMError(f"the llama.cpp engine {how} while {what}{last} (answered calls are cached: rerun with "
                        "--resume)")

    def _tail(self) -> str:
        if self._log is None:
            return ""
        self._log.seek(0)
        lines = [ln for ln in self._log.read().decode("utf-8", "replace").splitlines() if ln.strip()]
        return lines[-1][:200] if lines else ""

    def _receive(self, timeout_s: float, what: str) -> dict:
        """The engine's next answer, skipping heartbeats; dead, or silent and idle for timeout_s -> LLMError.
        Silence alone is not a hang: an engine paused on purpose (SIGSTOP) or starved of the CPU by another job
        is waited for, up to SILENT_LIMIT timeouts in a row while it keeps computing."""
        fd = self.proc.stdout.fileno()  # read raw: lines already read into a buffer are invisible to select()
        deadline = time.monotonic() + timeout_s
        silent_windows, cpu, was_paused = 0, engine_cpu_seconds(self.proc.pid), False
        while True:
            ready = b"\n" in self._unread or select.select([fd], [], [], max(0.0, deadline - time.monotonic()))[0]
            if not ready:
                state, now_cpu = engine_state(self.proc.pid), engine_cpu_seconds(self.proc.pid)
                # a window in which either side was stopped (SIGSTOP: the engine seen so, or this process
                # waking long after its deadline) says nothing about a hang
                paused = state == "T" or time.monotonic() - deadline > 1.0
                silent_windows = 0 if paused or was_paused else silent_windows + 1
                working = now_cpu is not None and cpu is not None and now_cpu - cpu >= BUSY_SHARE * timeout_s
                if paused or was_paused or (working and silent_windows < SILENT_LIMIT):
                    deadline, cpu, was_paused = time.monotonic() + timeout_s, now_cpu, paused
                    continue
                why = "computing without a word" if working else "idle"
                raise self._fail(f"{what} (no word from it for {silent_windows * timeout_s:.0f} s, {why}: hung)",
                                 grace_s=0.0)
            if b"\n" not in self._unread:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    raise self._fail(what)
                self._unread += chunk
                continue
            line, _, self._unread = self._unread.partition(b"\n")
            message = json.loads(line)
            if message.get("beat"):
                deadline, silent_windows, cpu = time.monotonic() + timeout_s, 0, engine_cpu_seconds(self.proc.pid)
                continue
            if "error" in message:
                raise LLMError(f"llama.cpp engine: {message['error']}")
            return message

    def _request(self, op: str, **fields) -> list[dict]:
        self.warm()
        try:
            self.proc.stdin.write((json.dumps({"op": op, **fields}) + "\n").encode())
            self.proc.stdin.flush()
        except OSError:
            raise self._fail(f"receiving a {op} request") from None
        return self._receive(self.timeout_s, f"answering a {op} request")["rows"]

    # ---- calls ----------------------------------------------------------------------------------
    def chat_messages(self, messages: list[dict]) -> str | None:
        """The GGUF's own template (tokenizer.chat_template), rendered with Jinja as transformers does, so both
        engines see the same prompts."""
        self.warm()
        info = self._template
        if not info.get("chat_template"):
            return None
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        text = env.from_string(info["chat_template"]).render(messages=messages, add_generation_prompt=True,
                                                             bos_token=info["bos_token"], eos_token=info["eos_token"])
        if info["add_bos"] and info["bos_token"] and text.startswith(info["bos_token"]):
            text = text[len(info["bos_token"]):]  # the tokenizer adds BOS itself
        return text

    def generate_with_prefix(self, prefix: str, suffixes: Sequence[str], params: GenerationParams,
                             seeds: Sequence[int]) -> list[RawGeneration]:
        rows = self._request("generate_with_prefix", prefix=prefix, suffixes=list(suffixes),
                             max_new_tokens=params.max_new_tokens, temperature=params.temperature,
                             stop=list(params.stop), seeds=[int(s) for s in seeds])
        return [RawGeneration(**row) for row in rows]

    def forget_prefix(self) -> None:
        self._request("forget_prefix")

    def generate(self, prompts: Sequence[str], params: GenerationParams, seeds: Sequence[int]) -> list[RawGeneration]:
        return [self.generate_with_prefix("", [p], params, [s])[0] for p, s in zip(prompts, seeds)]

    def loglik(self, contexts: Sequence[str], continuations: Sequence[str]) -> list[RawLoglik]:
        rows = self._request("loglik", contexts=list(contexts), continuations=list(continuations))
        return [RawLoglik(**row) for row in rows]

    def describe(self) -> str:
        return self.model_id
