"""Floating-point-safe noise: exact discrete Laplace and Gaussian noise on a lattice.

Adding ``rng.laplace(...)`` or ``rng.normal(...)`` to a double ``f(S)`` is not the
Laplace or Gaussian mechanism: the doubles ``fl(f(S) + noise)`` can take, and their
probabilities, depend on the low-order bits of ``f(S)`` (Mironov 2012). The releases
here round ``f(S)`` to a lattice ``gamma Z`` (``gamma`` a power of two fixed by public
values), add exact integer noise, and only then convert back to doubles, which is
post-processing.

Guarantee (replace-one neighbours): the safe Laplace release of a statistic of l1
sensitivity ``Delta_1`` with scale ``b`` is ``laplace_epsilon(Delta_1, b) = (1 + eta)
Delta_1 / b``-DP, and the safe Gaussian release of l2 sensitivity ``Delta_2`` with
``sigma`` is ``gaussian_rho(Delta_2, sigma) = ((1 + eta) Delta_2 / sigma)^2 / 2``-zCDP,
``eta = 2^-16`` (:data:`SENSITIVITY_SLACK`) paying for the rounding. The samplers are
exact in law (Canonne, Kamath & Steinke 2020, in 63-bit integer Numba kernels that
draw from the Generator's own stream, with an exact big-integer continuation for the
rare draws 63 bits cannot decide; nothing is truncated).

The derivation (lattice, sensitivity with rounding, samplers and their exactness) is
in ``doc/proofs/discrete.rst``.

Beyond the releases, exact samplers that other Numba kernels call per step:

* :class:`ExponentialSelector` (exact exponential mechanism on lattice keys, one pass
  or a dynamic sum tree) and :func:`report_noisy_max`, both ``2 D / t``-DP on the
  lattice of :func:`plan_selection` (:func:`selection_epsilon`);
* :class:`NoiseBuffer` (i.i.d. draws ahead of use) and :func:`plan_unit_gaussian` /
  :func:`plan_unit_laplace` (one lattice for coordinates of different sensitivities);
* :func:`plan_exceedance` (which of ``m`` draws exceed a threshold, in time
  proportional to their number, with their exact conditional values);
* :func:`plan_blocks` (the discrete Gaussian given ``c <= |Z| <= e``, from a block table, in
  about two words a draw at any scale) and :func:`ladder_exceedances` (the noise of a
  lattice release revealed down a ladder of public levels, for releases that only keep
  the coordinates that exceed a data-dependent threshold above them).

A kernel calls them with the generator's ``next_uint64`` and state address and an
int64 handoff record of ``HANDOFF_SLOTS``; when a draw cannot be decided within 63 bits
the sampler returns -1 with its state in the record, the kernel returns to Python
before changing anything, the sampler's ``finish`` completes the draw exactly from the
same generator, and the kernel resumes with that result.

Modules: ``_kernels`` (Numba primitives and the Laplace and Gaussian noise kernel), ``_exact``
(rational and interval arithmetic, the big-integer continuation), ``_tails`` (proven
brackets of tail probabilities), ``_samplers`` (sampler parameters and the draw loop),
``_lattice`` (plans, guarantees and releases), ``_selection`` and
``_selection_kernels`` (selections), ``_buffer`` (noise buffers), ``_process``
(exceedance processes), ``_blocks`` (block tables), ``_ladder`` (ladders of levels).
"""

from ._blocks import GaussianBlocks, plan_blocks
from ._buffer import NoiseBuffer
from ._ladder import LadderDraw, ladder_exceedances
from ._lattice import (
    LATTICE_RESOLUTION_BITS,
    SENSITIVITY_SLACK,
    GaussianLattice,
    LaplaceLattice,
    UnitNoiseLattice,
    check_lattice,
    discrete_gaussian_event,
    gaussian_rho,
    laplace_epsilon,
    laplace_scale_for,
    plan_gaussian,
    plan_laplace,
    plan_unit_gaussian,
    plan_unit_laplace,
    release_gaussian,
    release_laplace,
)
from ._process import ExceedancePlan, plan_exceedance
from ._samplers import (
    discrete_gaussian_sigma2,
    discrete_laplace_scale,
    sample_discrete_gaussian,
    sample_discrete_laplace,
)
from ._selection import (
    ExponentialSelector,
    SelectionLattice,
    plan_selection,
    report_noisy_max,
    sample_exponential_mechanism,
    selection_epsilon,
    selection_scale_for,
)

# isort: split
# Entry points for other Numba kernels (explicit re-exports; see their docstrings).
from ._blocks import block_value as block_value
from ._buffer import noise_take as noise_take
from ._kernels import HANDOFF_SLOTS as HANDOFF_SLOTS
from ._kernels import lattice_key as lattice_key
from ._kernels import lattice_release as lattice_release
from ._process import next_exceedance as next_exceedance
from ._samplers import kernel_source as kernel_source
from ._selection import finish_report_noisy_max as finish_report_noisy_max
from ._selection_bulk import em_invalidate as em_invalidate
from ._selection_kernels import em_select as em_select
from ._selection_kernels import em_set as em_set
from ._selection_kernels import rnm_select as rnm_select

# isort: split
# Internals the tests reach through the package (explicit re-exports).
from ._exact import _exp_neg_interval as _exp_neg_interval
from ._exact import _exp_neg_multiple_interval as _exp_neg_multiple_interval
from ._exact import _finish_noise as _finish_noise
from ._exact import _geometric_table as _geometric_table
from ._exact import _PyBits as _PyBits
from ._kernels import _FB_GAUSS_Y as _FB_GAUSS_Y
from ._kernels import _FB_GEOMETRIC as _FB_GEOMETRIC
from ._kernels import _FB_NOISE as _FB_NOISE
from ._lattice import _to_lattice as _to_lattice
from ._samplers import _gauss_draw_setup as _gauss_draw_setup
from ._samplers import _gaussian_params as _gaussian_params

# Bits of one uniform word when tables are built; tests lower it to make ties with
# table entries frequent and so exercise the exact continuation.
_WORD_BITS = 63

__all__ = [
    "SENSITIVITY_SLACK",
    "LATTICE_RESOLUTION_BITS",
    "sample_discrete_laplace",
    "sample_discrete_gaussian",
    "discrete_laplace_scale",
    "discrete_gaussian_sigma2",
    "laplace_epsilon",
    "laplace_scale_for",
    "gaussian_rho",
    "discrete_gaussian_event",
    "LaplaceLattice",
    "GaussianLattice",
    "plan_laplace",
    "plan_gaussian",
    "check_lattice",
    "release_laplace",
    "release_gaussian",
    "selection_epsilon",
    "selection_scale_for",
    "SelectionLattice",
    "plan_selection",
    "ExponentialSelector",
    "sample_exponential_mechanism",
    "report_noisy_max",
    "NoiseBuffer",
    "UnitNoiseLattice",
    "plan_unit_laplace",
    "plan_unit_gaussian",
    "ExceedancePlan",
    "plan_exceedance",
    "GaussianBlocks",
    "plan_blocks",
    "LadderDraw",
    "ladder_exceedances",
]
