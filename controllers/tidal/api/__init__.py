# SPDX-License-Identifier: Apache-2.0
"""The contract every component agrees on (DESIGN.md): names, the QoS model, the custom resources'
types, quantities and a pod's batch amounts. Imports nothing else of Tidal."""
