# SPDX-License-Identifier: Apache-2.0
"""tidal-manager: the admission webhook, the oversell master and the policy reconciler."""
