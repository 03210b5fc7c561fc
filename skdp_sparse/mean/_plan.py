"""The plan of a private mean: method, mechanism and bounds, from public values only."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from ..privacy.discrete import check_lattice
from ..privacy.mechanisms import GaussianMechanism, LaplaceMechanism

METHODS = ("auto", "projection", "l1_recovery", "gaussian", "laplace")

# Each row's measurement A z_i is clipped to this multiple of the l2 bound, so
# the l2 sensitivity of the averaged measurements is 2 * 1.5 * L / n = 3L/n for
# every draw of A (the value the paper obtains from a restricted-isometry event).
MEASUREMENT_CLIP = 1.5


@dataclass(frozen=True)
class MeanPlan:
    """Everything a fit does, fixed from public quantities before the data are read."""

    method: str
    mechanism: LaplaceMechanism | GaussianMechanism
    max_l2: float
    max_l1: float
    radius: float  # l1-ball radius of the final projection; inf: no projection
    n_measurements: int = 0  # > 0: compressed-sensing branch of Algorithm 2
    epsilon: float = 0.0
    delta: float = 0.0

    @property
    def events(self):
        """The fit's one mechanism call."""
        return (self.mechanism.event(),)

    @property
    def noise_scale(self):
        if isinstance(self.mechanism, LaplaceMechanism):
            return self.mechanism.scale
        return self.mechanism.sigma


# --------------------------------------------------------------------------
# Public-parameter rules
# --------------------------------------------------------------------------
def n_measurements(n, d, s, epsilon, delta):
    """Number m of measurements of Algorithm 2, or 0 when it falls back to plain noise.

    ``m = ceil(n eps sqrt(s ln(d/s) / ln(1/delta)))`` (Ghazi et al., Alg. 2; the
    nested root of Thm 3.4 is a typo). The compressed-sensing branch is taken
    when ``d >= m ln^2 m`` (and ``1 <= m < d``); with ``epsilon = inf`` there is
    no noise to compress away and the exact mean is returned.
    """
    if math.isinf(epsilon) or delta <= 0 or s >= d:
        return 0
    m = math.ceil(n * epsilon * math.sqrt(s * math.log(d / s) / math.log(1 / delta)))
    if m < 1 or m >= d or d < m * math.log(m) ** 2:
        return 0
    return int(m)


def table1_rates(n, d, s, epsilon, delta):
    """Upper-bound rates of Table 1 of Ghazi et al., L = 1, without the trivial ``1 ∧``.

    Returns ``{"projection": ..., "l1_recovery": ..., "gaussian"/"laplace": ...}``.
    """
    en = epsilon * n
    if delta == 0:
        return {
            "projection": min(math.sqrt(s * math.log(d) / en), math.sqrt(s * d) / en),
            "laplace": math.sqrt(s * d) / en,
        }
    lid = math.log(1 / delta)
    low = math.sqrt(d * lid) / en
    return {
        "projection": min((s * math.log(d) * lid) ** 0.25 / math.sqrt(en), low),
        # Thm 3.4's bound, with the sqrt(1.5) its 3L/n sensitivity costs over
        # the projection's 2L/n (the error scales as the square root of the noise).
        "l1_recovery": min(
            math.sqrt(1.5) * (s * math.log(d / s) * lid) ** 0.25
            / math.sqrt(en),
            low,
        ),
        "gaussian": low,
    }


