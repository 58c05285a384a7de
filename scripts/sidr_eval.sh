#!/usr/bin/env bash
# The SiDR rows of docs/results.md for one model: beta search (all query terms and 64), the full parametric
# index, and (with a third argument "rerank") beta search + re-ranking with m = 10, 20, 100, each from an
# empty embedding cache. Usage: bash scripts/sidr_eval.sh MODEL TAG [rerank]; JSON goes to runs/sidr-evals/.
set -euo pipefail
M=$1; T=$2
mkdir -p runs/eval-idx runs/sidr-evals
semiret eval --data scifact -r sidr-beta --model "$M" --index runs/eval-idx/bot --json > "runs/sidr-evals/$T.beta.json"
semiret eval --data scifact -r sidr-beta --model "$M" --query-top-k 64 --index runs/eval-idx/bot --json > "runs/sidr-evals/$T.beta64.json"
semiret eval --data scifact -r sidr-full --model "$M" --index "runs/eval-idx/$T-full" --rebuild --json > "runs/sidr-evals/$T.full.json"
if [ "${3:-}" = "rerank" ]; then
  for m in 10 20 100; do
    rm -rf "runs/eval-idx/$T-rerank"
    semiret eval --data scifact -r sidr-beta-rerank --model "$M" --rerank-depth $m --index "runs/eval-idx/$T-rerank" --json > "runs/sidr-evals/$T.rerank$m.json"
  done
  rm -rf "runs/eval-idx/$T-rerank"
  semiret eval --data scifact -r sidr-beta-rerank --model "$M" --query-top-k 64 --rerank-depth 100 --index "runs/eval-idx/$T-rerank" --json > "runs/sidr-evals/$T.rerank100-q64.json"
fi
