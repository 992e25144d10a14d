# SPDX-License-Identifier: Apache-2.0
"""tidal-console: the REST API (``/api/v1``, OpenAPI at ``/api/v1/openapi.json``), the web
console and monitoring through Prometheus."""
