# Makefile: builds the engine library, the apps, and the Catch2 test binary tests/run_tests.
#
#   make              optimized build (-O3 -march=native, OpenMP); CUDA backend when nvcc is found
#   make CUDA=0       CPU only
#   make CUDNN=0      the CUDA build without cuDNN (linked when found: conv2d, depthwise, batch norm, LSTM)
#   make DEBUG=1      -g -O0
#   make JOBS=1       a serial build (default: one job per core)
#   make test         build and run the test suite (ends with "N passed, N failed")
#   make sanitize     the same suite under AddressSanitizer + UBSan
#   make deps         install the Debian packages the build needs (run as root)
#   make bench        build the op benchmark bench/ops
#   make emu          the emulated CUDA build in build/emu/ (engine/cuda/*.cu compiled by g++ against
#                     the CPU emulator engine/cuda/emu/): build/emu/tests/run_tests "[cuda]",
#                     build/emu/apps/train_vit --device cuda, ...
#   make test-gpu     the [cuda] suite on a real GPU (nvcc build)
#   make cuda-check   nvcc for sm_80/sm_90, warnings as errors, the ptxas table of every kernel;
#                     fails on a register spill (mk/cuda_check.mk)

# Parallel by default (one job per core; make JOBS=1 for a serial build). The top-level make only:
# a sub-make shares its jobserver.
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
ifeq ($(MAKELEVEL),0)
  MAKEFLAGS += -j$(JOBS)
endif

CXX      ?= g++
NVCC     ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
DEBUG    ?= 0
CUDA     ?= 1
CUDNN    ?= 1
SANITIZE ?= 0
EMU      ?= 0
# Build elsewhere (a second checkout, a helper): make BUILD_ROOT=build/mine
BUILD_ROOT ?= build

DEB_PACKAGES := libopenblas-dev libopenblas-openmp-dev liblapacke-dev catch2 libfmt-dev libstb-dev \
                libcli11-dev nlohmann-json3-dev python3

# OpenBLAS: the OpenMP build, so a GEMM called inside one of our parallel loops runs on one
# thread instead of oversubscribing the cores with its own pthreads.
BLAS_INC := /usr/include/x86_64-linux-gnu/openblas-openmp
BLAS_LIB := /usr/lib/x86_64-linux-gnu/openblas-openmp

CXXFLAGS := -std=c++20 -Wall -Wextra -Wno-unused-parameter -fopenmp -I. -isystem $(BLAS_INC) -MMD -MP
LDLIBS   := /usr/lib/x86_64-linux-gnu/liblapacke.a -L$(BLAS_LIB) -Wl,--disable-new-dtags -Wl,-rpath,$(BLAS_LIB) \
            -lopenblas -lfmt -lgomp -lpthread -lm

ifeq ($(SANITIZE),1)
  BUILD := $(BUILD_ROOT)/sanitize
  CXXFLAGS += -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
  LDFLAGS  += -fsanitize=address,undefined
  CUDA := 0
else ifeq ($(DEBUG),1)
  BUILD := $(BUILD_ROOT)/debug
  CXXFLAGS += -O0 -g
else
  BUILD := $(BUILD_ROOT)/release
  CXXFLAGS += -O3 -march=native -DNDEBUG
endif
# The emulated CUDA build (its own folder; nvcc is not used at all).
ifeq ($(EMU),1)
  BUILD := $(BUILD_ROOT)/emu$(if $(filter 1,$(SANITIZE)),-sanitize)$(if $(filter 1,$(DEBUG)),-debug)
  CUDA := 0
endif

# ---------------------------------------------------------------------------------------------
# What we found (llm.c style: say what is there, what is not, and how to fix it).

have_header = $(shell test -e $(1) && echo 1)
MISSING :=
ifneq ($(call have_header,$(BLAS_INC)/cblas.h),1)
  MISSING += libopenblas-openmp-dev
endif
ifneq ($(call have_header,/usr/include/lapacke.h),1)
  MISSING += liblapacke-dev
