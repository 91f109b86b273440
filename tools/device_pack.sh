#!/usr/bin/env bash
# tools/device_pack.sh: gets a CUDA build ready to travel to a lent GPU machine (the `device` tool's
# `run`, which copies the working tree but not ../shared nor the host's packages). After `make`:
#
#   bash tools/device_pack.sh
#
# packs the host libraries the binaries link that a bare GPU machine lacks (OpenBLAS, gfortran,
# quadmath, fmt, gomp: whatever ldd resolves outside the CUDA toolkit) into .dev/libs.tar.xz, and
# prints the `run` call: carry .dev and the built binaries, run tools/device_check.sh there. cuBLAS
# and cuDNN come from the GPU machine (its toolkit, or the nvidia-* wheels of its PyTorch), so the
# build's cuDNN headers must be a 9.x the machine's library accepts (9.19 headers ran against the
# H200 machine's wheel on 2026-11-26).
#
# .dev/ must be git-ignored (add `/.dev/` to .git/info/exclude): it is the session's, not the project's.
set -euo pipefail
cd "$(dirname "$0")/.."
bins="tests/run_tests apps/bench apps/train_vit apps/train_lm"
for b in $bins; do [ -x "$b" ] || { echo "tools/device_pack.sh: $b not built (run make first)" >&2; exit 2; }; done
git check-ignore -q .dev || { echo "tools/device_pack.sh: .dev is not git-ignored; add /.dev/ to .git/info/exclude" >&2; exit 2; }
mkdir -p .dev/lib
# Every library the binaries resolve, except the C runtime and the CUDA toolkit's own.
for b in $bins; do ldd "$b"; done | awk '/=> \// {print $3}' | sort -u |
    grep -Ev '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*|libstdc\+\+|libgcc_s)\.so' |
    grep -Ev '/usr/local/cuda|libcu(da|dart|blas|blasLt|dnn)[^/]*\.so' |
    while read -r lib; do cp -L "$lib" .dev/lib/; done
tar -cJf .dev/libs.tar.xz -C .dev/lib .
echo "tools/device_pack.sh: .dev/libs.tar.xz ($(du -h .dev/libs.tar.xz | cut -f1)): $(ls .dev/lib | tr '\n' ' ')"
rm -rf .dev/lib
cat <<'RUN'
Then, with the device tool (one call; it writes its results under $OUT):
  run(command="bash tools/device_check.sh", timeout_s=540,
      carry=[".dev", "tests/run_tests", "apps/bench", "apps/train_vit", "apps/train_lm"])
RUN
