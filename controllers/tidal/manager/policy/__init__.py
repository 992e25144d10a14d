"""The policy reconciler: ColocationPolicy rollout status from what every node reports."""
