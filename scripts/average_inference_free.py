"""Average a saved inference-free model's weights with its starting model's (WiSE-FT), after the fact.

``python scripts/average_inference_free.py MODEL BASE SHARE OUT`` writes to OUT the model whose weights are
``(1 - SHARE) * MODEL + SHARE * BASE`` (what ``semiret train inference-free --average-with-base SHARE`` does at
the end of a run), keeping MODEL's query weights, lexical prior and document threshold.
"""

from __future__ import annotations

import json
import sys

from semiret.models.base import average_weights
from semiret.models.checkpoints import INFERENCE_FREE, resolve_inference_free
from semiret.models.inference_free import InferenceFreeModel
from semiret.models.splade import SpladeEncoder


def main() -> None:
    model_name, base, share, out = sys.argv[1], resolve_inference_free(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
    model = InferenceFreeModel.load(model_name)
    model.encoder.float()
    average_weights(model.encoder, SpladeEncoder.from_pretrained(base).float(), share)
    _, meta = INFERENCE_FREE.read(model_name)
    saved = model.save(out, training={"averaged_with": base, "share": share, "model": model_name})
    marker = saved / INFERENCE_FREE.marker
    written = json.loads(marker.read_text())
    marker.write_text(json.dumps({**written, "document_threshold": meta.get("document_threshold")}, indent=1))


if __name__ == "__main__":
    main()
