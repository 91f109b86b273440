#!/usr/bin/env bash
# bench/reproduce_cpu.sh: the reduced-scale runs reported in docs/RESULTS.md, exactly as they ran
# on 2026-11-23 (2-core AMD EPYC, one run at a time, in this order), each into its own runs/ folder
# (config.json, metrics.jsonl, checkpoints, result.json). The first block takes about 2 hours on 2 cores; the blocks added later say how long they take.
#
#   INITLAB_DATA=../shared/data bash bench/reproduce_cpu.sh
#   /usr/bin/python3 tools/results.py runs/vit          # then the tables (runs/lm, runs/gau, ...)
#
# Every training command has --auto-resume (added 2026-11-28; it does not change a run): when the
# script stops (a reboot, Ctrl-C), start it again and it skips the finished runs, continues the
# interrupted one and goes on.
#
# OMP_WAIT_POLICY=PASSIVE: OpenMP threads sleep at barriers instead of spinning, so a run does not
# crawl when another process (a build, a test) takes one of the cores. The original runs also had
# --threads 2 (this machine's cores); without it every core is used.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${INITLAB_DATA:?set INITLAB_DATA to the folder that holds cifar10-jpeg, ptb and ptb-char}"
export INITLAB_DATA OMP_WAIT_POLICY=PASSIVE
make
./apps/train_vit --auto-resume --dataset folder --data-dir "$INITLAB_DATA"/cifar10-jpeg --dim 96 --depth 6 --heads 3 --patch 4 --pool avg --batch-size 128 --epochs 4 --warmup-epochs 1 --lr 1e-3 --weight-decay 0.05 --randaug 0 --train-subset 10000 --seed 0 --init mimetic --out runs/vit/mimetic-s0
./apps/train_vit --auto-resume --dataset folder --data-dir "$INITLAB_DATA"/cifar10-jpeg --dim 96 --depth 6 --heads 3 --patch 4 --pool avg --batch-size 128 --epochs 4 --warmup-epochs 1 --lr 1e-3 --weight-decay 0.05 --randaug 0 --train-subset 10000 --seed 0 --init timm --out runs/vit/timm-s0
./apps/train_vit --auto-resume --dataset folder --data-dir "$INITLAB_DATA"/cifar10-jpeg --dim 96 --depth 6 --heads 3 --patch 4 --pool avg --batch-size 128 --epochs 4 --warmup-epochs 1 --lr 1e-3 --weight-decay 0.05 --randaug 0 --train-subset 10000 --seed 0 --init impulse3 --out runs/vit/impulse3-s0
./apps/train_vit --auto-resume --dataset folder --data-dir "$INITLAB_DATA"/cifar10-jpeg --dim 96 --depth 6 --heads 3 --patch 4 --pool avg --batch-size 128 --epochs 4 --warmup-epochs 1 --lr 1e-3 --weight-decay 0.05 --randaug 0 --train-subset 10000 --seed 0 --init torch --out runs/vit/torch-s0
./apps/train_vit --auto-resume --dataset folder --data-dir "$INITLAB_DATA"/cifar10-jpeg --dim 96 --depth 6 --heads 3 --patch 4 --pool avg --batch-size 128 --epochs 4 --warmup-epochs 1 --lr 1e-3 --weight-decay 0.05 --randaug 0 --train-subset 10000 --seed 0 --init impulse5 --out runs/vit/impulse5-s0
./apps/train_vit --auto-resume --dataset folder --data-dir "$INITLAB_DATA"/cifar10-jpeg --dim 96 --depth 6 --heads 3 --patch 4 --pool avg --batch-size 128 --epochs 4 --warmup-epochs 1 --lr 1e-3 --weight-decay 0.05 --randaug 0 --train-subset 10000 --seed 0 --init impulse3-closed --out runs/vit/impulse3-closed-s0
./apps/train_vit --auto-resume --dataset folder --data-dir "$INITLAB_DATA"/cifar10-jpeg --dim 96 --depth 6 --heads 3 --patch 4 --pool avg --batch-size 128 --epochs 4 --warmup-epochs 1 --lr 1e-3 --weight-decay 0.05 --randaug 0 --train-subset 10000 --seed 0 --init mimetic --no-mimetic-vo --out runs/vit/mimetic-qkonly-s0
./apps/train_vit --auto-resume --dataset folder --data-dir "$INITLAB_DATA"/cifar10-jpeg --dim 96 --depth 6 --heads 3 --patch 4 --pool avg --batch-size 128 --epochs 4 --warmup-epochs 1 --lr 1e-3 --weight-decay 0.05 --randaug 0 --train-subset 10000 --seed 0 --init mimetic --no-mimetic-qk --out runs/vit/mimetic-voonly-s0
./apps/train_lm --auto-resume --dataset ptb-char --model transformer --dim 128 --depth 4 --heads 4 --seq-len 128 --batch-size 32 --epochs 1 --max-steps 400 --lr 2e-3 --warmup-steps 50 --log-every 25 --init torch --out runs/lm/char-torch
./apps/train_lm --auto-resume --dataset ptb-char --model transformer --dim 128 --depth 4 --heads 4 --seq-len 128 --batch-size 32 --epochs 1 --max-steps 400 --lr 2e-3 --warmup-steps 50 --log-every 25 --init mimetic --out runs/lm/char-mimetic
./apps/train_lm --auto-resume --dataset ptb-char --model transformer --dim 128 --depth 4 --heads 4 --seq-len 128 --batch-size 32 --epochs 1 --max-steps 400 --lr 2e-3 --warmup-steps 50 --log-every 25 --init smallemb --out runs/lm/char-smallemb
./apps/train_lm --auto-resume --dataset ptb-char --model transformer --dim 128 --depth 4 --heads 4 --seq-len 128 --batch-size 32 --epochs 1 --max-steps 400 --lr 2e-3 --warmup-steps 50 --log-every 25 --init mimetic+smallemb --out runs/lm/char-mimetic+smallemb
./apps/train_lm --auto-resume --dataset ptb-char --dim 128 --seq-len 128 --batch-size 16 --epochs 1 --max-steps 300 --lr 1e-3 --log-every 25 --init torch --model gau --depth 24 --s 64 --out runs/gau/gau24-postnorm-nowarmup
./apps/train_lm --auto-resume --dataset ptb-char --dim 128 --seq-len 128 --batch-size 16 --epochs 1 --max-steps 300 --lr 1e-3 --log-every 25 --init torch --untied --model gau --depth 24 --s 64 --out runs/gau/untied-gau24-postnorm-nowarmup
./apps/train_lm --auto-resume --dataset ptb-char --dim 128 --seq-len 128 --batch-size 16 --epochs 1 --max-steps 300 --lr 1e-3 --log-every 25 --init torch --untied --model transformer --post-norm --depth 12 --heads 4 --out runs/gau/untied-postln12-nowarmup
./apps/train_lm --auto-resume --dataset ptb-char --dim 128 --seq-len 128 --batch-size 16 --epochs 1 --max-steps 300 --lr 1e-3 --log-every 25 --init torch --untied --model transformer --post-norm --depth 12 --heads 4 --warmup-steps 100 --out runs/gau/untied-postln12-warmup100
./apps/train_vit --auto-resume --dataset folder --data-dir "$INITLAB_DATA"/cifar10-jpeg --dim 96 --depth 6 --heads 3 --patch 4 --pool avg --batch-size 128 --epochs 4 --warmup-epochs 1 --lr 1e-3 --weight-decay 0.05 --randaug 0 --train-subset 10000 --seed 1 --init mimetic --out runs/vit/mimetic-s1
./apps/train_vit --auto-resume --dataset folder --data-dir "$INITLAB_DATA"/cifar10-jpeg --dim 96 --depth 6 --heads 3 --patch 4 --pool avg --batch-size 128 --epochs 4 --warmup-epochs 1 --lr 1e-3 --weight-decay 0.05 --randaug 0 --train-subset 10000 --seed 1 --init timm --out runs/vit/timm-s1
./apps/train_vit --auto-resume --dataset folder --data-dir "$INITLAB_DATA"/cifar10-jpeg --dim 96 --depth 6 --heads 3 --patch 4 --pool avg --batch-size 128 --epochs 4 --warmup-epochs 1 --lr 1e-3 --weight-decay 0.05 --randaug 0 --train-subset 10000 --seed 0 --init lsuv --out runs/vit/lsuv-s0
./apps/train_vit --auto-resume --dataset folder --data-dir "$INITLAB_DATA"/cifar10-jpeg --dim 96 --depth 6 --heads 3 --patch 4 --pool avg --batch-size 128 --epochs 4 --warmup-epochs 1 --lr 1e-3 --weight-decay 0.05 --randaug 0 --train-subset 10000 --seed 0 --init relu-quantile --act-prob 0.5 --out runs/vit/rq0.5-s0
./apps/train_vit --auto-resume --dataset folder --data-dir "$INITLAB_DATA"/cifar10-jpeg --dim 96 --depth 6 --heads 3 --patch 4 --pool avg --batch-size 128 --epochs 4 --warmup-epochs 1 --lr 1e-3 --weight-decay 0.05 --randaug 0 --train-subset 10000 --seed 0 --init relu-quantile --act-prob 0.8 --out runs/vit/rq0.8-s0
./apps/train_vit --auto-resume --dataset folder --data-dir "$INITLAB_DATA"/cifar10-jpeg --dim 96 --depth 6 --heads 3 --patch 4 --pool avg --batch-size 128 --epochs 4 --warmup-epochs 1 --lr 1e-3 --weight-decay 0.05 --randaug 0 --train-subset 10000 --seed 1 --init impulse3 --out runs/vit/impulse3-s1
./apps/train_vit --auto-resume --dataset folder --data-dir "$INITLAB_DATA"/cifar10-jpeg --model convmixer-256-8 --dim 128 --depth 4 --kernel 3 --patch 2 --batch-size 128 --epochs 3 --warmup-epochs 1 --lr 5e-3 --weight-decay 0.05 --randaug 0 --train-subset 5000 --seed 0 --init torch --out runs/convmixer/trained
./apps/train_vit --auto-resume --dataset folder --data-dir "$INITLAB_DATA"/cifar10-jpeg --model convmixer-256-8 --dim 128 --depth 4 --kernel 3 --patch 2 --batch-size 128 --epochs 3 --warmup-epochs 1 --lr 5e-3 --weight-decay 0.05 --randaug 0 --train-subset 5000 --seed 0 --init torch --spatial impulse --freeze-spatial --out runs/convmixer/frozen-impulse
./apps/train_vit --auto-resume --dataset folder --data-dir "$INITLAB_DATA"/cifar10-jpeg --model convmixer-256-8 --dim 128 --depth 4 --kernel 3 --patch 2 --batch-size 128 --epochs 3 --warmup-epochs 1 --lr 5e-3 --weight-decay 0.05 --randaug 0 --train-subset 5000 --seed 0 --init torch --spatial box --freeze-spatial --out runs/convmixer/frozen-box
./apps/train_vit --auto-resume --dataset folder --data-dir "$INITLAB_DATA"/cifar10-jpeg --model convmixer-256-8 --dim 128 --depth 4 --kernel 3 --patch 2 --batch-size 128 --epochs 3 --warmup-epochs 1 --lr 5e-3 --weight-decay 0.05 --randaug 0 --train-subset 5000 --seed 0 --init torch --spatial random --freeze-spatial --out runs/convmixer/frozen-random
./apps/train_lm --auto-resume --dataset ptb --log-every 50 --model transformer --dim 128 --depth 4 --heads 4 --seq-len 64 --batch-size 32 --epochs 1 --max-steps 400 --lr 2e-3 --warmup-steps 50 --init torch --out runs/word/transformer-torch
./apps/train_lm --auto-resume --dataset ptb --log-every 50 --model lstm --preset small --seq-len 20 --batch-size 20 --opt sgd --lr 1 --schedule step --decay-start 1 --lr-decay 0.5 --clip-grad 5 --weight-decay 0 --epochs 1 --max-steps 1200 --init uniform:0.1 --out runs/word/lstm-small
./apps/train_vit --auto-resume --dataset folder --data-dir "$INITLAB_DATA"/cifar10-jpeg --dim 96 --depth 6 --heads 3 --patch 4 --pool avg --batch-size 128 --epochs 4 --warmup-epochs 1 --lr 1e-3 --weight-decay 0.05 --randaug 0 --train-subset 10000 --seed 0 --init mimetic --pos learned --out runs/vit/mimetic-learnedpe-s0
./apps/train_vit --auto-resume --dataset folder --data-dir "$INITLAB_DATA"/cifar10-jpeg --dim 96 --depth 6 --heads 3 --patch 4 --pool avg --batch-size 128 --epochs 4 --warmup-epochs 1 --lr 1e-3 --weight-decay 0.05 --randaug 0 --train-subset 10000 --seed 0 --init impulse3-closed --closed-rcond 0.1 --out runs/vit/impulse3-closed-rcond0.1-s0
./apps/train_vit --auto-resume --dataset folder --data-dir "$INITLAB_DATA"/cifar10-jpeg --model convmixer-256-8 --dim 128 --depth 4 --kernel 3 --patch 2 --batch-size 128 --epochs 3 --warmup-epochs 1 --lr 5e-3 --weight-decay 0.05 --randaug 0 --train-subset 5000 --seed 0 --init lsuv --out runs/convmixer/lsuv
./apps/train_vit --auto-resume --dataset folder --data-dir "$INITLAB_DATA"/cifar10-jpeg --model convmixer-256-8 --dim 128 --depth 4 --kernel 3 --patch 2 --batch-size 128 --epochs 3 --warmup-epochs 1 --lr 5e-3 --weight-decay 0.05 --randaug 0 --train-subset 5000 --seed 0 --init relu-quantile --act-prob 0.5 --out runs/convmixer/rq0.5
# Added 2026-11-24 (issue 14): Zaremba et al.'s small LSTM, the whole recipe (13 epochs, ~1.6 h on 2 cores).
./apps/train_lm --auto-resume --dataset ptb --model lstm --preset small --protocol bptt --seq-len 20 --batch-size 20 --opt sgd --lr 1 --loss-scale time-sum --schedule step --decay-start 4 --lr-decay 0.5 --clip-grad 5 --weight-decay 0 --epochs 13 --init uniform:0.1 --threads 2 --log-every 100 --out runs/word/lstm-small-zaremba

