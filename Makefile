# Two commands on a fresh machine:  make serve  (the endpoint on localhost)  and  make test.
# Both create/reuse .venv in the repository root and install what they need.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_PINS := torch==2.14.1 torchaudio==2.11.1
# transformers 4.51 (what the Inference Endpoints toolkit image pins), installed beside the main
# environment and put first on PYTHONPATH for the compatibility pass of the tests
COMPAT := .compat-t451
COMPAT_PINS := transformers==4.51.3 'tokenizers>=0.21,<0.22' 'huggingface_hub>=0.30,<1.0'
HOST ?= 127.0.0.1
PORT ?= 8080

.PHONY: install serve test test-fast test-compat test-real eval bench clean

$(VENV)/.installed: requirements.txt requirements-test.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH_PINS)
	$(PY) -m pip install -q -r requirements.txt -r requirements-test.txt
	@command -v ffmpeg >/dev/null || { if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ffmpeg >/dev/null) \
		|| echo "warning: could not install ffmpeg (m4a/webm/amr input needs it)"; \
		else echo "warning: ffmpeg not found (m4a/webm/amr input needs it): install it with your package manager"; fi; }
	touch $@

$(COMPAT)/.installed: $(VENV)/.installed
	rm -rf $(COMPAT)
	$(PY) -m pip install -q --no-deps --target $(COMPAT) $(COMPAT_PINS)
	touch $@

install: $(VENV)/.installed

# the endpoint on HOST:PORT with the models named by ASR_MODEL / ASSISTANT_MODEL / DIARIZATION_MODEL
serve: $(VENV)/.installed
	$(PY) -m cli serve --host $(HOST) --port $(PORT)

# the whole offline suite, then the handler again under transformers 4.51
test: $(VENV)/.installed $(COMPAT)/.installed
	$(PY) -m pytest -q
	PYTHONPATH=$(COMPAT) EXPECT_TRANSFORMERS=4.51.3 $(PY) -m pytest -q tests/test_handler.py tests/test_compat.py tests/test_speedups.py tests/test_int8.py tests/test_lean_decoder.py tests/test_chunk_windows.py

test-real: $(VENV)/.installed
	$(PY) -m pytest -q -m real

eval: $(VENV)/.installed
	$(PY) eval/evaluate.py

clean:
	rm -rf $(VENV) $(COMPAT) .pytest_cache
