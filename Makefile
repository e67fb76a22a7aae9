# Self-bootstrapping: every target creates .venv and installs the project when needed.
# Python caches its bytecode in the checkout's __pycache__ (git ignores it), whatever the environment says:
# make test starts hundreds of Python processes (plugins, suites, hooks), and without the cache each one
# compiles what it imports (make test took a third more CPU: 18.5 against 13.9 CPU-minutes here)
unexport PYTHONDONTWRITEBYTECODE
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
REPORT_DIR ?= reports
# pytest exit 5 = "no tests collected": not a failure for a target whose selection may be empty.
PYTEST_OK5 = rc=$$?; if [ $$rc -eq 5 ]; then echo "(no tests collected)"; exit 0; fi; exit $$rc

.PHONY: venv conformance test load protos clean help
help:
	@echo "make conformance   run the conformance suite against the bundled fake-GPU plugin (emulator backend)"
	@echo "make test          the project's own tests (what CI runs)"
	@echo "make load          the load scenarios (pytest -m load), full profile; smoke: make load ARGS=\"--load-profile smoke\""
	@echo "make protos        regenerate kubeletapi/ stubs from the newest release's k8s.io/kubelet module (needs go)"
	@echo "make kube-bins     build the kubelet and the sample device plugin of KUBE_VERSION into bin/KUBE_VERSION/ (Go module"
	@echo "                   proxy; KUBE_VERSION: a tag of fixtures/kube_versions.py, default the newest: $(KUBE_VERSION))"
	@echo "make dra-driver    build the upstream DRA test driver (k8s.io/kubernetes/test/e2e/dra/test-driver) of KUBE_VERSION"
	@echo "make node-deps     apt-get install what the node backend needs: containerd, runc, CNI plugins, busybox-static (root);"
	@echo "                   and chromium (make node loads the HTML report in it)"
	@echo "make node          node-backend and differential tests on a real kubelet (root; installs nothing: see node-deps)"
	@echo "make cluster-bins  build kube-apiserver, kube-controller-manager, kube-scheduler of KUBE_VERSION, etcd 3.6 and kwokctl"
	@echo "make cluster       local one-node cluster tests: kwokctl control plane + the real kubelet (root; see node-deps)"
	@echo "make cluster-smoke the cluster tests of the presubmit tier; make cluster-periodic: the rest"
	@echo "make presubmit     the presubmit CI tier (what .ci/run runs, under 40 min); ARGS=\"--only 'make node'\" picks stages"
	@echo "make periodic      the periodic tier: the rest of the cluster suite, bench, long load (reports/periodic.md)"
	@echo "make bin/kindcheck build the strict kind-config decoder (sigs.k8s.io/kind v0.33.0; tests/test_kind_configs.py)"
	@echo "make bin/kind      build kind v0.33.0 into bin/ (fixtures/cluster/kind.py uses kind from PATH first)"
	@echo "make bin/actionlint build actionlint (lints ci-templates/github-actions.yml; tests/test_ci_templates.py)"
	@echo "make bin/ghz       build ghz v0.120.0 into bin/ (the native load generator: --load-generator ghz)"
	@echo "make bin/dp-floor  build the Go no-op device-plugin server (tools/dp-floor): the harness floor of make bench"
	@echo "make bin/mock-nvml/libnvidia-ml.so.1  build our mock NVML library (tools/mock-nvml): NVML without a GPU"
	@echo "make bin/nvidia-device-plugin  build NVIDIA's device plugin (tools/nvidia-device-plugin pins it): a test subject"
	@echo "make third-party   the catalogue on third-party code built from the Go module proxy (cgo): NVIDIA's device plugin"
	@echo "                   (root) and our NVML plugin, both through mock NVML (builds the two above)"
	@echo "make bin/runc-wrapper build runc without the capabilities the host lacks (tools/runc-wrapper): Docker for kind here"
	@echo "make kind-deps     apt-get install Debian's docker.io and debootstrap (root; Docker's service is not started)"
	@echo "make kind          the kind tests: a private Docker Engine with the runc wrapper (root; see kind-deps)"
	@echo "make kind-smoke    the kind tests of the presubmit tier; make kind-periodic: the rest"
	@echo "make kind-rootfs   debootstrap kind's base root filesystem into bin/kind-base (kind-deps first)"
	@echo "make dra           DRA checks: the fake-GPU DRA driver, its defect matrix, the upstream test driver (make cluster-bins)"
	@echo "make bench         Allocate bursts (fake GPU, sample plugin, NVML on fake NVML, harness floor), admission"
	@echo "                   per pod emulator vs real kubelet, catalogue on 4 vs 4096 devices: reports/bench/"

