"""Test oracles: literal reference versions of the methods.

The bad-input probe is a test helper (``tests/helpers/probe.py``), not part of the package.
"""
