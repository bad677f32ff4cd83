# gpumem: `make demo` runs the demo, `make test` runs the test suite.
CC       ?= cc
CXX      ?= c++
CUDA_HOME ?= /usr/local/cuda
WARN     := -std=c99 -Wall -Wextra -Wpedantic -Wconversion -Wshadow -Wstrict-prototypes -Werror
CFLAGS   ?= -O2 -g
# The disk tier's io_uring path needs liburing (Debian: liburing-dev). The
# probe decides once; NO_URING=1 forces the pread/pwrite fallback.
ifeq ($(NO_URING),1)
HAVE_URING := 0
endif
ifndef HAVE_URING
HAVE_URING := $(shell $(CC) tools/have_uring.c -o /dev/null -luring >/dev/null 2>&1 && echo 1 || echo 0)
endif
export HAVE_URING
ifeq ($(HAVE_URING),1)
URING    := -DGPUMEM_URING
URING_LIB := -luring
else
URING    :=
URING_LIB :=
ifeq ($(MAKELEVEL),0)
ifeq ($(NO_URING),1)
$(info note: NO_URING=1: the disk tier will use pread/pwrite)
else
$(info note: liburing not found: the disk tier will use pread/pwrite (for io_uring: apt-get install liburing-dev))
endif
endif
endif
LDLIBS   := -pthread -lm $(URING_LIB)
CUDA_INC := -isystem $(CUDA_HOME)/include
CUDA_LIB := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart

TESTS    := $(patsubst tests/%.c,%,$(wildcard tests/test_*.c))
# Fuzz targets (tests/fuzz): libFuzzer drives them under `make fuzz`; the
# suite replays their kept inputs on every build (sim only).
FUZZ     := options setup rmm lifetimes packing snapshot tier
SIMTESTS := $(TESTS) $(addprefix fuzz_,$(FUZZ)) test_torch_names test_install
B        := build

# The CUDA build of the tests links CUDART: the CUDA runtime stand-in of
# tests/cudart (a test double that holds the backend to CUDA's rules on a
# machine without a GPU: the default where nvidia-smi finds none), or the
# real libcudart (CUDART=real, on a GPU machine).
CUDART   ?= $(if $(shell nvidia-smi -L 2>/dev/null),real,standin)
ifeq ($(CUDART),real)
TEST_CUDA_LIB := $(CUDA_LIB)
TEST_CUDA_DEP :=
else
TEST_CUDA_LIB := -L$(B)/cudart -Wl,-rpath,$(abspath $(B)/cudart) -lgmcudart
TEST_CUDA_DEP := $(B)/cudart/libgmcudart.so
CUDART_TEST   := $(B)/cudart/test_cudart
endif

.PHONY: all tools install uninstall FORCE docs-check figures gpu-figures test test-sim test-cuda test-builds tsan-builds asan tsan fuzz demo examples planned caching train-mlp train-gpt torch-allocator bench bench-spill-vs-oom compile-check clean
all: $(addprefix $(B)/sim/,$(SIMTESTS)) $(B)/demo tools
tools: $(B)/gm-replay $(B)/gm-viz

$(B)/gm-%: tools/gm-%.c gpumem.h tools/gm_trace.h tools/gm_replay.h tools/gm_snapshot.h
	@mkdir -p $(dir $@)
	$(CC) $(WARN) -O2 -g -I. $< -o $@ $(LDLIBS)

$(B)/sim/%: tests/%.c gpumem.h tests/gm_test.h tests/gm_tier_test.h tools/gm_trace.h tools/gm_replay.h tools/gm_snapshot.h
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(CFLAGS) $(URING) -I. $< -o $@ $(LDLIBS)

# test_adverse reaches the C library's own calls through dlsym (in libdl
# before glibc 2.34).
$(B)/sim/test_adverse $(B)/cuda/test_adverse: LDLIBS += -ldl

FUZZ_DEPS := tests/fuzz/fuzz.h tests/fuzz/fuzz_trace.h gpumem.h tools/gm_trace.h tools/gm_replay.h tools/gm_snapshot.h
$(B)/sim/fuzz_%: tests/fuzz/fuzz_%.c $(FUZZ_DEPS)
	@mkdir -p $(dir $@)
	$(CC) $(WARN) -D_GNU_SOURCE $(CFLAGS) -DGPUMEM_PLAN_SEARCH=1000000 -I. $< -o $@ $(LDLIBS)

