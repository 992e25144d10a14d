# Tidal — the two README commands:
#   make test   install everything needed on a fresh machine, build the lab, run the whole suite
#   make site   ansible-playbook playbooks/site.yml against the default inventory (the lab)
# and, after changing a source of generated files (tidal/api, ...): make generate
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Debian packages the suite needs; later issues append theirs here.
DEBIAN_PACKAGES ?= prometheus
# tidal-console: headless browser tests drive Debian's chromium; node/npm build the web UI.
DEBIAN_PACKAGES += chromium nodejs
# NRI plugin: its containerd test (tests/nri) runs containers with Debian's runc.
DEBIAN_PACKAGES += runc
# Egress bandwidth of BE pods: its real test shapes veths with tc and measures with iperf3.
DEBIAN_PACKAGES += iperf3 iproute2
# The lab's real node: Debian's CNI plugins (bridge, host-local, portmap), iptables for
# kube-proxy and the kubelet, conntrack for kube-proxy's clean-up of UDP flows.
DEBIAN_PACKAGES += containernetworking-plugins iptables conntrack
# The controllers' image (make image, tests/packaging): a Debian root filesystem made by mmdebstrap.
DEBIAN_PACKAGES += mmdebstrap
PYTEST_ARGS ?=

.PHONY: test site venv debian-packages lab-build lab-up lab-down lab-status unit clean generate

venv: $(BIN)/.installed
$(BIN)/.installed: pyproject.toml devtools/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	# the product with its test tools, and the development distribution (the lab, test helpers)
	$(BIN)/pip install --quiet -e '.[test]' -e ./devtools
	touch $@

