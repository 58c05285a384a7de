#!/bin/bash
# `--device`: the packaged sparse models' indexes built on a GPU against the same command on the machine's CPU (every
# core: THREADS, default `nproc --all`), one after the other on one machine; each index then searches SciFact's
# queries, encoded on the device it was built on. The TREC runs come back in $OUT/runs.tar.xz (scored on the CPU
# machine with `semiret compare`), the timings in $OUT/timings.jsonl. Retrievers: inference-free (SPLADE's vectors off
# the CPU), sidr-full (VDR's top-k, both sides), bm25+nail (NAIL's score matrix). SEARCH=0 times the builds alone.
# What travels: the tree without the dense checkpoints (hce-scifact, gdr-scifact: over the 64 MiB limit),
# .gpu/data/scifact, .whl/ (PyStemmer). Locally, a dry run: DEVICE=cpu DATA=a-small-beir-folder bash THIS_SCRIPT
set -u
DATA=${DATA:-.gpu/data/scifact} SEARCH=${SEARCH:-1} THREADS=${THREADS:-$(nproc --all)} R=/tmp/encode-$(date +%s)
RETRIEVERS=${RETRIEVERS:-"inference-free sidr-full bm25+nail"}
source scripts/device/setup.sh
python3 -c "import Stemmer, torch, semiret.cli; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())" || exit 5
model() { case $1 in bm25+nail) echo "--model nail-scifact";; esac; }
mkdir -p $R/runs
devices=$DEVICE; [ $DEVICE = cpu ] || devices="$DEVICE cpu"
for retriever in $RETRIEVERS; do
  for device in $devices; do
    name=$device-${retriever/+/-}; began=$(date +%s.%N)
    OMP_NUM_THREADS=$THREADS timeout 200 python3 -m semiret.cli index --data $DATA --out $R/$name -r $retriever \
      $(model $retriever) --device $device > /tmp/logs/$name.log 2>&1
    status=$? built=$(python3 -c "print(round($(date +%s.%N) - $began, 2))")
    began=$(date +%s.%N)
    [ $SEARCH = 1 ] && timeout 100 python3 -m semiret.cli search --index $R/$name --queries $DATA/queries.jsonl \
      -k 100 --device $device --run $R/runs/$name.trec >> /tmp/logs/$name.log 2>&1
    searched=$(python3 -c "print(round($(date +%s.%N) - $began, 2))")
    echo "{\"retriever\": \"$retriever\", \"device\": \"$device\", \"index_exit\": $status, \"index_seconds\": $built, \
\"search_seconds\": $searched, \"threads\": $THREADS}" | tee -a $OUT/timings.jsonl
    [ $status = 0 ] || tail -5 /tmp/logs/$name.log
  done
done
tar -C $R -cJf $OUT/runs.tar.xz runs
t "done"
