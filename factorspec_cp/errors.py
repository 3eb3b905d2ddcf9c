"""Typed errors. Each names where (a JSON Pointer), what was found, and what would work."""

from __future__ import annotations

from typing import Any


class FactorspecError(Exception):
    """Base of every error this library raises on purpose."""


class DeclarationError(FactorspecError, ValueError):
    """A declaration (schema + relations) that cannot be compiled as written.

    ``pointer`` is the JSON Pointer of the offending part of the declaration document (``#/...``),
    ``found`` what was there, ``hint`` what would work.
    """

    def __init__(self, message: str, *, pointer: str | None = None, found: Any = None, hint: str | None = None):
        self.message = message
        self.pointer = pointer
        self.found = found
        self.hint = hint
        super().__init__(self._text())

    def _text(self) -> str:
        parts = [f"{self.pointer}: {self.message}" if self.pointer is not None else self.message]
        if self.found is not None:
            found = repr(self.found)
            parts.append(f"found {found if len(found) <= 200 else found[:197] + '...'}")
        if self.hint:
            parts.append(f"hint: {self.hint}")
        return "; ".join(parts)


class UnsupportedKeyword(DeclarationError):
    """A JSON Schema keyword (or keyword value) outside the supported subset. Never dropped silently."""


class UnknownPath(DeclarationError):
    """A relation path that names nothing in the schema."""


class NotAField(DeclarationError):
    """A relation path that names an object, an array, or a field that is not always present."""


class FreeFieldInRelation(DeclarationError):
    """A relation path that names a free field (no finite domain), which relations may not read."""


class UnboundedDomain(DeclarationError):
    """A field read by a relation whose domain is unbounded or too wide to enumerate."""


class UnknownRelationKind(DeclarationError):
    """A relation ``kind`` that no built-in or registered custom kind provides."""


class MalformedRelation(DeclarationError):
    """A relation with a missing or ill-typed key, a bad operator, or a path template that instantiates nothing."""


class TypeMismatch(DeclarationError):
    """A value of the wrong type for its place: a string in arithmetic, ``"Paris" < 3``, a row of the wrong width."""


class TableBudgetExceeded(DeclarationError):
    """A table relation with more rows than the declaration's ``table_budget``."""


class BackendUnsupported(DeclarationError):
    """The requested backend cannot encode this declaration (e.g. a custom kind without a SAT encoding)."""


class UnsatisfiableDeclaration(DeclarationError):
    """No record satisfies the declaration. ``explanation`` holds a minimal conflicting set of relations."""

    def __init__(self, message: str, *, explanation: Any = None, **kwargs: Any):
        self.explanation = explanation
        if explanation is not None:
            message = f"{message}\n{explanation}"
        super().__init__(message, **kwargs)


class EmptySchema(DeclarationError):
    """A schema no JSON value satisfies (``false``, an enum with no value of its type, allOf parts that exclude each
    other). An optional property, a union branch or the items of an array that may be empty with such a schema are
    left out instead (the record never writes them); anywhere else it is this error."""


class InvalidAssignment(FactorspecError, ValueError):
    """``session.assign`` with a path that is not a field, or a value outside the field's domain."""


class CompileBudgetExceeded(DeclarationError):
    """A part of the declaration whose compilation would pass its budget (automaton states or seconds): a pattern
    with counted repeats such as ``a{99999}``, nested quantifiers, an alternation whose automaton explodes."""


class NumberOutOfRange(DeclarationError):
    """A number in a relation, an objective, or a field a relation reads whose size CP-SAT (64-bit integers) cannot
    hold: a coefficient, constant or domain value past 2**62 in magnitude, or a linear sum that can reach it."""
