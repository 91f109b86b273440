#!/usr/bin/env bash
# bench/gpu.sh: the GPU benchmark kit. One command on a machine with an NVIDIA GPU and the CUDA
# toolkit: builds (make), runs the [cuda] parity suite on the device, then times a training step
# of every model family with apps/bench (fp32, tf32 and bf16; --profile for the op table), and
# with tools/bench_torch.py in PyTorch eager and torch.compile where a CUDA PyTorch is importable
# (it has twins of all five families; its bf16 is autocast). Writes one markdown table (the
# attention kernels each run took, ms/step, items/s, peak device memory, ours and PyTorch's, ratios
# to each PyTorch mode, and a variant's ratio to its model's row) with the device name and date.
#
#   bash bench/gpu.sh                       # the full kit, table in bench/results/gpu-<date>.md
#   bash bench/gpu.sh --smoke               # tiny models, one [cuda] test, no PyTorch
#   bash bench/gpu.sh --smoke --emulated    # the same on the CUDA emulator (make emu): CI's check
#                                           # that the kit runs, with no GPU anywhere
# Options: --out FILE (the table), --no-build, --no-tests, --no-torch (no PyTorch runs: when
# another table of the same call has them), --models "vit lm gau lstm" and
# --precisions "fp32 tf32 bf16" (a subset, for a short lease), --fused-attention off|on|both (the
# attention path: off, the default, is the unfused one (INITLAB_FUSED_ATTENTION=0); on the fused
# kernels (=1), which under tf32/bf16 are the tensor-core ones; both: two rows per model and
# precision, same call, same card). Models not in the default list: convmixer, ConvMixer-256/8 at
# kernel 9, patch 2 (its 1×1 and depthwise convs and batch norms through cuDNN where the build has
# it, INITLAB_CUDNN=0 for the own kernels); lm4k, the LM 512/4/8 at seq 4096, batch 2; lstm-cudnn, the lstm model with INITLAB_CUDNN_LSTM=1 (cuDNN's LSTM instead
# of the own LSTM kernels and cuBLAS, the default); vit-nosplit, vit with INITLAB_FLASH_SPLIT_DQ=0 (the fused
# backward's dq kernel instead of the split dq); vit-async, vit with INITLAB_FLASH_ASYNC=1 (the TF32
# flash kernels' double-buffered asynchronous copies instead of the default synchronous loads);
# vit-narrow, vit with INITLAB_FLASH_NARROW_FORWARD=1 (the tensor-core forward at 32 keys a step);
# vit-bf16fast, vit with INITLAB_BF16_GEMM_FAST=1 (under bf16, fp32 inputs that cuBLAS rounds in
# its kernels, CUBLAS_COMPUTE_32F_FAST_16BF, instead of a conversion pass into bf16 scratch);
# vit-lt, vit with INITLAB_LT_BIAS=1 (the linears' bias by cuBLASLt's epilogue instead of bias
# rows and a GEMM with beta = 1, and their gradient by its BGRADB epilogue instead of column sums); vit-noedge, vit with INITLAB_ATTENTION_EDGE_KEYS=0 (the unfused
# attention's GEMMs over all 257 keys instead of 256 and the edge key in the softmax kernels);
# vit-pointers and lm-pointers, vit and lm with INITLAB_GEMM_POINTER_BATCH=1 (each attention GEMM
# one cuBLAS call over every head from address arrays, instead of a call per head); vit-tune and
# lm-tune, vit and lm with INITLAB_GEMM_AUTOTUNE=1 (each GEMM shape through cuBLASLt with the
# fastest of its heuristic's candidates, timed at the first step); lm-ce, lm with INITLAB_LINEAR_CE=0
# (the logits made whole and cross_entropy, instead of the output layer and the loss chunk by chunk). The variants' PyTorch rows are
# their model's. E.g. a short
# comparison of the paths:
#   bash bench/gpu.sh --no-tests --models "vit lm lm4k lstm lstm-cudnn" --precisions tf32 --fused-attention both
# Budget: the full kit is sized to finish within 10 minutes on an H100 (the [cuda] suite ~30 s on
# an H200, then per model and precision our run and PyTorch eager ~8 s each, torch.compile ~25 s
# with its compilation).
set -euo pipefail
cd "$(dirname "$0")/.."

