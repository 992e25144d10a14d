# SPDX-License-Identifier: Apache-2.0
"""Tidal: online/offline workload colocation for Kubernetes.

Layers (tests/unit/test_layering.py keeps them): the contract every part agrees on
(`tidal.api`), the one Kubernetes client (`tidal.kube`), shared libraries (`tidal.predict`,
`tidal.metrics`), and the components (`tidal.manager`, `tidal.agent`, `tidal.console`), which
import the layers below them and never each other. The lab and the test helpers are a separate
distribution (`tidal_dev`, under devtools/) that the runtime image does not install.
"""

__version__ = "0.1.0"
