# SPDX-License-Identifier: Apache-2.0
"""Tidal: online/offline workload colocation for Kubernetes.

The package holds the shared model (`tidal.api.qos`, `tidal.api.policy`), the controllers
(tidal-manager, tidal-agent, tidal-console) and the local lab (`tidal.lab`).
"""

__version__ = "0.1.0"