# Added 2026-11-25 (issue 14, part 2): transformer inits on PTB at a larger scale, and the GAU / Post-LN depth study.
# They ran two at a time, one thread each (--threads 1), in this order; each writes validation points every
# --eval-every steps on the first --eval-tokens of the valid split (tools/plot.py --eval-x step time draws them).
# The Post-LN depth probe that found the stalling depth (24 blocks; 12 trains, see section 3 of RESULTS.md):
./apps/train_lm --auto-resume --dataset ptb-char --dim 128 --seq-len 128 --batch-size 16 --epochs 1 --max-steps 150 --lr 1e-3 --log-every 25 --init torch --untied --model transformer --post-norm --heads 4 --threads 1 --depth 24 --out runs/depth/postln24-nowarmup
./apps/train_lm --auto-resume --dataset ptb-char --model transformer --dim 256 --depth 6 --heads 8 --protocol window --seq-len 256 --scored 192 --batch-size 16 --epochs 1 --max-steps 600 --lr 2e-3 --warmup-steps 60 --dropout 0.1 --eval-every 100 --eval-tokens 50000 --log-every 25 --threads 1 --init torch --out runs/char256/char-torch
./apps/train_lm --auto-resume --dataset ptb-char --model transformer --dim 256 --depth 6 --heads 8 --protocol window --seq-len 256 --scored 192 --batch-size 16 --epochs 1 --max-steps 600 --lr 2e-3 --warmup-steps 60 --dropout 0.1 --eval-every 100 --eval-tokens 50000 --log-every 25 --threads 1 --init mimetic --out runs/char256/char-mimetic
./apps/train_lm --auto-resume --dataset ptb-char --model transformer --dim 256 --depth 6 --heads 8 --protocol window --seq-len 256 --scored 192 --batch-size 16 --epochs 1 --max-steps 600 --lr 2e-3 --warmup-steps 60 --dropout 0.1 --eval-every 100 --eval-tokens 50000 --log-every 25 --threads 1 --init mimetic+smallemb --out runs/char256/char-mimetic+smallemb
./apps/train_lm --auto-resume --dataset ptb --model transformer --dim 256 --depth 6 --heads 8 --protocol window --seq-len 80 --scored 40 --batch-size 32 --epochs 1 --max-steps 400 --lr 2e-3 --warmup-steps 40 --dropout 0.1 --word-dropout 0.1 --eval-every 50 --eval-tokens 20000 --log-every 25 --threads 1 --init torch --out runs/word/word-torch
./apps/train_lm --auto-resume --dataset ptb --model transformer --dim 256 --depth 6 --heads 8 --protocol window --seq-len 80 --scored 40 --batch-size 32 --epochs 1 --max-steps 400 --lr 2e-3 --warmup-steps 40 --dropout 0.1 --word-dropout 0.1 --eval-every 50 --eval-tokens 20000 --log-every 25 --threads 1 --init mimetic --out runs/word/word-mimetic
./apps/train_lm --auto-resume --dataset ptb --model transformer --dim 256 --depth 6 --heads 8 --protocol window --seq-len 80 --scored 40 --batch-size 32 --epochs 1 --max-steps 400 --lr 2e-3 --warmup-steps 40 --dropout 0.1 --word-dropout 0.1 --eval-every 50 --eval-tokens 20000 --log-every 25 --threads 1 --init mimetic+smallemb --out runs/word/word-mimetic+smallemb
./apps/train_lm --auto-resume --dataset ptb-char --dim 128 --seq-len 128 --batch-size 16 --epochs 1 --max-steps 400 --lr 1e-3 --log-every 25 --eval-every 50 --eval-tokens 50000 --init torch --untied --threads 1 --model gau --depth 48 --s 64 --out runs/gau2/gau48-postnorm-nowarmup
./apps/train_lm --auto-resume --dataset ptb-char --dim 128 --seq-len 128 --batch-size 16 --epochs 1 --max-steps 750 --lr 1e-3 --log-every 25 --eval-every 50 --eval-tokens 50000 --init torch --untied --threads 1 --model transformer --post-norm --depth 24 --heads 4 --out runs/gau2/postln24-nowarmup
./apps/train_lm --auto-resume --dataset ptb-char --dim 128 --seq-len 128 --batch-size 16 --epochs 1 --max-steps 150 --lr 1e-3 --log-every 25 --init torch --untied --model transformer --post-norm --heads 4 --threads 1 --depth 24 --warmup-steps 100 --out runs/depth/postln24-warmup100

# Added 2026-11-27 (session 18): the remaining ViT baselines, on section 1's protocol, seeds 0 and 1,
# one at a time (RESULTS.md, "The other baselines"); and torch's second seed. About 40 minutes on 2 cores.
V=(./apps/train_vit --auto-resume --dataset folder --data-dir "$INITLAB_DATA"/cifar10-jpeg --dim 96 --depth 6 --heads 3 --patch 4 --pool avg --batch-size 128 --epochs 4 --warmup-epochs 1 --lr 1e-3 --weight-decay 0.05 --randaug 0 --train-subset 10000)
for seed in 0 1; do
  "${V[@]}" --seed $seed --init xavier --out runs/vit/xavier-s$seed
  "${V[@]}" --seed $seed --init kaiming --out runs/vit/kaiming-s$seed
  "${V[@]}" --seed $seed --init t-fixup --out runs/vit/t-fixup-s$seed
  "${V[@]}" --seed $seed --init timm+zero-attn --out runs/vit/zero-attn-s$seed
  "${V[@]}" --seed $seed --init timm --layerscale 0.1 --out runs/vit/layerscale0.1-s$seed
  "${V[@]}" --seed $seed --init attn-logits --out runs/vit/attn-logits-s$seed
done
"${V[@]}" --seed 1 --init torch --out runs/vit/torch-s1

# Added 2026-11-27 (session 18): section 2's char-PTB transformer with T-Fixup and Xavier (3 minutes together),
# and the Post-LN-24 no-warmup probe of section 3 with other inits, rotary PE and seed 1 (150 steps each,
# about 3 minutes each on 2 threads; RESULTS.md, "Which inits let it train without warmup").
./apps/train_lm --auto-resume --dataset ptb-char --model transformer --dim 128 --depth 4 --heads 4 --seq-len 128 --batch-size 32 --epochs 1 --max-steps 400 --lr 2e-3 --warmup-steps 50 --log-every 25 --init t-fixup --out runs/lm/char-tfixup
./apps/train_lm --auto-resume --dataset ptb-char --model transformer --dim 128 --depth 4 --heads 4 --seq-len 128 --batch-size 32 --epochs 1 --max-steps 400 --lr 2e-3 --warmup-steps 50 --log-every 25 --init xavier --out runs/lm/char-xavier
P=(./apps/train_lm --auto-resume --dataset ptb-char --dim 128 --seq-len 128 --batch-size 16 --epochs 1 --max-steps 150 --lr 1e-3 --log-every 25 --untied --model transformer --post-norm --heads 4 --depth 24)
"${P[@]}" --init t-fixup --out runs/depth/postln24-nowarmup-tfixup
"${P[@]}" --init torch+smallemb --out runs/depth/postln24-nowarmup-smallemb
"${P[@]}" --init mimetic --out runs/depth/postln24-nowarmup-mimetic
"${P[@]}" --pos rope --init torch --out runs/depth/postln24-nowarmup-rope
"${P[@]}" --pos rope --init torch+smallemb --out runs/depth/postln24-nowarmup-rope-smallemb
"${P[@]}" --init mimetic --no-mimetic-vo --out runs/depth/postln24-nowarmup-mimetic-qkonly
"${P[@]}" --init mimetic --no-mimetic-qk --out runs/depth/postln24-nowarmup-mimetic-voonly
"${P[@]}" --seed 1 --init torch --out runs/depth/postln24-nowarmup-s1
"${P[@]}" --seed 1 --init mimetic --out runs/depth/postln24-nowarmup-mimetic-s1
"${P[@]}" --seed 1 --init mimetic --no-mimetic-qk --out runs/depth/postln24-nowarmup-mimetic-voonly-s1
./apps/train_lm --auto-resume --dataset ptb-char --dim 128 --seq-len 128 --batch-size 16 --epochs 1 --max-steps 400 --lr 1e-3 --log-every 25 --eval-every 50 --eval-tokens 50000 --untied --model transformer --post-norm --heads 4 --depth 24 --init mimetic --no-mimetic-qk --out runs/depth/postln24-nowarmup-mimetic-voonly-400
"${P[@]}" --init mimetic --no-mimetic-qk --mimetic-beta2 0 --out runs/depth/postln24-nowarmup-vo-noiseonly
"${P[@]}" --init mimetic --no-mimetic-qk --mimetic-beta2 -0.4 --out runs/depth/postln24-nowarmup-vo-plusI
for beta in 0.1 0.2 0.8; do
  "${P[@]}" --init mimetic --no-mimetic-qk --mimetic-beta2 $beta --out runs/depth/postln24-nowarmup-vo-beta$beta
done
"${P[@]}" --init mimetic --no-mimetic-qk --mimetic-alpha2 0 --out runs/depth/postln24-nowarmup-vo-identityonly

# Added 2026-11-27 (session 19): RESULTS.md section 3, "The stall is rank collapse". tok_cos per block of the
# Post-LN-24 probe at init, of each probe run's last checkpoint, and of the first 1/3/10/30 steps at a
# constant learning rate (seconds each for inspect_init; the train_lm runs take 1.5 minutes each, mostly
# the final evaluation). Write each --json report to a file (docs/results/gau-depth/collapse/).
C=(./apps/inspect_init --model lm-small --dataset ptb-char --post-ln --depth 24 --untied --batch 16 --seq-len 128 --json)
"${C[@]}" --init torch > torch.jsonl                                              # and each probe's --init flags
"${C[@]}" --checkpoint runs/depth/postln24-nowarmup-s1/last.safetensors > torch-s1.jsonl  # each probe run (--pos rope for the rope runs)
"${P[@]}" --warmup-steps 100 --init torch --out runs/collapse/torch-warmup100
for lr in 3e-4 1e-4; do  # no warmup, a smaller peak learning rate (P without its --lr: flags may not repeat)
  ./apps/train_lm --auto-resume --dataset ptb-char --dim 128 --seq-len 128 --batch-size 16 --epochs 1 --max-steps 150 --lr $lr --log-every 25 --untied --model transformer --post-norm --heads 4 --depth 24 --init torch --out runs/collapse/torch-lr$lr
