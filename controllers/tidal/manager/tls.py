# SPDX-License-Identifier: Apache-2.0
"""A server-side TLS context whose certificate follows its files.

cert-manager, the Ansible role and Kubernetes secret volumes all rotate a webhook's
certificate by replacing the files. `ReloadingTLS.check()` (called periodically)
reloads them into the same SSLContext when their modification time or size changes,
so new connections get the new certificate without a restart. A half-written pair
(key not matching the certificate yet) is skipped and retried on the next check.
"""
from __future__ import annotations

import logging
import os
import ssl
from pathlib import Path

log = logging.getLogger(__name__)


def _fingerprint(*paths: Path) -> tuple:
    out = []
    for path in paths:
        st = os.stat(path)
        out.append((st.st_mtime_ns, st.st_size, st.st_ino))
    return tuple(out)


class ReloadingTLS:
    def __init__(self, cert_file: str | os.PathLike, key_file: str | os.PathLike) -> None:
        self.cert_file, self.key_file = Path(cert_file), Path(key_file)
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self.context.load_cert_chain(self.cert_file, self.key_file)
        self._seen = _fingerprint(self.cert_file, self.key_file)
        self.reloads = 0

    def check(self) -> bool:
        """Reload when the files changed; True when a new certificate was loaded."""
        try:
            current = _fingerprint(self.cert_file, self.key_file)
        except OSError as err:
            log.warning("TLS files unreadable, keeping the loaded certificate: %s", err)
            return False
        if current == self._seen:
            return False
        try:
            self.context.load_cert_chain(self.cert_file, self.key_file)
        except (ssl.SSLError, OSError) as err:
            log.warning("TLS files changed but do not load yet (%s); retrying", err)
            return False
        self._seen = current
        self.reloads += 1
        log.info("reloaded TLS certificate from %s", self.cert_file)
        return True
