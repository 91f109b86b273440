#!/usr/bin/env bash
# tools/device_check.sh: one call on a lent GPU machine (see tools/device_pack.sh, which packs what
# it needs): the [cuda] suite on the device, then bench/gpu.sh's comparisons in TF32, each ours
# against PyTorch eager and torch.compile where the machine's PyTorch has CUDA:
#   - goal: issue 12's measurement in one short part (about 2 minutes): ViT-Tiny in TF32, ours with
#     the unfused attention (vit) and its switches (vit-noedge, vit-lt, vit-tune, vit-pointers)
#     against PyTorch eager and torch.compile in the same call. With 15 minutes of device time a
#     session (machine start included), PARTS="suite goal" is the first call to make;
#   - attention: vit, vit-nosplit, vit-async, vit-narrow, lm, lm4k with the fused attention off and
#     on (under tf32 the fused path is the tensor-core flash kernels; vit-nosplit is the fused
#     backward without the split dq, vit-async the flash kernels with the asynchronous copies,
#     vit-narrow the forward at 32 keys a step);
#   - unfused: vit, vit-noedge, vit-pointers, vit-lt, vit-tune, lm, lm-pointers, lm-tune, lm-ce with the
#     unfused attention (vit-noedge: the attention GEMMs over all 257 keys, no edge keys; the
#     -pointers ones: each attention GEMM one cuBLAS call over every head; vit-lt: the linears'
#     bias and its gradient by cuBLASLt's epilogues; the -tune ones: GEMMs through cuBLASLt, autotuned;
#     lm-ce: the whole logits and cross_entropy instead of linear_cross_entropy); no PyTorch
#     runs (the attention part has them);
#   - attention-bf16 (not in the default PARTS): vit, vit-bf16fast (cuBLAS rounding the GEMM
#     inputs itself), vit-pointers and lm under bf16, fused off and on (the bf16 flash kernels);
#   - gau-lstm: gau, lstm (the own LSTM kernels), lstm-cudnn (cuDNN's LSTM) and convmixer
#     (ConvMixer-256/8, kernel 9: cuDNN's convolutions and batch norms).
#   - sanitize: compute-sanitizer's memcheck over the [flash] tests and racecheck over one tensor-core case
#     (the fused kernels' shared memory and warp synchronization);
#   - kernels: Nsight Compute over one eager ViT-Tiny step (TF32, batch 128), every launch's time,
#     summed per kernel by tools/kernel_table.py (kernels-vit.md; the raw CSV beside it): which
#     GEMM, which elementwise kernel the step's time goes to. Time alone is one replay a kernel
#     (about 15 s a step on an H100); KERNEL_METRICS=gpu__time_duration.sum,dram__bytes.sum,
#     sm__throughput.avg.pct_of_peak_sustained_elapsed adds DRAM bytes and SM throughput, at
#     several replays a kernel (over 150 s for the step on the H100).
# Writes under $OUT (the device tool's folder; /tmp/out elsewhere): log.txt, suite.txt and the
# tables. Every default part takes about 9 minutes on an H100 or H200, near one command's 10-minute
# limit: a lease takes them in two calls by PARTS (default "suite attention unfused gau-lstm
# sanitize kernels"), e.g. "suite attention unfused" then "attention-bf16 kernels". SUITE_S,
# BENCH_S, SANITIZE_S and KERNELS_S bound each part.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
date -u
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
git log -1 --format='commit %h %s' 2>/dev/null || true
mkdir -p /tmp/lib && tar -xJf .dev/libs.tar.xz -C /tmp/lib
# cuBLAS and cuDNN: the toolkit's if it has them, else the nvidia-* wheels of the machine's PyTorch.
wheel_lib() { python3 -c "import importlib; print(list(importlib.import_module('$1').__path__)[0] + '/lib')" 2>/dev/null; }
export LD_LIBRARY_PATH=/tmp/lib:/usr/local/cuda/lib64:$(wheel_lib nvidia.cudnn):$(wheel_lib nvidia.cublas):${LD_LIBRARY_PATH:-}
if ldd tests/run_tests | grep "not found"; then echo "device_check: libraries missing (above)"; exit 1; fi

