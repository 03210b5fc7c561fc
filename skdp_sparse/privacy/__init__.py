"""Privacy core: mechanisms, accounting, randomness and audits."""

from .accounting import PrivacyAccountant, PrivacyEvent, calibrate_scale
from .mechanisms import (
    ExponentialMechanism,
    GaussianMechanism,
    LaplaceMechanism,
    gaussian_sigma_for_rho,
)

__all__ = [
    "PrivacyAccountant",
    "PrivacyEvent",
    "calibrate_scale",
    "LaplaceMechanism",
    "GaussianMechanism",
    "ExponentialMechanism",
    "gaussian_sigma_for_rho",
]