endif
ifneq ($(call have_header,/usr/include/catch2/catch.hpp),1)
  MISSING += catch2
endif
ifneq ($(call have_header,/usr/include/fmt/format.h),1)
  MISSING += libfmt-dev
endif

ENGINE_SRC := $(wildcard engine/*.cpp engine/ops/*.cpp engine/cpu/*.cpp)
LIB_SRC    := $(ENGINE_SRC) $(wildcard nn/*.cpp init/*.cpp data/*.cpp apps/common/*.cpp)
CUDA_SRC   := $(wildcard engine/cuda/*.cu)

ifeq ($(CUDA),1)
  # nvcc may be a wrapper script (/usr/local/bin/nvcc -> exec /usr/local/cuda-X/bin/nvcc), so ask
  # nvcc itself where its toolkit is instead of guessing from its path; then look for the CUDA
  # runtime in the places toolkits put it (lib64, lib, targets/<arch>/lib).
  ifneq ($(NVCC),)
    CUDA_HOME ?= $(shell $(NVCC) --dryrun -c -x cu /dev/null -o /tmp/initlab-nvcc-probe.o 2>&1 | \
                   sed -n 's/^#\$$ TOP=//p' | head -n1 | xargs -r realpath 2>/dev/null)
    CUDA_LIBDIR ?= $(firstword $(foreach d,lib64 lib targets/x86_64-linux/lib,\
                     $(if $(wildcard $(CUDA_HOME)/$(d)/libcudart_static.a),$(CUDA_HOME)/$(d))))
  endif
  ifeq ($(NVCC),)
    $(info ✗ CUDA: nvcc not found, building CPU only (install the CUDA toolkit, or set NVCC=/path/to/nvcc))
  else ifeq ($(CUDA_LIBDIR),)
    $(info ✗ CUDA: $(NVCC) found but not libcudart_static.a under '$(CUDA_HOME)', building CPU only (set CUDA_HOME=/path/to/cuda))
  else ifeq ($(wildcard $(CUDA_LIBDIR)/libcublas.so),)
    $(info ✗ CUDA: no libcublas.so in $(CUDA_LIBDIR), building CPU only (install cuBLAS, or make CUDA=0))
  else
    BUILD     := $(BUILD)-cuda
    CUDA_BUILD := 1
    CUDA_ARCH ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
    CXXFLAGS  += -DENGINE_CUDA -isystem $(CUDA_HOME)/include
    LDLIBS    += -L$(CUDA_LIBDIR) -lcudart_static -ldl -lrt
    # cuBLAS and cuBLASLt as shared libraries (toolkits ship no static cuBLAS everywhere), found
    # through the rpath.
    LDLIBS    += -lcublasLt -lcublas -Wl,-rpath,$(CUDA_LIBDIR)
    CUDA_OBJ  := $(CUDA_SRC:%.cu=$(BUILD)/%.o)
    $(info ✓ CUDA: $(NVCC), runtime in $(CUDA_LIBDIR) (make CUDA=0 to build CPU only))
    # cuDNN (conv2d, depthwise conv2d, batch norm: engine/cuda/cudnn.cu; the LSTM: cudnn_rnn.cu) when its header and library
    # are there; without it the own kernels run and nothing else changes.
    ifeq ($(CUDNN),0)
      $(info - cuDNN: off (CUDNN=0): the own conv, batch-norm and LSTM kernels)
    else ifeq ($(wildcard $(CUDA_HOME)/include/cudnn.h),)
      $(info ✗ cuDNN: no cudnn.h in $(CUDA_HOME)/include, building without it (the own conv, batch-norm and LSTM kernels; install cuDNN 9 into the toolkit to use it))
    else ifeq ($(wildcard $(CUDA_LIBDIR)/libcudnn.so),)
      $(info ✗ cuDNN: no libcudnn.so in $(CUDA_LIBDIR), building without it (the own conv, batch-norm and LSTM kernels; install cuDNN 9 into the toolkit to use it))
    else
      CUDNN_DEFINE := -DENGINE_CUDNN
      CXXFLAGS  += $(CUDNN_DEFINE)
      LDLIBS    += -lcudnn
      $(info ✓ cuDNN: $(CUDA_HOME)/include/cudnn.h, $(CUDA_LIBDIR)/libcudnn.so (INITLAB_CUDNN=0 at run time or make CUDNN=0 for the own kernels))
    endif
  endif
else ifeq ($(EMU),1)
  $(info ✓ CUDA: emulated (engine/cuda/*.cu compiled by $(CXX) against engine/cuda/emu/))
  CUDA_BUILD := 1
  # The emulator always has its cuDNN stand-in (engine/cuda/emu/cudnn.cpp).
  CXXFLAGS += -DENGINE_CUDA -DENGINE_CUDA_EMU -DENGINE_CUDNN -Iengine/cuda/emu/include
  CUDA_OBJ := $(CUDA_SRC:%.cu=$(BUILD)/%.o) $(patsubst %.cpp,$(BUILD)/%.o,$(wildcard engine/cuda/emu/*.cpp))
else
  $(info - CUDA: off (CUDA=0))
endif
ifneq ($(MISSING),)
  $(info ✗ missing Debian packages: $(MISSING) -> run: make deps)
endif

# The commit the binaries are built from, "+dirty" when the tree had uncommitted changes or
# untracked files: run configs record it (apps/common/run.cpp), wherever the binary is run from.
# The header is rewritten only when that changes, so only run.o is recompiled, and only then.
GIT_COMMIT := $(shell git rev-parse HEAD 2>/dev/null)
ifneq ($(GIT_COMMIT),)
  GIT_COMMIT := $(GIT_COMMIT)$(shell test -z "$$(git status --porcelain 2>/dev/null)" || echo +dirty)
else
  GIT_COMMIT := unknown
endif
$(shell mkdir -p $(BUILD)/gen && echo '#define INITLAB_GIT_COMMIT "$(GIT_COMMIT)"' > $(BUILD)/gen/git_commit.h.new && \
        (cmp -s $(BUILD)/gen/git_commit.h.new $(BUILD)/gen/git_commit.h || mv $(BUILD)/gen/git_commit.h.new $(BUILD)/gen/git_commit.h))
$(BUILD)/apps/common/run.o: CXXFLAGS += -I$(BUILD)/gen

LIB_OBJ   := $(LIB_SRC:%.cpp=$(BUILD)/%.o) $(CUDA_OBJ)
LIB       := $(BUILD)/libengine.a
# The [cuda] tests (tests/cuda/) are built into every CUDA build; the emulated build's test binary
# holds only them.
ifeq ($(EMU),1)
  TEST_SRC := tests/main.cpp $(wildcard tests/cuda/*.cpp)
else ifeq ($(CUDA_BUILD),1)
  TEST_SRC := $(wildcard tests/*.cpp tests/cuda/*.cpp)
else
  TEST_SRC := $(wildcard tests/*.cpp)
endif
TEST_OBJ  := $(TEST_SRC:%.cpp=$(BUILD)/%.o)
APP_SRC   := $(wildcard apps/*.cpp)
ifeq ($(EMU),1)
  APPS    := $(APP_SRC:%.cpp=$(BUILD)/%)
else
  APPS    := $(APP_SRC:%.cpp=%)
endif
BENCH_SRC := $(wildcard bench/*.cpp)
BENCHES   := $(BENCH_SRC:%.cpp=%)

# The default build's suite is tests/run_tests; other builds keep theirs in their build dir.
ifeq ($(EMU),1)
  TEST_BIN := $(BUILD)/tests/run_tests
else ifeq ($(BUILD),build/release-cuda)
  TEST_BIN := tests/run_tests
else ifeq ($(BUILD),build/release)
  TEST_BIN := tests/run_tests
else
  TEST_BIN := $(BUILD)/run_tests
endif

.PHONY: all test sanitize deps clean bench emu emu-sanitize test-gpu
# Keep the apps' and benchmarks' object files (make would delete them as intermediates).
.SECONDARY:
all: $(LIB) $(APPS) $(TEST_BIN)

$(BUILD)/%.o: %.cpp
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -c $< -o $@

ifeq ($(EMU),1)
$(BUILD)/%.o: %.cu
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -x c++ -c $< -o $@
else
$(BUILD)/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) -std=c++20 -O3 -DENGINE_CUDA $(CUDNN_DEFINE) $(CUDA_ARCH) -I. -Xcompiler -fPIC -MMD -MP -c $< -o $@
endif

# The pointwise loops, the softmax / cross-entropy rows and the LSTM cell: -fno-trapping-math lets g++ vectorize
# the branch-free exp/erf of engine/ops/pointwise.h (its clamps become vector min/max). Results
# are unchanged: nothing here reads floating-point exception flags.
$(BUILD)/engine/cpu/elementwise.o $(BUILD)/engine/cpu/nn.o $(BUILD)/engine/cpu/rnn.o: CXXFLAGS += -fno-trapping-math

$(LIB): $(LIB_OBJ)
	@mkdir -p $(dir $@)
	ar rcs $@ $^

apps/%: $(BUILD)/apps/%.o $(LIB)
	$(CXX) $(LDFLAGS) -fopenmp $< $(LIB) $(LDLIBS) -o $@

$(BUILD)/apps/%: $(BUILD)/apps/%.o $(LIB)
	$(CXX) $(LDFLAGS) -fopenmp $< $(LIB) $(LDLIBS) -o $@

bench/%: $(BUILD)/bench/%.o $(LIB)
	$(CXX) $(LDFLAGS) -fopenmp $< $(LIB) $(LDLIBS) -o $@

$(TEST_BIN): $(TEST_OBJ) $(LIB)
	$(CXX) $(LDFLAGS) -fopenmp $(TEST_OBJ) $(LIB) $(LDLIBS) -o $@

bench: $(BENCHES)

# The CPU suite (tests/run_tests, without the [cuda] tests: no GPU is assumed), then the [cuda]
# suite in the emulated build; tests/run_suites.sh ends with one "N passed, N failed" line for both.
test: $(TEST_BIN) $(APPS) emu
	tests/run_suites.sh ./$(TEST_BIN) $(BUILD_ROOT)/emu/tests/run_tests

emu:
	$(MAKE) EMU=1 $(BUILD_ROOT)/emu/libengine.a $(BUILD_ROOT)/emu/tests/run_tests \
	  $(APP_SRC:%.cpp=$(BUILD_ROOT)/emu/%)

# The [cuda] suite on the real device (a GPU machine; nvcc build).
test-gpu: $(TEST_BIN) $(APPS)
	./$(TEST_BIN) "[cuda]"

# The emulated [cuda] suite under AddressSanitizer + UBSan: out-of-bounds kernel accesses.
emu-sanitize:
	$(MAKE) EMU=1 SANITIZE=1 $(BUILD_ROOT)/emu-sanitize/tests/run_tests \
	  $(APP_SRC:%.cpp=$(BUILD_ROOT)/emu-sanitize/%)
	ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1 ./$(BUILD_ROOT)/emu-sanitize/tests/run_tests "[cuda]"

sanitize:
	$(MAKE) SANITIZE=1 $(BUILD_ROOT)/sanitize/run_tests
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ./$(BUILD_ROOT)/sanitize/run_tests

deps:
	@missing=""; for p in $(DEB_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then echo "installing:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	else echo "all build dependencies present"; fi

clean:
	rm -rf build tests/run_tests $(APPS) $(BENCHES)

-include $(shell find build -name '*.d' 2>/dev/null)

# Fuzz targets for the data readers (libFuzzer via clang): see fuzz/Makefile.
.PHONY: fuzz
fuzz:
	$(MAKE) -C fuzz

# make cuda-check: every kernel through nvcc (sm_80, sm_90) with warnings as errors and the ptxas
# report as a table; needs nvcc only, no GPU.
include mk/cuda_check.mk