# The PyTorch helper's names, against the torch installed here (python3,
# if any: a note otherwise).
$(B)/sim/test_torch_names: tests/test_torch_names.py examples/torch_allocator/gpumem_torch.py
	@mkdir -p $(dir $@)
	@printf '#!/bin/sh\nif command -v python3 >/dev/null 2>&1; then exec python3 tests/test_torch_names.py; fi\necho "note: no python3: the PyTorch helper was not checked"\necho "0 passed, 0 failed"\n' > $@
	@chmod +x $@

$(B)/cuda/%: tests/%.c gpumem.h tests/gm_test.h tests/gm_tier_test.h tools/gm_trace.h tools/gm_replay.h tools/gm_snapshot.h $(TEST_CUDA_DEP)
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(CFLAGS) $(URING) -DGPUMEM_CUDA -DGM_TEST_CUDA -I. $(CUDA_INC) $< -o $@ $(LDLIBS) $(TEST_CUDA_LIB)

# The stand-in, and its own test: every rule of CUDA's it enforces, broken
# on purpose.
CUDART_WARN := -std=c99 -D_GNU_SOURCE -Wall -Wextra -Wpedantic -Wconversion -Wshadow -Wstrict-prototypes -Werror
$(B)/cudart/libgmcudart.so: tests/cudart/cudart.c tests/cudart/gm_cudart.h
	@mkdir -p $(dir $@)
	$(CC) $(CUDART_WARN) $(CFLAGS) -fPIC -shared -fvisibility=hidden $(CUDA_INC) $< -o $@ -pthread

$(B)/cudart/test_cudart: tests/cudart/test_cudart.c tests/cudart/gm_cudart.h $(B)/cudart/libgmcudart.so
	$(CC) $(CUDART_WARN) $(CFLAGS) $(URING) $(CUDA_INC) $< -o $@ -L$(B)/cudart -Wl,-rpath,$(abspath $(B)/cudart) -lgmcudart -pthread $(URING_LIB)

$(B)/cpp/compile_cpp: tests/compile_cpp.cc gpumem.h
	@mkdir -p $(dir $@)
	$(CXX) -std=c++11 -Wall -Wextra -Wpedantic -Werror -O1 -I. $< -o $@ $(LDLIBS)

$(B)/demo: examples/demo.c examples/spill_workload.h examples/plot.h examples/pick_backend.h gpumem.h
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(CFLAGS) $(URING) -I. $< -o $@ $(LDLIBS)

$(B)/demo-cuda: examples/demo.c examples/spill_workload.h examples/plot.h examples/pick_backend.h gpumem.h
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(CFLAGS) $(URING) -DGPUMEM_CUDA -I. $(CUDA_INC) $< -o $@ $(LDLIBS) $(CUDA_LIB)

# The PyTorch allocator (examples/torch_allocator): only gm_torch_* is
# exported. test_torch loads the one beside it, else the one in $(B); the
# CUDA test's links the runtime the CUDA tests link.
$(B)/libgm_torch.so: examples/torch_allocator/gm_torch.c gpumem.h
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(CFLAGS) -shared -fPIC -fvisibility=hidden -DGPUMEM_CUDA -I. $(CUDA_INC) $< -o $@ $(LDLIBS) $(CUDA_LIB)

$(B)/cuda/libgm_torch.so: examples/torch_allocator/gm_torch.c gpumem.h $(TEST_CUDA_DEP)
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(CFLAGS) -shared -fPIC -fvisibility=hidden -DGPUMEM_CUDA -I. $(CUDA_INC) $< -o $@ $(LDLIBS) $(TEST_CUDA_LIB)

torch-allocator: $(B)/libgm_torch.so

$(B)/sim/test_torch: $(B)/libgm_torch.so
$(B)/cuda/test_torch: $(B)/cuda/libgm_torch.so

# The suite: every test on the sim backend, the C++ build, the CUDA runtime
# stand-in's own test, and the CUDA build of every test (on the stand-in
# where there is no GPU, so none is skipped).
test: $(addprefix $(B)/sim/,$(SIMTESTS)) $(B)/cpp/compile_cpp $(CUDART_TEST) $(addprefix $(B)/cuda/,$(TESTS)) tools
	@sh tools/run-tests.sh $(addprefix $(B)/sim/,$(SIMTESTS)) $(B)/cpp/compile_cpp $(CUDART_TEST) $(addprefix $(B)/cuda/,$(TESTS))