done
K=(./apps/train_lm --auto-resume --dataset ptb-char --dim 128 --seq-len 128 --batch-size 16 --epochs 1 --lr 1e-3 --min-lr 1e-3 --log-every 25 --untied --model transformer --post-norm --heads 4 --depth 24)
for k in 1 3 10 30; do
  "${K[@]}" --max-steps $k --init torch --out runs/collapse/torch-const-$k
  "${K[@]}" --max-steps $k --init mimetic --no-mimetic-qk --out runs/collapse/voonly-const-$k
  "${C[@]}" --checkpoint runs/collapse/torch-const-$k/last.safetensors > torch-const-$k.jsonl
  "${C[@]}" --checkpoint runs/collapse/voonly-const-$k/last.safetensors > voonly-const-$k.jsonl
done
# The Post-Norm GAU x48 of section 3 (the run above) over its first 1/3/10/30 steps, the same way:
G=(./apps/train_lm --auto-resume --dataset ptb-char --dim 128 --seq-len 128 --batch-size 16 --epochs 1 --lr 1e-3 --min-lr 1e-3 --log-every 25 --untied --model gau --depth 48 --s 64 --init torch)
for k in 1 3 10 30; do
  "${G[@]}" --max-steps $k --out runs/collapse/gau48-const-$k
  ./apps/inspect_init --model gau --dataset ptb-char --depth 48 --s 64 --untied --batch 16 --seq-len 128 --json --checkpoint runs/collapse/gau48-const-$k/last.safetensors > gau48-const-$k.jsonl
done
./apps/inspect_init --model gau --dataset ptb-char --depth 48 --s 64 --untied --batch 16 --seq-len 128 --json --init torch > gau48.jsonl
# The Post-LN probe at 48 blocks (about 8 minutes each on 2 threads):
./apps/train_lm --auto-resume --dataset ptb-char --dim 128 --seq-len 128 --batch-size 16 --epochs 1 --max-steps 150 --lr 1e-3 --log-every 25 --untied --model transformer --post-norm --heads 4 --depth 48 --init mimetic --no-mimetic-qk --out runs/collapse/postln48-voonly
./apps/train_lm --auto-resume --dataset ptb-char --dim 128 --seq-len 128 --batch-size 16 --epochs 1 --max-steps 150 --lr 1e-3 --log-every 25 --untied --model transformer --post-norm --heads 4 --depth 48 --init torch --out runs/collapse/postln48-torch
# The first step's two tests: the same size in random directions, and an output bias.
"${C[@]}" --init torch --perturb 1e-3 > torch-perturb1e-3.jsonl
"${C[@]}" --init mimetic --no-mimetic-qk --perturb 1e-3 > mimetic-voonly-perturb1e-3.jsonl
"${P[@]}" --init torch --head-bias --out runs/collapse/headbias-torch
"${K[@]}" --max-steps 1 --init torch --head-bias --out runs/collapse/headbias-torch-const-1
"${C[@]}" --head-bias --checkpoint runs/collapse/headbias-torch/last.safetensors > headbias-torch.jsonl
# One SGD step whose update has the norm of Adam's first (the gradient's norm at init is 4.44):
./apps/train_lm --auto-resume --dataset ptb-char --dim 128 --seq-len 128 --batch-size 16 --epochs 1 --max-steps 1 --min-lr 0 --log-every 1 --untied --model transformer --post-norm --heads 4 --depth 24 --init torch --opt sgd --clip-grad 0 --lr 0.49 --out runs/collapse/sgd-equalnorm-1
"${C[@]}" --checkpoint runs/collapse/sgd-equalnorm-1/last.safetensors > sgd-equalnorm-1.jsonl
# Seed 1 of four of the rows above:
"${P[@]}" --seed 1 --init torch --head-bias --out runs/collapse/headbias-torch-s1
./apps/train_lm --auto-resume --dataset ptb-char --dim 128 --seq-len 128 --batch-size 16 --epochs 1 --max-steps 150 --lr 3e-4 --log-every 25 --untied --model transformer --post-norm --heads 4 --depth 24 --seed 1 --init torch --out runs/collapse/torch-lr3e-4-s1
./apps/train_lm --auto-resume --dataset ptb-char --dim 128 --seq-len 128 --batch-size 16 --epochs 1 --max-steps 150 --lr 1e-3 --log-every 25 --untied --model transformer --post-norm --heads 4 --depth 48 --seed 1 --init mimetic --no-mimetic-qk --out runs/collapse/postln48-voonly-s1
./apps/train_lm --auto-resume --dataset ptb-char --dim 128 --seq-len 128 --batch-size 16 --epochs 1 --max-steps 150 --lr 1e-3 --log-every 25 --untied --model transformer --post-norm --heads 4 --depth 48 --seed 1 --init torch --out runs/collapse/postln48-torch-s1
# The ViT of section 1 at init, for comparison (each of its --init flags):
./apps/inspect_init --dim 96 --depth 6 --heads 3 --patch 4 --batch 32 --data-dir ../shared/data/cifar10-jpeg --json --init mimetic > vit-mimetic.jsonl

# Added 2026-11-27 (session 20): RESULTS.md section 3, "Which parameters' first step collapses the stack".
# One AdamW step at the constant lr 1e-3 (K above, --max-steps 1) on the torch init, updating one group of
# parameters only (--train-only) or all but one (--freeze); then inspect_init on the checkpoint (C above).
# About 1.5 minutes per run on 2 threads, mostly the final evaluation. init/*.jsonl were rewritten by the
# same C commands as above, with this session's inspect_init (grad_cos, grad_rank1; the rest unchanged).
K1=("${K[@]}" --max-steps 1 --init torch)
"${K1[@]}" --train-only 'tok_emb.*' --out runs/collapse/groups/only-emb
"${K1[@]}" --train-only 'head.*' --out runs/collapse/groups/only-head
"${K1[@]}" --train-only 'blocks.*.attn.q.*,blocks.*.attn.k.*' --out runs/collapse/groups/only-qk
"${K1[@]}" --train-only 'blocks.*.attn.v.*' --out runs/collapse/groups/only-v
"${K1[@]}" --train-only 'blocks.*.attn.proj.*' --out runs/collapse/groups/only-proj
"${K1[@]}" --train-only 'blocks.*.mlp.*' --out runs/collapse/groups/only-mlp
"${K1[@]}" --train-only 'blocks.*.mlp.fc1.*' --out runs/collapse/groups/only-fc1
"${K1[@]}" --train-only 'blocks.*.mlp.fc2.*' --out runs/collapse/groups/only-fc2
"${K1[@]}" --train-only '*norm*' --out runs/collapse/groups/only-norm
"${K1[@]}" --train-only '*.bias' --out runs/collapse/groups/only-bias
"${K1[@]}" --train-only 'blocks.?.*,blocks.1[01].*' --out runs/collapse/groups/only-lower   # blocks 1-12
"${K1[@]}" --freeze 'blocks.?.*,blocks.1[01].*,tok_emb.*,head.*' --out runs/collapse/groups/only-upper  # blocks 13-24
"${K1[@]}" --freeze '*norm*' --out runs/collapse/groups/no-norm
"${K1[@]}" --freeze '*.bias' --out runs/collapse/groups/no-bias
"${K1[@]}" --freeze 'blocks.*.mlp.*' --out runs/collapse/groups/no-mlp
"${K1[@]}" --freeze 'blocks.*.attn.v.*,blocks.*.attn.proj.*' --out runs/collapse/groups/no-vproj
"${K1[@]}" --freeze 'blocks.*.attn.v.*,blocks.*.attn.proj.*,blocks.*.mlp.*' --out runs/collapse/groups/no-vprojmlp
for g in runs/collapse/groups/*/; do "${C[@]}" --checkpoint $g/last.safetensors > $(basename $g).jsonl; done
# Seed 1 of five of those rows (inspect_init --seed 1 --init torch gives seed 1's init; the windows do not depend on the seed):
K1s=("${K[@]}" --max-steps 1 --seed 1 --init torch)
"${K1s[@]}" --out runs/collapse/groups/all-s1
"${K1s[@]}" --train-only 'blocks.*.mlp.*' --out runs/collapse/groups/only-mlp-s1
"${K1s[@]}" --train-only '*.bias' --out runs/collapse/groups/only-bias-s1
"${K1s[@]}" --train-only '*norm*' --out runs/collapse/groups/only-norm-s1
"${K1s[@]}" --freeze 'blocks.*.attn.v.*,blocks.*.attn.proj.*,blocks.*.mlp.*' --out runs/collapse/groups/no-vprojmlp-s1
# The first steps at the smaller constant rates (K without its --lr and --min-lr: flags may not repeat):
L=(./apps/train_lm --auto-resume --dataset ptb-char --dim 128 --seq-len 128 --batch-size 16 --epochs 1 --log-every 25 --untied --model transformer --post-norm --heads 4 --depth 24 --init torch)
for k in 1 3 5 7 10 30; do "${L[@]}" --lr 3e-4 --min-lr 3e-4 --max-steps $k --out runs/collapse/torch-lr3e-4-const-$k; done
for k in 1 3 10; do "${L[@]}" --lr 1e-4 --min-lr 1e-4 --max-steps $k --out runs/collapse/torch-lr1e-4-const-$k; done
for r in runs/collapse/torch-lr*-const-*/; do "${C[@]}" --checkpoint $r/last.safetensors > $(basename $r).jsonl; done
# The 150-step probe (P above) with some blocks frozen at their init for the whole run (about 3-4 minutes each):
"${P[@]}" --init torch --freeze 'blocks.?.*,blocks.1[01].*' --out runs/collapse/groups/freeze-lower-150             # updates 13-24
"${P[@]}" --init torch --freeze 'blocks.1[2-9].*,blocks.2?.*' --out runs/collapse/groups/freeze-upper-150           # updates 1-12
"${P[@]}" --init torch --freeze 'blocks.[13579].*,blocks.1[13579].*,blocks.2[13].*' --out runs/collapse/groups/freeze-odd-150  # updates 1, 3, ..., 23 (0-based 0, 2, ...)
"${P[@]}" --init torch --freeze 'blocks.[0-5].*' --out runs/collapse/groups/freeze-first6-150                      # updates 7-24
"${P[@]}" --init torch --freeze 'blocks.[0-8].*' --out runs/collapse/groups/freeze-first9-150                      # updates 10-24
"${P[@]}" --init torch --freeze 'blocks.?.*' --out runs/collapse/groups/freeze-first10-150                         # updates 11-24
"${P[@]}" --init torch --freeze 'blocks.?.*,blocks.10.*' --out runs/collapse/groups/freeze-first11-150              # updates 12-24
"${P[@]}" --seed 1 --init torch --freeze 'blocks.?.*,blocks.1[01].*' --out runs/collapse/groups/freeze-lower-150-s1
"${P[@]}" --seed 1 --init torch --freeze 'blocks.[0-5].*' --out runs/collapse/groups/freeze-first6-150-s1
# The two-stage run: blocks 13-24 for 50 steps, then all blocks from its checkpoint with a fresh optimizer (--init-from):
S=(./apps/train_lm --auto-resume --dataset ptb-char --dim 128 --seq-len 128 --batch-size 16 --epochs 1 --log-every 25 --untied --model transformer --post-norm --heads 4 --depth 24 --init torch --lr 1e-3)
"${S[@]}" --min-lr 1e-3 --max-steps 50 --freeze 'blocks.?.*,blocks.1[01].*' --out runs/collapse/groups/stage1-upper50
"${S[@]}" --max-steps 100 --init-from runs/collapse/groups/stage1-upper50/last.safetensors --out runs/collapse/groups/stage2-all100
"${S[@]}" --min-lr 1e-3 --max-steps 1 --init-from runs/collapse/groups/stage1-upper50/last.safetensors --out runs/collapse/groups/stage2-all1
"${S[@]}" --seed 1 --min-lr 1e-3 --max-steps 50 --freeze 'blocks.?.*,blocks.1[01].*' --out runs/collapse/groups/stage1-upper50-s1
"${S[@]}" --seed 1 --max-steps 100 --init-from runs/collapse/groups/stage1-upper50-s1/last.safetensors --out runs/collapse/groups/stage2-all100-s1
"${S[@]}" --seed 1 --min-lr 1e-3 --max-steps 1 --init-from runs/collapse/groups/stage1-upper50-s1/last.safetensors --out runs/collapse/groups/stage2-all1-s1

