# emailmw: the two commands of the quick start are `make demo` and `make test`.
# Both create .venv when it is missing and install the project into it.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test lint typecheck unit bench clean venv mailserver browser

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev,spark,bag,compress]'
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

# Debian's Postfix + Dovecot for the integration tests: installed when missing (as root;
# otherwise this says what to install). The tests start one server for the whole run.
mailserver: $(STAMP)
	$(PY) -m emailmw.testing.mailserver install

# Debian's chromium, in which a test opens the report: installed when missing (as root)
browser:
	@command -v chromium >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

unit: $(STAMP) mailserver browser
	$(PY) -m pytest -o faulthandler_timeout=300

test: lint typecheck unit

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
	$(PY) bench/bag.py --json bench/results/bag.json
	$(PY) bench/batching.py --json bench/results/batching.json
	$(PY) bench/quota.py --json bench/results/quota.json
	$(PY) bench/cli.py --json bench/results/cli.json
	$(PY) bench/servers.py --json bench/results/servers.json
	$(PY) bench/pipeline.py --messages 200000 --format maildir --repeat 3 --rerun --json bench/results/pipeline_maildir.json
	$(PY) bench/pipeline.py --messages 2000000 --format mbox --repeat 3 --json bench/results/pipeline_mbox.json

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .hypothesis
