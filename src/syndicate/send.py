"""Only the name ``bouncebox`` still imports from here; sending is ``sending/``."""

from __future__ import annotations

from .sending.messages import return_path

__all__ = ["return_path"]