test-sim: $(addprefix $(B)/sim/,$(SIMTESTS))
	@sh tools/run-tests.sh $^

# libFuzzer (clang -fsanitize=fuzzer, Debian: clang and libclang-rt-dev):
# each target for FUZZ_TIME seconds on a corpus under $(B)/fuzz, seeded
# from tests/fuzz/seed and tests/fuzz/regress. A crash stops it and leaves
# the input in $(B)/fuzz/crash-*: once fixed, keep it under
# tests/fuzz/regress/TARGET, where the suite replays it.
FUZZ_TIME ?= 60
FUZZ_CC   ?= clang
$(B)/fuzz/fuzz_%: tests/fuzz/fuzz_%.c $(FUZZ_DEPS)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) -std=c99 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
		-DGM_FUZZ_LIBFUZZER -DGPUMEM_PLAN_SEARCH=1000000 -I. $< -o $@ $(LDLIBS)

fuzz:
	@if ! printf 'int LLVMFuzzerTestOneInput(const char* d, unsigned long n) { return (int)(d && n) - 1; }\n' | \
		$(FUZZ_CC) -x c -fsanitize=fuzzer - -o /dev/null >/dev/null 2>&1; then \
		echo "note: $(FUZZ_CC) cannot build libFuzzer targets (Debian: apt-get install clang libclang-rt-dev): fuzzing skipped"; \
	else \
		$(MAKE) --no-print-directory $(addprefix $(B)/fuzz/fuzz_,$(FUZZ)) && \
		sh tools/run-fuzz.sh $(B)/fuzz $(FUZZ_TIME) $(FUZZ); \
	fi

# The sim and CUDA builds of the tests in one run (the sanitizers use it).
test-builds: $(addprefix $(B)/sim/,$(SIMTESTS)) $(CUDART_TEST) $(addprefix $(B)/cuda/,$(TESTS))
	@sh tools/run-tests.sh $^

test-cuda: $(CUDART_TEST) $(addprefix $(B)/cuda/,$(TESTS))
	@sh tools/run-tests.sh $^

# Sanitizer builds of the whole suite: sim, and CUDA on the runtime the
# tests link (the stand-in where there is no GPU).
asan:
	$(MAKE) --no-print-directory B=$(B)/asan CFLAGS="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all" test-builds
tsan:
	$(MAKE) --no-print-directory B=$(B)/tsan CFLAGS="-O1 -g -fsanitize=thread" tsan-builds

# ThreadSanitizer runs the suite several times slower than ASan: the whole
# suite on sim, and of the CUDA build the programs where the CUDA backend's
# own code meets several threads (thread caches, streams, the tier's
# threaded walk, the disk engine); the rest of the CUDA build runs under
# ASan and in `make test`.
TSAN_CUDA := test_backend test_streams test_threads test_tcache test_tier test_disk
tsan-builds: $(addprefix $(B)/sim/,$(SIMTESTS)) $(CUDART_TEST) $(addprefix $(B)/cuda/,$(TSAN_CUDA))
	@sh tools/run-tests.sh $^

