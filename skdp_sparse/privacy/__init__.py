"""Privacy core: mechanisms, accounting, randomness and audits."""

from .accounting import PrivacyAccountant, PrivacyEvent, calibrate_scale
from .mechanisms import ExponentialMechanism, GaussianMechanism, LaplaceMechanism

__all__ = [
    "PrivacyAccountant",
    "PrivacyEvent",
    "calibrate_scale",
    "LaplaceMechanism",
    "GaussianMechanism",
    "ExponentialMechanism",
]
