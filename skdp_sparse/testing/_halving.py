"""The budget at which an estimator's own calibration adds exactly half its noise.

Every private fit calibrates its noise to the requested ``(epsilon, delta)`` and
records the mechanism calls it made in ``privacy_events_``. Halving the noise of
every call multiplies each Gaussian ratio ``mu = Delta / sigma`` and each pure or
exponential-mechanism epsilon by 2 and each zCDP ``rho`` by 4; a subsampled
Gaussian's RDP curve is recomputed with half its noise multiplier. Composing
those events at the same delta gives the epsilon' at which the same calibration
(which inverts the same composition) yields half the noise: a fit at epsilon'
runs the real code path with half the noise, while an audit keeps checking it
against the original claim.
"""

from __future__ import annotations

import dataclasses
import math
import warnings

import numpy as np
from scipy.optimize import brentq
from sklearn.base import clone

from ..privacy.accounting import compose
from ..privacy.subsampling import subsampled_gaussian_event

__all__ = ["halved_events", "halved_noise_epsilon", "noise_scale", "subsampling_of"]

_SAMPLINGS = ("poisson", "without_replacement")


def subsampling_of(event, n_samples, *, batch_sizes=None, rtol=1e-6):
    """``(sampling_rate, noise_multiplier, sampling)`` of a subsampled-Gaussian RDP event.

    The sampling rate of a fit on ``n_samples`` rows is ``b / n_samples`` for an
    integer batch size ``b`` (``batch_sizes`` to try first, then all); for each ``b``
    (and each sampling scheme) the noise multiplier matching the curve at one order
    is found, and the pair whose whole curve matches the event's is returned.
    Raises ``ValueError`` if none does.
    """
    curve = np.asarray(event.rdp, dtype=float)
    finite = np.flatnonzero(np.isfinite(curve) & (curve > 0))
    if finite.size == 0:
        raise ValueError(f"event {event.name!r} has no finite positive RDP value")
    ref = int(finite[np.argmin(np.abs(finite - finite.size // 3))])
    n_samples = int(n_samples)
    first = [int(b) for b in (batch_sizes or ()) if 0 < int(b) < n_samples]
    order = first + [b for b in range(n_samples - 1, 0, -1) if b not in first]
    for b in order:
        for sampling in _SAMPLINGS:
            q = b / n_samples

            def gap(log_z, q=q, sampling=sampling):
                ev = subsampled_gaussian_event(math.exp(log_z), q, sampling=sampling)
                return math.log(ev.rdp[ref]) - math.log(curve[ref])

            lo, hi = math.log(1e-3), math.log(1e3)
            if not gap(lo) > 0 > gap(hi):
                continue
            z = math.exp(brentq(gap, lo, hi, xtol=1e-13))
            candidate = np.asarray(subsampled_gaussian_event(z, q, sampling=sampling).rdp)
            both = np.isfinite(candidate) & np.isfinite(curve)
            if np.array_equal(np.isfinite(candidate), np.isfinite(curve)) and np.allclose(
                    candidate[both], curve[both], rtol=rtol, atol=0.0):
                return q, z, sampling
    raise ValueError(
        f"event {event.name!r}: no subsampled Gaussian mechanism on {n_samples} rows "
        "reproduces its RDP curve"
    )


def halved_events(events, n_samples=None, batch_sizes=None):
    """The events of the same calls with half the noise.

    Gaussian events: ``mu`` doubled (``rho`` times 4). Pure and exponential-mechanism
    events: ``epsilon`` doubled (``rho`` times 4). zCDP-only events (the discrete
    Gaussian): ``rho`` times 4. RDP events of subsampled Gaussians (``n_samples``
    needed): recomputed with half the noise multiplier. An event's privacy loss
    distribution, if it has one, is that of its step with half the noise. An event known only by an
    ``(epsilon, delta)`` pair has no noise scale and raises ``ValueError``.
    """
    out = []
    for e in events:
        # The privacy loss distribution's step: the same step with half the noise.
        pld = None if e.pld is None else dataclasses.replace(
            e.pld, noise_multiplier=e.pld.noise_multiplier / 2)
        if e.rdp is not None:
            if n_samples is None:
                raise ValueError("halving an RDP event needs n_samples")
            q, z, sampling = subsampling_of(e, n_samples, batch_sizes=batch_sizes)
            halved = subsampled_gaussian_event(z / 2, q, e.count, sampling=sampling,
                                               name=e.name)
            out.append(halved if pld is None else dataclasses.replace(halved, pld=pld))
        elif e.rho is not None:
            out.append(dataclasses.replace(
                e,
                epsilon=2 * e.epsilon,  # nan stays nan (Gaussian, discrete Gaussian)
                rho=4 * e.rho,
                mu=None if e.mu is None else 2 * e.mu,
                pld=pld,
            ))
        else:
            raise ValueError(
                f"event {e.name!r} is only (epsilon={e.epsilon}, delta={e.delta})-DP: it "
                "carries no noise scale to halve"
            )
    return out


def noise_scale(fitted):
    """A number proportional to the noise of a fitted estimator (public attributes only).

    ``noise_scale_`` where the estimator has it; ``score_noise_`` for the private
    search (its fits' noise moves with it); otherwise ``1 / mu``, ``1 / sqrt(rho)``,
    ``1 / epsilon`` or the noise multiplier of the privacy loss distribution of the
    first recorded event.
    """
    for name in ("noise_scale_", "score_noise_"):
        if hasattr(fitted, name):
            return float(getattr(fitted, name))
    e = fitted.privacy_events_[0]
    if e.mu is not None:
        return 1.0 / e.mu
    if e.rho is not None:
        return 1.0 / math.sqrt(e.rho)
    if e.delta == 0 and math.isfinite(e.epsilon):
        return 1.0 / e.epsilon
    if e.pld is not None:
        return e.pld.noise_multiplier
    raise ValueError(f"event {e.name!r} carries no noise scale")


def _fit(estimator, epsilon, X, y):
    est = clone(estimator).set_params(epsilon=epsilon)
    with warnings.catch_warnings():
        # Fits on tiny audit data warn about it; the events are what is read here.
        warnings.simplefilter("ignore")
        return est.fit(X) if y is None else est.fit(X, y)


def _bisect_noise(estimator, X, y, rtol):
    """epsilon' at which ``noise_scale`` of a fit is half the fit's at ``estimator.epsilon``.

    For estimators whose events cannot be halved one by one (the private search
    records one RDP curve for the whole search, selection included).
    """
    epsilon = float(estimator.epsilon)
    target = noise_scale(_fit(estimator, epsilon, X, y)) / 2

    def gap(log_eps):
        return math.log(noise_scale(_fit(estimator, math.exp(log_eps), X, y)) / target)

    lo, hi = math.log(epsilon), math.log(2 * epsilon)
    while gap(hi) > 0:
        lo, hi = hi, hi + math.log(2)
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if gap(mid) > 0:
            lo = mid
        else:
            hi = mid
        if hi - lo < rtol / 4:
            break
    return math.exp(hi)


def halved_noise_epsilon(estimator, X, y=None, *, rtol=1e-3):
    """The epsilon at which ``estimator``'s own calibration adds half its noise.

    ``estimator`` (unfitted; its ``epsilon``, ``delta`` and other parameters are
    used as they are) is fitted once on ``(X, y)``; its recorded events are halved
    (:func:`halved_events`) and composed at its ``delta``. A fit of the same
    estimator at the returned epsilon (and the same delta) adds exactly half the
    noise on every mechanism call, as long as its calibration inverts the
    composition of its events and its structure (number of steps, phases) does not
    depend on epsilon; the audits check both.

    The private search records one RDP curve for the whole search; for it (and any
    estimator whose events cannot be halved one by one) epsilon is found by
    bisection so that :func:`noise_scale` halves, to relative tolerance ``rtol``.
    """
    fitted = _fit(estimator, float(estimator.epsilon), X, y)
    delta = float(estimator.delta)
    if hasattr(fitted, "score_noise_"):
        return _bisect_noise(estimator, X, y, rtol)
    n_samples = X.shape[0]
    batch = getattr(estimator, "batch_size", None)
    batch_sizes = None if batch is None else [min(int(batch), n_samples)]
    return compose(halved_events(fitted.privacy_events_, n_samples, batch_sizes),
                   delta)[0]
