"""Helpers shared by every part of the package: validation, randomness, warnings."""
