# Two commands on a fresh machine:  make serve  (the endpoint on localhost)  and  make test  (the
# everyday offline suite; make test-all adds the other environments, as CI runs it).
# Both create/reuse .venv in the repository root and install what they need.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# torchcodec (pyannote.audio 4's file reader) is built for a range of torch releases and says not
# which: pinned with torch (requirements-pyannote4.txt has the table)
TORCH_PINS := torch==2.14.1 torchaudio==2.11.1 torchcodec==0.17.0
# transformers 4.51 (what the Inference Endpoints toolkit image pins), installed beside the main
# environment and put first on PYTHONPATH for the compatibility pass of the tests
COMPAT := .compat-t451
COMPAT_PINS := transformers==4.51.3 'tokenizers>=0.21,<0.22' 'huggingface_hub>=0.30,<1.0'
HOST ?= 127.0.0.1
PORT ?= 8080
# the default Inference Endpoints image, emulated (tests/endpoints_image): its pins from the
# toolkit's setup.py in ../shared, then its entrypoint's `pip install -r requirements.txt`; the other
# transformers releases requirements.txt allows go into small overlays (--target, put first on
# PYTHONPATH) instead of copies of the 6 GB venv: a copy filled CI's disk
TOOLKIT := ../shared/hf-inference-toolkit
IMAGE_VENV := .venv-endpoints
# (transformers 5 cannot run there: it needs torch >= 2.6, and the toolkit itself imports
# transformers.file_utils.is_tf_available, which 5.x removed)
IMAGE_TRANSFORMERS := 4.57.6
# what `pip install transformers==4.57.6` upgrades in the image venv besides transformers
IMAGE_OVERLAY_PINS := 'tokenizers>=0.22,<=0.23.0' 'huggingface_hub>=0.34,<1.0' hf-xet
# the handler's tests, the compatibility checks and the patches, in another environment
VERSION_TESTS := tests/test_endpoint.py tests/test_known_speakers.py tests/test_multichannel.py tests/test_compat.py tests/patches \
	tests/diarization
IMAGE_TESTS := $(VERSION_TESTS) tests/endpoints_image
REAL_MODELS_DIR ?= $(HOME)/.cache/real-models
export REAL_MODELS_DIR

.PHONY: install serve test test-scripts test-all test-compat test-endpoints real-models test-real eval bench clean

$(VENV)/.installed: requirements-pyannote4.txt requirements-test.txt requirements-scripts.txt requirements-ray.txt \
		pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH_PINS)
	$(PY) -m pip install -q -r requirements-pyannote4.txt -r requirements-test.txt -r requirements-scripts.txt \
		-r requirements-ray.txt
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .
	@command -v ffmpeg >/dev/null || { if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ffmpeg >/dev/null) \
		|| echo "warning: could not install ffmpeg (m4a/webm/amr input needs it)"; \
		else echo "warning: ffmpeg not found (m4a/webm/amr input needs it): install it with your package manager"; fi; }
	@test -x /usr/bin/chromium || { if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
		|| echo "warning: could not install chromium (the /live page's browser test skips without it)"; \
		else echo "warning: /usr/bin/chromium not found (the /live page's browser test, tests/live/test_live_page.py," \
		"skips without it): install Debian's chromium package"; fi; }
	@{ command -v espeak-ng && command -v sox; } >/dev/null || { if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq espeak-ng sox >/dev/null) \
		|| echo "warning: could not install espeak-ng and sox (eval's generated dialogues need them)"; \
		else echo "warning: espeak-ng or sox not found (eval's generated dialogues and their test in" \
		"eval/test_eval.py need them): install Debian's espeak-ng and sox packages"; fi; }
	touch $@

$(COMPAT)/.installed: $(VENV)/.installed
	rm -rf $(COMPAT)
	$(PY) -m pip install -q --no-deps --target $(COMPAT) $(COMPAT_PINS)
	touch $@

$(IMAGE_VENV)/.installed: requirements.txt requirements-test.txt tests/endpoints_image/image_venv.py
	rm -rf $(IMAGE_VENV) $(addprefix $(IMAGE_VENV)-t,$(IMAGE_TRANSFORMERS))
	$(PYTHON) tests/endpoints_image/image_venv.py base $(IMAGE_VENV)
	$(PYTHON) tests/endpoints_image/image_venv.py entrypoint $(IMAGE_VENV)
	$(IMAGE_VENV)/bin/python -m pip install -q -r requirements-test.txt
	for v in $(IMAGE_TRANSFORMERS); do $(IMAGE_VENV)/bin/python -m pip install -q --no-cache-dir \
		--no-deps --target $(IMAGE_VENV)-t$$v "transformers==$$v" $(IMAGE_OVERLAY_PINS) || exit 1; done
	touch $@

