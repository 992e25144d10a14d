# SPDX-License-Identifier: Apache-2.0
"""Putting a test's ColocationPolicy spec back while controllers write the same object."""
from __future__ import annotations

import time

from kubernetes.client.exceptions import ApiException


def put_spec(custom, policy: tuple, spec: dict, timeout: float = 30) -> dict:
    """Replace the spec of the ColocationPolicy ``policy`` (the custom object's group, version,
    plural and name) with ``spec``, its metadata and status kept. A deployed manager writes the
    object too (its status, after every spec change), so the read-then-replace can meet 409
    Conflict: it is then read again and retried until ``timeout`` seconds have passed."""
    deadline = time.monotonic() + timeout
    while True:
        current = custom.get_cluster_custom_object(*policy)
        current["spec"] = spec
        try:
            return custom.replace_cluster_custom_object(*policy, current)
        except ApiException as err:
            if err.status != 409 or time.monotonic() > deadline:
                raise
            time.sleep(0.1)  # back off a little before the next read: the writer is mid-update
