"""The tokenmap's error type."""

from __future__ import annotations

from ..errors import FactorspecError


class VocabularyError(FactorspecError, ValueError):
    """A tokenizer, GGUF file or token id this library cannot map to bytes; the message says what would work."""
