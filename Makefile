# Two entry points for a fresh clone: `make run` and `make test`.
# Each creates .venv and installs the project into it first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test lint bench golden clean

# The hook compiles reader.py, language.py and feeds.py: an edit to them means a new install.
$(BIN)/syndicate: pyproject.toml hatch_build.py src/syndicate/reader.py src/syndicate/language.py src/syndicate/feeds.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

run: $(BIN)/syndicate
	$(BIN)/syndicate run --once

test: $(BIN)/syndicate
	$(BIN)/ruff check
	$(BIN)/pytest

golden: $(BIN)/syndicate
	UPDATE_GOLDEN=1 $(BIN)/pytest

bench: $(BIN)/syndicate
	for b in bench/*.py; do $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) outbox state feeds/*.xml feeds/*.json feeds/*.opml feeds/.*.json feeds/archive
