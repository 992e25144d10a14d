# SPDX-License-Identifier: Apache-2.0
"""tidal-agent's NRI plugin: QoS resources applied by containerd as containers are created.

Modules, outermost first: :mod:`.plugin` (registration, events, reconnect), :mod:`.ttrpc`
(containerd's RPC framing), :mod:`.mux` (NRI's multiplexed connection), :mod:`.decisions`
(pure: what each container gets), :mod:`.api` (protobuf code generated from NRI's api.proto).
"""
