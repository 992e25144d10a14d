# SPDX-License-Identifier: Apache-2.0
"""The usage collector: node and pod usage from cgroups and /proc, summarised for NodeProfile.

One job per module: ``cgroups`` (where a pod's cgroup is), ``readers`` (parsing the kernel's
files), ``rates`` (counters to cores), ``histogram`` (decaying histograms and window aggregates)
and ``sampler`` (one sampling step tying them together). Kubernetes API access lives elsewhere.
"""
