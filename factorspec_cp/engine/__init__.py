"""The embedded engine: the packaged model, drafters, and batched masked decoding with verified drafts."""

from .drafters import DRAFTERS, Drafter, make_drafter
from .run import CONSTRAINTS, Engine, Job, Result

__all__ = ["Engine", "Job", "Result", "Drafter", "make_drafter", "DRAFTERS", "CONSTRAINTS"]
