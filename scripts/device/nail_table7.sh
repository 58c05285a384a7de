#!/bin/bash
# NAIL's Table 7 at a GPU's pre-training length (issue 18): the CPU recipe pre-trains for 128 steps (4 epochs of 2,048
# pseudo pairs), the paper for 500k. Here one long pre-training over the unlabelled corpora of SciFact, climate-fever
# and Vaswani (8 pseudo pairs per document; as many 50-step epochs as fit before PRETRAIN_UNTIL seconds, timed by a
# one-epoch calibration), then the default fine-tuning on SciFact train from it, against the same fine-tuning from
# SPLADE-tiny alone, SEEDS seeds each; every model (and the pre-trained one) re-ranks BM25's top 100 of each
# collection's test queries (scripts/device/nail_rerank.py, W = 0 and 1.5); the runs come back in $OUT/runs.tar.xz for
# paired tests on the CPU, with the summaries and the pre-trained model (float16).
# What travels (scripts/device/setup.sh): .gpu/data/{scifact,climate-fever,vaswani} (queries, qrels, corpus.jsonl.xz),
# .gpu/splade-tiny (its packaged folder, xz-compressed), .gpu/bm25-D.trec.xz (BM25 test runs from `semiret eval
# --run`), .whl/ (PyStemmer). Locally, a dry run: DEVICE=cpu DATA=small-folders FIRST_STAGE=folder-of-runs
# FT_ARGS="--finetune-epochs 1" PAIRS=128 PRETRAIN_UNTIL=150 END=330.
set -u
DATA=${DATA:-.gpu/data} FIRST_STAGE=${FIRST_STAGE:-.gpu} SPLADE=${SPLADE:-.gpu/splade-tiny} SEEDS=${SEEDS:-"1 2 3"}
PRETRAIN_UNTIL=${PRETRAIN_UNTIL:-270} END=${END:-530} FT_ARGS=${FT_ARGS:-} PAIRS=${PAIRS:-3200}
R=${R:-/tmp/nail-table7-$(date +%s)}  # a fresh folder each call: a warm machine keeps /tmp, and the runs would resume
source scripts/device/setup.sh
python3 -c "import Stemmer, torch, semiret.cli; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())" || exit 5
collections="scifact climate-fever vaswani"
nail() { name=$1 limit=$2; shift 2; timeout $limit python3 -m semiret.cli train nail --device $DEVICE --output $R/$name \
  "$@" > /tmp/logs/$name.log 2>&1; t "$name exit $?"; }
rerank() { local pids=(); for D in $collections; do python3 scripts/device/nail_rerank.py $DATA/$D $FIRST_STAGE/bm25-$D.trec \
  $R/runs/$D "$@" --device $DEVICE >> $OUT/rerank-$D.jsonl 2>>/tmp/logs/rerank.err & pids+=($!); done; wait "${pids[@]}"; }
pretraining="--data $DATA/scifact --base $SPLADE --finetune-epochs 0 --pretrain-pairs-per-document 8
  --pretrain-pairs-per-epoch $PAIRS --pretrain $DATA/scifact --pretrain $DATA/climate-fever --pretrain $DATA/vaswani"

t "fine-tuning only, seeds $SEEDS, beside a one-epoch pre-training calibration"
ft=()
for s in $SEEDS; do nail ft-s$s $LIMIT --data $DATA/scifact --base $SPLADE --pretrain none --seed $s $FT_ARGS & ft+=($!); done
nail calibration 120 $pretraining --pretrain-epochs 1  # beside the three fine-tunings: about twice an epoch's time alone
epochs=$(python3 -c "
import json, time
stage = json.load(open('$R/calibration/summary.json'))['stages'][0]
left = $PRETRAIN_UNTIL - (time.time() - $start) - 20  # 20 s: loading, pair generation, saving
print(max(1, int(left / stage['seconds'])))" || echo 8)  # 8: the calibration failed
t "pre-training: $epochs epochs of $(( PAIRS / 64 )) steps"
nail pretrained $(( PRETRAIN_UNTIL + 60 - ($(date +%s) - start) )) $pretraining --pretrain-epochs $epochs &
pt=$!
wait "${ft[@]}"
(rerank $(for s in $SEEDS; do echo $R/ft-s$s/model; done); t "fine-tuning only: re-ranked") &
first=$!
wait $pt
left=$(( END - 80 - ($(date +%s) - start) ))
t "fine-tuning from the pre-trained model, seeds $SEEDS (at most $left s)"
ptft=()
for s in $SEEDS; do
  nail ptft-s$s $left --data $DATA/scifact --base $R/pretrained/pretrain/model --pretrain none --seed $s $FT_ARGS & ptft+=($!)
done
wait "${ptft[@]}" $first
rerank $R/pretrained/pretrain/model $(for s in $SEEDS; do echo $R/ptft-s$s/model; done)
t "re-ranked; packing"
for n in calibration pretrained $(for s in $SEEDS; do echo ft-s$s ptft-s$s; done); do
  python3 -c "
import json; s = json.load(open('$R/$n/summary.json'))
print('$n', json.dumps({'train_seconds': s.get('train_seconds'), 'stages': [{k: v for k, v in st.items()
  if k in ('stage', 'steps_per_epoch', 'epochs', 'seconds', 'loss_per_epoch', 'pairs')} for st in s['stages']]}))" 2>/dev/null \
    || echo "$n: no summary"
done | tee $OUT/summaries.txt
tar -C $R -cJf $OUT/runs.tar.xz runs
[ -d $R/pretrained/model ] && tar -C $R/pretrained -cJf $OUT/pretrained-model.tar.xz model
t "done"
tail -n 15 /tmp/logs/*.log /tmp/logs/*.err > $OUT/logs.txt 2>&1
ls -la $OUT
