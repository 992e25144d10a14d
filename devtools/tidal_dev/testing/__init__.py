"""Test support shipped with the package (fixtures and helpers used by the suite)."""
