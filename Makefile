# emailmw: the two commands of the quick start are `make demo` and `make test`.
# Both create .venv when it is missing and install the project into it (the venv's own pip,
# no byte-compiling at install: a module is compiled when first imported; 8 s less of the
# 51 s the install takes, most of it pyspark's jars).

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test lint typecheck unit soak bench clean venv mailserver browser

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --no-compile \
		-e '.[dev,spark,bag,compress]'
	@touch $(STAMP)

venv: $(STAMP)

# ruff, and the layer contract of docs/design.md (import-linter, pyproject.toml): an
# upward import fails it, also one inside a function or under TYPE_CHECKING
lint: $(STAMP)
	$(VENV)/bin/ruff check emailmw tests examples bench
	$(VENV)/bin/ruff format --check emailmw tests examples bench
	$(VENV)/bin/lint-imports

typecheck: $(STAMP)
	$(VENV)/bin/mypy --strict emailmw

# Debian's Postfix + Dovecot, and Cyrus and Courier-IMAP, for the integration tests:
# installed when missing (as root; otherwise this says what to install). Each test worker
# starts its own servers.
mailserver: $(STAMP)
	$(PY) -m emailmw.testing.mailserver install --server all

# Debian's chromium, in which a test opens the report: installed when missing (as root)
browser:
	@command -v chromium >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

# The suite runs in parallel (pytest-xdist): its tests mostly wait on mail servers and
# processes, so it runs more workers than cores; each worker starts its own mail servers on
# free ports. PYTEST_WORKERS=0 runs it in one process; RANDOM_ORDER=1 shuffles the order
# (pytest-randomly: the seed is printed at the top; PYTEST_ARGS=--randomly-seed=N repeats it).
# SQUEEZE=N runs it beside N processes that keep the CPU busy (emailmw.testing.squeeze).
PYTEST_WORKERS ?= 4
RANDOM_ORDER ?= 0
SQUEEZE ?= 0
PYTEST_ARGS ?=
SQUEEZED = $(if $(filter-out 0,$(SQUEEZE)),$(PY) -m emailmw.testing.squeeze --hogs $(SQUEEZE) --)
unit: $(STAMP) mailserver browser
	$(SQUEEZED) $(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadgroup --durations=25 \
		$(if $(filter 1,$(RANDOM_ORDER)),,-p no:randomly) $(PYTEST_ARGS)

# The long checks under a CPU squeeze (one busy process per core beside them): the delivery
# groups over the real server, their in-process protocol tests and the combination matrix;
# then the fleet (bench/fleet.py: three federated sites, twelve processes, faults on a
# schedule) for FLEET_MINUTES, failing when it lost, repeated silently, hung or dropped
FLEET_MINUTES ?= 20
soak: $(STAMP) mailserver
	EMAILMW_SIM_SEEDS=2000 $(PY) -m emailmw.testing.squeeze -- $(PY) -m pytest -n 2 -p no:randomly \
		tests/test_groups.py tests/test_group_simulation.py tests/email/test_delivery_modes.py \
		tests/email/test_composition.py tests/email/test_matrix.py $(PYTEST_ARGS)
	$(PY) bench/fleet.py --minutes $(FLEET_MINUTES) --squeeze --check --json bench/results/fleet.json

# ruff and mypy, while Spark's class-data archive is recorded beside them when this
# installation has none (tests/spark_archive.py: the suite's JVMs start from it), then the tests
test: $(STAMP) mailserver browser
	@$(PY) -m tests.spark_archive & warm=$$!; \
	$(MAKE) --no-print-directory lint typecheck || { kill $$warm; exit 1; }; \
	wait $$warm; \
	$(MAKE) --no-print-directory unit

# talker, listener and a service as separate processes over the local mail server
# (intraprocess, with a line saying why, when no server can be had), then the Spark report
demo: $(STAMP)
	$(PY) examples/demo.py --out demo-out

bench: $(STAMP)
	$(PY) bench/intraprocess.py --json bench/results/intraprocess.json
	$(PY) bench/email_latency.py --json bench/results/email_latency.json
	$(PY) bench/reliability.py --json bench/results/reliability.json
	$(PY) bench/security.py --json bench/results/security.json
	$(PY) bench/gateway.py --json bench/results/gateway.json
	$(PY) bench/delivery_modes.py --json bench/results/delivery_modes.json
	$(PY) bench/group_fence.py --json bench/results/group_fence.json
	$(PY) bench/bag.py --json bench/results/bag.json
	$(PY) bench/batching.py --json bench/results/batching.json
	$(PY) bench/quota.py --json bench/results/quota.json
	$(PY) bench/connections.py --json bench/results/connections.json
	$(PY) bench/cli.py --json bench/results/cli.json
	$(PY) bench/servers.py --json bench/results/servers.json
	$(PY) bench/pipeline.py --messages 200000 --format maildir --repeat 3 --rerun --json bench/results/pipeline_maildir.json
	$(PY) bench/pipeline.py --messages 2000000 --format mbox --repeat 3 --json bench/results/pipeline_mbox.json

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .hypothesis