# Added 2026-11-27 (session 21): RESULTS.md section 3, "A staged start in one run (--freeze-until)".
# Blocks 13-24 (and the embedding and head) from the first step, blocks 1-12 from step 51, in one run: the upper
# blocks keep their AdamW state, and each lower-block parameter takes a first Adam step of its own at step 51.
"${K[@]}" --init torch --max-steps 51 --freeze 'blocks.?.*,blocks.1[01].*' --freeze-until 50 --out runs/staged/u50-const-51
"${K[@]}" --seed 1 --init torch --max-steps 51 --freeze 'blocks.?.*,blocks.1[01].*' --freeze-until 50 --out runs/staged/u50-const-51-s1
"${P[@]}" --init torch --freeze 'blocks.?.*,blocks.1[01].*' --freeze-until 50 --out runs/staged/u50-150
"${P[@]}" --seed 1 --init torch --freeze 'blocks.?.*,blocks.1[01].*' --freeze-until 50 --out runs/staged/u50-150-s1
for k in 1 3 4 5 7 10 100; do "${P[@]}" --init torch --freeze 'blocks.?.*,blocks.1[01].*' --freeze-until $k --out runs/staged/u$k-150; done
for k in 3 4 5 10; do "${P[@]}" --seed 1 --init torch --freeze 'blocks.?.*,blocks.1[01].*' --freeze-until $k --out runs/staged/u$k-150-s1; done
for k in 3 4 5 10 50; do "${P[@]}" --seed 2 --init torch --freeze 'blocks.?.*,blocks.1[01].*' --freeze-until $k --out runs/staged/u$k-150-s2; done
"${P[@]}" --seed 2 --init torch --out runs/staged/u0-150-s2   # the probe itself, seed 2
"${P[@]}" --seed 1 --init torch --warmup-steps 100 --out runs/staged/warmup100-s1   # seed 0's is probe-postln24-warmup100 (1 thread)
# Where joining after 3 and after 5 steps part (constant rate), and the upper-only run evaluated after every step:
"${K[@]}" --init torch --max-steps 3 --freeze 'blocks.?.*,blocks.1[01].*' --out runs/staged/upper-const-3
"${K[@]}" --init torch --max-steps 5 --freeze 'blocks.?.*,blocks.1[01].*' --out runs/staged/upper-const-5
for k in 4 10; do "${K[@]}" --init torch --max-steps $k --freeze 'blocks.?.*,blocks.1[01].*' --freeze-until 3 --out runs/staged/u3-const-$k; done
for k in 6 10; do "${K[@]}" --init torch --max-steps $k --freeze 'blocks.?.*,blocks.1[01].*' --freeze-until 5 --out runs/staged/u5-const-$k; done
./apps/train_lm --auto-resume --dataset ptb-char --dim 128 --seq-len 128 --batch-size 16 --epochs 1 --lr 1e-3 --min-lr 1e-3 --log-every 1 --untied --model transformer --post-norm --heads 4 --depth 24 --init torch --max-steps 12 --freeze 'blocks.?.*,blocks.1[01].*' --eval-every 1 --eval-tokens 4096 --out runs/staged/upper-const-12-evals
for r in runs/staged/*const-[0-9]*/ runs/staged/u50-150*/ runs/staged/u10-150/ runs/staged/u100-150/; do "${C[@]}" --checkpoint $r/last.safetensors > $(basename $r).jsonl; done
# Section 3's vit-init/ files rewritten with this session's inspect_init (grad_cos, grad_rank1; the rest unchanged):
for i in attn-logits kaiming mimetic t-fixup timm+zero-attn timm torch xavier; do ./apps/inspect_init --dim 96 --depth 6 --heads 3 --patch 4 --batch 32 --data-dir ../shared/data/cifar10-jpeg --json --init $i > $i.jsonl; done
./apps/inspect_init --dim 96 --depth 6 --heads 3 --patch 4 --batch 32 --data-dir ../shared/data/cifar10-jpeg --json --init timm --layerscale 0.1 > timm+layerscale0.1.jsonl

# Added 2026-11-27 (session 21): RESULTS.md section 1, more seeds (V as in the session-19 lines above).
for s in 1 2; do
  "${V[@]}" --seed $s --init impulse5 --out runs/vit/impulse5-s$s
  "${V[@]}" --seed $s --init mimetic --no-mimetic-qk --out runs/vit/mimetic-voonly-s$s
  "${V[@]}" --seed $s --init mimetic --no-mimetic-vo --out runs/vit/mimetic-qkonly-s$s
done
for i in mimetic timm impulse3 torch; do "${V[@]}" --seed 2 --init $i --out runs/vit/$i-s2; done
"${V[@]}" --seed 1 --init impulse3-closed --out runs/vit/impulse3-closed-s1
"${V[@]}" --seed 1 --init mimetic --pos learned --out runs/vit/mimetic-learnedpe-s1
"${V[@]}" --seed 1 --init impulse3-closed --closed-rcond 0.1 --out runs/vit/impulse3-closed-rcond0.1-s1

# Added 2026-11-27 (session 22): RESULTS.md section 2, "SmallInitEmb needs its recipe's position embedding"
# (S as section 2's first table, on 2 threads), section 6's word runs with rotary PE (W as section 6's runs), and
# the 256/6/8 char model with rotary PE (C as that table's runs).
S=(./apps/train_lm --auto-resume --dataset ptb-char --model transformer --dim 128 --depth 4 --heads 4 --seq-len 128 --batch-size 32 --epochs 1 --max-steps 400 --lr 2e-3 --warmup-steps 50 --log-every 25 --threads 2)
for s in 0 1 2; do
  sfx=$([ $s = 0 ] || echo -s$s)
  for i in torch smallemb; do
    "${S[@]}" --seed $s --init $i --out runs/smallemb-pe/char-$i$sfx
    "${S[@]}" --seed $s --init $i --untied --out runs/smallemb-pe/char-$i-untied$sfx
    "${S[@]}" --seed $s --init $i --pos rope --out runs/smallemb-pe/char-$i-rope$sfx
    "${S[@]}" --seed $s --init $i --pos learned --out runs/smallemb-pe/char-$i-learned$sfx
    "${S[@]}" --seed $s --init $i --pos rope --untied --out runs/smallemb-pe/char-$i-rope-untied$sfx
  done
done
for s in 0 1 2; do
  sfx=$([ $s = 0 ] || echo -s$s)
  "${S[@]}" --seed $s --init mimetic --out runs/smallemb-pe/char-mimetic$sfx
  "${S[@]}" --seed $s --init mimetic --pos rope --out runs/smallemb-pe/char-mimetic-rope$sfx
done
"${S[@]}" --init mimetic+smallemb --pos rope --out runs/smallemb-pe/char-mimetic+smallemb-rope
W=(./apps/train_lm --auto-resume --dataset ptb --model transformer --dim 256 --depth 6 --heads 8 --protocol window --seq-len 80 --scored 40 --batch-size 32 --epochs 1 --max-steps 400 --lr 2e-3 --warmup-steps 40 --dropout 0.1 --word-dropout 0.1 --eval-every 50 --eval-tokens 20000 --log-every 25 --threads 1)
"${W[@]}" --init torch --pos rope --out runs/word/word-torch-rope
"${W[@]}" --init smallemb --pos rope --out runs/word/word-smallemb-rope
"${W[@]}" --seed 1 --init torch --pos rope --out runs/word/word-torch-rope-s1
"${W[@]}" --seed 1 --init smallemb --pos rope --out runs/word/word-smallemb-rope-s1
"${W[@]}" --init smallemb --out runs/word/word-smallemb
"${W[@]}" --init mimetic+smallemb --pos rope --out runs/word/word-mimetic+smallemb-rope
C=(./apps/train_lm --auto-resume --dataset ptb-char --model transformer --dim 256 --depth 6 --heads 8 --protocol window --seq-len 256 --scored 192 --batch-size 16 --epochs 1 --max-steps 600 --lr 2e-3 --warmup-steps 60 --dropout 0.1 --eval-every 100 --eval-tokens 50000 --log-every 25 --threads 1)
"${C[@]}" --init torch --pos rope --out runs/char256/char-torch-rope
"${C[@]}" --init mimetic+smallemb --pos rope --out runs/char256/char-mimetic+smallemb-rope
# Added 2026-11-27 (session 23): RESULTS.md section 2, "Mimetic's gain, the position embedding and the
# tied head" (S as above, about 1.6 min a run on 2 threads), then section 6's word runs with an
# untied head (W as above, the two in parallel). `inspect_init --checkpoint` also read the
# checkpoints of the session-22 torch / mimetic runs above, which were rerun for them and gave the
# same test bpc to the last digit.
for s in 0 1 2; do
  sfx=$([ $s = 0 ] || echo -s$s)
  for p in sinusoidal rope; do
    ps=$([ $p = sinusoidal ] || echo -$p)
    "${S[@]}" --seed $s --init mimetic --no-mimetic-vo --pos $p --out runs/mimetic-pe/char-mimetic-qk$ps$sfx
    "${S[@]}" --seed $s --init mimetic --no-mimetic-qk --pos $p --out runs/mimetic-pe/char-mimetic-vo$ps$sfx
    "${S[@]}" --seed $s --init mimetic --untied --pos $p --out runs/mimetic-pe/char-mimetic$ps-untied$sfx
  done
  "${S[@]}" --seed $s --init torch --pos none --out runs/mimetic-pe/char-torch-nope$sfx
  "${S[@]}" --seed $s --init mimetic --pos none --out runs/mimetic-pe/char-mimetic-nope$sfx
done
for s in 0 1 2; do
  sfx=$([ $s = 0 ] || echo -s$s)
  for p in rope sinusoidal; do
    ps=$([ $p = sinusoidal ] || echo -$p)
    for i in normal normal+mimetic; do "${S[@]}" --seed $s --init $i --pos $p --out runs/mimetic-pe/char-$i$ps$sfx; done
  done
done
for i in torch mimetic; do
  ./apps/train_lm --auto-resume --dataset ptb-char --model transformer --dim 128 --depth 4 --heads 4 --seq-len 128 --batch-size 32 --epochs 1 --max-steps 1200 --lr 2e-3 --warmup-steps 50 --log-every 100 --threads 2 --init $i --out runs/mimetic-pe/char1200-$i
done
"${W[@]}" --init torch --untied --out runs/word/word-torch-untied
"${W[@]}" --init mimetic --untied --out runs/word/word-mimetic-untied
# The figures at init and of the trained weights (docs/results/mimetic-pe/{init,trained}/), e.g.
#   ./apps/inspect_init --model lm-small --dataset ptb-char --seq-len 128 --batch 32 --pos rope --init mimetic --json
#   ./apps/inspect_init ... --checkpoint runs/mimetic-pe/char-mimetic-rope/last.safetensors

# Added 2026-11-27 (session 24): RESULTS.md section 2, "The copy prior decides, and mimetic's Q/K identity
# stays" (S's flags without --max-steps, --log-every and --threads, which some runs set otherwise), then
# section 6's word runs (W as above, two at a time). The edited starts come from each run's
# init.safetensors (a one-step run writes it) through tools/edit_checkpoint.py.
T=(./apps/train_lm --auto-resume --dataset ptb-char --model transformer --dim 128 --depth 4 --heads 4 --seq-len 128 --batch-size 32 --epochs 1 --lr 2e-3 --warmup-steps 50)
S=("${T[@]}" --max-steps 400 --log-every 25 --threads 2)
mkdir -p runs/copy-prior/starts
for s in 0 1 2; do
  sfx=$([ $s = 0 ] || echo -s$s)
  for i in torch mimetic; do
    "${T[@]}" --max-steps 1 --seed $s --init $i --untied --out runs/copy-prior/starts/$i-untied$sfx
    "${T[@]}" --max-steps 1 --seed $s --init $i --out runs/copy-prior/starts/$i-tied$sfx
    tools/edit_checkpoint.py runs/copy-prior/starts/$i-untied$sfx/init.safetensors runs/copy-prior/starts/$i-headcopy$sfx.safetensors --copy head.weight=tok_emb.weight
    tools/edit_checkpoint.py runs/copy-prior/starts/$i-tied$sfx/init.safetensors runs/copy-prior/starts/$i-gain0$sfx.safetensors --fill norm.weight=0
    "${S[@]}" --seed $s --init $i --untied --init-from runs/copy-prior/starts/$i-headcopy$sfx.safetensors --out runs/copy-prior/char-$i-headcopy$sfx
    "${S[@]}" --seed $s --init $i --init-from runs/copy-prior/starts/$i-gain0$sfx.safetensors --out runs/copy-prior/char-$i-gain0$sfx
  done
  "${S[@]}" --seed $s --pos rope --untied --init mimetic --no-mimetic-vo --out runs/copy-prior/char-mimetic-qk-rope-untied$sfx
  "${S[@]}" --seed $s --pos rope --untied --init mimetic --no-mimetic-qk --out runs/copy-prior/char-mimetic-vo-rope-untied$sfx
  "${S[@]}" --seed $s --pos rope --untied --init mimetic --mimetic-beta1 0 --out runs/copy-prior/char-mimetic-b0-rope-untied$sfx
  "${S[@]}" --seed $s --pos rope --untied --init mimetic --mimetic-beta1 0.35 --out runs/copy-prior/char-mimetic-b035-rope-untied$sfx
  "${S[@]}" --seed $s --init mimetic --mimetic-beta1 0 --out runs/copy-prior/char-mimetic-b0$sfx
  "${S[@]}" --seed $s --init mimetic --mimetic-beta1 0 --pos rope --out runs/copy-prior/char-mimetic-b0-rope$sfx
