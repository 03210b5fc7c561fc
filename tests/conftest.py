"""Fixtures shared by the test modules."""

import pytest

import skdp_sparse.solvers.coordinate_descent as cd_module


@pytest.fixture
def cd_calls(monkeypatch):
    """Keyword arguments of every call the coordinate-descent solvers make to the CD
    engine, which records the noise scales, clips and smoothness it was asked to use."""
    calls = []
    real = cd_module.coordinate_descent

    def wrapper(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(cd_module, "coordinate_descent", wrapper)
    return calls
