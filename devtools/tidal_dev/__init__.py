# SPDX-License-Identifier: Apache-2.0
"""Tidal's development distribution (`tidal-dev`): the local lab (`tidal_dev.lab`: pinned upstream
builds, PKI, processes, the real node, the image recipe, the pytest plugin) and the helpers the test
suite and benchmarks share (`tidal_dev.testing`). The runtime image never installs it; the
product (`tidal`) never imports it."""
