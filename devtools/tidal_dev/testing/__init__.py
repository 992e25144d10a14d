# SPDX-License-Identifier: Apache-2.0
"""Test support shipped with the package (fixtures and helpers used by the suite)."""
