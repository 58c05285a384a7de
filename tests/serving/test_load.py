"""The load benchmark (``bench/serve_load.py``) in short: 8 clients of mixed search/add/delete (a fifth of the
requests writes) against a BM25 and an inference-free index of a SciFact sample, 6 seconds by default
(``SEMIRET_LOAD_SECONDS``; 15 before); no request may fail and no acknowledged write may be lost. Latency is the
benchmark's to report, not this test's: nothing here is timed, and the idle searches are left out."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import require_shared_data

BENCH = Path(__file__).resolve().parents[2] / "bench" / "serve_load.py"
SECONDS = float(os.environ.get("SEMIRET_LOAD_SECONDS", "6"))

pytestmark = pytest.mark.integration  # real SciFact documents, the packaged inference-free-scifact


def test_mixed_load_loses_nothing_and_fails_nothing():
    """The indexes of 200 SciFact documents are built on the first run (into the benchmark cache), then reused.
    The clients' choices are seeded: at this mix each index gets its first add and delete by some client's 22nd
    request (about 2 s in at 10 requests a second), so each kind of request runs on each index within the run."""
    require_shared_data()
    done = subprocess.run([sys.executable, str(BENCH), "--duration", str(SECONDS), "--docs", "200", "--mix", "0.8,0.1,0.1",
                           "--idle-queries", "1", "--paced-idle-queries", "0"],
                          capture_output=True, text=True, timeout=SECONDS + 300)
    assert done.stdout.strip(), done.stderr
    result = json.loads(done.stdout)
    assert (result["errors"], result["lost_documents"], result["not_visible_after_add"]) == (0, 0, 0), result["error_examples"]
    assert done.returncode == 0, done.stderr
    for name, figures in result["indexes"].items():
        counts = {operation: figures["load"][operation]["count"] for operation in ("search", "add", "delete", "check")}
        assert min(counts.values()) > 0, (name, counts)  # every kind ran: the checks above had writes to check
        assert counts["check"] == counts["add"], (name, counts)  # each acknowledged add was searched for
        assert figures["documents_after"] == figures["documents_before"] + counts["add"] - counts["delete"], name
