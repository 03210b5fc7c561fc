"""Sources of randomness for the mechanisms.

Every mechanism draws from a :class:`numpy.random.Generator`. ``None`` seeds it
from operating-system entropy, an int makes runs reproducible. Numba kernels
receive the same ``Generator`` object and advance its state in place, so no
global or per-thread generator state is ever shared between fits or reused.
"""

import numbers

import numpy as np

__all__ = ["check_generator"]


def check_generator(random_state):
    """Turn a ``random_state`` hyperparameter into a :class:`numpy.random.Generator`.

    Parameters
    ----------
    random_state : None, int, numpy.random.Generator or numpy.random.RandomState
        ``None`` draws a fresh seed from the operating system (use this for a
        private release); an int gives a reproducible stream (use it for tests
        and experiments, never reuse one seed for two releases); a Generator is
        used as it is; a legacy RandomState is used to draw a seed.
    """
    if random_state is None:
        return np.random.default_rng()
    if isinstance(random_state, np.random.Generator):
        return random_state
    if isinstance(random_state, np.random.RandomState):
        return np.random.default_rng(random_state.randint(0, 2**63 - 1, dtype=np.int64))
    if (isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool)
            and random_state >= 0):
        return np.random.default_rng(int(random_state))
    raise ValueError(
        f"random_state must be None, a non-negative int, a numpy Generator or "
        f"RandomState; got {random_state!r}."
    )
