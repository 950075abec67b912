# tierd — the front door. `make test` on a fresh machine installs what it needs.
PYTHON ?= python3
export PYTHONUNBUFFERED := 1

.PHONY: deps run test unit system bench cluster fmt lint typecheck clean

deps:
	bash scripts/install-deps.sh

run:
	$(PYTHON) -m pip install -q -e . 2>&1 | grep -v -i "warning" || true
	$(PYTHON) -m broker --config deploy/server.properties

test: deps
	$(PYTHON) -m pytest -q tests system_tests

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
