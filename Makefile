# make test: create .venv if needed, install replaybuf with every extra (pinned), run the suite.
# make demo: the main job (train DQN on CartPole from the buffer).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: test lint test-tf215 demo bench bench-quick install clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e '.[all]'
	touch $(STAMP)

install: $(STAMP)

# The TF-Agents venv: TensorFlow 2.15.1 + tf-agents 0.19.0 and what it pins, frozen in
# tests/tf_agents_suite/requirements.txt (no torch; ~600 MB to download once).
TFA := .venv-tf-agents
TFA_REQUIREMENTS := tests/tf_agents_suite/requirements.txt

$(TFA)/.installed: pyproject.toml $(TFA_REQUIREMENTS)
	test -x $(TFA)/bin/python || $(PYTHON) -m venv $(TFA)
	$(TFA)/bin/python -m pip install -q -r $(TFA_REQUIREMENTS)
	$(TFA)/bin/python -m pip install -q --no-deps -e .
	touch $@

# Stable-Baselines3 2.9.2's own test files, unpacked from its sdist (pip download) into a
# gitignored folder; tests/sb3_suite/suite.py says which run and which classes are swapped.
SB3_SDIST := tests/sb3_suite/sdist/.unpacked

$(SB3_SDIST): tests/sb3_suite/suite.py tests/sb3_suite/fetch.py $(STAMP)
	$(PY) tests/sb3_suite/fetch.py

# make test also runs TF-Agents 0.19.0's own test files and example scripts
# (tests/tf_agents_suite) with replaybuf's classes swapped in, in .venv-tf-agents, and
# SB3's (tests/sb3_suite) with replaybuf.sb3's.
test: $(STAMP) $(TFA)/.installed $(SB3_SDIST)
	$(PY) -m pytest -q -p no:cacheprovider
	$(TFA)/bin/python -m pytest -q -c tests/tf_agents_suite/pytest.ini tests/tf_agents_suite
	$(PY) -m pytest -q -c tests/sb3_suite/pytest.ini tests/sb3_suite

# make lint: ruff's checks and its formatter (configured in pyproject.toml) over the code,
# tests, benchmarks and examples.
lint: $(STAMP)
	$(PY) -m ruff check src tests bench examples
	$(PY) -m ruff format --check src tests bench examples

# make test-tf215: the TensorFlow tests and the conformance suite on TensorFlow 2.15 (the
# version TF-Agents pins) with NumPy 1.26, in their own venv (no torch; ~500 MB download).
TF215 := .venv-tf215
TF215_PINS := tensorflow-cpu==2.15.1 numpy==1.26.4 optree==0.20.0 pytest==9.2.0 hypothesis==6.170.15 pytest-timeout==2.4.0

$(TF215)/.installed: pyproject.toml
	test -x $(TF215)/bin/python || $(PYTHON) -m venv $(TF215)
	$(TF215)/bin/python -m pip install -q $(TF215_PINS)
	$(TF215)/bin/python -m pip install -q --no-deps -e .
	touch $@

test-tf215: $(TF215)/.installed
	$(TF215)/bin/python -m pytest -q -p no:cacheprovider tests/test_tf_*.py tests/test_conformance.py

demo: $(STAMP)
	$(VENV)/bin/replaybuf demo

bench: $(STAMP)
	$(PY) bench/run.py

bench-quick: $(STAMP)
	$(PY) bench/run.py --quick

clean:
	rm -rf $(VENV) $(TFA) build src/*.egg-info