parts=" ${PARTS:-suite attention unfused gau-lstm sanitize kernels} "
if [[ $parts == *" suite "* ]]; then
    echo "== [cuda] suite"
    timeout "${SUITE_S:-150}" tests/run_tests "[cuda]" -r compact > "$OUT/suite.txt" 2>&1
    echo "suite rc=$?"
    grep -E "failed|passed" "$OUT/suite.txt" | tail -n 20
fi
if [[ $parts == *" goal "* ]]; then
    echo "== the goal: ViT-Tiny (tf32) against PyTorch eager and torch.compile, with the unfused attention's switches"
    timeout "${BENCH_S:-300}" bash bench/gpu.sh --no-build --no-tests \
        --models "vit vit-noedge vit-lt vit-tune vit-pointers" --precisions tf32 --out "$OUT/gpu-goal-tf32.md"
    echo "rc=$?"
fi
if [[ $parts == *" attention "* ]]; then
    echo "== attention models, fused off and on (tf32)"
    timeout "${BENCH_S:-300}" bash bench/gpu.sh --no-build --no-tests --models "vit vit-nosplit vit-async vit-narrow lm lm4k" \
        --precisions tf32 --fused-attention both --out "$OUT/gpu-attention-tf32.md"
    echo "rc=$?"
fi
if [[ $parts == *" unfused "* ]]; then
    echo "== unfused attention: edge keys, address-array GEMMs, cuBLASLt's bias, autotuned GEMMs (tf32)"
    timeout "${BENCH_S:-300}" bash bench/gpu.sh --no-build --no-tests --no-torch \
        --models "vit vit-noedge vit-pointers vit-lt vit-tune lm lm-pointers lm-tune lm-ce" --precisions tf32 \
        --fused-attention off --out "$OUT/gpu-unfused-tf32.md"
    echo "rc=$?"
fi
if [[ $parts == *" attention-bf16 "* ]]; then
    echo "== attention models, fused off and on (bf16)"
    timeout "${BENCH_S:-300}" bash bench/gpu.sh --no-build --no-tests --models "vit vit-bf16fast vit-pointers lm" --precisions bf16 \
        --fused-attention both --out "$OUT/gpu-attention-bf16.md"
    echo "rc=$?"
fi
if [[ $parts == *" gau-lstm "* ]]; then
    echo "== gau, lstm with the own kernels and with cuDNN, convmixer (tf32)"
    timeout "${BENCH_S:-300}" bash bench/gpu.sh --no-build --no-tests --models "gau lstm lstm-cudnn convmixer" --precisions tf32 \
        --out "$OUT/gpu-gau-lstm-tf32.md"
    echo "rc=$?"
fi
if [[ $parts == *" sanitize "* ]]; then
    echo "== compute-sanitizer: memcheck over [flash], racecheck over a tensor-core case"
    timeout "${SANITIZE_S:-120}" compute-sanitizer --tool memcheck --print-limit 20 tests/run_tests "[flash]" 2>&1 |
        grep -E "ERROR SUMMARY|========= (Invalid|Race|Error)|passed|failed" | head -n 30
    timeout "${SANITIZE_S:-120}" compute-sanitizer --tool racecheck --print-limit 20 tests/run_tests \
        "*tensor cores: the same bits*" 2>&1 |
        grep -E "ERROR SUMMARY|RACECHECK SUMMARY|hazard|passed|failed" | head -n 30
fi
if [[ $parts == *" kernels "* ]]; then
    echo "== ncu: the kernels of one eager ViT-Tiny step (tf32, batch 128)"
    timeout "${KERNELS_S:-150}" ncu --csv --page raw --print-units base --clock-control none \
        --metrics "${KERNEL_METRICS:-gpu__time_duration.sum}" \
        apps/bench vit --dim 192 --depth 12 --heads 3 --patch 2 --batch 128 --steps 1 --warmup 0 --device cuda \
        --precision tf32 --cuda-graph off > "$OUT/kernels-vit.csv" 2> "$OUT/kernels-vit.err"
    echo "ncu rc=$?"
    python3 tools/kernel_table.py "$OUT/kernels-vit.csv" --top 40 > "$OUT/kernels-vit.md" && head -n 30 "$OUT/kernels-vit.md"
fi
grep -h '^| ' "$OUT"/gpu-*.md 2>/dev/null
date -u
