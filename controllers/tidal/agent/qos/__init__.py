# SPDX-License-Identifier: Apache-2.0
"""The agent's node QoS engine: capability probe, cgroup strategies and watermark eviction.

Every node feature has one shape (:class:`~.feature.Feature`: ``enabled``, a pure ``plan`` and
``undo`` returning intents); :mod:`.registry` lists them in order, :class:`~.engine.QoSEngine`
loops over them each round, and the executor (:mod:`tidal.agent.executor`) is the only code
that writes to the kernel, with one restore journal.
"""
