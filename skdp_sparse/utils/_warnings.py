"""Warnings that point at the user's line, not at the library's."""

from __future__ import annotations

import os
import sys
import warnings

__all__ = ["warn"]

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _in_package(frame):
    return os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE_DIR)


def warn(message, category=UserWarning):
    """``warnings.warn`` attributed to the first caller outside this package."""
    frame = sys._getframe(1)
    level = 2  # stacklevel 2 is the caller of this function
    while frame is not None and _in_package(frame):
        frame = frame.f_back
        level += 1
    warnings.warn(message, category, stacklevel=level)
