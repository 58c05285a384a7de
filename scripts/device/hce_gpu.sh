#!/bin/bash
# HCE-J on a GPU (docs/results.md, "HCE-J on a GPU", sixteenth session): five trainings side by side, a greedy soup of
# the 512-token runs by the dev split, test figures of each (scripts/device/dense_test_figures.py), the dev-best model
# packed into $OUT in 15 MiB parts. Run from the repository root on the device machine, with what the device tool
# carries, prepared here (git-ignored through .git/info/exclude; the packaged checkpoints must not travel, the tree's
# limit is 64 MiB):
#   .gpu/minilm/   MiniLM's sentence-transformers folder, model.safetensors in float16 and xz-compressed
#   .gpu/data/scifact/   queries.jsonl, qrels/, corpus.jsonl.gz
#   .whl/          cp312 wheels of faiss-cpu, ir-measures, pytrec-eval-terrier, PyStemmer (device README)
# and copy this script and dense_test_figures.py to .gpu/. Locally, a dry run on the CPU:
#   DEVICE=cpu EPOCHS=1 DATA=<a small BEIR folder> BASE=minilm bash .gpu/hce_gpu.sh
set -u
DEVICE=${DEVICE:-cuda} EPOCHS=${EPOCHS:-10} LIMIT=${LIMIT:-300} DATA=${DATA:-.gpu/data/scifact} R=${R:-/tmp/r}
OUT=${OUT:-/tmp/out}; mkdir -p $OUT $R /tmp/logs
start=$(date +%s); t() { echo "[$(( $(date +%s) - start )) s] $*"; }
if [ "$DEVICE" = cuda ]; then
  [ -d /tmp/site/faiss ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
  export PYTHONPATH=/tmp/site:$PWD
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  [ -f $DATA/corpus.jsonl ] || gunzip -k $DATA/corpus.jsonl.gz
  xz -dkf .gpu/minilm/model.safetensors.xz
  python3 -c "
import torch, transformers; from safetensors.torch import load_file, save_file
p='.gpu/minilm/model.safetensors'; t=load_file(p)
save_file({k:(v.float() if v.is_floating_point() else v).contiguous() for k,v in t.items()}, p, metadata={'format':'pt'})
print(torch.__version__, transformers.__version__, torch.cuda.get_device_name())" || exit 4
fi
BASE=${BASE:-.gpu/minilm}
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True PYTHONUNBUFFERED=1 OMP_NUM_THREADS=3 TOKENIZERS_PARALLELISM=false
train() { name=$1; shift; timeout $LIMIT python3 -m semiret.cli train hce --data $DATA --base $BASE --output $R/$name \
  --device $DEVICE --best-epoch --epochs $EPOCHS "$@" > /tmp/logs/$name.log 2>&1; t "$name exit $?"; }
t "training"
train j256 --document-max-length 256 --index-max-length 256 &
train j512 --document-max-length 512 --index-max-length 512 &
train j512ng --document-max-length 512 --index-max-length 512 --negative-gradients &
train j256ng --document-max-length 256 --index-max-length 256 --negative-gradients &
train j512s2 --document-max-length 512 --index-max-length 512 --seed 2 &
wait
for n in j256 j256ng j512 j512ng j512s2; do
  [ -d $R/$n/model ] || { [ -d $R/$n/best-model ] && cp -r $R/$n/best-model $R/$n/model && echo "$n: stopped, best-model so far"; }
  python3 -c "
import json; s=json.load(open('$R/$n/summary.json'))
print('$n', json.dumps({k: s.get(k) for k in ('train_seconds', 'steps_per_epoch', 'dev_nDCG@10_initial', 'dev_nDCG@10_per_epoch', 'reclustered_after_epochs', 'saved_epoch', 'loss_per_epoch')}))" 2>/dev/null || echo "$n: no summary"
done | tee $OUT/summaries.txt
t "soup"
models=$(for n in j512 j512ng j512s2; do [ -d $R/$n/model ] && echo $R/$n/model; done)
[ -n "${SKIP_SOUP:-}" ] || python3 scripts/greedy_soup.py $models --out $R/soup512 --data $DATA --max-length 512 --device $DEVICE 2>/tmp/logs/soup.err | tee $OUT/soup.jsonl
t "test figures"
python3 .gpu/dense_test_figures.py $DATA $DEVICE $R/j256/model $R/j256ng/model $R/j512/model $R/j512ng/model $R/j512s2/model $R/soup512 2>/tmp/logs/post.err | tee $OUT/test.jsonl
t "packing the dev-best"
best=$(python3 - <<PY
import json
soup = [json.loads(l) for l in open("$OUT/soup.jsonl") if l.strip()]
final = [s for s in soup if "soup" in s]
cands = {}
if final: cands["$R/soup512"] = final[0]["dev_nDCG@10"]
for n in ("j256", "j256ng"):
    try:
        s = json.load(open(f"$R/{n}/summary.json"))
        devs = [d for d in s["dev_nDCG@10_per_epoch"] if d is not None]
        if devs: cands[f"$R/{n}/model"] = max(devs)
    except Exception: pass
print("# candidates", cands, file=__import__("sys").stderr)
print(max(cands, key=cands.get) if cands else "")
PY
)
echo "dev-best: $best" | tee $OUT/best.txt
[ -n "$best" ] && tar -C $(dirname $best) -cf - $(basename $best) | split -b 15M -d - $OUT/best.tar.
t "done"
tail -n 25 /tmp/logs/*.log /tmp/logs/*.err > $OUT/logs.txt 2>&1
ls -la $OUT
