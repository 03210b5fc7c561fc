"""The label set of a classifier is a public parameter (``classes``)."""

import warnings

import numpy as np
import pytest

from skdp_sparse import (
    BudgetExceededError,
    DPOutputPerturbationClassifier,
    DPSparseLogisticRegression,
    PrivacyLeakWarning,
    privacy_ledger,
)

CLASSIFIERS = [
    lambda **kw: DPSparseLogisticRegression(epsilon=1.0, delta=1e-5, random_state=0, **kw),
    lambda **kw: DPOutputPerturbationClassifier(epsilon=1.0, random_state=0, **kw),
]


def _data(n=60, labels=(0, 1)):
    rng = np.random.default_rng(0)
    # Rows inside the default bounds (norm at most 1): only the label set may warn.
    X = rng.random((n, 4)) / 2
    y = np.resize(np.asarray(labels), n)
    return X, y


@pytest.mark.parametrize("make", CLASSIFIERS)
def test_public_label_set_fixes_classes_and_shapes(make):
    X, y = _data()
    y_rare = y.copy()
    y_rare[0] = 2  # one row with a rare label
    shapes = []
    for labels in (y, y_rare):
        with warnings.catch_warnings():
            warnings.simplefilter("error", PrivacyLeakWarning)
            clf = make(classes=[0, 1, 2]).fit(X, labels)
        np.testing.assert_array_equal(clf.classes_, [0, 1, 2])
        shapes.append(clf.coef_.shape)
    assert shapes[0] == shapes[1] == (3, 4)


@pytest.mark.parametrize("make", CLASSIFIERS)
def test_one_class_present_still_fits_with_public_classes(make):
    X, _ = _data()
    clf = make(classes=["a", "b"]).fit(X, np.full(X.shape[0], "a"))
    assert set(clf.predict(X)) <= {"a", "b"}
    assert clf.coef_.shape == (1, 4)


@pytest.mark.parametrize("make", CLASSIFIERS)
def test_label_outside_public_set_fails_before_any_budget(make):
    X, y = _data()
    with privacy_ledger(max_epsilon=10.0, max_delta=1e-3) as ledger:
        with pytest.raises(ValueError, match="outside the public label set"):
            make(classes=[0, 1]).fit(X, np.r_[y[:-1], 5])
    assert len(ledger) == 0 and ledger.pending() == []
    with pytest.raises(BudgetExceededError):  # the cap itself still works
        with privacy_ledger(max_epsilon=0.5, max_delta=1e-3):
            make(classes=[0, 1]).fit(X, y)


@pytest.mark.parametrize("make", CLASSIFIERS)
def test_labels_outside_the_public_set_give_one_message_whatever_their_count(make):
    # The error may say that some label is outside; how many rows hold one is a
    # statistic of the data.
    X, y = _data()
    messages = []
    for k in (1, 3):
        with pytest.raises(ValueError, match="outside the public label set") as info:
            make(classes=[0, 1]).fit(X, np.r_[y[:-k], np.full(k, 5)])
        messages.append(str(info.value))
    assert messages[0] == messages[1]


@pytest.mark.parametrize("make", CLASSIFIERS)
def test_label_set_read_from_data_warns(make):
    X, y = _data()
    with pytest.warns(PrivacyLeakWarning, match="label set") as record:
        make().fit(X, y)
    # The warning points at this file, not at the library.
    assert all(w.filename == __file__ for w in record if w.category is PrivacyLeakWarning)


@pytest.mark.parametrize("make", CLASSIFIERS)
def test_one_class_read_from_the_data_is_refused_without_quoting_it(make):
    # It printed np.float64(0.0): a label of the data, read without a public label set.
    X, _ = _data()
    messages = []
    for label in (np.float64(0.0), "secret"):
        with pytest.warns(PrivacyLeakWarning), \
                pytest.raises(ValueError, match="one class only.*classes=") as info:
            make().fit(X, np.full(X.shape[0], label))
        messages.append(str(info.value))
    assert messages[0] == messages[1]


@pytest.mark.parametrize("classes", [[1], [1, 1, 2], [[0, 1]]])
def test_invalid_classes(classes):
    X, y = _data()
    with pytest.raises(ValueError, match="classes"):
        DPSparseLogisticRegression(classes=classes).fit(X, y)


def test_classes_mixing_strings_and_numbers_are_refused():
    # As an array they would all become strings, and predict would return "0" for 0.
    X, _ = _data()
    y = np.where(np.arange(X.shape[0]) % 2 == 0, "0", "a")
    with pytest.raises(ValueError, match="mixes strings and numbers"):
        DPSparseLogisticRegression(classes=[0, "a"]).fit(X, y)
