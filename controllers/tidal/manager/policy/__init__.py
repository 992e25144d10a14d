# SPDX-License-Identifier: Apache-2.0
"""The policy reconciler: ColocationPolicy rollout status from what every node reports."""