# The header alone, with every warning, in each language and compiler here.
compile-check:
	@mkdir -p $(B) && printf '#define GPUMEM_IMPLEMENTATION\n#include "gpumem.h"\nint main(void){return 0;}\n' > $(B)/cc.c
	gcc $(WARN) -I. -c $(B)/cc.c -o $(B)/cc-gcc.o
	gcc $(WARN) $(URING) -I. -c $(B)/cc.c -o $(B)/cc-gcc-uring.o
	gcc $(WARN) $(URING) -DGPUMEM_CUDA -I. $(CUDA_INC) -c $(B)/cc.c -o $(B)/cc-gcc-cuda-uring.o
	gcc $(WARN) -DGPUMEM_CUDA -I. $(CUDA_INC) -c $(B)/cc.c -o $(B)/cc-gcc-cuda.o
	gcc $(WARN) -std=c11 -DNDEBUG -I. -c $(B)/cc.c -o $(B)/cc-gcc-c11.o
	gcc $(WARN) -DGPUMEM_DEBUG -DGPUMEM_STATIC -Wno-unused-function -I. -c $(B)/cc.c -o $(B)/cc-gcc-debug.o
	gcc $(WARN) -DGPUMEM_NO_THREAD_CACHE -I. -c $(B)/cc.c -o $(B)/cc-gcc-notc.o
	if command -v clang >/dev/null; then clang $(WARN) -I. -c $(B)/cc.c -o $(B)/cc-clang.o && clang $(WARN) -DGPUMEM_CUDA -I. $(CUDA_INC) -c $(B)/cc.c -o $(B)/cc-clang-cuda.o; fi
	cp $(B)/cc.c $(B)/cc.cc && g++ -std=c++11 -Wall -Wextra -Wpedantic -Werror -I. -c $(B)/cc.cc -o $(B)/cc-gxx.o
	g++ -std=c++11 -Wall -Wextra -Wpedantic -Werror $(URING) -I. -c $(B)/cc.cc -o $(B)/cc-gxx-uring.o
	gcc $(WARN) -I. examples/basic.c -o $(B)/basic $(LDLIBS) && $(B)/basic >/dev/null
	$(MAKE) --no-print-directory $(B)/train_mlp-cuda $(B)/demo-cuda $(B)/libgm_torch.so
	gcc $(WARN) $(URING) -I. bench/spill.c -o $(B)/bench-spill-check $(LDLIBS)
	gcc $(WARN) $(URING) -I. bench/nvme.c -o $(B)/bench-nvme-check $(LDLIBS)

$(B)/bench-alloc: bench/alloc.c bench/bench.h gpumem.h
	@mkdir -p $(dir $@)
	$(CC) $(WARN) -O2 -I. $< -o $@ $(LDLIBS)

$(B)/bench-alloc-cuda: bench/alloc.c bench/bench.h gpumem.h
	@mkdir -p $(dir $@)
	$(CC) $(WARN) -O2 -DGPUMEM_CUDA -I. $(CUDA_INC) $< -o $@ $(LDLIBS) $(CUDA_LIB)

# The PyTorch traces through gpumem on a real GPU (no device: says so);
# tools/gpu-figures.sh runs it beside PyTorch's allocator (bench/torch_replay.cc).
$(B)/bench-cuda-replay: bench/cuda_replay.c bench/bench.h examples/pick_backend.h gpumem.h tools/gm_trace.h tools/gm_replay.h
	@mkdir -p $(dir $@)
	$(CC) $(WARN) -O2 -DGPUMEM_CUDA -I. $(CUDA_INC) $< -o $@ $(LDLIBS) $(CUDA_LIB)

# The driver's virtual-memory calls against cudaMalloc (a GPU machine only:
# it links the driver, from the toolkit's stub at build time).
$(B)/bench-vmm: bench/vmm.c bench/bench.h
	@mkdir -p $(dir $@)
	$(CC) $(WARN) -D_POSIX_C_SOURCE=200809L -O2 $(CUDA_INC) $< -o $@ -L$(CUDA_HOME)/lib64 -L$(CUDA_HOME)/lib64/stubs -lcudart -lcuda

# Benchmarks print a table and write CSV under build/; the CUDA build falls
# back to the sim backend where there is no device.
$(B)/bench-replay: bench/replay.c bench/bench.h gpumem.h tools/gm_trace.h tools/gm_replay.h tools/gm_snapshot.h
	@mkdir -p $(dir $@)
	$(CC) $(WARN) -O2 -I. $< -o $@ $(LDLIBS)

$(B)/bench-tier-scale: bench/tier_scale.c bench/bench.h examples/plot.h gpumem.h
	@mkdir -p $(dir $@)
	$(CC) $(WARN) -O2 -I. $< -o $@ $(LDLIBS)

$(B)/bench-spill: bench/spill.c bench/bench.h gpumem.h
	@mkdir -p $(dir $@)
	$(CC) $(WARN) -O2 $(URING) -I. $< -o $@ $(LDLIBS)

# bench-nvme compares with fio (Debian: fio) in SPILL_DIR, on its file system.
SPILL_DIR ?= /var/tmp
$(B)/bench-nvme: bench/nvme.c bench/bench.h gpumem.h
	@mkdir -p $(dir $@)
	$(CC) $(WARN) -O2 $(URING) -I. $< -o $@ $(LDLIBS)

