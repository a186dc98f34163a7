"""Loopback servers for tests: llama-cpp-python's OpenAI-compatible server, and an HTTP server too slow to answer.

Everything binds 127.0.0.1 only, and every wait is bounded.
"""
from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

HOST = "127.0.0.1"
PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


def free_port() -> int:
    """A port nothing listens on right now (bound to port 0, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def _get(url: str, timeout_s: float) -> bytes:
    # No proxies: a proxy from the environment must never see loopback traffic.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=timeout_s) as resp:
        return resp.read()


@contextlib.contextmanager
def llama_server(model_path: str | Path, *, n_ctx: int = 2048, startup_timeout_s: float = 60.0,
                 stop_timeout_s: float = 10.0) -> Iterator[str]:
    """Run `python -m llama_cpp.server` on a free loopback port; yields its OpenAI base URL (…/v1)."""
    port = free_port()
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(model_path), "--host", HOST,
           "--port", str(port), "--n_ctx", str(n_ctx)]
    env = {k: v for k, v in os.environ.items() if k not in PROXY_VARS}
    log = tempfile.TemporaryFile()  # a file, not a pipe: a full pipe would block the server
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    base = f"http://{HOST}:{port}/v1"
    try:
        deadline = time.monotonic() + startup_timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"llama.cpp server exited with {proc.returncode}: {_tail(log)}")
            try:
                _get(f"{base}/models", timeout_s=2.0)
                break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"llama.cpp server not ready after {startup_timeout_s:.0f} s: {_tail(log)}")
            time.sleep(0.25)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=stop_timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=stop_timeout_s)
        log.close()


def _tail(log, n: int = 2000) -> str:
    log.flush()
    log.seek(0)
    return log.read().decode("utf-8", errors="replace")[-n:]


class SlowServer:
    """Answers every POST only after `delay_s`; counts the requests it received.

    Use as a context manager; `base_url` is an OpenAI-style base (…/v1).
    """

    def __init__(self, delay_s: float):
        self.delay_s = delay_s
        self.requests = 0
        self._lock = threading.Lock()
        self._release = threading.Event()  # set on exit, so sleeping handlers end at once
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's naming)
                with outer._lock:
                    outer.requests += 1
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer._release.wait(outer.delay_s)
                body = json.dumps({"id": "slow", "object": "text_completion", "created": 0, "model": "slow",
                                   "choices": [{"text": "late", "index": 0, "logprobs": None,
                                                "finish_reason": "length"}]}).encode()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:  # the client gave up long ago
                    pass

            def log_message(self, *args):  # keep test output quiet
                pass

        self._httpd = ThreadingHTTPServer((HOST, 0), Handler)
        self._httpd.daemon_threads = True
        self.base_url = f"http://{HOST}:{self._httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)

    def __enter__(self) -> "SlowServer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._release.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


@contextlib.contextmanager
def scripted_server(respond, bodies: list | None = None) -> Iterator[tuple[str, list[float]]]:
    """A loopback OpenAI-style server: `respond(n)` gives (status, JSON body bytes, extra headers) for the n-th
    POST (from 1). Yields (base URL …/v1, the arrival time of every request); `bodies` collects the requests."""
    hits: list[float] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            hits.append(time.monotonic())
            request = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if bodies is not None:
                bodies.append(json.loads(request or b"{}"))
            status, body, extra = respond(len(hits))
            self.send_response(status)
            for name, value in {"Content-Type": "application/json", "Content-Length": str(len(body)), **extra}.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer((HOST, 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://{HOST}:{httpd.server_address[1]}/v1", hits
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


@contextlib.contextmanager
def transformers_openai_server(backend, native: list | None = None, older_sglang: bool = False) -> Iterator[str]:
    """An OpenAI-compatible server in this process over a transformers backend (bench.llm.hf): /v1/models,
    /v1/completions (echo + logprobs for log-likelihoods) and /v1/chat/completions, on a loopback port, and
    SGLang's own /v1/tokenize and /generate (return_logprob from logprob_start_len on, as SGLang's source answers
    them; each request's body is appended to `native`; `older_sglang`: the list as versions before 2025 laid it out).
    It needs no compiler, unlike llama-cpp-python's server; it yields the base URL (…/v1)."""
    import torch

    from bench.llm.base import GenerationParams

    tok, model = backend.tokenizer, backend.model

    def echo_logprobs(text: str) -> tuple[list, list, list]:
        enc = tok(text, return_offsets_mapping=True)
        ids, offsets = enc["input_ids"], enc["offset_mapping"]
        with torch.inference_mode():
            logits = model(torch.tensor([ids])).logits[0].float()
        logprobs = torch.log_softmax(logits, dim=-1)
        keep = [i for i, (a, b) in enumerate(offsets) if b > a]  # special tokens (BOS) have no text
        values = [None if i == 0 else float(logprobs[i - 1, ids[i]]) for i in keep]
        return [tok.decode([ids[i]]) for i in keep], values, [offsets[i][0] for i in keep], int(logprobs[-1].argmax())

    def sglang_native(path: str, req: dict) -> dict:
        if path == "/v1/tokenize":  # {"tokens", "count", "max_model_len"}, special tokens added by default
            ids = tok(req["prompt"], add_special_tokens=req.get("add_special_tokens", True))["input_ids"]
            return {"tokens": ids, "count": len(ids), "max_model_len": 8192}
        ids, start = req["input_ids"], int(req.get("logprob_start_len", -1))
        with torch.inference_mode():
            logprobs = torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), dim=-1)
        # input_token_logprobs: [logprob, token id, text] for the input from logprob_start_len on, the first None
        # (SGLang's scheduler: [None] + the values the positions from logprob_start_len on predict, less the last)
        scored = [[None if i == start else float(logprobs[i - 1, ids[i]]), ids[i], None]
                  for i in range(max(start, 0), len(ids))] if req.get("return_logprob") and start >= 0 else []
        if older_sglang and start > 0:  # older schedulers: from the token after logprob_start_len, no None first
            scored = scored[1:]
        nxt = int(logprobs[-1].argmax())
        return {"text": tok.decode([nxt]), "meta_info": {"prompt_tokens": len(ids), "completion_tokens": 1,
                                                         "input_token_logprobs": scored}}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _send(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self._send(200, {"object": "list", "data": [{"id": backend.model_id, "object": "model"}]})

        def do_POST(self):
            req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path in ("/v1/tokenize", "/generate") and native is not None:
                native.append({"path": self.path, **req})
                return self._send(200, sglang_native(self.path, req))
            chat = self.path.endswith("/chat/completions")
            prompt = req["messages"][-1]["content"] if chat else req["prompt"]
            params = GenerationParams(max_new_tokens=int(req.get("max_tokens") or 16),
                                      temperature=float(req.get("temperature") or 0.0), stop=tuple(req.get("stop") or ()))
            if not chat and req.get("echo"):
                tokens, values, offsets, nxt = echo_logprobs(prompt)
                text = prompt + tok.decode([nxt])
                choice = {"index": 0, "text": text, "finish_reason": "length",
                          "logprobs": {"tokens": tokens + [tok.decode([nxt])], "token_logprobs": values + [None],
                                       "text_offset": offsets + [len(prompt)], "top_logprobs": None}}
                usage = {"prompt_tokens": len(tokens), "completion_tokens": 1, "total_tokens": len(tokens) + 1}
            else:
                gen = backend.generate([prompt], params, [int(req.get("seed") or 0)])[0]
                choice = ({"index": 0, "message": {"role": "assistant", "content": gen.text}, "finish_reason": "stop"}
                          if chat else {"index": 0, "text": gen.text, "logprobs": None, "finish_reason": "stop"})
                usage = {"prompt_tokens": gen.prompt_tokens, "completion_tokens": gen.completion_tokens,
                         "total_tokens": gen.prompt_tokens + gen.completion_tokens}
            self._send(200, {"id": "cmpl-test", "object": "chat.completion" if chat else "text_completion",
                             "created": int(time.time()), "model": backend.model_id, "choices": [choice],
                             "usage": usage})

    server = ThreadingHTTPServer((HOST, 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{HOST}:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