smoke=0 emulated=0 build=1 tests=1 torch=1 out="" models="vit lm gau lstm" only_precisions="" fused_attention=off
while [ $# -gt 0 ]; do
    case "$1" in
        --smoke) smoke=1 ;;
        --emulated) emulated=1 ;;
        --no-build) build=0 ;;
        --no-tests) tests=0 ;;
        --no-torch) torch=0 ;;
        --out) out="$2"; shift ;;
        --models) models="$2"; shift ;;
        --precisions) only_precisions="$2"; shift ;;
        --fused-attention) fused_attention="$2"; shift ;;
        -h|--help) awk 'NR > 1 && /^set -euo pipefail/ { exit } NR > 1' "$0"; exit 0 ;;  # the header
        *) echo "bench/gpu.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
case "$fused_attention" in
    off) fused_modes="0" ;;
    on) fused_modes="1" ;;
    both) fused_modes="0 1" ;;
    *) echo "bench/gpu.sh: --fused-attention off|on|both, not $fused_attention" >&2; exit 2 ;;
esac
# Variants: another path of a model whose PyTorch rows are that model's (a vit-* or lm-* variant:
# vit or lm with the switch model_env names).
variant_of_model() { case "$1" in lstm-cudnn | vit-* | lm-*) return 0 ;; *) return 1 ;; esac; }
model_env() {  # extra environment of a model
    case "$1" in
        lstm-cudnn) echo INITLAB_CUDNN_LSTM=1 ;;
        vit-nosplit) echo INITLAB_FLASH_SPLIT_DQ=0 ;;
        vit-async) echo INITLAB_FLASH_ASYNC=1 ;;
        vit-bf16fast) echo INITLAB_BF16_GEMM_FAST=1 ;;
        vit-lt) echo INITLAB_LT_BIAS=1 ;;
        vit-narrow) echo INITLAB_FLASH_NARROW_FORWARD=1 ;;
        vit-noedge) echo INITLAB_ATTENTION_EDGE_KEYS=0 ;;
        vit-pointers | lm-pointers) echo INITLAB_GEMM_POINTER_BATCH=1 ;;
        vit-tune | lm-tune) echo INITLAB_GEMM_AUTOTUNE=1 ;;
        lm-ce) echo INITLAB_LINEAR_CE=0 ;;
    esac
}
for model in $models; do  # refused before anything runs
    case "$model" in
        vit | lm | gau | lstm | lm4k | lstm-cudnn | convmixer) ;;
        vit-* | lm-*) [ -n "$(model_env "$model")" ] || { echo "bench/gpu.sh: unknown variant $model" >&2; exit 2; } ;;
        *) echo "bench/gpu.sh: unknown model $model (see --help)" >&2; exit 2 ;;
    esac
done
date_tag=$(date -u +%Y-%m-%d)
[ -n "$out" ] || out="bench/results/gpu-$date_tag$([ $smoke = 1 ] && echo -smoke).md"
mkdir -p "$(dirname "$out")"
logdir=$(mktemp -d)
trap 'rm -rf "$logdir"' EXIT

if [ $emulated = 1 ]; then
    bin=build/emu/apps tests_bin=build/emu/tests/run_tests
    [ $build = 1 ] && make emu
else
    bin=apps tests_bin=tests/run_tests
    if [ $build = 1 ]; then make; fi
fi
[ -x "$bin/bench" ] || { echo "bench/gpu.sh: $bin/bench not found (build first, or drop --no-build)" >&2; exit 2; }

# The [cuda] suite on the device (whole in the full kit, one case in a smoke run).
suite="not run (--no-tests)"
if [ $tests = 1 ]; then
    filter='[cuda]'
    [ $smoke = 1 ] && filter='cuda: the suite names the device it runs on'
    if "$tests_bin" "$filter" > "$logdir/suite.log" 2>&1; then
        suite=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$logdir/suite.log" | tail -n1)
    else
        cat "$logdir/suite.log" >&2
        echo "bench/gpu.sh: the [cuda] suite failed on this device; no benchmark is worth reading" >&2
        exit 1
    fi
fi

# Model sizes: the defaults of apps/bench (ViT 192/6/3 p4, LM 256/4/4 seq 128 ...) at GPU batch
# sizes, or tiny ones for a smoke run.
if [ $smoke = 1 ]; then
    sizes_vit="--dim 16 --depth 1 --heads 2 --patch 8 --batch 2"
    sizes_lm="--dim 16 --depth 1 --heads 2 --seq 8 --batch 2 --vocab 11"
    steps="--steps 1 --warmup 0"
    precisions="fp32 tf32 bf16"
    torch_ok=0
