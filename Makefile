# Loom: `make run` sets everything up and runs the main job; `make test` sets up and runs all tests.
BUILD ?= build
JOBS ?= $(shell nproc)
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# Debian packages the engine builds against (DESIGN.md: real dependencies, from the registries).
APT_PACKAGES := cmake ninja-build g++ make libcli11-dev nlohmann-json3-dev libyaml-cpp-dev libfmt-dev \
                libgtest-dev libgmock-dev libbenchmark-dev chromium ccache \
                pkg-config coinor-libcbc-dev libz3-dev zlib1g-dev libssl-dev \
                libonnx-dev libprotobuf-dev libmimalloc-dev clang-19 libclang-rt-19-dev llvm-19
# The main job: plan GPT-3 1.3B on one DGX-A100 with Megatron's 3-D parallelism, simulate it and write the
# report (the summary names build/run/report.html).
# ccache (Debian) keeps rebuilds of a fresh clone short; CCACHE_BASEDIR makes clones share the cache.
CCACHE_LAUNCHER = $(if $(shell command -v ccache),-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
export CCACHE_BASEDIR := $(CURDIR)
export CCACHE_NOHASHDIR := 1
RUN_ARGS ?= plan --model gpt3-1.3b --cluster dgx-a100 --policy megatron --dp 2 --tp 4 --global-batch 32 \
            --microbatches 4 --out $(BUILD)/run

.PHONY: setup system-packages venv configure build run test test-sanitize bench fuzz test-fuzz fuzz-build clean

# Everything the build and the tests need: the Debian packages and the op timer's Python environment.
setup: system-packages venv

system-packages:
	@missing=""; for p in $(APT_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi
	@# Room for the gcc, sanitizer and fuzz builds' objects at once (ccache's default 5 GB evicts one for another).
	@ccache --max-size=12G >/dev/null

# .venv: the Python of `loom profile`'s op timer (python/requirements.txt: torch, the CPU build on this
# machine's disk). Made once; again only when the requirements change.
venv: .venv/.requirements-installed

.venv/.requirements-installed: python/requirements.txt
	python3 -m venv .venv
	.venv/bin/python -m pip install -q -r python/requirements.txt
	touch $@

# Configured with the venv's Python (its pybind11 builds the loom extension, src/bindings); again when the
# venv's requirements change.
$(BUILD)/build.ninja: .venv/.requirements-installed | system-packages
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOOM_WERROR=ON \
	      -DLOOM_PYTHON=$(CURDIR)/.venv/bin/python $(CCACHE_LAUNCHER)
	touch $@

configure: system-packages $(BUILD)/build.ninja

# loom.pth makes `import loom` work in the venv: python/ and this build's extension dir (the last build wins).
build: configure
	cmake --build $(BUILD) -j $(JOBS)
	@.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' | \
	  { read site; printf '%s\n' "$(CURDIR)/python" "$(abspath $(BUILD))/python" > "$$site/loom.pth"; }

# Then trains a small GPT-2 with the plan Loom finds (megatron-best search for 4 gloo processes) for 20 steps and
# prints each step's loss beside the single-process run's and torch's own (python/loom/examples/train_gpt2.py).
run: build venv
	./$(BUILD)/loom $(RUN_ARGS)
	@echo
	PYTHONPATH=python .venv/bin/python -m loom.examples.train_gpt2 --loom $(BUILD)/loom --out $(BUILD)/run/train_gpt2

test: build venv
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

# The libFuzzer targets (fuzz/, docs/fuzzing.md): a clang build of just the libraries the readers live in, with
# ASan and UBSan, in its own build dir; each target runs FUZZ_SECONDS from its committed corpus and any crash,
# hang, leak or memory blow-up fails. clang 19: libstdc++ 12's <expected> needs C++20 concepts in full.
# `make test` replays the committed corpora through the normal build (ctest fuzz_replay_*).
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 20
FUZZ_CXX ?= clang++-19

$(FUZZ_BUILD)/build.ninja: | system-packages
	cmake -S . -B $(FUZZ_BUILD) -G Ninja -DCMAKE_CXX_COMPILER=$(FUZZ_CXX) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	      -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" -DLOOM_FUZZ=ON -DLOOM_BUILD_TESTS=OFF \
	      -DLOOM_BUILD_BENCH=OFF $(CCACHE_LAUNCHER)
	touch $@

fuzz-build: $(FUZZ_BUILD)/build.ninja
	cmake --build $(FUZZ_BUILD) -j $(JOBS) --target loom_fuzz_targets

fuzz: fuzz-build
	fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

# A short run of every target (a few seconds each), as CI's check.
test-fuzz: FUZZ_SECONDS = 5
test-fuzz: fuzz

# `make test-sanitize` (docs/sanitizers.md): the engine, `loom` and the C++ tests built by clang with ASan + UBSan
# in their own build dir, then every ctest test but the Python suite (label python). Any report fails its test.
# Debian's clang-19 (bookworm's default clang 14 cannot compile libstdc++ 12's <expected>); llvm-19 symbolizes.
SANITIZE_BUILD ?= build-sanitize
SANITIZE_CXX ?= clang++-19
SANITIZE_SYMBOLIZER := external_symbolizer_path=/usr/lib/llvm-19/bin/llvm-symbolizer
SANITIZE_ENV := ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:check_initialization_order=1:strict_init_order=1:detect_stack_use_after_return=1:$(SANITIZE_SYMBOLIZER) \
                UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:$(SANITIZE_SYMBOLIZER)

$(SANITIZE_BUILD)/build.ninja: | system-packages
	cmake -S . -B $(SANITIZE_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -gline-tables-only" \
	      -DCMAKE_CXX_COMPILER=$(SANITIZE_CXX) -DLOOM_SANITIZE=address,undefined -DLOOM_BUILD_BENCH=OFF $(CCACHE_LAUNCHER)
	touch $@

# SANITIZE_LIBS picks libraries (ctest labels: a library's test executable, cli: the tests/cli scripts on `loom`);
# .ci/run names the subset CI runs (docs/sanitizers.md).
SANITIZE_LIBS ?= core ir ops models frontend cluster plan comm exec policy cost sim verify codegen search api cli
sanitize_space := $(subst ,, )
SANITIZE_TARGETS = $(foreach lib,$(SANITIZE_LIBS),$(if $(filter cli,$(lib)),loom,loom_$(lib)_tests))
SANITIZE_LABELS = ^($(subst $(sanitize_space),|,$(strip $(SANITIZE_LIBS))))$$

test-sanitize: system-packages venv $(SANITIZE_BUILD)/build.ninja
	cmake --build $(SANITIZE_BUILD) -j $(JOBS) --target $(SANITIZE_TARGETS)
	$(SANITIZE_ENV) ctest --test-dir $(SANITIZE_BUILD) --output-on-failure -j $(JOBS) -L '$(SANITIZE_LABELS)'

bench: build
	@for b in $(BUILD)/bench_*; do echo "== $$b"; $$b --benchmark_repetitions=5 --benchmark_report_aggregates_only=true || exit 1; done

clean:
	rm -rf $(BUILD) $(FUZZ_BUILD) $(SANITIZE_BUILD)