done
# The probes: an evaluation every 10 steps, one thread (seed 0).
P=("${T[@]}" --max-steps 400 --log-every 10 --threads 1 --eval-every 10 --eval-tokens 8192)
"${P[@]}" --init torch --out runs/copy-prior/probe-torch
"${P[@]}" --init torch --untied --out runs/copy-prior/probe-torch-untied
"${P[@]}" --init torch --init-from runs/copy-prior/starts/torch-gain0.safetensors --out runs/copy-prior/probe-torch-gain0
"${P[@]}" --init mimetic --out runs/copy-prior/probe-mimetic
# Section 6's word runs of session 24 (W as above; the one-step runs only write init.safetensors):
U=(./apps/train_lm --auto-resume --dataset ptb --model transformer --dim 256 --depth 6 --heads 8 --protocol window --seq-len 80 --scored 40 --batch-size 32 --epochs 1 --lr 2e-3 --warmup-steps 40 --dropout 0.1 --word-dropout 0.1 --threads 1)
"${U[@]}" --max-steps 1 --init torch --out runs/copy-prior/starts/word-torch-tied
"${U[@]}" --max-steps 1 --init mimetic --out runs/copy-prior/starts/word-mimetic-tied
"${U[@]}" --max-steps 1 --init torch --untied --out runs/copy-prior/starts/word-torch-untied
for i in torch mimetic; do tools/edit_checkpoint.py runs/copy-prior/starts/word-$i-tied/init.safetensors runs/copy-prior/starts/word-$i-gain0.safetensors --fill norm.weight=0; done
tools/edit_checkpoint.py runs/copy-prior/starts/word-torch-untied/init.safetensors runs/copy-prior/starts/word-torch-headcopy.safetensors --copy head.weight=tok_emb.weight
"${W[@]}" --init torch --init-from runs/copy-prior/starts/word-torch-gain0.safetensors --out runs/word/word-torch-gain0
"${W[@]}" --init mimetic --init-from runs/copy-prior/starts/word-mimetic-gain0.safetensors --out runs/word/word-mimetic-gain0
"${W[@]}" --init torch --untied --init-from runs/copy-prior/starts/word-torch-headcopy.safetensors --out runs/word/word-torch-headcopy
"${W[@]}" --init mimetic --pos rope --out runs/word/word-mimetic-rope
"${W[@]}" --seed 1 --init torch --untied --out runs/word/word-torch-untied-s1
"${W[@]}" --seed 1 --init mimetic --untied --out runs/word/word-mimetic-untied-s1
"${U[@]}" --max-steps 1 --seed 1 --init torch --out runs/copy-prior/starts/word-torch-tied-s1
"${U[@]}" --max-steps 1 --seed 1 --init torch --untied --out runs/copy-prior/starts/word-torch-untied-s1
tools/edit_checkpoint.py runs/copy-prior/starts/word-torch-tied-s1/init.safetensors runs/copy-prior/starts/word-torch-gain0-s1.safetensors --fill norm.weight=0
tools/edit_checkpoint.py runs/copy-prior/starts/word-torch-untied-s1/init.safetensors runs/copy-prior/starts/word-torch-headcopy-s1.safetensors --copy head.weight=tok_emb.weight
"${W[@]}" --seed 1 --init torch --init-from runs/copy-prior/starts/word-torch-gain0-s1.safetensors --out runs/word/word-torch-gain0-s1
"${W[@]}" --seed 1 --init torch --untied --init-from runs/copy-prior/starts/word-torch-headcopy-s1.safetensors --out runs/word/word-torch-headcopy-s1

# Added 2026-11-27 (session 25): RESULTS.md section 2, "Why the rotary PE learns faster here than the
# sinusoidal one" (T and S as in session 24's lines; untied head, torch init). The learned PE's edited
# starts: its init scaled to the sinusoid's rms (×35), and the sinusoid itself, copied from a
# sinusoidal run's init.safetensors (the PE is a buffer there).
L=("${T[@]}" --max-steps 1200 --log-every 100 --threads 2)
mkdir -p runs/pe/starts
for s in 0 1 2; do
  sfx=$([ $s = 0 ] || echo -s$s)
  for p in none learned; do "${S[@]}" --seed $s --init torch --untied --pos $p --out runs/pe/char-torch-$p-untied$sfx; done
  for k in 2 4; do "${S[@]}" --seed $s --init torch --untied --pe-scale $k --out runs/pe/char-torch-sin$k-untied$sfx; done
  for k in 1 2; do "${S[@]}" --seed $s --init torch --untied --pe-scale $k --pe-every-block --out runs/pe/char-torch-sin$k-every-untied$sfx; done
  "${T[@]}" --max-steps 1 --seed $s --init torch --untied --pos learned --out runs/pe/starts/learned$sfx
  "${T[@]}" --max-steps 1 --seed $s --init torch --untied --pos sinusoidal --out runs/pe/starts/sinusoidal$sfx
  tools/edit_checkpoint.py runs/pe/starts/learned$sfx/init.safetensors runs/pe/starts/learned-x35$sfx.safetensors --scale pos_embed=35
  tools/edit_checkpoint.py runs/pe/starts/learned$sfx/init.safetensors runs/pe/starts/learned-sin$sfx.safetensors --copy pos_embed=runs/pe/starts/sinusoidal$sfx/init.safetensors:pos_embed
  "${S[@]}" --seed $s --init torch --untied --pos learned --init-from runs/pe/starts/learned-x35$sfx.safetensors --out runs/pe/char-torch-learnedx35-untied$sfx
  "${S[@]}" --seed $s --init torch --untied --pos learned --init-from runs/pe/starts/learned-sin$sfx.safetensors --out runs/pe/char-torch-learnedsin-untied$sfx
done
for k in 0.25 0.5; do "${S[@]}" --seed 0 --init torch --untied --pe-scale $k --out runs/pe/char-torch-sin$k-untied; done
for p in sinusoidal rope; do "${L[@]}" --seed 0 --init torch --untied --pos $p --out runs/pe/char1200-torch-$p-untied; done
for p in sinusoidal rope; do "${L[@]}" --seed 1 --init torch --untied --pos $p --out runs/pe/char1200-torch-$p-untied-s1; done
# Mimetic against torch at PE × 2 (the untied torch runs are those above).
for s in 0 1 2; do
  sfx=$([ $s = 0 ] || echo -s$s)
  "${S[@]}" --seed $s --init torch --pe-scale 2 --out runs/pe2/char-torch-sin2$sfx
  "${S[@]}" --seed $s --init mimetic --pe-scale 2 --out runs/pe2/char-mimetic-sin2$sfx
  "${S[@]}" --seed $s --init mimetic --untied --pe-scale 2 --out runs/pe2/char-mimetic-sin2-untied$sfx
done
X=(./apps/train_lm --auto-resume --dataset ptb-char --model transformer --dim 256 --depth 4 --heads 4 --seq-len 128 --batch-size 32 --epochs 1 --lr 2e-3 --warmup-steps 50 --max-steps 400 --log-every 25 --threads 2)
for p in sinusoidal rope; do "${X[@]}" --seed 0 --init torch --untied --pos $p --out runs/pe/char256w-torch-$p-untied; done
# Section 6's word runs of session 25 (W as above, two at a time):
"${W[@]}" --init torch --untied --pe-scale 2 --out runs/word/word-torch-untied-sin2
"${W[@]}" --init torch --untied --pos rope --out runs/word/word-torch-untied-rope
"${W[@]}" --init mimetic --untied --pe-scale 2 --out runs/word/word-mimetic-untied-sin2
"${W[@]}" --seed 1 --init torch --untied --pe-scale 2 --out runs/word/word-torch-untied-sin2-s1
"${W[@]}" --seed 1 --init mimetic --untied --pe-scale 2 --out runs/word/word-mimetic-untied-sin2-s1
"${W[@]}" --seed 1 --init torch --untied --pos rope --out runs/word/word-torch-untied-rope-s1
# The figures (docs/results/pe/{init,trained}/), e.g.
#   ./apps/inspect_init --model lm-small --dataset ptb-char --seq-len 128 --batch 32 --init torch --untied --pe-scale 2 --json
#   ./apps/inspect_init ... --checkpoint runs/pe/char-torch-sin2-untied/last.safetensors

# Added 2026-11-28 (session 26): RESULTS.md section 2 (more seeds of the PE scale sweep, × 3, the
# token embedding's scale, mimetic at × 4, the 256-wide pair's second seed), S and X as above.
for s in 1 2; do for k in 0.25 0.5; do "${S[@]}" --seed $s --init torch --untied --pe-scale $k --out runs/pe/char-torch-sin$k-untied-s$s; done; done
for s in 0 1 2; do
  sfx=$([ $s = 0 ] || echo -s$s)
  "${S[@]}" --seed $s --init torch --untied --pe-scale 3 --out runs/pe/char-torch-sin3-untied$sfx
  "${S[@]}" --seed $s --init mimetic --untied --pe-scale 4 --out runs/pe2/char-mimetic-sin4-untied$sfx
done
for p in sinusoidal rope; do "${X[@]}" --seed 1 --init torch --untied --pos $p --out runs/pe/char256w-torch-$p-untied-s1; done
for s in 0 1 2; do
  sfx=$([ $s = 0 ] || echo -s$s)
  "${S[@]}" --seed $s --init torch --untied --emb-scale 0.5 --out runs/pe/char-torch-emb0.5-untied$sfx
  "${S[@]}" --seed $s --init torch --untied --emb-scale 2 --pe-scale 4 --out runs/pe/char-torch-emb2-sin4-untied$sfx
done
# RESULTS.md section 1, "impulse3-closed with the authors' own pseudo input" (V as in section 1's
# lines; the runs used edited starts, since --closed-pe-scale came after their binary: for
# impulse3-closed the start below is what --init impulse3-closed --pos learned now writes itself).
mkdir -p runs/vit-impulse-pe/starts
for s in 0 1 2; do "${V[@]}" --seed $s --init impulse3-closed --pos learned --out runs/vit-impulse-pe/impulse3-closed-learned18-s$s; done
for s in 0 1; do
  "${V[@]}" --seed $s --init impulse3-closed --pos learned --closed-pe-scale 1 --out runs/vit-impulse-pe/impulse3-closed-learned-s$s
  "${V[@]}" --seed $s --init impulse3 --pe-scale 18 --out runs/vit-impulse-pe/impulse3-pe18-s$s
  # mimetic does not scale the PE: a start from a short run's init.safetensors, its PE × 18
  ./apps/train_vit --auto-resume --dataset folder --data-dir "$INITLAB_DATA"/cifar10-jpeg --dim 96 --depth 6 --heads 3 --patch 4 --pool avg --batch-size 128 --epochs 4 --warmup-epochs 1 --lr 1e-3 --weight-decay 0.05 --randaug 0 --train-subset 128 --seed $s --init mimetic --no-mimetic-qk --pos learned --out runs/vit-impulse-pe/starts/voonly-learned-s$s
  tools/edit_checkpoint.py runs/vit-impulse-pe/starts/voonly-learned-s$s/init.safetensors runs/vit-impulse-pe/starts/voonly-learned-x18-s$s.safetensors --scale pos_embed=18
  "${V[@]}" --seed $s --init mimetic --no-mimetic-qk --pos learned --init-from runs/vit-impulse-pe/starts/voonly-learned-x18-s$s.safetensors --out runs/vit-impulse-pe/mimetic-voonly-learned18-s$s
