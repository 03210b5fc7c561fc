"""Fixtures shared by the test modules."""

import pytest

import skdp_sparse.linear_model._coordinate_descent as cd_module


@pytest.fixture
def cd_calls(monkeypatch):
    """Keyword arguments of every call the estimators make to the CD engine,
    which records the noise scales, clips and smoothness it was asked to use."""
    calls = []
    real = cd_module.coordinate_descent

    def wrapper(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(cd_module, "coordinate_descent", wrapper)
    return calls
