# Copyright: Tidal maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Connection options of every Tidal cluster module (plugins/module_utils/kube.py)."""

from __future__ import annotations


class ModuleDocFragment:

    DOCUMENTATION = r"""
options:
  kubeconfig:
    description:
      - Path to a kubeconfig file.
      - Falls back to E(K8S_AUTH_KUBECONFIG), then E(KUBECONFIG), C(~/.kube/config) and finally the in-cluster
        service account.
    type: path
  context:
    description: The kubeconfig context to use; falls back to E(K8S_AUTH_CONTEXT).
    type: str
  host:
    description: URL of the API server, instead of the one in the kubeconfig; falls back to E(K8S_AUTH_HOST).
    type: str
  api_key:
    description: A bearer token for the API server; falls back to E(K8S_AUTH_API_KEY).
    type: str
  validate_certs:
    description: Whether to verify the API server's certificate; falls back to E(K8S_AUTH_VERIFY_SSL).
    type: bool
    aliases: [verify_ssl]
  ca_cert:
    description: CA bundle that signs the API server's certificate; falls back to E(K8S_AUTH_SSL_CA_CERT).
    type: path
    aliases: [ssl_ca_cert]
  client_cert:
    description: Client certificate for the API server; falls back to E(K8S_AUTH_CERT_FILE).
    type: path
    aliases: [cert_file]
  client_key:
    description: Key of O(client_cert); falls back to E(K8S_AUTH_KEY_FILE).
    type: path
    aliases: [key_file]
requirements:
  - python >= 3.9
  - kubernetes >= 24.2.0
notes:
  - Run the module where the API server is reachable, usually C(localhost) or with C(delegate_to).
"""