install: $(VENV)/.installed

# the endpoint on HOST:PORT with the models named by ASR_MODEL / ASSISTANT_MODEL / DIARIZATION_MODEL
serve: $(VENV)/.installed
	$(PY) -m speaker_asr serve --host $(HOST) --port $(PORT)

# the everyday loop: the whole offline suite on tiny random models (tests/ and eval/test_eval.py),
# with the quick smoke runs of the scripts in bench/ and eval/ (tests/scripts/); the checks on the
# real models (marker real) are make test-real
# One pytest worker per core (pytest-xdist), each test file on one worker (its module-scoped
# servers start once), one torch/OpenMP thread per worker: two workers with two threads each on
# two cores spin against each other. The tests spend much of their time starting processes and
# loading models, single-threaded, so the workers overlap where one process would wait.
# Which tests: pytest.ini's default selection (not slow, not heavy, not real).
XDIST := -n auto --dist loadfile
test: $(VENV)/.installed
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(PY) -m pytest -q $(XDIST)

# the tests of half a minute or more each (marker heavy): the scripts' longer smoke runs
# (benchmark.py, diarization_bench.py, profile_cpu.py, gpu_benchmark.py --smoke, word_timestamp_memory.py,
# clustering_bench.py, long_audio.py, reliability/run_all.py and through it the other reliability
# scripts, eval's long part and choose_voice_rule.py) and the longest end-to-end tests (a Ray pool
# with a killed actor, a killed batch run), so that make test stays within 10 minutes on 2 cores
test-scripts: $(VENV)/.installed
	$(PY) -m pytest -q -m heavy

# what CI runs: test and test-scripts, the handler again under transformers 4.51, then the default
# Endpoints image emulated (where ../shared has the toolkit), then the real-model checks (where
# ../shared has the real-models kit; skipped otherwise)
test-all: test test-scripts test-compat test-endpoints test-real

# the handler's tests under transformers 4.51.3 (the default Endpoints image's), beside .venv; every
# test of those files (EVERY_MARK: their real-model check too, which pytest.ini's default leaves out)
EVERY_MARK := -m "not slow"
test-compat: $(VENV)/.installed $(COMPAT)/.installed
	PYTHONPATH=$(COMPAT) EXPECT_TRANSFORMERS=4.51.3 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(PY) -m pytest -q $(XDIST) \
		$(EVERY_MARK) $(VERSION_TESTS) tests/asr/test_quantization.py

# the REAL toolkit webservice (../shared/hf-inference-toolkit) serving handler.py in the image's
# environment: transformers 4.51.3 (the image's), then each of IMAGE_TRANSFORMERS
ifneq ($(wildcard $(TOOLKIT)/setup.py),)
test-endpoints: $(IMAGE_VENV)/.installed real-models
	TOOLKIT_SERVER=1 EXPECT_TRANSFORMERS=4.51.3 $(IMAGE_VENV)/bin/python -m pytest -q $(EVERY_MARK) $(IMAGE_TESTS)
	for v in $(IMAGE_TRANSFORMERS); do TOOLKIT_SERVER=1 EXPECT_TRANSFORMERS=$$v \
		PYTHONPATH=$(IMAGE_VENV)-t$$v $(IMAGE_VENV)/bin/python -m pytest -q $(EVERY_MARK) $(IMAGE_TESTS) || exit 1; done
else
test-endpoints:
	@echo "test-endpoints SKIPPED: $(TOOLKIT) is absent (the Inference Endpoints toolkit's source, for the image emulation)"
endif

# real whisper tiny.en/base and the CAM++ 3.1 pipeline, for the tests marked real and the image
# emulation's two-speaker check (../shared/real-models/build.sh; skipped where ../shared lacks it)
real-models: $(VENV)/.installed
	@if [ -x ../shared/real-models/build.sh ]; then PYTHON=$(PY) ../shared/real-models/build.sh $(REAL_MODELS_DIR); \
	else echo "real-models SKIPPED: ../shared/real-models/build.sh is absent"; fi

test-real: $(VENV)/.installed real-models
	$(PY) -m pytest -q -m real

eval: $(VENV)/.installed
	$(PY) eval/evaluate.py

clean:
	rm -rf $(VENV) $(COMPAT) $(IMAGE_VENV) $(addprefix $(IMAGE_VENV)-t,$(IMAGE_TRANSFORMERS)) .pytest_cache
