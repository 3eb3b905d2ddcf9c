"""Tokens: what each token id of a model spells, as bytes (see DESIGN.md, Tokens).

>>> from factorspec_cp.tokenmap import Vocabulary
>>> Vocabulary.qwen3().size
151669
"""

from .vocab import Vocabulary, VocabularyError

__all__ = ["Vocabulary", "VocabularyError"]
