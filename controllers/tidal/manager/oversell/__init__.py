# SPDX-License-Identifier: Apache-2.0
"""The oversell master: NodeProfile reports -> predicted online peak -> node batch resources."""
