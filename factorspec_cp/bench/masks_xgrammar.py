"""Mask latency of the XGrammar baseline: replay token sequences through
:class:`~factorspec_cp.baselines.xgrammar.XGrammarMatcher` and time every ``fill_mask`` and ``consume``.

Needs xgrammar (``pip install --no-deps xgrammar==0.2.9``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from . import summary_ms

if TYPE_CHECKING:
    from ..tokenmap.vocab import Vocabulary

__all__ = ["time_masks"]


def time_masks(schema: dict[str, Any], vocab: Vocabulary, token_sequences: Iterable[Sequence[int]],
               indent: int | None = None, *, cold: bool = True) -> dict[str, Any]:
    """Replay each token sequence through a fresh matcher: before every token, time ``fill_mask`` (only the call,
    ``time.perf_counter``), then time ``consume``. A sequence may end with EOS; one the matcher rejects raises
    :class:`~factorspec_cp.baselines.xgrammar.XGrammarRejected` (a ValueError).

    Returns ``compile_seconds`` (a cold compile when ``cold``: our cache and XGrammar's are cleared first),
    ``tokenizer_info_seconds``, per sequence lists ``fill_mask_seconds`` / ``consume_seconds`` (one entry per token),
    and their summaries in milliseconds ``fill_mask_ms`` / ``consume_ms`` (n, p50, p99, max, mean).
    """
    from ..baselines.xgrammar import XGrammarMatcher, tokenizer_info_seconds, xgrammar_version

    info_seconds = tokenizer_info_seconds(vocab)  # built here (outside the compile time) when not yet cached
    if cold:
        XGrammarMatcher.clear_cache()
    first = XGrammarMatcher(schema, vocab, indent=indent)
    compile_seconds = first.compile_seconds
    row = np.zeros(first.words, dtype=np.int32)
    fills: list[list[float]] = []
    consumes: list[list[float]] = []
    clock = time.perf_counter
    for n, seq in enumerate(token_sequences):
        m = first if n == 0 else XGrammarMatcher(schema, vocab, indent=indent)
        f: list[float] = []
        c: list[float] = []
        for t in seq:
            t0 = clock()
            m.fill_mask(row)
            t1 = clock()
            m.consume(t)
            t2 = clock()
            f.append(t1 - t0)
            c.append(t2 - t1)
        fills.append(f)
        consumes.append(c)
    flat_f = [x for f in fills for x in f]
    flat_c = [x for c in consumes for x in c]
    return {
        "backend": "xgrammar",
        "xgrammar_version": xgrammar_version(),
        "vocab": vocab.name,
        "vocab_size": vocab.size,
        "indent": indent,
        "tokenizer_info_seconds": info_seconds,
        "compile_seconds": compile_seconds,
        "compile_cold": cold,
        "sequences": len(fills),
        "positions": len(flat_f),
        "fill_mask_seconds": fills,
        "consume_seconds": consumes,
        "fill_mask_ms": summary_ms(flat_f),
        "consume_ms": summary_ms(flat_c),
    }
