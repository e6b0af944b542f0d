# make test: create .venv if needed, install replaybuf with every extra (pinned), run the suite
# and every python block of README.md and docs/*.md (Sybil: conftest.py, docs/contributing.md).
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

# CleanRL pins gymnasium 0.29.1: a venv holding it and CleanRL 1.2.0 (+ TensorBoard, which
# its scripts log to) that takes everything else from .venv through a .pth file (listed
# after its own site-packages, so its gymnasium wins). replaybuf.sb3's tests and CleanRL's
# dqn.py and dqn_atari.py with the one-line switch run there (tests/test_sb3_cleanrl.py).
GYM029 := .venv-gym029
GYM029_PINS := gymnasium==0.29.1 cleanrl==1.2.0 tensorboard==2.21.0 tensorboard-data-server==0.7.2 markdown==3.10.2 werkzeug==3.1.5

$(GYM029)/.installed: $(STAMP)
	test -x $(GYM029)/bin/python || $(PYTHON) -m venv $(GYM029)
	$(GYM029)/bin/python -c "import site, sys; open(site.getsitepackages()[0] + '/replaybuf-main-venv.pth', 'w').write(sys.argv[1] + '\n')" "$$($(PY) -c 'import site; print(site.getsitepackages()[0])')"
	$(GYM029)/bin/python -m pip install -q --no-deps --ignore-requires-python $(GYM029_PINS)
	touch $@

# rl-zoo3 2.9.2 cannot join .venv: its pytablewriter~=1.2 needs typepy[datetime], which
# needs python-dateutil<3, and .venv holds python-dateutil 4.0.0. A venv like .venv-gym029
# holds rl-zoo3 and what it pulls (pinned), the rest from .venv; tests/test_sb3_zoo.py runs there.
ZOO := .venv-zoo
ZOO_PINS := rl_zoo3==2.9.2 sb3_contrib==2.9.2 sb3-team-hf-integration==3.2 huggingface_hub==2.4.0 hf-xet==1.8.0 \
	httpx2==2.16.2 httpcore2==2.16.2 h11==0.16.0 anyio==4.16.0 truststore==0.10.5 optuna==5.0.0 alembic==1.20.1 \
	SQLAlchemy==2.1.9 Mako==1.4.3 colorlog==6.12.0 Shimmy==2.0.1 wasabi==1.1.3 moviepy==1.0.3 decorator==4.4.2 \
	ImageIO==2.38.1 imageio-ffmpeg==0.8.1 proglog==0.1.12 pytablewriter==1.2.1 DataProperty==1.1.1 \
	mbstrdecoder==1.1.5 chardet==6.0.0.post1 pathvalidate==3.3.1 tabledata==1.3.5 tcolorpy==0.1.7 typepy==1.3.5 \
	python-dateutil==2.9.0.post0 pytz==2026.6

$(ZOO)/.installed: $(STAMP)
	test -x $(ZOO)/bin/python || $(PYTHON) -m venv $(ZOO)
	$(ZOO)/bin/python -c "import site, sys; open(site.getsitepackages()[0] + '/replaybuf-main-venv.pth', 'w').write(sys.argv[1] + '\n')" "$$($(PY) -c 'import site; print(site.getsitepackages()[0])')"
	$(ZOO)/bin/python -m pip install -q --no-deps $(ZOO_PINS)
	touch $@

# RLlib (ray[rllib] 2.60.0) pins gymnasium 1.2.2 and needs dm-tree: a venv like .venv-gym029
# holds those and what else ray[rllib] pulls (pinned), the rest (ray itself) from .venv;
# replaybuf.rllib's tests (tests/test_rllib*.py) and docs/rllib.md's examples run there.
RLLIB := .venv-rllib
RLLIB_PINS := gymnasium==1.2.2 dm-tree==0.1.10 ormsgpack==1.13.1 pyarrow==26.0.1 tensorboardX==2.6.5

$(RLLIB)/.installed: $(STAMP)
	test -x $(RLLIB)/bin/python || $(PYTHON) -m venv $(RLLIB)
	$(RLLIB)/bin/python -c "import site, sys; open(site.getsitepackages()[0] + '/replaybuf-main-venv.pth', 'w').write(sys.argv[1] + '\n')" "$$($(PY) -c 'import site; print(site.getsitepackages()[0])')"
	$(RLLIB)/bin/python -m pip install -q --no-deps $(RLLIB_PINS)
	touch $@

# make test also runs TF-Agents 0.19.0's own test files and example scripts
# (tests/tf_agents_suite) with replaybuf's classes swapped in, in .venv-tf-agents, and
# SB3's (tests/sb3_suite) with replaybuf.sb3's. Every run is strict about skips: one whose
# reason is not in tests/skip_gate.py's ALLOWED (a missing extra, a broken import) fails it.
test: export REPLAYBUF_STRICT_SKIPS := 1
test: $(STAMP) $(TFA)/.installed $(SB3_SDIST) $(GYM029)/.installed $(ZOO)/.installed $(RLLIB)/.installed
	$(PY) -m pytest -q -p no:cacheprovider
	$(TFA)/bin/python -m pytest -q -c tests/tf_agents_suite/pytest.ini tests/tf_agents_suite
	$(PY) -m pytest -q -c tests/sb3_suite/pytest.ini tests/sb3_suite
	PYTHONPATH=src $(GYM029)/bin/python -m pytest -q -p no:cacheprovider tests/test_sb3.py tests/test_sb3_next_obs.py tests/test_sb3_cleanrl.py
	PYTHONPATH=src $(ZOO)/bin/python -m pytest -q -p no:cacheprovider tests/test_sb3_zoo.py
	PYTHONPATH=src $(RLLIB)/bin/python -m pytest -q -p no:cacheprovider tests/test_rllib*.py docs/rllib.md

# make lint: ruff's checks and its formatter (configured in pyproject.toml) over the code,
# tests, benchmarks and examples.
lint: $(STAMP)
	$(PY) -m ruff check src tests bench examples
	$(PY) -m ruff format --check src tests bench examples

# make test-tf215: the TensorFlow tests and the conformance suite on TensorFlow 2.15 (the
# version TF-Agents pins) with NumPy 1.26, in their own venv (no torch; ~500 MB download).
# sybil: the repository root's conftest.py (the docs as tests) imports it.
TF215 := .venv-tf215
TF215_PINS := tensorflow-cpu==2.15.1 numpy==1.26.4 optree==0.20.0 pytest==9.2.0 hypothesis==6.170.15 pytest-timeout==2.4.0 sybil==10.1.0

$(TF215)/.installed: pyproject.toml
	test -x $(TF215)/bin/python || $(PYTHON) -m venv $(TF215)
	$(TF215)/bin/python -m pip install -q $(TF215_PINS)
	$(TF215)/bin/python -m pip install -q --no-deps -e .
	touch $@

test-tf215: $(TF215)/.installed
	$(TF215)/bin/python -m pytest -q -p no:cacheprovider tests/test_tf_*.py tests/test_conformance.py

demo: $(STAMP)
	$(VENV)/bin/replaybuf demo

# make bench: every suite at full size (python -m bench SUITE ... runs some; bench/README.md);
# writes bench/results/SUITE.json, then docs/benchmarks.md, its plots (docs/plots/) and the README's
# table and plot from them.
bench: $(STAMP)
	$(PY) -m bench

bench-quick: $(STAMP)
	$(PY) -m bench --quick

clean:
	rm -rf $(VENV) $(TFA) $(GYM029) $(ZOO) $(RLLIB) build src/*.egg-info
