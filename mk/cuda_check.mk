# mk/cuda_check.mk: `make cuda-check`: every engine/cuda/*.cu compiled by nvcc for sm_80 and sm_90
# with warnings as errors (nvcc's and the host compiler's) and `-Xptxas -v`; the ptxas report of
# every kernel (registers and the largest block they allow, stack frame, spills, static shared
# memory, barriers) becomes the table
# $(BUILD_ROOT)/cuda-check/kernels.md (tools/ptxas_table.py), and the check fails when a kernel
# spills registers, naming it. Needs nvcc only, no GPU. Included by the Makefile; standalone:
#     make -f Makefile -f mk/cuda_check.mk cuda-check BUILD_ROOT=build/x
#
# Each file's log is rebuilt when the file or a header it includes changes (nvcc -MMD), so a second
# run only recompiles what changed.

BUILD_ROOT ?= build
PYTHON     ?= python3
# The Makefile's NVCC (empty when it found none), else whatever nvcc is on the PATH.
CUDA_CHECK_NVCC := $(or $(NVCC),nvcc)

CUDA_CHECK_DIR  := $(BUILD_ROOT)/cuda-check
CUDA_CHECK_SRC  := $(wildcard engine/cuda/*.cu)
CUDA_CHECK_LOGS := $(CUDA_CHECK_SRC:engine/cuda/%.cu=$(CUDA_CHECK_DIR)/%.log)
# Real machine code for both targets (ptxas runs for each; the compute_90 PTX of the main build
# needs no ptxas and is left out).
CUDA_CHECK_ARCH ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90
# nvcc's own warnings (front end, ptxas, nvlink) and the host compiler's (the main build's -Wall
# -Wextra) as errors; CUDA's headers are system headers to both, so only our code is held to it.
# $(CUDNN_DEFINE): -DENGINE_CUDNN when the Makefile found cuDNN, so engine/cuda/cudnn.cu is checked
# against the real cudnn.h.
CUDA_CHECK_FLAGS ?= -std=c++20 -O3 -DENGINE_CUDA $(CUDNN_DEFINE) -I. $(CUDA_CHECK_ARCH) \
                    -Werror all-warnings -Xptxas -v \
                    -Xcompiler -Wall,-Wextra,-Wno-unused-parameter,-Werror

.PHONY: cuda-check

cuda-check: $(CUDA_CHECK_LOGS)
	@if [ -z "$(CUDA_CHECK_LOGS)" ]; then echo "✗ cuda-check: no engine/cuda/*.cu files"; exit 1; fi
	$(PYTHON) tools/ptxas_table.py --out $(CUDA_CHECK_DIR)/kernels.md $(CUDA_CHECK_LOGS)

# One log per .cu: nvcc's whole output (the ptxas report). A failed compile prints it and leaves no
# log behind, so the next run tries again.
$(CUDA_CHECK_DIR)/%.log: engine/cuda/%.cu
	@mkdir -p $(dir $@)
	@command -v $(CUDA_CHECK_NVCC) >/dev/null 2>&1 || { echo "✗ cuda-check: nvcc not found (set NVCC=/path/to/nvcc)"; exit 1; }
	@echo "nvcc (sm_80, sm_90, -Werror, -Xptxas -v) $<"
	@if $(CUDA_CHECK_NVCC) $(CUDA_CHECK_FLAGS) -MMD -MP -MT $@ -MF $(@:.log=.d) -c $< -o $(@:.log=.o) > $@.tmp 2>&1; then \
	  mv $@.tmp $@; \
	else \
	  cat $@.tmp; rm -f $@.tmp; echo "✗ cuda-check: $< does not compile cleanly with nvcc (warnings are errors)"; exit 1; \
	fi

-include $(wildcard $(CUDA_CHECK_DIR)/*.d)
