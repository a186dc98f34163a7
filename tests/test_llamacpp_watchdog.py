"""The llama.cpp client's hang detector, against stand-in engines (no llama.cpp needed): an idle, silent engine
is killed as hung; one that computes without a word, or is paused with SIGSTOP, is waited for; one that dies
is reported with its own signal, not the kill that follows it."""
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from bench.errors import LLMError
from bench.llm.llamacpp import LlamaCppBackend

ANSWER = 'import json, sys; print(json.dumps({"rows": [{"text": "ok"}]}), flush=True)'
ENGINES = {  # each reads one request first
    "idle": "import sys, time; sys.stdin.readline(); time.sleep(60)",
    "computing": "import sys, time; sys.stdin.readline()\nt = time.process_time()\n"
                 "while time.process_time() - t < 3.0: pass\n" + ANSWER,
    "prompt": "import sys; sys.stdin.readline()\n" + ANSWER,
    # a heartbeat and the answer in one write, then idle waiting for the next request (2026-11-25: a client
    # that read the heartbeat with readline() left the answer in its buffer and killed the waiting engine as hung)
    "beat+answer": "import json, sys, time; sys.stdin.readline()\n"
                   "sys.stdout.write(json.dumps({'beat': True}) + '\\n' + json.dumps({'rows': [{'text': 'ok'}]}) + '\\n')\n"
                   "sys.stdout.flush(); time.sleep(60)",
    "aborting": "import os, sys, time; sys.stdin.readline(); sys.stdout.close(); os.close(1); time.sleep(1); "
                "os.abort()",
}


def backend_on(kind: str, timeout_s: float) -> LlamaCppBackend:
    backend = object.__new__(LlamaCppBackend)  # the client half only: no model, no llama.cpp
    backend._log = tempfile.TemporaryFile()
    backend.proc = subprocess.Popen([sys.executable, "-c", ENGINES[kind]], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=backend._log)
    backend.timeout_s = timeout_s
    backend._unread = b""
    return backend


def test_an_idle_silent_engine_is_killed_as_hung():
    backend = backend_on("idle", timeout_s=1.0)
    proc, start = backend.proc, time.monotonic()
    with pytest.raises(LLMError, match=r"killed by SIGKILL \(signal 9\).*1 s, idle: hung.*--resume"):
        backend._request("generate_with_prefix")
    assert time.monotonic() - start < 10 and proc.returncode == -signal.SIGKILL and backend.proc is None


def test_an_answer_that_arrives_with_a_heartbeat_is_read_not_waited_for():
    backend = backend_on("beat+answer", timeout_s=1.0)
    start = time.monotonic()
    assert backend._request("generate_with_prefix") == [{"text": "ok"}]
    assert time.monotonic() - start < 1.0 and backend.proc.poll() is None  # the engine is alive, not killed
    backend.proc.kill()
    backend.close()


def test_an_engine_computing_without_a_word_is_waited_for():
    backend = backend_on("computing", timeout_s=1.0)  # 3 CPU seconds of silence: three timeouts
    assert backend._request("generate_with_prefix") == [{"text": "ok"}]
    backend.close()


def test_a_paused_engine_is_waited_for():
    backend = backend_on("prompt", timeout_s=1.0)
    pid = backend.proc.pid
    os.kill(pid, signal.SIGSTOP)  # paused for 3 s: three timeouts in which it uses no CPU, as a hung one
    resume = threading.Timer(3.0, os.kill, (pid, signal.SIGCONT))
    resume.start()
    start = time.monotonic()
    assert backend._request("generate_with_prefix") == [{"text": "ok"}]
    assert time.monotonic() - start >= 2.5
    resume.join()
    backend.close()


def test_an_engine_that_dies_is_reported_with_its_own_signal():
    backend = backend_on("aborting", timeout_s=30.0)
    with pytest.raises(LLMError, match=r"killed by SIGABRT \(signal 6\)"):
        backend._request("generate_with_prefix")


CLIENT = """
import subprocess, sys, tempfile
from bench.llm.llamacpp import LlamaCppBackend
b = object.__new__(LlamaCppBackend)
b._log, b.timeout_s, b._unread = tempfile.TemporaryFile(), 1.0, b""
b.proc = subprocess.Popen([sys.executable, "-c", sys.argv[1]], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
print(b.proc.pid, flush=True)
print(b._request("generate_with_prefix"), flush=True)
b.close()
"""


def test_a_client_paused_beside_its_engine_does_not_call_it_hung():
    # the study's pause: both stopped, the engine resumed first; the client wakes 2 s past its deadline while
    # the engine, idle, has 1.5 s of work left: that window and the next are not counted against it
    engine = "import sys, time; sys.stdin.readline(); time.sleep(4.5)\n" + ANSWER
    client = subprocess.Popen([sys.executable, "-c", CLIENT, engine], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    engine_pid = int(client.stdout.readline())
    time.sleep(0.2)
    os.kill(client.pid, signal.SIGSTOP)
    os.kill(engine_pid, signal.SIGSTOP)
    time.sleep(0.3)
    os.kill(engine_pid, signal.SIGCONT)
    time.sleep(2.5)
    os.kill(client.pid, signal.SIGCONT)
    out, err = client.communicate(timeout=30)
    assert client.returncode == 0, err[-1000:]
    assert out.strip() == "[{'text': 'ok'}]"