$(B)/bench-plan: bench/plan.c bench/bench.h gpumem.h
	@mkdir -p $(dir $@)
	$(CC) $(WARN) -O2 -I. $< -o $@ $(LDLIBS)

$(B)/bench-spill-vs-oom: bench/spill_vs_oom.c bench/bench.h examples/spill_workload.h examples/plot.h examples/pick_backend.h gpumem.h
	@mkdir -p $(dir $@)
	$(CC) $(WARN) -O2 $(URING) -DGPUMEM_CUDA -I. $(CUDA_INC) $< -o $@ $(LDLIBS) $(CUDA_LIB)

bench: $(B)/bench-alloc $(B)/bench-alloc-cuda $(B)/bench-replay $(B)/bench-spill $(B)/bench-nvme $(B)/bench-spill-vs-oom $(B)/bench-plan $(B)/bench-tier-scale
	$(B)/bench-alloc-cuda $(B)/bench-alloc.csv
	$(B)/bench-replay ../shared/traces $(B)/bench-replay.csv
	$(B)/bench-spill $(B)/bench-spill.csv $(SPILL_DIR)
	$(B)/bench-nvme $(SPILL_DIR) 1024 $(B)/bench-nvme.csv
	$(B)/bench-spill-vs-oom $(B)/bench-spill-vs-oom.csv $(B)/bench-spill-vs-oom.svg $(SPILL_DIR)
	$(B)/bench-plan $(B)/bench-plan.csv
	$(B)/gm-replay --plan --csv $(B)/bench-plan-traces.csv ../shared/traces/minimalloc/*.csv ../shared/traces/pytorch/*.csv
	$(B)/bench-tier-scale $(B)/bench-tier-scale.csv $(B)/bench-tier-scale.svg

# make figures: every benchmark and measuring example, run once (the demo
# three times), and docs/measured.md written from their CSV and tables
# (about a quarter of an hour on two cores). TIER_MAX=N caps bench-tier-scale's tensor count.
figures: $(B)/bench-alloc-cuda $(B)/bench-replay $(B)/bench-spill $(B)/bench-nvme $(B)/bench-spill-vs-oom $(B)/bench-plan \
		$(B)/bench-tier-scale $(B)/demo $(B)/train_mlp $(B)/train_gpt $(B)/planned $(B)/caching $(B)/sim/test_frag tools
	@if [ -x $(CUDA_HOME)/bin/nvcc ]; then $(MAKE) -s --no-print-directory $(B)/demo-cuda >/dev/null 2>&1 || true; fi
	B=$(B) SPILL_DIR=$(SPILL_DIR) sh tools/figures.sh

# make gpu-figures: on a machine with a GPU, the CUDA suite on the real
# runtime, the demo and the benchmarks that need a device, each step timed
# and logged under $(B)/gpu (tools/gpu-figures.sh says what each step is).
gpu-figures:
	B=$(B) TRACES=$(TRACES) sh tools/gpu-figures.sh

# make docs-check: README.md's sh blocks run as written, every gpumem name
# in README.md and docs/ exists in the header, every link resolves.
docs-check:
	B=$(B) sh tools/docs-check.sh

bench-spill-vs-oom: $(B)/bench-spill-vs-oom
	$(B)/bench-spill-vs-oom $(B)/bench-spill-vs-oom.csv $(B)/bench-spill-vs-oom.svg $(SPILL_DIR)

$(B)/tensors: examples/tensors.c gpumem.h
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(CFLAGS) -I. $< -o $@ $(LDLIBS)

$(B)/planned: examples/planned.c examples/pick_backend.h gpumem.h
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(CFLAGS) -I. $< -o $@ $(LDLIBS)

# train_mlp: C kernels on sim; the CUDA build adds cuBLAS and mlp_kernels.cu
# (nvcc), and falls back to sim where there is no device.
NVCC ?= $(CUDA_HOME)/bin/nvcc
$(B)/train_mlp: examples/train_mlp.c examples/mlp_kernels.h examples/plot.h examples/pick_backend.h gpumem.h
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(CFLAGS) -I. $< -o $@ $(LDLIBS)

$(B)/mlp_kernels.o: examples/mlp_kernels.cu examples/mlp_kernels.h
	@mkdir -p $(dir $@)
	$(NVCC) -O2 -Iexamples -c $< -o $@

$(B)/train_mlp-cuda: examples/train_mlp.c examples/mlp_kernels.h examples/plot.h examples/pick_backend.h gpumem.h $(B)/mlp_kernels.o
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(CFLAGS) -DGPUMEM_CUDA -I. $(CUDA_INC) $< $(B)/mlp_kernels.o -o $@ $(LDLIBS) $(CUDA_LIB) -lcublas -lstdc++

# train_gpt: a GPT-shaped model, C kernels on sim only (a CUDA build would
# run on sim too, so there is none).
$(B)/train_gpt: examples/train_gpt.c examples/gpt_kernels.h gpumem.h
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(CFLAGS) -I. $< -o $@ $(LDLIBS)

# The examples that check themselves: each exits non-zero if its result is wrong.
examples: $(B)/tensors $(B)/planned $(B)/train_mlp $(B)/train_gpt $(B)/libgm_torch.so
	$(B)/tensors
	$(B)/planned
	$(B)/train_mlp
	$(B)/train_gpt

planned: $(B)/planned
	$(B)/planned

train-mlp: $(B)/train_mlp
	@if [ -x $(NVCC) ] && $(MAKE) -s --no-print-directory $(B)/train_mlp-cuda >/dev/null 2>&1; then $(B)/train_mlp-cuda; else $(B)/train_mlp; fi

train-gpt: $(B)/train_gpt
	$(B)/train_gpt

$(B)/caching: examples/caching.c gpumem.h
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(CFLAGS) -I. $< -o $@ $(LDLIBS)

# what the caching allocator buys on a training loop's requests, and where it stops
caching: $(B)/caching
	$(B)/caching

demo: $(B)/demo
	@if [ -x $(CUDA_HOME)/bin/nvcc ] && $(MAKE) -s --no-print-directory $(B)/demo-cuda >/dev/null 2>&1; then $(B)/demo-cuda; else $(B)/demo; fi

# make install PREFIX=... [CUDA=1]: the header, the tools and a pkg-config
# file (pkg-config --cflags --libs gpumem) whose flags say how this build
# was configured: io_uring when liburing was found, the CUDA backend with
# CUDA=1. make uninstall removes them. DESTDIR stages a package.
PREFIX  ?= /usr/local
VERSION ?= 0.1
PC_CFLAGS := $(URING) $(if $(filter 1,$(CUDA)),-DGPUMEM_CUDA -I$(CUDA_HOME)/include)
PC_LIBS   := -pthread -lm $(URING_LIB) $(if $(filter 1,$(CUDA)),$(CUDA_LIB))
INSTALLED := include/gpumem.h bin/gm-replay bin/gm-viz lib/pkgconfig/gpumem.pc

$(B)/gpumem.pc: FORCE
	@mkdir -p $(dir $@)
	@printf 'prefix=%s\nincludedir=$${prefix}/include\n\nName: gpumem\nDescription: a caching allocator and tiered manager for GPU memory, in one C header\nVersion: %s\nCflags: -I$${includedir} %s\nLibs: %s\n' \
		'$(PREFIX)' '$(VERSION)' '$(strip $(PC_CFLAGS))' '$(strip $(PC_LIBS))' > $@

install: tools $(B)/gpumem.pc
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 644 gpumem.h $(DESTDIR)$(PREFIX)/include/gpumem.h
	install -m 755 $(B)/gm-replay $(B)/gm-viz $(DESTDIR)$(PREFIX)/bin/
	install -m 644 $(B)/gpumem.pc $(DESTDIR)$(PREFIX)/lib/pkgconfig/gpumem.pc

uninstall:
	rm -f $(addprefix $(DESTDIR)$(PREFIX)/,$(INSTALLED))

# The install, checked: into a temporary prefix, examples/basic.c built with
# pkg-config's flags alone, then uninstalled (part of the suite).
$(B)/sim/test_install: tools/test-install.sh
	@mkdir -p $(dir $@)
	@printf '#!/bin/sh\nexec sh tools/test-install.sh\n' > $@
	@chmod +x $@

FORCE:

clean:
	rm -rf $(B)
