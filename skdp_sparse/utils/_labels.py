"""The label set of a private classifier: a public parameter, or read from the data
with a :class:`~skdp_sparse.exceptions.PrivacyLeakWarning`."""

from __future__ import annotations

import numpy as np
from sklearn.utils.multiclass import type_of_target

from ..exceptions import PrivacyLeakWarning
from ._warnings import warn

__all__ = ["check_classes", "encode_labels"]


def check_classes(classes):
    """Validate a ``classes`` parameter: None, or at least two distinct labels.

    Returns the sorted unique labels (the order of ``classes_`` and of the rows of
    ``coef_``), or None.
    """
    if classes is None:
        return None
    if len({isinstance(label, str) for label in np.asarray(classes, dtype=object).ravel()}) > 1:
        # numpy would turn every label into a string, and predict would return "0" for 0.
        raise ValueError(f"classes mixes strings and numbers, got {classes!r}")
    arr = np.asarray(classes)
    if arr.ndim != 1:
        raise ValueError(f"classes must be a 1-d list of labels, got shape {arr.shape}")
    unique = np.unique(arr)
    if unique.size < 2:
        raise ValueError(f"classes must hold at least two distinct labels, got {classes!r}")
    if unique.size != arr.size:
        raise ValueError(f"classes must not repeat a label, got {classes!r}")
    return unique


def encode_labels(y, classes, estimator_name):
    """``(classes_, codes)``: the public label set and each label's index in it.

    With ``classes`` given, ``classes_`` is its sorted copy whatever labels ``y``
    holds, and a label outside it raises ``ValueError``. Without, the label set is
    read from ``y``, which is not covered by the privacy guarantee (a single row
    with a rare label changes ``classes_`` and the shape of ``coef_``): the
    function emits :class:`~skdp_sparse.exceptions.PrivacyLeakWarning`.
    """
    public = check_classes(classes)
    if public is not None:
        # With a public label set nothing may depend on which labels occur: scikit-learn's
        # type_of_target would call the labels of classes=[0, 0.5, 1] continuous only
        # when some row is labelled 0.5. Only the shape and the membership are checked.
        shape = np.shape(y)
        if len(shape) != 1:
            raise ValueError(f"y must be a 1-d array of labels, got shape {shape}")
    else:
        # One type_of_target (check_classification_targets would run it again).
        kind = type_of_target(y, input_name="y")
        if kind not in ("binary", "multiclass"):
            if kind not in ("multilabel-indicator", "multiclass-multioutput"):
                # scikit-learn's wording for targets that are not labels.
                raise ValueError(f"Unknown label type: {kind}. Maybe you are trying to fit "
                                 "a classifier, which expects discrete classes on a "
                                 "regression target with continuous values.")
            raise ValueError(f"y must hold binary or multiclass labels, got {kind} targets")
        warn(
            f"{estimator_name} reads its label set (classes_) from the training labels, "
            "which the privacy guarantee does not cover: one row with a rare label changes "
            "classes_ and the shape of coef_. Pass the public label set as classes=[...].",
            PrivacyLeakWarning,
        )
        public = np.unique(y)
        if public.size < 2:
            # The label is the data's, not a public one (a public label set has two at
            # least): the message does not quote it.
            raise ValueError(
                "y has one class only; a classifier needs at least two. Pass the public "
                "label set as classes=[...] to fit anyway."
            )
        return public, np.searchsorted(public, y)
    try:
        known = np.isin(y, public)
    except TypeError:
        # A label that cannot be compared with the label set (None among numbers) is
        # outside it: the same error as any other such label.
        known = np.zeros(1, dtype=bool)
    if not np.all(known):
        # How many rows are outside is a statistic of the data: the message says only
        # that some are.
        raise ValueError(
            f"y holds labels outside the public label set classes={public.tolist()!r}"
        )
    return public, np.searchsorted(public, y)