venv: $(STAMP)
$(STAMP): pyproject.toml setup.py
	@command -v $(PYTHON) >/dev/null || { echo "make: $(PYTHON) not found; install Python 3.11+ or run 'make PYTHON=python3.x'"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

# two xdist workers (same verdicts and report as serial; a real-kubelet backend runs serially anyway);
# worksteal: each worker starts on its half of the run order (the longest check and the observation windows
# on one, the rest on the other) and takes from the other's when it runs dry
CONFORMANCE_WORKERS ?= 2
conformance: $(STAMP)
	@mkdir -p $(REPORT_DIR)
	$(PY) -m pytest conformance -p no:randomly -n $(CONFORMANCE_WORKERS) --dist worksteal --report $(REPORT_DIR)/conformance.json $(ARGS); $(PYTEST_OK5)

# pytest's 25 slowest tests at the end of every target CI runs: where the time goes, in every log
DURATIONS ?= --durations=25
# make test is one pytest run on 4 workers: the project's tests and the defect matrix (-m matrix: one
# whole-catalogue run per defect) together, so the matrix's CPU fills what the other tests leave while
# they wait (run one after the other, 2 workers then 4, they took 285 + 392 s here; together 580 s);
# worksteal: a worker that runs dry takes pending tests from the others (no long tail on one worker).
# TEST_MARKS is pyproject.toml's default selection (a -m given here replaces it).
TEST_MARKS     = not load and not node and not differential and not cluster and not dra and not kind and not third_party
TEST_WORKERS   ?= 4
test: $(STAMP)
	$(PY) -m pytest tests -n $(TEST_WORKERS) --dist worksteal -m "$(TEST_MARKS)" $(DURATIONS) $(ARGS); $(PYTEST_OK5)

# LOAD_PROFILE=smoke|full|PATH, or ARGS="--load-profile smoke": given twice, pytest takes the last one.
LOAD_PROFILE ?= full
load: $(STAMP)
	@mkdir -p $(REPORT_DIR)
	$(PY) -m pytest -m load --load-profile $(LOAD_PROFILE) --load-out=$(REPORT_DIR)/load $(ARGS); $(PYTEST_OK5)

protos: $(STAMP)
	$(PY) -m dpconform.commands.protos

clean:
	rm -rf $(VENV) $(REPORT_DIR) *.egg-info

# node backend
# Real kubelet + the upstream sample device plugin of one Kubernetes release, built from that release's
# wrapper module tools/kube/<tag>/ (go.mod generated by tools/kube/gen-replaces.sh TAG) into bin/<tag>/.
# The releases are the table in fixtures/kube_versions.py; KUBE_VERSION=<tag> picks one (default: the newest).
# Rebuilt only when the release's go.mod/go.sum are newer.
GO            ?= $(shell command -v go 2>/dev/null || echo /usr/local/go/bin/go)
# asked once, at its first use (every recipe exports it; make conformance paid ~1 s for a Python per use)
KUBE_VERSION  ?= $(eval KUBE_VERSION := $$(shell python3 fixtures/kube_versions.py default))$(KUBE_VERSION)
KBIN           = bin/$(KUBE_VERSION)
# the release the tests a target runs judge against (fixtures/kube_versions.py reads it)
export DPCONFORM_KUBE_VERSION = $(KUBE_VERSION)
KUBE_VERSION_PKGS = k8s.io/component-base/version k8s.io/client-go/pkg/version
# $(call kube_build,TAG,PACKAGE,OUTPUT): one program of release TAG, its version stamped as a release build
kube_build = mkdir -p $(dir $(3)) && cd tools/kube/$(1) && CGO_ENABLED=0 $(GO) build -trimpath -buildvcs=false -ldflags '-s -w \
	$(foreach p,$(KUBE_VERSION_PKGS),-X $(p).gitVersion=$(1) -X $(p).gitMajor=1 \
	-X $(p).gitMinor=$(word 2,$(subst ., ,$(1))) -X $(p).gitTreeState=clean -X $(p).buildDate=1970-01-01T00:00:00Z)' \
	-o $(CURDIR)/$(3) $(2)

.PHONY: kube-bins dra-driver node node-deps
kube-bins: $(KBIN)/kubelet $(KBIN)/sample-device-plugin
# The upstream DRA test driver (a kubelet plugin that publishes ResourceSlices and writes CDI specs).
dra-driver: $(KBIN)/dra-test-driver

tools/kube/%/tools.go: tools/kube/tools.go
	cp $< $@

# tools.go is copied in (order-only: a fresh copy does not make the built programs stale)
KUBE_MODULE = tools/kube/%/go.mod tools/kube/%/go.sum | tools/kube/%/tools.go
bin/%/kubelet: $(KUBE_MODULE)
	$(call kube_build,$*,k8s.io/kubernetes/cmd/kubelet,$@)
bin/%/sample-device-plugin: $(KUBE_MODULE)
	$(call kube_build,$*,k8s.io/kubernetes/test/images/sample-device-plugin,$@)
bin/%/dra-test-driver: $(KUBE_MODULE)
	$(call kube_build,$*,k8s.io/kubernetes/test/e2e/dra/test-driver,$@)
bin/%/kube-apiserver: $(KUBE_MODULE)
	$(call kube_build,$*,k8s.io/kubernetes/cmd/kube-apiserver,$@)
bin/%/kube-controller-manager: $(KUBE_MODULE)
	$(call kube_build,$*,k8s.io/kubernetes/cmd/kube-controller-manager,$@)
bin/%/kube-scheduler: $(KUBE_MODULE)
	$(call kube_build,$*,k8s.io/kubernetes/cmd/kube-scheduler,$@)
# kind's offline node image (fixtures/cluster/kind_node.py): kubeadm and kubectl beside the kubelet
bin/%/kubeadm: $(KUBE_MODULE)
	$(call kube_build,$*,k8s.io/kubernetes/cmd/kubeadm,$@)
bin/%/kubectl: $(KUBE_MODULE)
	$(call kube_build,$*,k8s.io/kubernetes/cmd/kubectl,$@)

# The only target that installs system packages (fixtures/node/backend.py APT_PACKAGES, with apt-get; root).
node-deps: $(STAMP)
	$(PY) -c 'import sys; from dpconform.fixtures.node.backend import install_node_deps; sys.exit(install_node_deps())'

# then the fidelity table's rows against what this run observed (fixtures/node/fidelity.py), on a whole run only.
# NODE_SKIP: a -k expression of tests left out (CI's older releases leave out what does not depend on the kubelet)
node: $(STAMP) kube-bins bin/ghz bin/dp-floor bin/nvidia-device-plugin bin/mock-nvml/libnvidia-ml.so.1
	$(PY) -m pytest tests -m "(node or differential) and not cluster" -n 0 -p no:randomly $(DURATIONS) $(if $(NODE_SKIP),-k "not ($(NODE_SKIP))") $(ARGS); $(PYTEST_OK5)
	@if [ -z "$(ARGS)" ]; then $(PY) -m dpconform.fixtures.node.fidelity --results reports/fidelity-node.json; fi

# local cluster (fixtures/cluster/local.py): a control plane from binaries, started by kwokctl, that the
# real kubelet joins. Cached like the kubelet: each binary is rebuilt only when its wrapper module's
# go.mod/go.sum are newer (tools/kube/<tag>: the same module as the kubelet; tools/etcd; tools/kwok).
KWOK_VERSION = v0.8.0
CLUSTER_BINS = $(KBIN)/kube-apiserver $(KBIN)/kube-controller-manager $(KBIN)/kube-scheduler bin/etcd bin/kwokctl
GOBUILD      = CGO_ENABLED=0 $(GO) build -trimpath -buildvcs=false
# with cgo (NVML's header declares functions deprecated): NVIDIA's device plugin, mock NVML
CGO_GOBUILD  = CGO_ENABLED=1 CGO_CFLAGS="-O2 -Wno-deprecated-declarations" $(GO) build -trimpath -buildvcs=false

.PHONY: cluster-bins cluster
cluster-bins: $(CLUSTER_BINS)

# go.etcd.io/etcd/server/v3's root package is etcd's main (its go.mod has replaces: no `go install @v`)
bin/etcd: tools/etcd/go.mod tools/etcd/go.sum
	@mkdir -p bin
	cd tools/etcd && $(GOBUILD) -ldflags '-s -w' -o ../../$@ go.etcd.io/etcd/server/v3

bin/kwokctl: tools/kwok/go.mod tools/kwok/go.sum
	@mkdir -p bin
	cd tools/kwok && $(GOBUILD) -ldflags '-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$(KWOK_VERSION:v%=%)' -o ../../$@ sigs.k8s.io/kwok/cmd/kwokctl

# The whole cluster suite (make cluster) is two parts: the smoke the presubmit tier runs (.ci/run: one local
# cluster, the catalogue with the CLU checks, the sample plugin, its DaemonSet lifecycle) and the rest, which
# the periodic tier runs (make periodic): the same tests never run in both tiers.
CLUSTER_PYTEST = $(PY) -m pytest tests -n 0 -p no:randomly $(DURATIONS)
cluster: $(STAMP) kube-bins cluster-bins
	$(CLUSTER_PYTEST) -m cluster $(ARGS); $(PYTEST_OK5)
	@if [ -z "$(ARGS)" ]; then $(PY) -m dpconform.fixtures.node.fidelity --results reports/fidelity-local.json; fi

.PHONY: cluster-smoke cluster-periodic
cluster-smoke: $(STAMP) kube-bins cluster-bins
	$(CLUSTER_PYTEST) -m "cluster and smoke" $(ARGS); $(PYTEST_OK5)

cluster-periodic: $(STAMP) kube-bins cluster-bins
	$(CLUSTER_PYTEST) -m "cluster and not smoke" $(ARGS); $(PYTEST_OK5)
	@if [ -z "$(ARGS)" ]; then $(PY) -m dpconform.fixtures.node.fidelity --results reports/fidelity-local.json; fi

# kind provider (fixtures/cluster/kind.py) and its configs (kind-configs/): one wrapper module,
# tools/kindcheck, pins sigs.k8s.io/kind v0.33.0 for both binaries; rebuilt only when go.mod/go.sum change.
KIND_GOBUILD = cd tools/kindcheck && CGO_ENABLED=0 $(GO) build -trimpath -buildvcs=false -ldflags '-s -w'

bin/kindcheck: tools/kindcheck/go.mod tools/kindcheck/go.sum tools/kindcheck/main.go
	@mkdir -p bin
	$(KIND_GOBUILD) -o ../../$@ .

# ghz (tools/ghz pins github.com/bojand/ghz v0.120.0): the native load generator for plugin_allocate_burst
# (--load-generator ghz) and make bench; rebuilt only when go.mod/go.sum change.
bin/ghz: tools/ghz/go.mod tools/ghz/go.sum
	@mkdir -p bin
	cd tools/ghz && $(GOBUILD) -ldflags '-s -w' -o ../../$@ github.com/bojand/ghz/cmd/ghz

# dp-floor (tools/dp-floor, our own main.go on the newest release's k8s.io/kubelet): the no-op device-plugin server the
# harness floor runs against (scenarios/noop_plugin.py; make bench requires it); rebuilt when its sources change.
bin/dp-floor: tools/dp-floor/go.mod tools/dp-floor/go.sum tools/dp-floor/main.go
	@mkdir -p bin
	cd tools/dp-floor && $(GOBUILD) -ldflags '-s -w' -o ../../$@ .

# mock-nvml (tools/mock-nvml, our own over go-nvml's mock NVML servers): a libnvidia-ml.so.1 for hosts without a
# GPU (cgo, c-shared); a process with LD_LIBRARY_PATH=bin/mock-nvml loads it as NVML (pynvml, go-nvml)
MOCK_NVML = bin/mock-nvml/libnvidia-ml.so.1
$(MOCK_NVML): tools/mock-nvml/go.mod tools/mock-nvml/go.sum tools/mock-nvml/gen_stubs.py $(wildcard tools/mock-nvml/*.go)
	@mkdir -p bin/mock-nvml
	cd tools/mock-nvml && $(GO) mod download github.com/NVIDIA/go-nvml && \
		python3 gen_stubs.py "$$($(GO) list -m -f '{{.Dir}}' github.com/NVIDIA/go-nvml)/pkg/nvml/nvml.h" \
		zz_stubs.c *.go && $(CGO_GOBUILD) -buildmode=c-shared -ldflags '-s -w' -o ../../$@ .
	@rm -f bin/mock-nvml/*.h

# The tests of third-party code (marker third_party): built here from the Go module proxy with cgo, a few minutes
# of build on a cold cache, so not part of make test (the presubmit builds them beside make test, then runs this).
.PHONY: third-party
third-party: $(STAMP) bin/nvidia-device-plugin $(MOCK_NVML)
	$(PY) -m pytest tests -n 2 -m "third_party and not node" $(DURATIONS) $(ARGS); $(PYTEST_OK5)

# NVIDIA's device plugin (tools/nvidia-device-plugin/go.mod pins its version): a third-party test subject (cgo: it
# loads libnvidia-ml.so.1 when it runs; with $(MOCK_NVML)'s dir on LD_LIBRARY_PATH it needs no GPU)
bin/nvidia-device-plugin: tools/nvidia-device-plugin/go.mod tools/nvidia-device-plugin/go.sum
	@mkdir -p bin
	cd tools/nvidia-device-plugin && $(CGO_GOBUILD) -ldflags '-s -w' -o ../../$@ github.com/NVIDIA/k8s-device-plugin/cmd/nvidia-device-plugin

# crictl (tools/crictl/go.mod pins sigs.k8s.io/cri-tools): the CRI client of kind's offline base image
bin/crictl: tools/crictl/go.mod tools/crictl/go.sum
	@mkdir -p bin
	cd tools/crictl && $(GOBUILD) -ldflags '-s -w' -o ../../$@ sigs.k8s.io/cri-tools/cmd/crictl

# runc-wrapper (tools/runc-wrapper, our own main.go, no dependencies): runc without the capabilities the host's
# bounding set lacks, for a Docker that must run privileged containers (kind's nodes) on such a host
bin/runc-wrapper: tools/runc-wrapper/go.mod tools/runc-wrapper/main.go
	@mkdir -p bin
	cd tools/runc-wrapper && $(GOBUILD) -ldflags '-s -w' -o ../../$@ .

# DRA: the DRA checks against the fake-GPU DRA driver and its defects, and the upstream test driver
# (an API server from bin/: etcd + kube-apiserver started by kwokctl; no root)
.PHONY: dra
dra: $(STAMP) cluster-bins dra-driver
	$(PY) -m pytest tests -m dra -n 2 -p no:randomly $(DURATIONS) $(ARGS); $(PYTEST_OK5)

# kind on this host: Debian's Docker with the runc wrapper as its runtime (fixtures/cluster/engine.py)
.PHONY: kind-deps kind
kind-deps: $(STAMP)
	$(PY) -m dpconform.fixtures.cluster.engine deps

# the binaries kind's offline images and the kind backend need (the CI builds them beside make node)
KIND_BINS = bin/kind bin/runc-wrapper bin/crictl $(KBIN)/kubeadm $(KBIN)/kubectl
.PHONY: kind-bins kind-rootfs kind-smoke kind-periodic
kind-bins: $(KIND_BINS)

# the base image's Debian root filesystem (debootstrap, about a minute), cached in bin/kind-base
kind-rootfs: $(STAMP)
	$(PY) -m dpconform.fixtures.cluster.kind_base rootfs

# make kind is two parts, as make cluster: the smoke the presubmit tier runs (a two-worker cluster, a part of
# the catalogue) and the rest, which the periodic tier runs (the whole catalogue beside local, the engine,
# the base image on its own)
KIND_PYTEST = $(PY) -m pytest tests -n 0 -p no:randomly $(DURATIONS)
kind: $(STAMP) kube-bins cluster-bins kind-bins
	$(KIND_PYTEST) -m kind $(ARGS); $(PYTEST_OK5)
kind-smoke: $(STAMP) kube-bins cluster-bins kind-bins
	$(KIND_PYTEST) -m "kind and smoke" $(ARGS); $(PYTEST_OK5)
kind-periodic: $(STAMP) kube-bins cluster-bins kind-bins
	$(KIND_PYTEST) -m "kind and not smoke" $(ARGS); $(PYTEST_OK5)

# The two CI tiers (.ci/tiers.py): presubmit is .ci/run; periodic is everything it does not run at full cost
.PHONY: presubmit periodic
presubmit:
	$(PYTHON) .ci/tiers.py presubmit $(ARGS)
periodic:
	$(PYTHON) .ci/tiers.py periodic $(ARGS)

.PHONY: bench
bench: $(STAMP) bin/ghz bin/dp-floor kube-bins
	$(PY) -m dpconform.scenarios.bench --out $(REPORT_DIR)/bench $(ARGS)

# CI templates for vendors (ci-templates/): linted with actionlint, built from the Go module proxy.
ACTIONLINT_VERSION = v1.7.12
bin/actionlint:
	@mkdir -p bin
	GOBIN=$(CURDIR)/bin CGO_ENABLED=0 $(GO) install -trimpath -ldflags '-s -w' github.com/rhysd/actionlint/cmd/actionlint@$(ACTIONLINT_VERSION)

bin/kind: tools/kindcheck/go.mod tools/kindcheck/go.sum
	@mkdir -p bin
	$(KIND_GOBUILD) -o ../../$@ sigs.k8s.io/kind
