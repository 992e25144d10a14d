# SPDX-License-Identifier: Apache-2.0
"""Protobuf code generated from NRI's ``pkg/api/api.proto`` (see source.py for the version) and
from ttrpc.proto; regenerate with regenerate.sh, never edit by hand."""
