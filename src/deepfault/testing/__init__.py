"""Test oracles (literal reference versions of the methods) and the bad-input probe."""
