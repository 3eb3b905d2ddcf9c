"""The other engines of ``factorspec bench coverage``: XGrammar and llguidance on the same schemas, same run.

Each engine compiles a schema over the same real vocabulary (compile seconds timed), or refuses it (the first words
of its error are the reason), and, where it compiled, says whether it accepts a JSON text: the Test Suite's invalid
data it accepts are its weakenings, its valid data it rejects are narrowings (or refusals to emit). Settings as the
issue measured them: XGrammar in strict mode with our separators, llguidance with its defaults (strict: unknown
keywords are errors; flexible whitespace, so a compact rendering is read as it is).
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

from ..tokenmap import Vocabulary


def _render(v: Any) -> str:
    return json.dumps(v, separators=(", ", ": "), ensure_ascii=False)


def ordered_like(schema: Any, v: Any) -> Any:
    """``v`` with each object's keys in the order of its schema's ``properties`` (then the rest, as they were): an
    engine that writes properties in schema order (XGrammar) is asked about the rendering it could write."""
    if isinstance(v, list):
        items = schema.get("items") if isinstance(schema, dict) else None
        return [ordered_like(items, x) for x in v]
    if not isinstance(v, dict) or not isinstance(schema, dict):
        return v
    props = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    keys = [k for k in props if k in v] + [k for k in v if k not in props]
    return {k: ordered_like(props.get(k), v[k]) for k in keys}


class XGrammarEngine:
    name = "xgrammar"

    def __init__(self, vocab: Vocabulary):
        from ..baselines.xgrammar import _xgr, compiler, tokenizer_info, xgrammar_version
        self.xgr = _xgr()
        self.version = xgrammar_version()
        self.compiler = compiler(vocab)
        self.info = tokenizer_info(vocab)
        self.eos = list(vocab.eos_token_ids)

    def compile(self, schema: Any) -> tuple[Any, str | None, float]:
        t = time.perf_counter()
        try:
            compiled = self.compiler.compile_json_schema(json.dumps(schema, ensure_ascii=False), any_whitespace=False,
                                                         separators=(", ", ": "), strict_mode=True)
        except Exception as e:  # XGrammar's refusals are RuntimeError / ValueError with a message
            return None, _reason(e), time.perf_counter() - t
        return compiled, None, time.perf_counter() - t

    def accepts(self, compiled: Any, schema: Any, v: Any) -> bool:
        m = self.xgr.GrammarMatcher(compiled)
        return bool(m.accept_string(_render(ordered_like(schema, v)))) and any(
            m.fork().accept_token(e) for e in self.eos)


class LLGuidanceEngine:
    name = "llguidance"

    def __init__(self, vocab: Vocabulary):
        import llguidance
        self.ll = llguidance
        self.version = llguidance.get_version() if hasattr(llguidance, "get_version") else "?"
        self.tokenizer = llguidance.LLTokenizer(llguidance.TokenizerWrapper(_Tokens(vocab)))

    def compile(self, schema: Any) -> tuple[Any, str | None, float]:
        t = time.perf_counter()
        try:
            grammar = self.ll.LLMatcher.grammar_from_json_schema(json.dumps(schema, ensure_ascii=False))
            err, msgs = self.ll.LLMatcher.validate_grammar_with_warnings(grammar, self.tokenizer)
        except Exception as e:
            return None, _reason(e), time.perf_counter() - t
        if err:
            return None, _reason(msgs[0] if msgs else "error"), time.perf_counter() - t
        return grammar, None, time.perf_counter() - t

    def accepts(self, grammar: Any, schema: Any, v: Any) -> bool:
        m = self.ll.LLMatcher(self.tokenizer, grammar, log_level=0)
        toks = self.tokenizer.tokenize_bytes(_render(ordered_like(schema, v)).encode("utf-8"))
        return bool(m.consume_tokens(toks)) and not m.is_error() and m.is_accepting()


class _Tokens:
    """What ``llguidance.TokenizerWrapper`` reads from a tokenizer: our vocabulary's bytes and its encoder."""

    def __init__(self, vocab: Vocabulary):
        self.vocab = vocab
        self.eos_token_id = vocab.eos_token_ids[0]
        self.bos_token_id = None
        self.tokens = [b if b is not None else b"" for b in vocab.tokens]
        self.special_token_ids = [t for t, b in enumerate(vocab.tokens) if b is None]

    def __call__(self, data: bytes | str) -> list[int]:
        text = data.decode("utf-8", errors="replace") if isinstance(data, bytes) else data
        return list(self.vocab.encode(text))


_SOURCE = re.compile(r"^\[[^\]]*\]\s*\S+\.(?:cc|h|cpp):[0-9]+:\s*")
_WORDS = re.compile(r"\b[0-9]+\b|'[^']*'|\"[^\"]*\"|`[^`]*`")


def _reason(e: Any) -> str:
    """The first line of an engine's error, without numbers and quoted names (so that reasons group)."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    text = _SOURCE.sub("", text)  # XGrammar's "[time] /path/file.cc:line: " prefix
    return _WORDS.sub("…", text)[:100]


def engines(vocab: Vocabulary) -> list[Any]:
    """XGrammar and llguidance over ``vocab``; one that is not installed is left out (and said so by the caller)."""
    out: list[Any] = []
    for cls in (XGrammarEngine, LLGuidanceEngine):
        try:
            out.append(cls(vocab))
        except ImportError:
            continue
    return out
