"""Warnings that point at the user's line, not at the library's."""

from __future__ import annotations

import os
import sys
import warnings

__all__ = ["warn", "warn_float_noise"]

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


def warn_float_noise(owner):
    """The :class:`~skdp_sparse.exceptions.PrivacyLeakWarning` of a fit asked to add its
    noise in doubles (``floating_point_safe=False``)."""
    from ..exceptions import PrivacyLeakWarning

    warn(f"{owner}(floating_point_safe=False) adds noise in doubles, whose low-order "
         "bits can reveal the noiseless values it was added to (Mironov 2012); the "
         "privacy guarantee does not cover that.", PrivacyLeakWarning)