# Installs only what is missing; needs root (or sudo) the first time.
debian-packages:
	@missing=""; for p in $(DEBIAN_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  sudo=""; [ "$$(id -u)" = 0 ] || sudo=sudo; \
	  $$sudo apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq --no-install-recommends $$missing; \
	fi

lab-build: venv
	$(BIN)/tidal lab build

# Ansible: the collections of requirements.yml (unpacked from the pinned `ansible` release) and
# this checkout as tidal.colocation, in .venv/collections (ansible.cfg's first collections path).
.PHONY: collections
collections: $(VENV)/collections/.installed
$(VENV)/collections/.installed: requirements.yml tests/ansible/install_collections.py $(BIN)/.installed
	$(BIN)/python tests/ansible/install_collections.py
	touch $@

# The image is built before pytest (an install step, like the lab's binaries): built inside the
# first test that deploys Tidal, a cold build on a busy machine counted against that test's timeout.
test: venv debian-packages lab-build console-web collections image udevadm
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# udev's rules engine for the disk_queue role's rule (tests/ansible/test_disk_queue_udev.py):
# udevadm of Debian's udev, extracted into ~/.cache/tidal/lab/udev, not installed (the package would
# start a udev daemon on this machine).
.PHONY: udevadm
udevadm: venv
	$(BIN)/python -m tidal_dev.testing.udev

# The flake hunt (issue 15, not part of `make test`): every lab, fault and NRI test FLAKE_RUNS
# times, each run a pytest session of its own (on a clean lab of its own unless $TIDAL_LAB_DIR
# names a running one); prints each test's pass rate, then a JSON line. FLAKE_TESTS narrows it;
# FLAKE_BUDGET (seconds) ends it on time with fewer runs; FLAKE_KEEP keeps the JUnit reports.
FLAKE_RUNS ?= 10
FLAKE_TESTS ?= tests/lab tests/faults tests/nri
FLAKE_BUDGET ?=
FLAKE_KEEP ?=
.PHONY: flake-hunt
flake-hunt: venv debian-packages lab-build console-web collections image
	$(BIN)/python -m tidal_dev.testing.flake_hunt --runs $(FLAKE_RUNS) \
		$(if $(FLAKE_BUDGET),--budget $(FLAKE_BUDGET)) $(if $(FLAKE_KEEP),--keep $(FLAKE_KEEP)) \
		$(FLAKE_TESTS) -- $(PYTEST_ARGS)

unit: venv collections
	$(BIN)/python -m pytest tests/unit $(PYTEST_ARGS)

# Rewrites every generated file (the CRDs, the collection's copies, ...): each hack/generate_*.py
# writes its own; `python hack/generate_X.py --check` only reports stale files, as
# tests/unit/test_generated.py does. Generated files are committed, so `make test` never runs this.
generate: venv collections
	@set -e; for generator in hack/generate_*.py; do $(BIN)/python "$$generator"; done

site: venv debian-packages collections
	$(BIN)/ansible-playbook playbooks/site.yml

lab-up: venv debian-packages
	$(BIN)/tidal lab up
lab-down: venv
	$(BIN)/tidal lab down
lab-status: venv
	$(BIN)/tidal lab status

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis

# Benchmarks print JSON (last line) and compare against a baseline measured in the same run.
.PHONY: bench-admission
bench-admission: venv
	$(MAKE) debian-packages DEBIAN_PACKAGES=wrk
	$(BIN)/python bench/admission.py

.PHONY: bench-oversell
bench-oversell: venv debian-packages lab-build
	$(BIN)/python bench/oversell.py

# nginx from Debian: its package's service is never started here (servers listen on loopback only).
.PHONY: bench-isolation
bench-isolation: venv debian-packages lab-build
	$(MAKE) debian-packages DEBIAN_PACKAGES="nginx-light stress-ng"
	$(BIN)/python bench/isolation.py $(BENCH_ARGS)

# The scheduler's part of bench-isolation, with cgroups and two small C programs (gcc) only.
.PHONY: bench-sched-probe
bench-sched-probe: venv debian-packages
	$(MAKE) debian-packages DEBIAN_PACKAGES=gcc
	$(BIN)/python bench/sched_probe.py $(BENCH_ARGS)

# An online service whose latency depends on memory (nginx serving a file set from page cache) next
# to a memory-hungry BE job inside a 6 GiB memory budget standing for the node; ~10 min, and about
# 11 GiB of scratch files under /var/tmp, deleted at the end.
.PHONY: bench-memory
bench-memory: venv debian-packages lab-build
	$(MAKE) debian-packages DEBIAN_PACKAGES="nginx-light"
	$(BIN)/python bench/memory.py $(BENCH_ARGS)

.PHONY: bench-agent
bench-agent: venv debian-packages lab-build
	$(BIN)/python bench/agent.py $(BENCH_ARGS)

.PHONY: bench-policy
bench-policy: venv debian-packages lab-build
	$(BIN)/python bench/policy.py $(BENCH_ARGS)

# Oversell predictors (tidal.predict) on the shared public traces, as in its README: Azure 2019
# strict and lenient, Alibaba 2018 strict, converted into a temporary directory (one trace = one
# node) and evaluated per node and pooled over them; ~10 s. PREDICT_TRACES: where the traces are.
PREDICT_TRACES ?= $(or $(TIDAL_TRACES_DIR),../shared/data/traces)
# the three converted traces in a temporary directory, the recipe's working directory
define PREDICT_CONVERTED
	set -eo pipefail; t="$(abspath $(PREDICT_TRACES))"; tidal="$(CURDIR)/$(BIN)/tidal"; \
	d=$$(mktemp -d); trap 'rm -rf "$$d"' EXIT; cd "$$d"; \
	$$tidal predict convert-azure --cpu "$$t/azure2019_20vms_cpu_5min.csv.gz" --meta "$$t/azure2019_20vms_meta.csv" --variant strict -o azure_strict.csv; \
	$$tidal predict convert-azure --cpu "$$t/azure2019_20vms_cpu_5min.csv.gz" --meta "$$t/azure2019_20vms_meta.csv" --variant lenient -o azure_lenient.csv; \
	$$tidal predict convert-alibaba --usage "$$t/alibaba2018_machine_usage_head_16machines.csv.gz" --meta "$$t/alibaba2018_machine_meta_full.csv.gz" --variant strict -o alibaba_strict.csv
endef
.PHONY: bench-predict bench-predict-bound bench-predict-agent-window bench-predict-placements
bench-predict: venv
	@$(PREDICT_CONVERTED); \
	$$tidal predict evaluate --trace . --json $(BENCH_ARGS) | "$(CURDIR)/$(BIN)/python" -c 'import json, sys; print(json.dumps(json.load(sys.stdin)))'

# Issue 18: what a linear model of the rules' statistics could reclaim, fitted in hindsight
# (bench/predict_bound.py), on the same three traces; ~1 min.
bench-predict-bound: venv
	@$(PREDICT_CONVERTED); \
	"$(CURDIR)/$(BIN)/python" "$(CURDIR)/bench/predict_bound.py" --trace . $(BENCH_ARGS)

# Issue 18's held-back shape (10 VMs per node) from the shared Azure trace: the 20 VMs placed on
# two nodes in 20 shuffled orders, strict and lenient, 1 d and 2 h warm-up; ~6 min.
bench-predict-placements: venv
	"$(CURDIR)/$(BIN)/python" "$(CURDIR)/bench/predict_placements.py" --traces "$(abspath $(PREDICT_TRACES))" $(BENCH_ARGS)

# The default predictor as the agent runs it (rebuilt on its 14-day window at every step) against
# the evaluator (the whole history), on the same decision points; about 15 minutes.
bench-predict-agent-window: venv
	@$(PREDICT_CONVERTED); \
	"$(CURDIR)/$(BIN)/python" "$(CURDIR)/bench/predict_agent_window.py" --trace azure_strict.csv \
		--trace azure_lenient.csv --trace alibaba_strict.csv $(BENCH_ARGS)

# Advanced node features on this machine's cgroups (root): CPU burst latency, PSI reaction time.
.PHONY: bench-burst bench-psi bench-block-io
bench-burst: venv
	$(BIN)/python bench/burst.py $(BENCH_ARGS)
bench-psi: venv
	$(BIN)/python bench/psi.py $(BENCH_ARGS)
bench-block-io: venv debian-packages lab-build
	$(BIN)/python bench/block_io.py $(BENCH_ARGS)

# NRI plugin: the runtime harness (NRI's pkg/adaptation, pinned in tests/nri/harness/go.mod),
# built with the local Go toolchain and cached under ~/.cache/tidal/nri/<nri-version>/.
# Test 2's containerd, shim, ctr and CRI client come from tests/nri/cri/go.mod, cached under
# ~/.cache/tidal/nri/containerd-<version>/ (the tests build both on first use).
.PHONY: nri-harness nri-containerd bench-nri
nri-harness: venv
	$(BIN)/python -c "import sys; sys.path.insert(0, 'tests/nri'); from nri_harness import build_harness; print(build_harness())"
nri-containerd: venv
	$(BIN)/python -c "import sys; sys.path.insert(0, 'tests/nri'); from containerd_env import build_binaries; print(build_binaries())"
bench-nri: venv
	$(BIN)/python bench/nri.py

# The web console of tidal-console: `npm ci` (committed lockfile) + esbuild into
# ~/.cache/tidal/lab/console-web/<hash of the sources>; a no-op when that build exists.
.PHONY: console-web
console-web: venv debian-packages
	$(BIN)/tidal-console build-web

.PHONY: bench-console
bench-console: venv debian-packages lab-build
	$(BIN)/python bench/console.py

# The controllers' container image without Docker or a registry: mmdebstrap (Debian packages) +
# wheels from PyPI + the web console, as an OCI archive in ~/.cache/tidal/lab/image/<hash of the
# inputs>/ (rebuilt only when they change); Containerfile builds the same image with an engine.
.PHONY: image
image: venv debian-packages console-web
	$(BIN)/python -m tidal_dev.lab.image
