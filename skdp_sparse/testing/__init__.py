"""Helpers for tests, audits and benchmarks (not needed to fit models)."""
