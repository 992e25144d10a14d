# SPDX-License-Identifier: Apache-2.0
"""The agent's node QoS engine: capability probe, cgroup strategies and watermark eviction.

Strategies are pure (:meth:`Strategy.plan` turns a :class:`NodeState` into desired cgroup file
values); :func:`apply` and :func:`restore` are the only code that writes to the kernel.
"""
