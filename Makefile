# fedforget: `make demo` and `make test` set everything up themselves (idempotent).
SHELL := /bin/bash
ROOT := $(shell pwd)
VENV := $(ROOT)/.venv
ACTIVATE := source $(VENV)/bin/activate
DEMO_STORE ?= runs/demo
# 3 groups x 3 sequences (9 chain positions, 25 with 5 x 5) on 2,000 samples, to keep `make demo` short on 2 cores
DEMO_CONFIG ?= method='fedsgt' task='fmnist-cnn' chains.groups=3 chains.budget=3 train-size=2000 test-size=1000 seed=1
PYTEST_ARGS ?=
# pytest-xdist workers for unit + integration (CPU-bound) and for the e2e tests (on heartbeat deadlines)
TEST_WORKERS ?= 3
E2E_WORKERS ?= 2
# CONTAINERS=0 leaves out the compose tests (they then skip and say so); by default `make test` starts a
# Docker engine (installing it as root) and runs them, and a missing engine fails the run
CONTAINERS ?= 1
# `make deploy-up TLS=1 AUTH=1`: TLS on the SuperLink and SuperNode authentication (AUTH implies TLS)
TLS ?= 0
AUTH ?= 0
# `make deploy-up`: each SuperNode trains on its own records in $(DATA)/node-<p> (deploy/data.sh writes them
# once with `fedforget data split`); the ServerApp evaluates on $(DATA)/server. DATA= : the public set instead
DATA ?= .deploy/data
DEPLOY_NODES ?= 3

.PHONY: setup demo test test-fast lint lint-deploy deploy-up deploy-data deploy-down deploy-status bench bench-ops clean-runs docker-e2e

setup:
	@bash tools/setup.sh

# train FedSGT, find and forget one sample (instant, exact), see what is served, verify against a from-scratch
# reference, retrain through Flower, verify again; each step is headed by one line saying what it shows
demo: setup
	@rm -rf $(DEMO_STORE)
	@echo "== 1/7 train FedSGT on Fashion-MNIST through Flower's simulation engine (10 clients)"
	@$(ACTIVATE) && fedforget run --federation local-simulation --store $(DEMO_STORE) --run-config "$(DEMO_CONFIG)"
	@echo "== 2/7 what the store serves: sequences, their active prefixes, artifacts, accuracy"
	@$(ACTIVATE) && fedforget status --store $(DEMO_STORE)
	@echo "== 3/7 find a sample of client 3 (fedforget samples / locate) and forget it: instant, exact, no training"
	@$(ACTIVATE) && sample=$$(fedforget samples --store $(DEMO_STORE) --client 3 --slice 1 --json \
		| python -c "import json, sys; print(json.load(sys.stdin)['slices'][0]['samples'][0])") \
		&& fedforget locate --store $(DEMO_STORE) --sample $$sample && fedforget forget --store $(DEMO_STORE) --sample $$sample
	@echo "== 4/7 what is served now (shorter prefixes, nothing that saw the sample) and its test accuracy"
	@$(ACTIVATE) && fedforget status --store $(DEMO_STORE) && fedforget evaluate --store $(DEMO_STORE)
	@echo "== 5/7 verify: train the from-scratch reference without the sample (in process), compare what is served bit for bit"
	@$(ACTIVATE) && fedforget verify --store $(DEMO_STORE)
	@echo "== 6/7 retrain through Flower: client 3 deletes the sample for good, the invalidated artifacts are rebuilt"
	@$(ACTIVATE) && fedforget retrain --store $(DEMO_STORE) --federation local-simulation
	@echo "== 7/7 verify the retrained store: train the from-scratch reference again, compare bit for bit"
	@$(ACTIVATE) && fedforget verify --store $(DEMO_STORE)

# stop this checkout's managed local SuperLink (by the pid listening on its own port, .flwr/local-superlink.env);
# other checkouts' SuperLinks keep running
.PHONY: superlink-stop
superlink-stop: setup
	@$(ACTIVATE) && python -m fedforget.local_superlink stop

# everything, in tiers (tools/run_tests.sh): ruff; unit + integration in parallel while the container images
# build; the Flower-runtime e2e tests two at a time; the compose tests alone
test: setup
	@TEST_WORKERS=$(TEST_WORKERS) E2E_WORKERS=$(E2E_WORKERS) CONTAINERS=$(CONTAINERS) PYTEST_ARGS="$(PYTEST_ARGS)" \
		bash tools/run_tests.sh

# unit and integration only (no Flower processes, no containers)
test-fast: setup
	@$(ACTIVATE) && python -m pytest -q -n $(TEST_WORKERS) --dist loadscope -m "not e2e" $(PYTEST_ARGS)

lint: setup
	@$(ACTIVATE) && ruff check .

# the compose files (docker compose config, no engine needed) and the Dockerfile (hadolint)
lint-deploy: setup
	@$(ACTIVATE) && python -m pytest -q tests/unit/test_deploy_files.py

deploy-up: setup
	@$(ACTIVATE) && if [ -n "$(DATA)" ]; then bash deploy/data.sh "$(DATA)" $(DEPLOY_NODES); fi \
		&& FEDFORGET_DEPLOY_TLS=$(TLS) FEDFORGET_DEPLOY_AUTH=$(AUTH) FEDFORGET_DEPLOY_DATA="$(DATA)" \
		FEDFORGET_DEPLOY_NODES=$(DEPLOY_NODES) deploy/loopback.sh up

# each SuperNode's own data for the compose topology and `make deploy-up` (deploy/data.sh)
deploy-data: setup
	@$(ACTIVATE) && bash deploy/data.sh "$(DATA)" $(DEPLOY_NODES)

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
		&& python benchmarks/many_clients.py && python benchmarks/registration_cost.py

# measure the figures under docs/results/ again (benchmarks/results.toml): `results` the ones that took under
# 5 min each on 2 cores, `results-all` every one with a command; a line per benchmark
.PHONY: results results-all results-stale
results: setup
	@$(ACTIVATE) && python tools/results_run.py

results-all: setup
	@$(ACTIVATE) && python tools/results_run.py --all

# which figures measured code that changed since (git only); `--write-index` updates docs/results.md
results-stale: setup
	@$(ACTIVATE) && python tools/results_staleness.py

clean-runs:
	rm -rf runs

# docker-compose.yml on a local Docker engine (started here if needed): images built without Docker Hub
# when absent (tools/docker_images.sh), train -> forget -> retrain -> verify, TLS + auth, a killed
# SuperNode, teardown with volumes (tests/e2e/test_docker_compose.py)
docker-e2e: setup
	@bash tools/docker_engine.sh
	@$(ACTIVATE) && bash tools/docker_images.sh
	@$(ACTIVATE) && FEDFORGET_DOCKER_E2E=1 python -m pytest -q -rs tests/e2e/test_docker_compose.py $(PYTEST_ARGS)
