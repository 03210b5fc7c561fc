"""Test configuration: a fresh Numba cache, and fixtures shared by the test modules."""

import os
import shutil
import tempfile

# Compiled kernels are cached per source file; a kernel that inlines a function of
# another module keeps stale code when only that module changes. The suite compiles
# everything afresh into a directory of its own (set before the package is imported;
# numba itself may already be, for the warning filters of the configuration). The
# processes of a parallel run (pytest-xdist) share the directory of the process that
# started them, which alone removes it.
_WORKER = "PYTEST_XDIST_WORKER" in os.environ
if _WORKER and "SKDP_SPARSE_TEST_NUMBA_CACHE" in os.environ:
    _NUMBA_CACHE = os.environ["SKDP_SPARSE_TEST_NUMBA_CACHE"]
else:
    _NUMBA_CACHE = tempfile.mkdtemp(prefix="skdp_sparse-numba-")
    os.environ["SKDP_SPARSE_TEST_NUMBA_CACHE"] = _NUMBA_CACHE
os.environ["NUMBA_CACHE_DIR"] = _NUMBA_CACHE

import numba.core.config  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

numba.core.config.reload_config()

import skdp_sparse.solvers.coordinate_descent as cd_module  # noqa: E402


def pytest_sessionfinish(session, exitstatus):
    if not _WORKER:
        shutil.rmtree(_NUMBA_CACHE, ignore_errors=True)


class _CountedKernel:
    """A Numba kernel as if not yet compiled in this process (no signatures), counting
    the calls that reach it: the switch of a first-use budget (utils._first_use)."""

    signatures = ()

    def __init__(self, kernel):
        self.py_func = kernel.py_func
        self._kernel = kernel
        self.calls = 0

    def __call__(self, *args):
        self.calls += 1
        return self._kernel(*args)


@pytest.fixture
def counted_kernel():
    """Wraps a kernel in a stand-in that counts its calls and reports no compilation."""
    return _CountedKernel


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


@pytest.fixture
def spy_on_releases(monkeypatch):
    """``spy(pure=False) -> (captured, real)``: every release the calibrated decisions
    make (Laplace ones with ``pure``) is recorded in ``captured`` as ``(value,
    sensitivity, unit, floating_point_safe)``, then drawn by ``real``, the release
    itself."""
    from skdp_sparse.solvers import _calibration

    def spy(pure=False):
        captured = []
        name = "release_pure" if pure else "release"
        real = getattr(_calibration, name)

        def recording(value, sensitivity, unit, floating_point_safe, rng):
            captured.append((np.array(value), sensitivity, unit, floating_point_safe))
            return real(value, sensitivity, unit, floating_point_safe, rng)

        monkeypatch.setattr(_calibration, name, recording)
        return captured, real

    return spy


@pytest.fixture
def release_noise(monkeypatch):
    """``record(module) -> drawn``: the noise of every Gaussian release ``module`` makes
    through its ``release`` is appended to ``drawn[sensitivity]``, flattened."""

    def record(module):
        drawn = {}
        real = module.release

        def recording(value, sensitivity, unit, safe, rng):
            noisy, sigma = real(value, sensitivity, unit, safe, rng)
            drawn.setdefault(float(sensitivity), []).append(np.ravel(noisy - value))
            return noisy, sigma

        monkeypatch.setattr(module, "release", recording)
        return drawn

    return record
