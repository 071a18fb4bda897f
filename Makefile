# nmt: `make demo` runs the whole job on Multi30k; `make test` runs the test suite.
# Both create .venv and install the package on first use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
MIRROR ?= $(wildcard ../shared/corpora/multi30k)
CORPUS := corpora/multi30k
WORK   ?= work/demo
DEMO_TIME ?= 10m
SRC ?= en
TGT ?= de
export NMT_CORPUS_MIRROR ?= $(abspath $(MIRROR))

.PHONY: venv test test-fast demo lint bench fetch clean browser

$(STAMP): setup.cfg pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -c constraints.txt -e '.[torch,dev,ct2,serve,hub]'
	touch $(STAMP)

venv: $(STAMP)

# The page test drives a real headless Chromium; install Debian's when missing and we can (root + apt).
browser:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
	  { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	    (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver) \
	      >/dev/null 2>&1 && echo "installed chromium and chromium-driver"; } || \
	  echo "note: chromium/chromedriver not installed: the browser test will be skipped"

test: $(STAMP) browser
	$(BIN)/python -m pytest -q -n 2 --dist loadfile

# The tests not marked slow (no browser, torchrun, venv installs or multi-minute training): under a
# minute, held by failing any of them that takes over 5 s (a slower one is marked slow).
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 --dist loadfile -m "not slow" --max-test-seconds 5

lint: $(STAMP)
	$(BIN)/ruff check nmt scripts tests
	$(BIN)/ruff format --check nmt scripts tests
	$(BIN)/mypy

fetch: $(STAMP)
	$(BIN)/python scripts/fetch_corpus.py multi30k --dest $(CORPUS) $(if $(MIRROR),--mirror $(MIRROR))

demo: fetch
	bash scripts/demo.sh

bench: fetch
	$(BIN)/python scripts/bench_preprocess.py
	$(BIN)/python scripts/bench_model.py
	$(BIN)/python scripts/bench_train.py
	$(BIN)/python scripts/bench_length.py --precision fp32,bf16 --json work/bench/length.json --plot work/bench/length.png
	$(BIN)/python scripts/bench_translate.py $(if $(wildcard $(WORK)/model/checkpoints/best.safetensors),-m $(WORK)/model)
	$(BIN)/python scripts/bench_pretrained.py --json work/bench/pretrained.json

clean:
	rm -rf work build dist *.egg-info .pytest_cache
