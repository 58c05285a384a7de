"""The load benchmark (``bench/serve_load.py``) in short: 8 clients of mixed search/add/delete against a BM25
and an inference-free index of a SciFact sample, 15 seconds by default (``SEMIRET_LOAD_SECONDS``; 30 before the
twenty-ninth session); no request may fail and no acknowledged write may be lost. Latency is the benchmark's to report, not this test's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from helpers import require_shared_data

BENCH = Path(__file__).resolve().parents[2] / "bench" / "serve_load.py"
SECONDS = float(os.environ.get("SEMIRET_LOAD_SECONDS", "15"))


def test_mixed_load_loses_nothing_and_fails_nothing():
    """The indexes of 200 SciFact documents are built on the first run (into the benchmark cache), then reused."""
    require_shared_data()
    done = subprocess.run([sys.executable, str(BENCH), "--duration", str(SECONDS), "--docs", "200", "--idle-queries", "50",
                           "--paced-idle-queries", "20"],
                          capture_output=True, text=True, timeout=SECONDS + 300)
    result = json.loads(done.stdout)
    assert (result["errors"], result["lost_documents"], result["not_visible_after_add"]) == (0, 0, 0), result["error_examples"]
    assert done.returncode == 0, done.stderr
    for name, figures in result["indexes"].items():
        load = figures["load"]
        assert load["search"]["count"] > 0 and load["add"]["count"] > 0 and load["delete"]["count"] > 0, name
        added, deleted = load["add"]["count"], load["delete"]["count"]
        assert figures["documents_after"] == figures["documents_before"] + added - deleted, name
        assert figures["idle_paced"]["searches"] == 20 and figures["search_p99_over_paced_idle_p50"] > 0, name
