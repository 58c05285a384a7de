#!/bin/bash
# The comparisons at the GPU settings where HCE-J reached 0.81 (docs/results.md, seventeenth session):
# plain in-batch contrastive and mined hard negatives (the same data and steps as HCE-J), the tree fixed at the
# start, supervised only; and HCE-U on SciFact and on Vaswani, each corpus alone, three ways (the CPU's settings with
# gradients through the negatives; the paper's batch of 512; adapt's gentler settings). Test figures of each model
# and of each HCE-U model averaged half with MiniLM, and every model's test run packed into $OUT for paired tests.
# Run from the repository root on the device machine with what scripts/device/hce_setup.sh says travels
# (.gpu/data/scifact and .gpu/data/vaswani). ONLY="NAME ..." runs some of them (the names in RUNS below).
set -u
SCIFACT=${SCIFACT:-.gpu/data/scifact} VASWANI=${VASWANI:-.gpu/data/vaswani} EPOCHS=${EPOCHS:-10} U_EPOCHS=${U_EPOCHS:-4}
OMP_NUM_THREADS=${THREADS:-1} source scripts/device/hce_setup.sh  # THREADS: CPU threads per run (16 cores over the runs)
(while sleep 15; do nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader; done) > /tmp/logs/gpu.txt 2>&1 &
monitor=$! pids=()
t "training"
sup="--best-epoch --epochs $EPOCHS --document-max-length 256 --index-max-length 256"
unsup="--scenario unsupervised --best-epoch"
declare -A RUNS=(
  [c256]="$SCIFACT $sup --loss contrastive"
  [m256]="$SCIFACT $sup --loss mined"
  [jfixed256]="$SCIFACT $sup --no-co-training"
  [s256]="$SCIFACT $sup --scenario supervised"
  [ua-scifact]="$SCIFACT $unsup --epochs $U_EPOCHS --unsupervised-per-epoch 832"
  [ua-vaswani]="$VASWANI $unsup --epochs $U_EPOCHS --unsupervised-per-epoch 1664"
  [ub-scifact]="$SCIFACT $unsup --epochs $EPOCHS --batch-size 512 --no-negative-gradients"
  [ub-vaswani]="$VASWANI $unsup --epochs $EPOCHS --batch-size 512 --no-negative-gradients"
  [uc-scifact]="$SCIFACT $unsup --epochs 2 --unsupervised-per-epoch 1024 --learning-rate 2e-5 --span-words 16"
  [uc-vaswani]="$VASWANI $unsup --epochs 2 --unsupervised-per-epoch 1024 --learning-rate 2e-5 --span-words 16"
)
ONLY=${ONLY:-${!RUNS[*]}}  # e.g. ONLY="m256 jfixed256 s256": the runs the seventeenth session's 260 s cut short
for n in $ONLY; do train $n ${RUNS[$n]} & pids+=($!); done
wait "${pids[@]}"
kill $monitor
summaries $ONLY | tee $OUT/summaries.txt
t "averaging the HCE-U models half with MiniLM"
for n in $ONLY; do
  [[ $n == u* && -d $R/$n/model ]] && python3 scripts/average_dense.py $R/$n/model $R/$n/wise50 --base $BASE 2>>/tmp/logs/average.err &
done
wait
t "test figures"
rm -rf /tmp/runs && mkdir -p /tmp/runs
on() { for n in $ONLY; do [[ $n == *$1* ]] && echo $R/$n/model $R/$n/wise50; done; }  # missing folders are skipped
python3 scripts/device/dense_test_figures.py $SCIFACT $DEVICE $BASE $(on 256) $(on scifact) --runs /tmp/runs/scifact \
  2>/tmp/logs/figures-scifact.err > $OUT/test-scifact.jsonl &
python3 scripts/device/dense_test_figures.py $VASWANI $DEVICE $BASE $(on vaswani) --runs /tmp/runs/vaswani \
  2>/tmp/logs/figures-vaswani.err > $OUT/test-vaswani.jsonl &
wait
cat $OUT/test-*.jsonl
tar -C /tmp -cJf $OUT/runs.tar.xz runs
t "done"
tail -n 20 /tmp/logs/*.log /tmp/logs/*.err > $OUT/logs.txt 2>&1; cp /tmp/logs/gpu.txt $OUT/ 2>/dev/null
ls -la $OUT