def choose_method(n, d, s, epsilon, delta, max_work=1e9):
    """The ``method="auto"`` rule; it reads only public n, d, s, epsilon, delta.

    * No ``sparsity``: nothing to project on; plain ``"laplace"`` (delta = 0) or
      ``"gaussian"`` (delta > 0).
    * delta = 0: ``"projection"``. With the same noise, projecting onto the l1
      ball (which contains the clipped mean) never increases the l2 error, so it
      is never worse than plain Laplace, and Thm 3.2 gives both rates of Table 1.
    * delta > 0: ``"l1_recovery"`` only where all of these hold: Algorithm 2
      takes its compressed-sensing branch (``d >= m ln^2 m``); its Table-1 rate,
      inflated by ``sqrt(1.5)`` for its 3L/n sensitivity, is below both the
      projection's rate and the trivial rate 1; and one product with the
      ``m x d`` sensing matrix costs at most ``max_work`` multiply-adds.
      Otherwise ``"projection"`` (which, with the same Gaussian noise, dominates
      the plain baseline Alg. 2 falls back to).

    The gain of Alg. 2 is ln d -> ln(d/s) inside a fourth root, which beats the
    sqrt(1.5) only for s > d^0.56 or so; together with the first two conditions
    this needs d around 1e8 and then ``m * d > 4e13``, so in practice the rule
    picks ``"projection"``.
    """
    if s is None:
        return "laplace" if delta == 0 else "gaussian"
    if delta == 0 or math.isinf(epsilon):
        return "projection"
    m = n_measurements(n, d, s, epsilon, delta)
    if m > 0 and m * d <= max_work:
        rates = table1_rates(n, d, s, epsilon, delta)
        if rates["l1_recovery"] < min(rates["projection"], 1.0):
            return "l1_recovery"
    return "projection"


def resolve_floating_point_safe(option):
    """The noise path: ``"auto"`` is the floating-point-safe one, for every method.

    The safe Laplace release costs a relative 2^-16 of noise; the safe Gaussian 4 to 9%
    more noise (zCDP calibration), and its projection draws only the noise that can
    survive it, as the float path does (``sampled_discrete_projection``).
    """
    if option == "auto":
        return True
    return bool(option)


@functools.lru_cache(maxsize=64)
def make_plan(method, n, d, norm_bound, sparsity, epsilon, delta, floating_point_safe="auto"):
    """The plan of a fit; cached, as the Gaussian calibration alone takes about a
    millisecond and depends only on these public arguments (the plan is immutable)."""
    L = norm_bound
    if method == "auto":
        method = choose_method(n, d, sparsity, epsilon, delta)
    max_l1 = L * math.sqrt(sparsity) if sparsity is not None else math.inf
    radius = math.inf
    m = 0
    if method == "laplace" or (method == "projection" and delta == 0):
        # l1 sensitivity of the mean: two rows of l1 norm <= L sqrt(s) (or
        # L sqrt(d), implied by the l2 bound alone) differ by at most twice that.
        l1_row = max_l1 if sparsity is not None else L * math.sqrt(d)
        safe = resolve_floating_point_safe(floating_point_safe)
        mechanism = LaplaceMechanism(2 * l1_row / n, epsilon=epsilon, floating_point_safe=safe)
    else:
        m = n_measurements(n, d, sparsity, epsilon, delta) if method == "l1_recovery" else 0
        sensitivity = 2 * MEASUREMENT_CLIP * L / n if m else 2 * L / n
        safe = resolve_floating_point_safe(floating_point_safe)
        mechanism = GaussianMechanism(sensitivity, epsilon=epsilon, delta=delta,
                                      floating_point_safe=safe)
    if method == "projection":
        radius = max_l1
    _check_lattice(mechanism, m or d)
    return MeanPlan(method, mechanism, L, max_l1, radius, m, epsilon, delta)


def _check_lattice(mechanism, dim):
    """Plan the exact noise's lattice now (public values: the mechanism and the
    release's size), so that a budget too small for the exact samplers is refused before
    the fit reserves it rather than in the release."""
    noise = getattr(mechanism, "scale", None) if isinstance(mechanism, LaplaceMechanism) \
        else mechanism.sigma
    if not (mechanism.floating_point_safe and noise and math.isfinite(noise)):
        return
    check_lattice(mechanism.sensitivity, noise, dim,
                  pure=isinstance(mechanism, LaplaceMechanism))