done
# RESULTS.md section 1, "Mimetic and the PE scale on the ViT" (V as above):
for s in 0 1; do
  for k in 0.5 2 4; do "${V[@]}" --seed $s --init mimetic --pe-scale $k --out runs/vit-pe/mimetic-pe$k-s$s; done
  "${V[@]}" --seed $s --init torch --pe-scale 2 --out runs/vit-pe/torch-pe2-s$s
done
# Section 6's word runs of session 26 (W as above, two at a time):
for s in 0 1; do
  sfx=$([ $s = 0 ] || echo -s$s)
  for k in 0.5 0.25; do "${W[@]}" --seed $s --init torch --untied --pe-scale $k --out runs/word/word-torch-untied-sin$k$sfx; done
  "${W[@]}" --seed $s --init mimetic --untied --pe-scale 0.5 --out runs/word/word-mimetic-untied-sin0.5$sfx
  "${W[@]}" --seed $s --init torch --untied --pos none --out runs/word/word-torch-untied-none$sfx
done
# Session 27 (2026-11-28): section 6's mimetic with no PE (W as above, two at a time).
for s in 0 1; do
  sfx=$([ $s = 0 ] || echo -s$s)
  "${W[@]}" --seed $s --init mimetic --untied --pos none --out runs/word/word-mimetic-untied-none$sfx
done
# Session 27: section 1's third seed of the ViT PE × 2 pair (V as above, one at a time, --threads 2).
"${V[@]}" --seed 2 --threads 2 --init mimetic --pe-scale 2 --out runs/vit-pe/mimetic-pe2-s2
"${V[@]}" --seed 2 --threads 2 --init torch --pe-scale 2 --out runs/vit-pe/torch-pe2-s2
for s in 0 1; do
  sfx=$([ $s = 0 ] || echo -s$s)
  "${W[@]}" --seed $s --init torch --untied --emb-scale 2 --out runs/word/word-torch-untied-emb2$sfx
done
# Session 27: section 1's `timm` again after its fix (98c6a67: the patch conv as built), V as above, --threads 2.
for s in 0 1 2; do "${V[@]}" --seed $s --threads 2 --init timm --out runs/vit-timm-fix/timm-s$s; done
# Session 27: section 1 "At ViT-Tiny's width and depth" (one at a time, --threads 2).
T=(./apps/train_vit --auto-resume --dataset folder --data-dir "$INITLAB_DATA"/cifar10-jpeg --dim 192 --depth 12 --heads 3 --patch 4 --pool avg --batch-size 128 --epochs 4 --warmup-epochs 1 --lr 1e-3 --weight-decay 0.05 --randaug 0 --train-subset 10000 --threads 2)
"${T[@]}" --seed 0 --init mimetic --out runs/vit-tiny-size/mimetic-s0
"${T[@]}" --seed 0 --init timm --out runs/vit-tiny-size/timm-s0
"${T[@]}" --seed 0 --init impulse3-closed --pos learned --out runs/vit-tiny-size/impulse3-closed-learned18-s0
# Session 27: T-Fixup with its embedding fixed (1bd3fe6): section 2's char run and section 3's probe (--threads 2).
./apps/train_lm --auto-resume --dataset ptb-char --model transformer --dim 128 --depth 4 --heads 4 --seq-len 128 --batch-size 32 --epochs 1 --max-steps 400 --lr 2e-3 --warmup-steps 50 --log-every 25 --threads 2 --init t-fixup --out runs/lm/char-tfixup-emb9n
./apps/train_lm --auto-resume --dataset ptb-char --dim 128 --seq-len 128 --batch-size 16 --epochs 1 --max-steps 150 --lr 1e-3 --log-every 25 --untied --model transformer --post-norm --heads 4 --depth 24 --threads 2 --init t-fixup --out runs/depth/postln24-nowarmup-tfixup-emb9n
# Session 27: section 5's relu-quantile ViT rows with Scheme 4's output layer (5620493), V as above, --threads 2.
for p in 0.5 0.8; do "${V[@]}" --seed 0 --threads 2 --init relu-quantile --act-prob $p --out runs/vit-data-dependent/scheme4-rq$p-s0; done
# Session 28 (2026-11-28): the data-dependent folder runs again after the init-set fix (cccd392: the init
# set is --init-samples images drawn at random, not the folder's first, which were two or three classes).
# Section 5 and section 1's attn-logits (V as above, --threads 2, one at a time).
for s in 0 1; do
  "${V[@]}" --seed $s --threads 2 --init lsuv --out runs/vit-init-set/lsuv-s$s
  "${V[@]}" --seed $s --threads 2 --init relu-quantile --act-prob 0.5 --out runs/vit-init-set/rq0.5-s$s
  "${V[@]}" --seed $s --threads 2 --init attn-logits --out runs/vit-init-set/attn-logits-s$s
done
"${V[@]}" --seed 0 --threads 2 --init relu-quantile --act-prob 0.8 --out runs/vit-init-set/rq0.8-s0
M=(./apps/train_vit --auto-resume --dataset folder --data-dir "$INITLAB_DATA"/cifar10-jpeg --model convmixer-256-8 --dim 128 --depth 4 --kernel 3 --patch 2 --batch-size 128 --epochs 3 --warmup-epochs 1 --lr 5e-3 --weight-decay 0.05 --randaug 0 --train-subset 5000 --threads 2 --seed 0)
"${M[@]}" --init lsuv --out runs/convmixer-init-set/lsuv
"${M[@]}" --init relu-quantile --act-prob 0.5 --out runs/convmixer-init-set/rq0.5
# Session 28: section 1 "At ViT-Tiny's width and depth": the closed form on sin-cos, its Q/K control (mimetic's
# V/proj, default Q/K, learned PE × 18 from an edited start, as section 1's 96-wide control), second seeds.
"${T[@]}" --seed 0 --init impulse3-closed --out runs/vit-tiny-size/impulse3-closed-sincos-s0
mkdir -p runs/vit-tiny-size/starts
for s in 0 1; do
  ./apps/train_vit --auto-resume --dataset folder --data-dir "$INITLAB_DATA"/cifar10-jpeg --dim 192 --depth 12 --heads 3 --patch 4 --pool avg --batch-size 128 --epochs 4 --warmup-epochs 1 --lr 1e-3 --weight-decay 0.05 --randaug 0 --train-subset 128 --threads 2 --seed $s --init mimetic --no-mimetic-qk --pos learned --out runs/vit-tiny-size/starts/voonly-learned-s$s
  tools/edit_checkpoint.py runs/vit-tiny-size/starts/voonly-learned-s$s/init.safetensors runs/vit-tiny-size/starts/voonly-learned-x18-s$s.safetensors --scale pos_embed=18
done
"${T[@]}" --seed 0 --init mimetic --no-mimetic-qk --pos learned --init-from runs/vit-tiny-size/starts/voonly-learned-x18-s0.safetensors --out runs/vit-tiny-size/mimetic-voonly-learned18-s0
"${T[@]}" --seed 1 --init mimetic --out runs/vit-tiny-size/mimetic-s1
# Session 28: section 2's T-Fixup char row, seeds 1 and 2 (--threads 2).
for s in 1 2; do ./apps/train_lm --auto-resume --dataset ptb-char --model transformer --dim 128 --depth 4 --heads 4 --seq-len 128 --batch-size 32 --epochs 1 --max-steps 400 --lr 2e-3 --warmup-steps 50 --log-every 25 --threads 2 --seed $s --init t-fixup --out runs/lm/char-tfixup-emb9n-s$s; done
"${T[@]}" --seed 1 --init impulse3-closed --pos learned --out runs/vit-tiny-size/impulse3-closed-learned18-s1
"${T[@]}" --seed 1 --init mimetic --no-mimetic-qk --pos learned --init-from runs/vit-tiny-size/starts/voonly-learned-x18-s1.safetensors --out runs/vit-tiny-size/mimetic-voonly-learned18-s1
# Session 28: section 1's timm+zero-attn and LayerScale rows on the fixed timm (V as above, --threads 2).
for s in 0 1; do
  "${V[@]}" --seed $s --threads 2 --init timm+zero-attn --out runs/vit-timm-fix/zero-attn-s$s
  "${V[@]}" --seed $s --threads 2 --init timm --layerscale 0.1 --out runs/vit-timm-fix/layerscale0.1-s$s
done
# Session 29: section 5's "On the char-level LM": section 2's model and schedule under the data-dependent
# schemes and plain orthogonal weights, three seeds each, with torch and mimetic again at three seeds
# (--threads 2, one at a time; the init set is 2,048 rows spread over the split, or the first batch).
L=(./apps/train_lm --auto-resume --dataset ptb-char --model transformer --dim 128 --depth 4 --heads 4 --seq-len 128 --batch-size 32 --epochs 1 --max-steps 400 --lr 2e-3 --warmup-steps 50 --log-every 25 --threads 2)
for s in 0 1 2; do
  sfx=$([ $s = 0 ] || echo -s$s)
  "${L[@]}" --seed $s --init torch --out runs/lm-data-dependent/char-torch$sfx
  "${L[@]}" --seed $s --init mimetic --out runs/lm-data-dependent/char-mimetic$sfx
  "${L[@]}" --seed $s --init lsuv --init-samples 2048 --out runs/lm-data-dependent/char-lsuv$sfx
  "${L[@]}" --seed $s --init relu-quantile --act-prob 0.5 --init-samples 2048 --out runs/lm-data-dependent/char-rq0.5$sfx
  "${L[@]}" --seed $s --init relu-quantile --init-samples 2048 --out runs/lm-data-dependent/char-rq0.8$sfx
  "${L[@]}" --seed $s --init orthogonal --out runs/lm-data-dependent/char-orthogonal$sfx
done
"${L[@]}" --seed 0 --init relu-quantile --act-prob 0.5 --out runs/lm-data-dependent/char-rq0.5-firstbatch
# Session 29: section 1 "At ViT-Tiny's width and depth", third seeds of the closed form and its control (T as above).
./apps/train_vit --auto-resume --dataset folder --data-dir "$INITLAB_DATA"/cifar10-jpeg --dim 192 --depth 12 --heads 3 --patch 4 --pool avg --batch-size 128 --epochs 4 --warmup-epochs 1 --lr 1e-3 --weight-decay 0.05 --randaug 0 --train-subset 128 --threads 2 --seed 2 --init mimetic --no-mimetic-qk --pos learned --out runs/vit-tiny-size/starts/voonly-learned-s2
tools/edit_checkpoint.py runs/vit-tiny-size/starts/voonly-learned-s2/init.safetensors runs/vit-tiny-size/starts/voonly-learned-x18-s2.safetensors --scale pos_embed=18
"${T[@]}" --seed 2 --init impulse3-closed --pos learned --out runs/vit-tiny-size/impulse3-closed-learned18-s2
"${T[@]}" --seed 2 --init mimetic --no-mimetic-qk --pos learned --init-from runs/vit-tiny-size/starts/voonly-learned-x18-s2.safetensors --out runs/vit-tiny-size/mimetic-voonly-learned18-s2
# Session 29: section 5's char-level LM, relu-quantile's fc1 fit alone on torch's other weights (L as above).
for s in 0 1 2; do "${L[@]}" --seed $s --init torch+relu-quantile --act-prob 0.5 --init-samples 2048 --out runs/lm-data-dependent/char-torch+rq0.5$([ $s = 0 ] || echo -s$s); done
# Session 30: section 5's char-level LM, which part of the fc1 fit helps: relu-quantile's bias alone,
# its per-unit scale alone, and one global factor (3.4: the scale fit's median fc1 row norm over
# torch's) on torch's fc1 or fc2 (--threads 1, two runs at a time).
L1=(./apps/train_lm --auto-resume --dataset ptb-char --model transformer --dim 128 --depth 4 --heads 4 --seq-len 128 --batch-size 32 --epochs 1 --max-steps 400 --lr 2e-3 --warmup-steps 50 --log-every 25 --threads 1)
for s in 0 1 2; do
  sfx=$([ $s = 0 ] || echo -s$s)
  "${L1[@]}" --seed $s --init torch+relu-quantile --act-prob 0.5 --init-samples 2048 --no-rq-scale --out runs/lm-data-dependent/char-torch+rq0.5-biasonly$sfx
  "${L1[@]}" --seed $s --init torch+relu-quantile --act-prob 0.5 --init-samples 2048 --no-rq-bias --out runs/lm-data-dependent/char-torch+rq0.5-scaleonly$sfx
  # (the torch init of seed s, from a one-step run of the same model)
  [ -f runs/lm-data-dependent/starts/torch$sfx/init.safetensors ] || ./apps/train_lm --dataset ptb-char --model transformer --dim 128 --depth 4 --heads 4 --seq-len 128 --batch-size 32 --epochs 1 --max-steps 1 --threads 1 --seed $s --init torch --overwrite --out runs/lm-data-dependent/starts/torch$sfx
  for layer in fc1 fc2; do
    tools/edit_checkpoint.py runs/lm-data-dependent/starts/torch$sfx/init.safetensors runs/lm-data-dependent/starts/torch-${layer}x3.4$sfx.safetensors --scale "blocks.*.mlp.$layer.weight=3.4"
    "${L1[@]}" --seed $s --init torch --init-from runs/lm-data-dependent/starts/torch-${layer}x3.4$sfx.safetensors --out runs/lm-data-dependent/char-torch-${layer}x3.4$sfx
  done
