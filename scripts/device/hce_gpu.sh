#!/bin/bash
# HCE-J on a GPU (docs/results.md, "HCE-J on a GPU", sixteenth session): five trainings side by side, a greedy soup of
# the 512-token runs by the dev split, test figures of each (scripts/device/dense_test_figures.py), the dev-best model
# packed into $OUT in 15 MiB parts. Run from the repository root on the device machine with what
# scripts/device/hce_setup.sh says travels (.gpu/data/scifact the SciFact collection).
set -u
EPOCHS=${EPOCHS:-10} DATA=${DATA:-.gpu/data/scifact}
source scripts/device/hce_setup.sh
t "training"
train j256 $DATA --best-epoch --epochs $EPOCHS --document-max-length 256 --index-max-length 256 &
train j512 $DATA --best-epoch --epochs $EPOCHS --document-max-length 512 --index-max-length 512 &
train j512ng $DATA --best-epoch --epochs $EPOCHS --document-max-length 512 --index-max-length 512 --negative-gradients &
train j256ng $DATA --best-epoch --epochs $EPOCHS --document-max-length 256 --index-max-length 256 --negative-gradients &
train j512s2 $DATA --best-epoch --epochs $EPOCHS --document-max-length 512 --index-max-length 512 --seed 2 &
wait
summaries j256 j256ng j512 j512ng j512s2 | tee $OUT/summaries.txt
t "soup"
models=$(for n in j512 j512ng j512s2; do [ -d $R/$n/model ] && echo $R/$n/model; done)
[ -n "${SKIP_SOUP:-}" ] || python3 scripts/greedy_soup.py $models --out $R/soup512 --data $DATA --max-length 512 --device $DEVICE 2>/tmp/logs/soup.err | tee $OUT/soup.jsonl
t "test figures"
python3 scripts/device/dense_test_figures.py $DATA $DEVICE $R/j256/model $R/j256ng/model $R/j512/model $R/j512ng/model $R/j512s2/model $R/soup512 2>/tmp/logs/post.err | tee $OUT/test.jsonl
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
