# tierd — the front door. `make test` on a fresh machine installs what it needs.
PYTHON ?= python3
export PYTHONUNBUFFERED := 1

.PHONY: deps run test unit system bench cluster fmt lint typecheck clean

deps:
	bash scripts/install-deps.sh

run:
	$(PYTHON) -m pip install -q -e . 2>&1 | grep -v -i "warning" || true
	$(PYTHON) -m broker --config deploy/server.properties

# Two processes: file descriptors the fast tests leave open (about 1,400 log
# files) must not carry into the system tests, where py4j's callback server
# (PySpark's foreachBatch) dies in select() once its socket's fd is >= 1024.
test: deps
	$(PYTHON) -m pytest -q tests; fast=$$?; \
	$(PYTHON) -m pytest -q --durations=15 system_tests; system=$$?; \
	test $$fast -eq 0 && test $$system -eq 0

unit:
	$(PYTHON) -m pytest -q tests

system:
	$(PYTHON) -m pytest -q system_tests

# Three brokers, ZooKeeper and an S3 endpoint (moto) as processes: the
# compose file's topology without Docker (python -m deploy.launcher).
CLUSTER_DIR ?= ./cluster-data
cluster: deps
	$(PYTHON) -m deploy.launcher --dir $(CLUSTER_DIR) --base-port 19092

bench: deps
	$(PYTHON) -m bench $(BENCH_ARGS)

fmt:
	$(PYTHON) -m ruff format protocol broker storage replication config deploy tests system_tests bench

lint:
	$(PYTHON) -m ruff check protocol broker storage replication config deploy

typecheck:
	$(PYTHON) -m mypy protocol broker storage replication config

clean:
	rm -rf data .pytest_cache .mypy_cache .ruff_cache