else
    sizes_vit="--dim 192 --depth 12 --heads 3 --patch 2 --batch 128"
    sizes_lm="--dim 512 --depth 8 --heads 8 --seq 256 --batch 32 --vocab 10000"
    steps="--steps 20 --warmup 5"
    precisions="fp32 tf32 bf16"
    torch_ok=0
    if [ $torch = 1 ] && python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
        torch_ok=1
    fi
fi
[ -n "$only_precisions" ] && precisions="$only_precisions"
sizes_lm4k="--dim 512 --depth 4 --heads 8 --seq 4096 --batch 2 --vocab 10000"
[ $smoke = 1 ] && sizes_lm4k="--dim 32 --depth 1 --heads 1 --seq 64 --batch 1 --vocab 11"  # head dim 32: the fused kernels run
sizes_convmixer="--dim 256 --depth 8 --kernel 9 --patch 2 --batch 128"
[ $smoke = 1 ] && sizes_convmixer="--dim 8 --depth 1 --kernel 3 --patch 8 --batch 2"
sizes_for() {  # gau, lstm ignore --heads
    case "$1" in
        vit | vit-*) echo "$sizes_vit" ;;
        lm4k) echo "$sizes_lm4k" ;;
        convmixer) echo "$sizes_convmixer" ;;
        *) echo "$sizes_lm" ;;
    esac
}
app_model() { case "$1" in lm4k | lm-*) echo lm ;; lstm-cudnn) echo lstm ;; vit-*) echo vit ;; *) echo "$1" ;; esac; }
# One field of a JSON line (numbers and strings), without jq.
field() { python3 -c 'import json,sys; v=json.loads(sys.argv[1]).get(sys.argv[2]); print("" if v is None else (f"{v:.4g}" if isinstance(v,float) else v))' "$1" "$2"; }
ratio() { python3 -c 'import sys; a,b=sys.argv[1],sys.argv[2]; print(f"{float(b)/float(a):.2f}" if a and b else "")' "$1" "$2"; }

device=""
rows=""
runs=""
declare -A base_ms  # the models' own rows' ms, by "model|precision|fused", for their variants' ratio
for model in $models; do
    for prec in $precisions; do
        first=1
        for fa in $fused_modes; do
            fa_name=$([ "$fa" = 1 ] && echo on || echo off)
            args="$(app_model $model) $(sizes_for $model) $steps --device cuda --precision $prec --profile 2"
            line=$(env $(model_env $model) INITLAB_FUSED_ATTENTION=$fa "$bin/bench" $args 2> "$logdir/$model-$prec-fused-$fa_name.profile" | tail -n1) || {
                cat "$logdir/$model-$prec-fused-$fa_name.profile" >&2
                echo "bench/gpu.sh: INITLAB_FUSED_ATTENTION=$fa apps/bench $args failed" >&2; exit 1; }
            device=$(field "$line" device)
            ms=$(field "$line" ms_per_step)
            # the run's whole apps/bench line, less its profile (the counters the table has no column for)
            runs+="- $model $prec fused $fa_name: \`$(python3 -c 'import json,sys; d=json.loads(sys.argv[1]); d.pop("profile", None); print(json.dumps(d))' "$line")\`"$'\n'

            # PyTorch once per model and precision (its attention does not change with ours; lstm-cudnn
            # and the vit-* and lm-* variants are compared with the lstm, vit and lm rows').
            if [ $first = 1 ]; then
                eager="" compiled="" eager_mb="" compiled_mb=""
                if [ $torch_ok = 1 ] && ! variant_of_model "$model"; then
                    targs="$(app_model $model) $(sizes_for $model) $steps --device cuda --precision $prec"
                    tline=$(python3 tools/bench_torch.py $targs --mode eager | tail -n1) || tline=""
                    if [ -n "$tline" ]; then
                        eager=$(field "$tline" ms_per_step) || eager=""
                        eager_mb=$(field "$tline" peak_device_mb) || eager_mb=""
                    fi
                    tline=$(python3 tools/bench_torch.py $targs --mode compile | tail -n1) || tline=""
                    if [ -n "$tline" ]; then
                        compiled=$(field "$tline" ms_per_step) || compiled=""
                        compiled_mb=$(field "$tline" peak_device_mb) || compiled_mb=""
                    fi
                fi
            fi
            first=0
            kernels=$(field "$line" attention_kernels)
            vs_base="–"
            if variant_of_model "$model"; then
                base="${base_ms[$(app_model $model)|$prec|$fa]:-}"
                [ -n "$base" ] && vs_base=$(ratio "$ms" "$base")
            else
                base_ms["$model|$prec|$fa"]=$ms
            fi
            rows+="| $model | $prec | $fa_name | ${kernels:-–} | $ms | $(field "$line" ms_per_step_eager) | $(field "$line" items_per_s) | $(field "$line" peak_device_mb) | ${eager_mb:-–} | ${compiled_mb:-–} | $(field "$line" cudnn_calls) | $(field "$line" params) | ${eager:-–} | ${compiled:-–} | $(ratio "$ms" "$eager") | $(ratio "$ms" "$compiled") | $vs_base |"$'\n'
        done
    done
