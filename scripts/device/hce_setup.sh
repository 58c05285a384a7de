# Sourced by the HCE device scripts (scripts/device/hce_*.sh): scripts/device/setup.sh (wheels, unpacked data, `t`,
# $OUT, $R), MiniLM widened back to float32 (it travels in float16, xz-compressed), and `train NAME DATA [semiret
# train hce options]` (a run under $R/NAME, its log /tmp/logs/NAME.log, stopped at $LIMIT seconds; resumable). What
# travels, prepared here and ignored through .git/info/exclude (the tree's limit is 64 MiB, so the packaged
# checkpoints must not travel):
#   .gpu/minilm/   MiniLM's sentence-transformers folder, model.safetensors in float16 and xz-compressed
#   .gpu/data/NAME/   queries.jsonl, qrels/, corpus.jsonl.gz or .xz
#   .whl/          cp312 wheels of faiss-cpu, ir-measures, pytrec-eval-terrier, PyStemmer (device README)
# Locally, a dry run on the CPU: DEVICE=cpu BASE=minilm with a small BEIR folder as the data.
source scripts/device/setup.sh
if [ "$DEVICE" = cuda ]; then
  python3 -c "
import torch, transformers; from safetensors.torch import load_file, save_file
p='.gpu/minilm/model.safetensors'; t=load_file(p)
save_file({k:(v.float() if v.is_floating_point() else v).contiguous() for k,v in t.items()}, p, metadata={'format':'pt'})
print(torch.__version__, transformers.__version__, torch.cuda.get_device_name())" || exit 4
fi
BASE=${BASE:-.gpu/minilm}
train() { name=$1 data=$2; shift 2; timeout $LIMIT python3 -m semiret.cli train hce --data $data --base $BASE --output $R/$name \
  --device $DEVICE "$@" > /tmp/logs/$name.log 2>&1; t "$name exit $?"; }
summaries() {  # one line per run: its dev figures, per-epoch losses and what was saved
  for n in "$@"; do
    [ -d $R/$n/model ] || { [ -d $R/$n/best-model ] && cp -r $R/$n/best-model $R/$n/model && echo "$n: stopped, best-model so far"; }
    python3 -c "
import json; s=json.load(open('$R/$n/summary.json'))
print('$n', json.dumps({k: s.get(k) for k in ('train_seconds', 'steps_per_epoch', 'dev_nDCG@10_initial', 'dev_nDCG@10_per_epoch', 'reclustered_after_epochs', 'saved_epoch', 'loss_per_epoch', 'gpu_peak_gb')}))" 2>/dev/null || \
    python3 -c "
from semiret.training.trainer import saved_history
print('$n: no summary; epochs checkpointed:', [(h.epoch, h.notes) for h in saved_history('$R/$n')])" 2>&1 | tail -n 1
  done
}
