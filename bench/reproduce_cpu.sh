#!/usr/bin/env bash
# bench/reproduce_cpu.sh: the reduced-scale runs reported in docs/RESULTS.md, exactly as they ran
# on 2026-11-23 (2-core AMD EPYC, one run at a time, in this order), each into its own runs/ folder
# (config.json, metrics.jsonl, checkpoints, result.json). About 2 hours on 2 cores.
#
#   INITLAB_DATA=../shared/data bash bench/reproduce_cpu.sh
#   /usr/bin/python3 tools/results.py runs/vit          # then the tables (runs/lm, runs/gau, ...)
#
# OMP_WAIT_POLICY=PASSIVE: OpenMP threads sleep at barriers instead of spinning, so a run does not
# crawl when another process (a build, a test) takes one of the cores. The original runs also had
# --threads 2 (this machine's cores); without it every core is used.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${INITLAB_DATA:?set INITLAB_DATA to the folder that holds cifar10-jpeg, ptb and ptb-char}"
export INITLAB_DATA OMP_WAIT_POLICY=PASSIVE
make
./apps/train_vit --dataset folder --data-dir "$INITLAB_DATA"/cifar10-jpeg --dim 96 --depth 6 --heads 3 --patch 4 --pool avg --batch-size 128 --epochs 4 --warmup-epochs 1 --lr 1e-3 --weight-decay 0.05 --randaug 0 --train-subset 10000 --seed 0 --init mimetic --out runs/vit/mimetic-s0
./apps/train_vit --dataset folder --data-dir "$INITLAB_DATA"/cifar10-jpeg --dim 96 --depth 6 --heads 3 --patch 4 --pool avg --batch-size 128 --epochs 4 --warmup-epochs 1 --lr 1e-3 --weight-decay 0.05 --randaug 0 --train-subset 10000 --seed 0 --init timm --out runs/vit/timm-s0
./apps/train_vit --dataset folder --data-dir "$INITLAB_DATA"/cifar10-jpeg --dim 96 --depth 6 --heads 3 --patch 4 --pool avg --batch-size 128 --epochs 4 --warmup-epochs 1 --lr 1e-3 --weight-decay 0.05 --randaug 0 --train-subset 10000 --seed 0 --init impulse3 --out runs/vit/impulse3-s0
./apps/train_vit --dataset folder --data-dir "$INITLAB_DATA"/cifar10-jpeg --dim 96 --depth 6 --heads 3 --patch 4 --pool avg --batch-size 128 --epochs 4 --warmup-epochs 1 --lr 1e-3 --weight-decay 0.05 --randaug 0 --train-subset 10000 --seed 0 --init torch --out runs/vit/torch-s0
./apps/train_vit --dataset folder --data-dir "$INITLAB_DATA"/cifar10-jpeg --dim 96 --depth 6 --heads 3 --patch 4 --pool avg --batch-size 128 --epochs 4 --warmup-epochs 1 --lr 1e-3 --weight-decay 0.05 --randaug 0 --train-subset 10000 --seed 0 --init impulse5 --out runs/vit/impulse5-s0
./apps/train_vit --dataset folder --data-dir "$INITLAB_DATA"/cifar10-jpeg --dim 96 --depth 6 --heads 3 --patch 4 --pool avg --batch-size 128 --epochs 4 --warmup-epochs 1 --lr 1e-3 --weight-decay 0.05 --randaug 0 --train-subset 10000 --seed 0 --init impulse3-closed --out runs/vit/impulse3-closed-s0
./apps/train_vit --dataset folder --data-dir "$INITLAB_DATA"/cifar10-jpeg --dim 96 --depth 6 --heads 3 --patch 4 --pool avg --batch-size 128 --epochs 4 --warmup-epochs 1 --lr 1e-3 --weight-decay 0.05 --randaug 0 --train-subset 10000 --seed 0 --init mimetic --no-mimetic-vo --out runs/vit/mimetic-qkonly-s0
./apps/train_vit --dataset folder --data-dir "$INITLAB_DATA"/cifar10-jpeg --dim 96 --depth 6 --heads 3 --patch 4 --pool avg --batch-size 128 --epochs 4 --warmup-epochs 1 --lr 1e-3 --weight-decay 0.05 --randaug 0 --train-subset 10000 --seed 0 --init mimetic --no-mimetic-qk --out runs/vit/mimetic-voonly-s0
./apps/train_lm --dataset ptb-char --model transformer --dim 128 --depth 4 --heads 4 --seq-len 128 --batch-size 32 --epochs 1 --max-steps 400 --lr 2e-3 --warmup-steps 50 --log-every 25 --init torch --out runs/lm/char-torch
./apps/train_lm --dataset ptb-char --model transformer --dim 128 --depth 4 --heads 4 --seq-len 128 --batch-size 32 --epochs 1 --max-steps 400 --lr 2e-3 --warmup-steps 50 --log-every 25 --init mimetic --out runs/lm/char-mimetic
./apps/train_lm --dataset ptb-char --model transformer --dim 128 --depth 4 --heads 4 --seq-len 128 --batch-size 32 --epochs 1 --max-steps 400 --lr 2e-3 --warmup-steps 50 --log-every 25 --init smallemb --out runs/lm/char-smallemb
./apps/train_lm --dataset ptb-char --model transformer --dim 128 --depth 4 --heads 4 --seq-len 128 --batch-size 32 --epochs 1 --max-steps 400 --lr 2e-3 --warmup-steps 50 --log-every 25 --init mimetic+smallemb --out runs/lm/char-mimetic+smallemb
./apps/train_lm --dataset ptb-char --dim 128 --seq-len 128 --batch-size 16 --epochs 1 --max-steps 300 --lr 1e-3 --log-every 25 --init torch --model gau --depth 24 --s 64 --out runs/gau/gau24-postnorm-nowarmup
./apps/train_lm --dataset ptb-char --dim 128 --seq-len 128 --batch-size 16 --epochs 1 --max-steps 300 --lr 1e-3 --log-every 25 --init torch --untied --model gau --depth 24 --s 64 --out runs/gau/untied-gau24-postnorm-nowarmup
./apps/train_lm --dataset ptb-char --dim 128 --seq-len 128 --batch-size 16 --epochs 1 --max-steps 300 --lr 1e-3 --log-every 25 --init torch --untied --model transformer --post-norm --depth 12 --heads 4 --out runs/gau/untied-postln12-nowarmup
./apps/train_lm --dataset ptb-char --dim 128 --seq-len 128 --batch-size 16 --epochs 1 --max-steps 300 --lr 1e-3 --log-every 25 --init torch --untied --model transformer --post-norm --depth 12 --heads 4 --warmup-steps 100 --out runs/gau/untied-postln12-warmup100
