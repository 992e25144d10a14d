# SPDX-License-Identifier: Apache-2.0
"""The admission webhook: a pure core that turns an AdmissionReview into an answer, and its edges.

Pure core, one job per module, listed from the bottom layer up:

* ``quantities`` — Kubernetes quantity strings, exactly, to millicores and bytes.
* ``shape`` — typed reads of untrusted JSON, with the path of what is malformed.
* ``podspec`` — the containers of a pod spec and their resources.
* ``batch`` — how a BE container's native cpu/memory become ``kubernetes.io/batch-*``.
* ``rules`` — the admission rule of each QoS level (validation).
* ``patch`` — RFC 6902 operations and JSON Pointer escaping.
* ``mutation`` — what Tidal changes on a pod of each level (a minimal JSON Patch).
* ``workloads`` — which objects are reviewed and where their pod template lives.
* ``decision`` — the answer (`Decision`) and the denial reasons used as metric labels.
* ``context`` — what a review needs besides the request (namespace annotations, the policy).
* ``review`` — the entry point: ``review(admission_review) -> AdmissionReview response``.

The edges (``server``, ``context_cache``, ``configuration``, ``cli``) do the I/O around ``review``.
"""
