"""factorspec-cp: JSON records whose fields obey relations, compiled to CP/SAT and decoded exactly.

>>> import factorspec_cp as fs
>>> spec = fs.Spec.from_json({
...     "type": "object", "required": ["a"], "properties": {"a": {"enum": [1, 2, 3]}},
...     "x-factorspec": {"relations": [{"kind": "compare", "left": "/a", "op": ">", "right": 1}]}})
>>> spec.session().admissible("/a")
[2, 3]
"""

from ._native import check as _check_build

_check_build()  # before any compiled module is imported: the compiled build, or the sources where it is stale

from .errors import (
                     BackendUnsupported,
                     DeclarationError,
                     EmptySchema,
                     FactorspecError,
                     FreeFieldInRelation,
                     InvalidAssignment,
                     MalformedRelation,
                     NotAField,
                     TableBudgetExceeded,
                     TypeMismatch,
                     UnboundedDomain,
                     UnknownPath,
                     UnknownRelationKind,
                     UnsatisfiableDeclaration,
                     UnsupportedKeyword,
)
from .graph import FactorGraph
from .relations import (
                     AllDifferent,
                     Any_,
                     Compare,
                     Count,
                     Element,
                     Implies,
                     Linear,
                     Literal,
                     NoOverlap,
                     Relation,
                     Table,
                     Term,
                     relation_kind,
)
from .session import Explanation, Session
from .spec import Objective, Spec

__version__ = "0.1.0"

__all__ = [
    "Spec", "Objective", "Session", "Explanation", "FactorGraph",
    "Relation", "relation_kind", "Term", "Literal",
    "AllDifferent", "Table", "Linear", "Compare", "Implies", "Any_", "Element", "NoOverlap", "Count",
    "FactorspecError", "DeclarationError", "UnsupportedKeyword", "UnknownPath", "NotAField", "FreeFieldInRelation",
    "UnboundedDomain", "UnknownRelationKind", "MalformedRelation", "TypeMismatch", "TableBudgetExceeded",
    "BackendUnsupported", "UnsatisfiableDeclaration", "InvalidAssignment", "EmptySchema",
]
