# Two entry points for a fresh clone: `make run` and `make test`.
# Each creates .venv and installs the project into it first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test lint bench golden clean

# The hook compiles the modules pyproject.toml lists ([tool.syndicate] compiled): an edit to one
# runs as Python until the next install, which `make test` does, so the suite tests them compiled.
COMPILED := $(shell $(PYTHON) -c "import tomllib; print(' '.join('src/syndicate/' + m.replace('.', '/') + '.py' for m in tomllib.load(open('pyproject.toml', 'rb'))['tool']['syndicate']['compiled']))")

$(BIN)/syndicate: pyproject.toml hatch_build.py $(COMPILED)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,dev,postgres,scale,docs]'
	touch $@

run: $(BIN)/syndicate
	$(BIN)/syndicate run --once

test: $(BIN)/syndicate
	$(BIN)/ruff check
	$(BIN)/ruff format --check --quiet
	$(BIN)/mypy
	$(BIN)/mkdocs build --strict --site-dir site
	$(BIN)/pytest

golden: $(BIN)/syndicate
	UPDATE_GOLDEN=1 $(BIN)/pytest

bench: $(BIN)/syndicate
	# bench/scale.py needs PostgreSQL and takes minutes: run it by hand
	for b in bench/*.py; do [ $$b = bench/scale.py ] || $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) outbox state feeds/*.xml feeds/*.json feeds/*.opml feeds/.*.json feeds/archive
