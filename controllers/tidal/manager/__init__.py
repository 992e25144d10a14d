"""tidal-manager: the admission webhook, the oversell master and the policy reconciler."""