done
"${L1[@]}" --seed 0 --init torch+relu-quantile --act-prob 0.5 --init-samples 2048 --out runs/lm-data-dependent/char-torch+rq0.5-threads1
# The factor's dose on torch's fc1 (seeds 0 and 1), from the same starts.
for s in 0 1; do
  sfx=$([ $s = 0 ] || echo -s$s)
  for f in 1.7 6.8 13.6; do
    tools/edit_checkpoint.py runs/lm-data-dependent/starts/torch$sfx/init.safetensors runs/lm-data-dependent/starts/torch-fc1x$f$sfx.safetensors --scale "blocks.*.mlp.fc1.weight=$f"
    "${L1[@]}" --seed $s --init torch --init-from runs/lm-data-dependent/starts/torch-fc1x$f$sfx.safetensors --out runs/lm-data-dependent/char-torch-fc1x$f$sfx
  done
done
# Session 30: section 5's ViT (V as above, --threads 1, two runs at a time): relu-quantile's fc1 fit
# alone on torch's weights (no output-layer fit), its per-unit scale alone and its bias alone.
for s in 0 1; do
  "${V[@]}" --threads 1 --seed $s --init torch --out runs/vit-fc1/torch-s$s
  "${V[@]}" --threads 1 --seed $s --init torch+relu-quantile --act-prob 0.5 --output-logit 0 --out runs/vit-fc1/torch+rq0.5-s$s
  "${V[@]}" --threads 1 --seed $s --init torch+relu-quantile --act-prob 0.5 --output-logit 0 --no-rq-bias --out runs/vit-fc1/torch+rq0.5-scaleonly-s$s
  "${V[@]}" --threads 1 --seed $s --init torch+relu-quantile --act-prob 0.5 --output-logit 0 --no-rq-scale --out runs/vit-fc1/torch+rq0.5-biasonly-s$s
done
# The output-layer fit's share: the full scheme without it, and the fc1 fit with it.
for s in 0 1; do
  "${V[@]}" --threads 1 --seed $s --init relu-quantile --act-prob 0.5 --output-logit 0 --out runs/vit-fc1/rq0.5-nohead-s$s
  "${V[@]}" --threads 1 --seed $s --init torch+relu-quantile --act-prob 0.5 --out runs/vit-fc1/torch+rq0.5-head-s$s
done
for s in 0 1; do "${V[@]}" --threads 1 --seed $s --init orthogonal --out runs/vit-fc1/orthogonal-s$s; done
# One factor on torch's ViT fc1 (×3.8: the scale fit's median fc1 row norm over PyTorch's), from
# each seed's torch run above.
for s in 0 1; do
  tools/edit_checkpoint.py runs/vit-fc1/torch-s$s/init.safetensors runs/vit-fc1/starts/torch-fc1x3.8-s$s.safetensors --scale 'blocks.*.mlp.fc1.weight=3.8'
  "${V[@]}" --threads 1 --seed $s --init torch --init-from runs/vit-fc1/starts/torch-fc1x3.8-s$s.safetensors --out runs/vit-fc1/torch-fc1x3.8-s$s
done
# Session 31: section 5, which weights carry orthogonal's ViT gain: torch's start of each seed with
# one part taken from orthogonal's start of the same seed (V as above, --threads 1, two at a time).
for s in 0 1; do
  "${V[@]}" --threads 1 --seed $s --init torch --out runs/vit-orth/torch-s$s
  "${V[@]}" --threads 1 --seed $s --init orthogonal --out runs/vit-orth/orthogonal-s$s
  T=runs/vit-orth/torch-s$s/init.safetensors O=runs/vit-orth/orthogonal-s$s/init.safetensors
  tools/edit_checkpoint.py $T runs/vit-orth/starts/attn-s$s.safetensors --take "blocks.*.attn.*=$O"
  tools/edit_checkpoint.py $T runs/vit-orth/starts/mlp-s$s.safetensors --take "blocks.*.mlp.*=$O"
  tools/edit_checkpoint.py $T runs/vit-orth/starts/ends-s$s.safetensors --take "patch_embed.*=$O" --take "head.*=$O"
  for arm in attn mlp ends; do
    "${V[@]}" --threads 1 --seed $s --init torch --init-from runs/vit-orth/starts/$arm-s$s.safetensors --out runs/vit-orth/torch+orth-$arm-s$s
  done
  # Within attention: orthogonal's q and k, or its v and proj; torch's attention weights × √3
  # (orthogonal's size for a square matrix), or its attention biases at 0 (as orthogonal's).
  tools/edit_checkpoint.py $T runs/vit-orth/starts/qk-s$s.safetensors --take "blocks.*.attn.q.*=$O" --take "blocks.*.attn.k.*=$O"
  tools/edit_checkpoint.py $T runs/vit-orth/starts/vproj-s$s.safetensors --take "blocks.*.attn.v.*=$O" --take "blocks.*.attn.proj.*=$O"
  tools/edit_checkpoint.py $T runs/vit-orth/starts/attnx1.73-s$s.safetensors --scale "blocks.*.attn.*.weight=1.732"
  tools/edit_checkpoint.py $T runs/vit-orth/starts/attnbias0-s$s.safetensors --fill "blocks.*.attn.*.bias=0"
  for arm in qk vproj attnx1.73 attnbias0; do
    "${V[@]}" --threads 1 --seed $s --init torch --init-from runs/vit-orth/starts/$arm-s$s.safetensors --out runs/vit-orth/torch+$arm-s$s
  done
  # torch's q and k × √3 alone; and torch's q and k at their own size with lr × √3.
  tools/edit_checkpoint.py $T runs/vit-orth/starts/qkx1.73-s$s.safetensors --scale "blocks.*.attn.q.weight=1.732" --scale "blocks.*.attn.k.weight=1.732"
  "${V[@]}" --threads 1 --seed $s --init torch --init-from runs/vit-orth/starts/qkx1.73-s$s.safetensors --out runs/vit-orth/torch+qkx1.73-s$s
  "${V[@]}" --threads 1 --seed $s --init torch --init-from $T --lr-scale 'blocks.*.attn.q.weight=1.732,blocks.*.attn.k.weight=1.732' --out runs/vit-orth/torch-qklrx1.73-s$s
done
# Session 31: section 5, fc1's range or Adam's relative step (L1 as above): PyTorch's fc1 × 3.4 with
# its lr × 3.4 (the larger range, torch's relative steps), and PyTorch's fc1 with its lr / 3.4
# (torch's range, the smaller relative steps).
for s in 0 1 2; do
  ./apps/train_lm --dataset ptb-char --model transformer --dim 128 --depth 4 --heads 4 --seq-len 128 --batch-size 32 --epochs 1 --max-steps 1 --threads 1 --seed $s --init torch --overwrite --out runs/lm-fc1-lr/starts/torch-s$s
  tools/edit_checkpoint.py runs/lm-fc1-lr/starts/torch-s$s/init.safetensors runs/lm-fc1-lr/starts/fc1x3.4-s$s.safetensors --scale 'blocks.*.mlp.fc1.weight=3.4'
  "${L1[@]}" --seed $s --init torch --init-from runs/lm-fc1-lr/starts/fc1x3.4-s$s.safetensors --lr-scale 'blocks.*.mlp.fc1.weight=3.4' --out runs/lm-fc1-lr/char-torch-fc1x3.4-lrx3.4-s$s
  "${L1[@]}" --seed $s --init torch --init-from runs/lm-fc1-lr/starts/torch-s$s/init.safetensors --lr-scale 'blocks.*.mlp.fc1.weight=0.294' --out runs/lm-fc1-lr/char-torch-lrx0.294-s$s
  # torch's range with fc1's lr × 3.4 (larger relative steps)
  "${L1[@]}" --seed $s --init torch --init-from runs/lm-fc1-lr/starts/torch-s$s/init.safetensors --lr-scale 'blocks.*.mlp.fc1.weight=3.4' --out runs/lm-fc1-lr/char-torch-lrx3.4-s$s
done
# (a control: torch's start of seed 0 through --init-from on this binary)
"${L1[@]}" --seed 0 --init torch --init-from runs/lm-fc1-lr/starts/torch-s0/init.safetensors --out runs/lm-fc1-lr/char-torch-control-s0
# Session 32: section 5, what makes the q/k weights' size matter on the ViT: weight decay 0, Adam's
# ε 1e-8 instead of the recipe's 1e-3, and q, k × 3 or × 1/√3 (V as above, --threads 1, two at a time;
# the starts are session 31's). Then the section-1 inits at ε 1e-8, and torch at ε 1e-4 and 1e-5.
VW0=(./apps/train_vit --auto-resume --dataset folder --data-dir "$INITLAB_DATA"/cifar10-jpeg --dim 96 --depth 6 --heads 3 --patch 4 --pool avg --batch-size 128 --epochs 4 --warmup-epochs 1 --lr 1e-3 --weight-decay 0 --randaug 0 --train-subset 10000)
for s in 0 1; do
  T=runs/vit-orth/torch-s$s/init.safetensors Q=runs/vit-orth/starts/qkx1.73-s$s.safetensors
  tools/edit_checkpoint.py $T runs/vit-qk/starts/qkx3-s$s.safetensors --scale "blocks.*.attn.q.weight=3" --scale "blocks.*.attn.k.weight=3"
  tools/edit_checkpoint.py $T runs/vit-qk/starts/qkx0.58-s$s.safetensors --scale "blocks.*.attn.q.weight=0.577" --scale "blocks.*.attn.k.weight=0.577"
  "${VW0[@]}" --threads 1 --seed $s --init torch --init-from $T --out runs/vit-qk/torch-wd0-s$s
  "${VW0[@]}" --threads 1 --seed $s --init torch --init-from $Q --out runs/vit-qk/torch+qkx1.73-wd0-s$s
  "${V[@]}" --threads 1 --seed $s --init torch --init-from $T --adam-eps 1e-8 --out runs/vit-qk/torch-eps1e-8-s$s
  "${V[@]}" --threads 1 --seed $s --init torch --init-from $Q --adam-eps 1e-8 --out runs/vit-qk/torch+qkx1.73-eps1e-8-s$s
  "${V[@]}" --threads 1 --seed $s --init torch --init-from runs/vit-qk/starts/qkx3-s$s.safetensors --out runs/vit-qk/torch+qkx3-s$s
  "${V[@]}" --threads 1 --seed $s --init torch --init-from runs/vit-qk/starts/qkx0.58-s$s.safetensors --out runs/vit-qk/torch+qkx0.58-s$s
  for init in timm mimetic impulse3 impulse5 orthogonal; do
    "${V[@]}" --threads 1 --seed $s --init $init --adam-eps 1e-8 --out runs/vit-eps/$init-eps1e-8-s$s
  done
  "${V[@]}" --threads 1 --seed $s --init mimetic --no-mimetic-vo --adam-eps 1e-8 --out runs/vit-eps/mimetic-qkonly-eps1e-8-s$s
  "${V[@]}" --threads 1 --seed $s --init mimetic --no-mimetic-qk --adam-eps 1e-8 --out runs/vit-eps/mimetic-voonly-eps1e-8-s$s
  for eps in 1e-4 1e-5; do
    "${V[@]}" --threads 1 --seed $s --init torch --adam-eps $eps --out runs/vit-eps/torch-eps$eps-s$s
  done