done

{
    echo "# GPU benchmark: $device, $date_tag"
    echo
    echo "\`bash bench/gpu.sh$([ $smoke = 1 ] && echo ' --smoke')$([ $emulated = 1 ] && echo ' --emulated')\` at commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)."
    echo "[cuda] suite on this device: $suite."
    [ $torch_ok = 1 ] || echo "PyTorch with CUDA: not importable here (or a smoke run, or --no-torch): no PyTorch columns."
    echo
    echo "| model | precision | fused attention | attention kernels | ms/step | without CUDA graph | items/s | peak device MB | PyTorch eager peak MB | torch.compile peak MB | cuDNN calls | params | PyTorch eager ms | torch.compile ms | eager / ours | compile / ours | base / variant |"
    echo "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    printf "%s" "$rows"
    echo
    lm4k_note=""
    case " $models " in *" lm4k "*) lm4k_note=", lm4k \`$sizes_lm4k\`" ;; esac
    case " $models " in *" convmixer "*) lm4k_note+=", convmixer \`$sizes_convmixer\`" ;; esac
    echo "Sizes: vit \`$sizes_vit\`, lm/gau/lstm/lstm-cudnn \`$sizes_lm\`$lm4k_note, $steps. lstm: the own LSTM kernels; lstm-cudnn: INITLAB_CUDNN_LSTM=1, cuDNN's LSTM where the build has cuDNN (fp32, tf32)."
    echo "attention kernels: what the run took (apps/bench's attention_kernels: unfused, or flash with fp32 / tf32 / bf16, async for the asynchronous copies, split-dq for the split backward; – for a model without the attention op)."
    echo "fused attention: INITLAB_FUSED_ATTENTION=0 (off: two batched GEMMs and a softmax kernel) or 1 (on: engine/cuda/flash_attention.cu; fp32 kernels under fp32, the tensor-core kernels under tf32 (TF32 inputs) and bf16 (bf16 inputs)). vit-nosplit: vit with INITLAB_FLASH_SPLIT_DQ=0; vit-async: vit with INITLAB_FLASH_ASYNC=1; vit-bf16fast: vit with INITLAB_BF16_GEMM_FAST=1 (under bf16, cuBLAS rounds the fp32 inputs in its kernels); vit-lt: vit with INITLAB_LT_BIAS=1 (linear biases by cuBLASLt's epilogue); vit-narrow: vit with INITLAB_FLASH_NARROW_FORWARD=1 (the tensor-core forward at 32 keys a step); vit-noedge: vit with INITLAB_ATTENTION_EDGE_KEYS=0 (the unfused GEMMs over every key); vit-pointers, lm-pointers: vit, lm with INITLAB_GEMM_POINTER_BATCH=1 (each attention GEMM one call over every head); vit-tune, lm-tune: vit, lm with INITLAB_GEMM_AUTOTUNE=1 (GEMMs through cuBLASLt, autotuned); lm-ce: lm with INITLAB_LINEAR_CE=0 (whole logits and cross_entropy)."
    echo "ms/step: the step replayed from a CUDA graph where it applies (vit, lm, gau), else eager. A ratio above 1 means this engine is faster; base / variant: a variant's model row's ms (same precision and fused setting, this table) over the variant's, above 1 where the variant is faster. Op profiles (apps/bench --profile 2, eager, device time from events):"
    echo
    echo "Each run's apps/bench line, less its profile (lt_bias_calls: GEMMs that took a cuBLASLt bias epilogue; gemm_tunings: shapes autotuned):"
    echo
    printf '%s' "$runs"
    for f in "$logdir"/*.profile; do
        echo
        echo '```'
        grep -v '^{' "$f" | head -n 14
        echo '```'
    done
} > "$out"
echo "bench/gpu.sh: wrote $out"
