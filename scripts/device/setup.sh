# Sourced by every device script (scripts/device/*.sh): on the GPU machine (DEVICE=cuda, the default), unpacks the
# carried xz/gz files under .gpu/ (corpora, models), installs the carried cp312 wheels (.whl/, the device README) and
# puts them and this checkout on PYTHONPATH; everywhere, defines `t MESSAGE` (seconds since the start), $OUT (what
# comes back), $R (run folders), /tmp/logs and the environment the trainings share. .gpu/ and .whl/ are prepared
# here and ignored through .git/info/exclude (the tree's limit is 64 MiB: the packaged checkpoints must not travel).
# Locally, a dry run on the CPU: DEVICE=cpu, with small BEIR folders as the data.
DEVICE=${DEVICE:-cuda} LIMIT=${LIMIT:-300} R=${R:-/tmp/r}
OUT=${OUT:-/tmp/out}; mkdir -p $OUT $R /tmp/logs
start=$(date +%s); t() { echo "[$(( $(date +%s) - start )) s] $*"; }
if [ "$DEVICE" = cuda ]; then
  for packed in $(find .gpu -name '*.gz' -o -name '*.xz'); do
    [ -f "${packed%.*}" ] || { case $packed in *.gz) gunzip -k "$packed";; *) xz -dk "$packed";; esac; }
  done
  [ -f /tmp/site/.installed ] || { python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && touch /tmp/site/.installed; } || exit 3
  export PYTHONPATH=/tmp/site:$PWD
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
fi
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True PYTHONUNBUFFERED=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-3} TOKENIZERS_PARALLELISM=false
