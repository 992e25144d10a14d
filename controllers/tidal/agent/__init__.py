# SPDX-License-Identifier: Apache-2.0
"""tidal-agent: the node-side DaemonSet (usage collector, QoS engine, NRI plugin, capability probe)."""
