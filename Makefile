# tierd — the front door. `make test` on a fresh machine installs what it needs.
# Everything runs in the project's virtualenv .venv/, filled from the lock
# (requirements/*.lock, written by `make lock`); PYTHON only makes the venv.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
export PYTHONUNBUFFERED := 1

.PHONY: deps run test unit system bench cluster fmt lint typecheck clean lock lock-upgrade

deps:
	PYTHON=$(PYTHON) bash scripts/install-deps.sh

# The broker alone needs only requirements/app.lock (the same versions as the
# test lock): no test tools, no Java, no Docker.
$(VENV)/.tierd-app.stamp: requirements/app.lock pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check --require-hashes --no-deps -r requirements/app.lock
	$(PY) -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
	touch $@

run: $(VENV)/.tierd-app.stamp
	$(PY) -m broker --config deploy/server.properties

# Re-resolve after a pyproject change, keeping the other pins; lock-upgrade
# takes every package to the newest version pyproject allows.
lock:
	bash scripts/lock.sh

lock-upgrade:
	UPGRADE=1 bash scripts/lock.sh

# Two processes: file descriptors the fast tests leave open (about 1,400 log
# files) must not carry into the system tests, where py4j's callback server
# (PySpark's foreachBatch) dies in select() once its socket's fd is >= 1024.
test: deps
	$(PY) -m pytest -q tests; fast=$$?; \
	$(PY) -m pytest -q --durations=15 system_tests; system=$$?; \
	test $$fast -eq 0 && test $$system -eq 0

unit: deps
	$(PY) -m pytest -q tests

system: deps
	$(PY) -m pytest -q system_tests

# Three brokers, ZooKeeper and an S3 endpoint (moto) as processes: the
# compose file's topology without Docker (python -m deploy.launcher).
CLUSTER_DIR ?= ./cluster-data
cluster: deps
	$(PY) -m deploy.launcher --dir $(CLUSTER_DIR) --base-port 19092

bench: deps
	$(PY) -m bench $(BENCH_ARGS)

fmt:
	$(PY) -m ruff format protocol broker storage replication config deploy tests system_tests bench

lint:
	$(PY) -m ruff check protocol broker storage replication config deploy

typecheck:
	$(PY) -m mypy protocol broker storage replication config

clean:
	rm -rf data .pytest_cache .mypy_cache .ruff_cache
