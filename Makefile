# emailmw: the two commands of the quick start are `make demo` and `make test`.
# Both create .venv when it is missing and install the project into it.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-dev

.PHONY: demo test lint typecheck unit bench clean venv

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@touch $(STAMP)

venv: $(STAMP)

lint: $(STAMP)
	$(VENV)/bin/ruff check emailmw tests examples bench
	$(VENV)/bin/ruff format --check emailmw tests examples bench

typecheck: $(STAMP)
	$(VENV)/bin/mypy --strict emailmw

unit: $(STAMP)
	$(PY) -m pytest -o faulthandler_timeout=300

test: lint typecheck unit

demo: $(STAMP)
	@for example in examples/intraprocess_pub_sub.py examples/intraprocess_service.py \
	    examples/wait_set.py; do \
	  echo "== $$example"; $(PY) $$example || exit 1; done

bench: $(STAMP)
	$(PY) bench/intraprocess.py --json bench/results/intraprocess.json

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .hypothesis
