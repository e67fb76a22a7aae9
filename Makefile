# Self-bootstrapping: every target creates .venv and installs the project when needed.
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
	@echo "make load          the load scenarios (pytest -m load), full profile"
	@echo "make protos        regenerate kubeletapi/ stubs from the pinned k8s.io/kubelet module (needs go)"

venv: $(STAMP)
$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "make: $(PYTHON) not found; install Python 3.11+ or run 'make PYTHON=python3.x'"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

conformance: $(STAMP)
	@mkdir -p $(REPORT_DIR)
	$(PY) -m pytest conformance -p no:randomly --report $(REPORT_DIR)/conformance.json $(ARGS); $(PYTEST_OK5)

test: $(STAMP)
	$(PY) -m pytest tests -n 2 $(ARGS); $(PYTEST_OK5)

load: $(STAMP)
	@mkdir -p $(REPORT_DIR)
	$(PY) -m pytest scenarios -m load --load-profile full $(ARGS); $(PYTEST_OK5)

protos: $(STAMP)
	$(PY) -m kubeletapi.generate

clean:
	rm -rf $(VENV) $(REPORT_DIR) *.egg-info
