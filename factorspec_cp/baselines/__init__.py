"""Baselines our decoder is measured against, behind the decoder's per-request interface.

``xgrammar``: :class:`~factorspec_cp.baselines.xgrammar.XGrammarMatcher` (needs the optional ``xgrammar`` package,
installed with ``pip install --no-deps xgrammar==0.2.9``; see that module). Nothing is imported here, so this package
imports without xgrammar.
"""
