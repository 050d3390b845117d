# fedforget: `make demo` and `make test` set everything up themselves (idempotent).
SHELL := /bin/bash
ROOT := $(shell pwd)
VENV := $(ROOT)/.venv
ACTIVATE := source $(VENV)/bin/activate
DEMO_STORE ?= runs/demo
DEMO_CONFIG ?= method='fedsgt' task='fmnist-cnn' chains.groups=5 chains.budget=5 train-size=3000 test-size=1000 seed=1
PYTEST_ARGS ?=
# `make deploy-up TLS=1 AUTH=1`: TLS on the SuperLink and SuperNode authentication (AUTH implies TLS)
TLS ?= 0
AUTH ?= 0

.PHONY: setup demo test test-fast lint lint-deploy deploy-up deploy-down deploy-status bench bench-ops clean-runs docker-e2e

setup:
	@bash tools/setup.sh

# train FedSGT, forget one sample (instant, exact), see what is served, retrain through Flower, verify
demo: setup
	@rm -rf $(DEMO_STORE)
	@$(ACTIVATE) && fedforget run --federation local-simulation --store $(DEMO_STORE) --run-config "$(DEMO_CONFIG)"
	@$(ACTIVATE) && fedforget status --store $(DEMO_STORE)
	@$(ACTIVATE) && fedforget forget --store $(DEMO_STORE) --sample $$(python -c "import json; \
		print(json.load(open('$(DEMO_STORE)/manifest.json'))['partitions']['3'][1][0])")
	@$(ACTIVATE) && fedforget status --store $(DEMO_STORE) && fedforget evaluate --store $(DEMO_STORE)
	@$(ACTIVATE) && fedforget verify --store $(DEMO_STORE)
	@$(ACTIVATE) && fedforget retrain --store $(DEMO_STORE) --federation local-simulation
	@$(ACTIVATE) && fedforget verify --store $(DEMO_STORE)

# stop this checkout's managed local SuperLink (by the pid listening on its own port, .flwr/local-superlink.env);
# other checkouts' SuperLinks keep running
.PHONY: superlink-stop
superlink-stop: setup
	@$(ACTIVATE) && python -m fedforget.local_superlink stop

test: setup
	@$(ACTIVATE) && ruff check . && python -m pytest -q $(PYTEST_ARGS)

test-fast: setup
	@$(ACTIVATE) && python -m pytest -q -m "not e2e" $(PYTEST_ARGS)

lint: setup
	@$(ACTIVATE) && ruff check .

# the compose files (docker compose config, no engine needed) and the Dockerfile (hadolint)
lint-deploy: setup
	@$(ACTIVATE) && python -m pytest -q tests/unit/test_deploy_files.py

deploy-up: setup
	@$(ACTIVATE) && FEDFORGET_DEPLOY_TLS=$(TLS) FEDFORGET_DEPLOY_AUTH=$(AUTH) deploy/loopback.sh up

deploy-down:
	@bash deploy/loopback.sh down

deploy-status:
	@bash deploy/loopback.sh status

bench: setup
	@$(ACTIVATE) && python benchmarks/runtime_overhead.py && python benchmarks/unlearning_service.py \
		&& python benchmarks/forget_scale.py && python benchmarks/fedshard_bench.py && python benchmarks/safe_bench.py

# crash campaign, concurrent forget throughput, TLS cost, node recovery, 10 to 1,000 clients
bench-ops: setup
	@$(ACTIVATE) && python benchmarks/crash_campaign.py && python benchmarks/ops_concurrency.py \
		&& python benchmarks/ops_tls_cost.py && python benchmarks/ops_node_recovery.py \
		&& python benchmarks/many_clients.py

clean-runs:
	rm -rf runs

# docker-compose.yml on a local Docker engine (started here if needed): images built without Docker Hub
# when absent (tools/docker_images.sh), train -> forget -> retrain -> verify, TLS + auth, a killed
# SuperNode, teardown with volumes (tests/e2e/test_docker_compose.py)
docker-e2e: setup
	@bash tools/docker_engine.sh
	@$(ACTIVATE) && bash tools/docker_images.sh
	@$(ACTIVATE) && FEDFORGET_DOCKER_E2E=1 python -m pytest -q -rs tests/e2e/test_docker_compose.py $(PYTEST_ARGS)