done
# (torch, timm and mimetic at the recipe's ε again, seed 0, for their optimizer state. The step-79
# tables of docs/results/vit-eps/eps_share.md come from copies of last.optim.safetensors (and
# config.json) taken when each epoch's checkpoint was written, by a loop polling the run folders.)
"${V[@]}" --threads 1 --seed 0 --init torch --out runs/vit-eps/torch-eps1e-3-s0
"${V[@]}" --threads 1 --seed 0 --init timm --out runs/vit-eps/timm-eps1e-3-s0
"${V[@]}" --threads 1 --seed 0 --init mimetic --out runs/vit-eps/mimetic-eps1e-3-s0
tools/adam_eps_share.py runs/vit-orth/torch-s0 runs/vit-orth/torch+qkx1.73-s0 runs/vit-qk/torch+qkx3-s0 runs/vit-orth/orthogonal-s0 runs/vit-qk/torch-eps1e-8-s0
# Session 32: section 5's ConvMixer (trained or frozen spatial filters) at the recipe's ε and at 1e-8,
# seeds 0 and 1, --threads 1, two at a time.
M32=(./apps/train_vit --auto-resume --dataset folder --data-dir "$INITLAB_DATA"/cifar10-jpeg --model convmixer-256-8 --dim 128 --depth 4 --kernel 3 --patch 2 --batch-size 128 --epochs 3 --warmup-epochs 1 --lr 5e-3 --weight-decay 0.05 --randaug 0 --train-subset 5000 --threads 1 --init torch)
for s in 0 1; do
  for eps in 1e-3 1e-8; do
    "${M32[@]}" --seed $s --adam-eps $eps --out runs/convmixer-eps/trained-eps$eps-s$s
    for k in random impulse box; do
      "${M32[@]}" --seed $s --spatial $k --freeze-spatial --adam-eps $eps --out runs/convmixer-eps/frozen-$k-eps$eps-s$s
    done
  done
done
# Session 33: section 5, the data-dependent fit at ε 1e-8 (V as above, --threads 1, two at a time):
# the session-30 ViT fc1 study with --adam-eps 1e-8, seeds 0-2, and torch and orthogonal at seed 2.
for s in 0 1 2; do
  "${V[@]}" --threads 1 --seed $s --init relu-quantile --act-prob 0.5 --adam-eps 1e-8 --out runs/vit-eps/rq0.5-eps1e-8-s$s
  "${V[@]}" --threads 1 --seed $s --init relu-quantile --act-prob 0.5 --output-logit 0 --adam-eps 1e-8 --out runs/vit-eps/rq0.5-nohead-eps1e-8-s$s
  "${V[@]}" --threads 1 --seed $s --init torch+relu-quantile --act-prob 0.5 --output-logit 0 --adam-eps 1e-8 --out runs/vit-eps/torch+rq0.5-eps1e-8-s$s
  "${V[@]}" --threads 1 --seed $s --init torch+relu-quantile --act-prob 0.5 --adam-eps 1e-8 --out runs/vit-eps/torch+rq0.5-head-eps1e-8-s$s
done
for init in torch orthogonal; do "${V[@]}" --threads 1 --seed 2 --init $init --adam-eps 1e-8 --out runs/vit-eps/$init-eps1e-8-s2; done
# The output layer's fit: torch+rq0.5's start with its head × 10.6 (the fitted head's norm over
# PyTorch's) and head bias 0; and both relu-quantile ablation switches composed after torch.
for s in 0 1 2; do
  tools/edit_checkpoint.py runs/vit-eps/torch+rq0.5-eps1e-8-s$s/init.safetensors runs/vit-eps/starts/torch+rq0.5-headx10.6-s$s.safetensors --scale 'head.weight=10.6' --fill 'head.bias=0'
  "${V[@]}" --threads 1 --seed $s --init torch --init-from runs/vit-eps/starts/torch+rq0.5-headx10.6-s$s.safetensors --adam-eps 1e-8 --out runs/vit-eps/torch+rq0.5-headx10.6-eps1e-8-s$s
  "${V[@]}" --threads 1 --seed $s --init torch+relu-quantile --act-prob 0.5 --no-rq-bias --no-rq-scale --adam-eps 1e-8 --out runs/vit-eps/torch+headfit-eps1e-8-s$s
done
# Ten epochs instead of four: torch and mimetic at both ε, seed 0 (V with --epochs 10).
V10=(./apps/train_vit --auto-resume --dataset folder --data-dir "$INITLAB_DATA"/cifar10-jpeg --dim 96 --depth 6 --heads 3 --patch 4 --pool avg --batch-size 128 --epochs 10 --warmup-epochs 1 --lr 1e-3 --weight-decay 0.05 --randaug 0 --train-subset 10000)
for init in torch mimetic; do
  "${V10[@]}" --threads 1 --seed 0 --init $init --out runs/vit-eps-long/$init-eps1e-3-s0
  "${V10[@]}" --threads 1 --seed 0 --init $init --adam-eps 1e-8 --out runs/vit-eps-long/$init-eps1e-8-s0
done
# Session 34: the output layer's fit alone (--init ...+output-fit), on torch's, mimetic's and orthogonal's weights,
# ε 1e-8, seeds 0-2 (V as above, --threads 1, two or three at a time); mimetic's seed 2; and torch's
# start with its head scaled to the fitted head's norm (the factor: that norm over torch's, per
# seed), bias 0.
for s in 0 1 2; do
  for init in torch mimetic orthogonal; do
    "${V[@]}" --threads 1 --seed $s --init $init+output-fit --adam-eps 1e-8 --out runs/vit-eps/$init+outfit-eps1e-8-s$s
  done
done
"${V[@]}" --threads 1 --seed 2 --init mimetic --adam-eps 1e-8 --out runs/vit-eps/mimetic-eps1e-8-s2
for sf in 0:43.13 1:45.64 2:47.56; do
  s=${sf%%:*} f=${sf#*:}
  tools/edit_checkpoint.py runs/vit-eps/torch-eps1e-8-s$s/init.safetensors runs/vit-eps/starts/torch-headx$f-s$s.safetensors --scale "head.weight=$f" --fill 'head.bias=0'
  "${V[@]}" --threads 1 --seed $s --init torch --init-from runs/vit-eps/starts/torch-headx$f-s$s.safetensors --adam-eps 1e-8 --out runs/vit-eps/torch-headx$f-eps1e-8-s$s
done
# The fit with a ridge penalty on the head's size (--output-ridge), on torch's weights.
for s in 0 1 2; do
  for r in 0.001 0.1; do
    "${V[@]}" --threads 1 --seed $s --init torch+output-fit --output-ridge $r --adam-eps 1e-8 --out runs/vit-eps/torch+outfit-ridge$r-eps1e-8-s$s
  done
done
# Session 35: the output layer's fit on the char-level LM with an untied head (L1 as above), seeds 0-2,
# beside torch and mimetic untied again (with this binary, --threads 1, and their score at init);
# and mimetic+output-fit at ten epochs on the ViT (V10 as above, ε 1e-8), with mimetic and torch at seed 1
# (two runs at a time).
for s in 0 1 2; do
  sfx=$([ $s = 0 ] || echo -s$s)
  for init in torch mimetic; do
    "${L1[@]}" --untied --seed $s --init $init+output-fit --init-samples 2048 --out runs/lm-data-dependent/char-$init+outfit-untied$sfx
    "${L1[@]}" --untied --seed $s --init $init --eval-init --out runs/lm-data-dependent/char-$init-untied$sfx
  done
done
"${V10[@]}" --threads 1 --seed 0 --init mimetic+output-fit --adam-eps 1e-8 --out runs/vit-eps-long/mimetic+outfit-eps1e-8-s0
for init in mimetic mimetic+output-fit torch; do
  "${V10[@]}" --threads 1 --seed 1 --init $init --adam-eps 1e-8 --out runs/vit-eps-long/${init/output-fit/outfit}-eps1e-8-s1
done
# The fitted heads' test accuracy at init: one epoch at lr 1e-30 (no weight moves in float32; made
# before --eval-init existed, which gives the same figure), seeds 0 and 1.
P35=(./apps/train_vit --auto-resume --dataset folder --data-dir "$INITLAB_DATA"/cifar10-jpeg --dim 96 --depth 6 --heads 3 --patch 4 --pool avg --batch-size 128 --epochs 1 --warmup-epochs 1 --lr 1e-30 --min-lr 0 --weight-decay 0.05 --randaug 0 --train-subset 10000 --threads 1 --adam-eps 1e-8)
for s in 0 1; do
  for init in torch mimetic orthogonal; do "${P35[@]}" --seed $s --init $init+output-fit --out runs/vit-probe/$init+outfit-s$s; done
  for r in 0.001 0.1; do "${P35[@]}" --seed $s --init torch+output-fit --output-ridge $r --out runs/vit-probe/torch+outfit-ridge$r-s$s; done
done
# The fitted heads' validation bpc at init on the char-level LM (--eval-init, then one step).
for s in 0 1 2; do
  for init in torch mimetic; do
    ./apps/train_lm --auto-resume --dataset ptb-char --model transformer --dim 128 --depth 4 --heads 4 --seq-len 128 --batch-size 32 --epochs 1 --max-steps 1 --lr 2e-3 --warmup-steps 50 --log-every 25 --threads 1 --untied --seed $s --init $init+output-fit --init-samples 2048 --eval-init --out runs/lm-probe/char-$init+outfit-untied-s$s
  done
done
# What the fitted head leaves on mimetic: mimetic's start with PyTorch's head scaled to the fitted
# head's norm (bias 0), and mimetic+output-fit's start with its fitted head scaled down to
# PyTorch's norm (the factors: the two heads' norms per seed). V as above, with --eval-init.
for sf in 0:9.702:0.10307 1:10.427:0.0959 2:9.749:0.10257; do
  IFS=: read -r s f inv <<< "$sf"
  tools/edit_checkpoint.py runs/vit-eps/mimetic-eps1e-8-s$s/init.safetensors runs/vit-eps/starts/mimetic-headx$f-s$s.safetensors --scale "head.weight=$f" --fill 'head.bias=0'
  tools/edit_checkpoint.py runs/vit-eps/mimetic+outfit-eps1e-8-s$s/init.safetensors runs/vit-eps/starts/mimetic+outfit-headx$inv-s$s.safetensors --scale "head.weight=$inv"
  "${V[@]}" --threads 1 --seed $s --init mimetic --init-from runs/vit-eps/starts/mimetic-headx$f-s$s.safetensors --adam-eps 1e-8 --eval-init --out runs/vit-eps/mimetic-headx$f-eps1e-8-s$s
  "${V[@]}" --threads 1 --seed $s --init mimetic --init-from runs/vit-eps/starts/mimetic+outfit-headx$inv-s$s.safetensors --adam-eps 1e-8 --eval-init --out runs/vit-eps/mimetic+outfit-headx$inv-eps1e-8-s$s
done
# The head's direction kept nearly fixed at PyTorch's size: the fitted head scaled down (above), or
# PyTorch's own head, trained at a tenth of the learning rate (--lr-scale 'head.*=0.1').
for sf in 0:0.10307 1:0.0959 2:0.10257; do
  IFS=: read -r s inv <<< "$sf"
  "${V[@]}" --threads 1 --seed $s --init mimetic --init-from runs/vit-eps/starts/mimetic+outfit-headx$inv-s$s.safetensors --lr-scale 'head.*=0.1' --adam-eps 1e-8 --eval-init --out runs/vit-eps/mimetic+outfit-headx$inv-headlr0.1-eps1e-8-s$s
  "${V[@]}" --threads 1 --seed $s --init mimetic --lr-scale 'head.*=0.1' --adam-eps 1e-8 --eval-init --out runs/vit-eps/mimetic-headlr0.1-eps1e-8-s$s
done
# torch+output-fit's start with its fitted head scaled down to PyTorch's norm (its bias kept).
for sf in 0:0.023186 1:0.021911 2:0.021026; do
  IFS=: read -r s inv <<< "$sf"
  tools/edit_checkpoint.py runs/vit-eps/torch+outfit-eps1e-8-s$s/init.safetensors runs/vit-eps/starts/torch+outfit-headx$inv-s$s.safetensors --scale "head.weight=$inv"
  "${V[@]}" --threads 1 --seed $s --init torch --init-from runs/vit-eps/starts/torch+outfit-headx$inv-s$s.safetensors --adam-eps 1e-8 --eval-init --out runs/vit-eps/torch+outfit-headx$inv-eps1e-8-s$s
done
