"""A masked LM grown to more layers, near its own function at the start: ``python scripts/grow_layers.py MODEL OUT
LAYERS [--data CORPUS]``.

Each new layer is a copy of the last, appended above it, with its attention-output and feed-forward-output projections
zeroed, so it adds nothing to the residual stream. BERT's LayerNorms come after the residual (post-LN), and normalising
an already normalised state again is not the identity, so the new layer's two LayerNorms get a gain and a bias fitted
per dimension (least squares over the tokens of the first 400 documents of ``--data``, texts without titles) that map
LayerNorm(h) back onto the last layer's output h. SPLADE-tiny grown to 6 layers this way gives SPLADE vectors at
cosine 0.9997 to its own on SciFact documents (printed). Why: the vocabulary projection costs most of a SPLADE-tiny
student's time (30,522 x 128 per token against about 0.5 MFLOP a layer), so a deeper body is a cheap way to a larger
student (docs/results.md, thirty-first session). The zeroed projections still get gradients: training uses the new
layers from its first step.
"""

import argparse
import copy
import json

import torch

from semiret.data.collection import Collection
from semiret.data.paths import dataset
from semiret.models.loading import load_masked_lm, load_tokenizer
from semiret.models.splade import SpladeEncoder

FIT_DOCUMENTS = 400
CHECK_DOCUMENTS = 60


def fitted_layer_norm(hidden: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Gain and bias per dimension so that ``gain * normalised(h) + bias`` best reproduces ``h`` (rows: tokens)."""
    normalised = (hidden - hidden.mean(1, keepdim=True)) / torch.sqrt(hidden.var(1, unbiased=False, keepdim=True) + eps)
    n_mean, h_mean = normalised.mean(0), hidden.mean(0)
    gain = ((normalised - n_mean) * (hidden - h_mean)).sum(0) / ((normalised - n_mean) ** 2).sum(0)
    return gain, h_mean - gain * n_mean


def splade_vectors(model, tokenizer, batch: dict) -> torch.Tensor:
    """The model's SPLADE document vectors (:meth:`SpladeEncoder.forward`) of a tokenized batch, ten texts at a time
    (the logits are |V| wide)."""
    encoder = SpladeEncoder(model, tokenizer, "grown")
    ids, mask = batch["input_ids"], batch["attention_mask"]
    with torch.no_grad():
        return torch.cat([encoder(ids[start: start + 10], mask[start: start + 10]) for start in range(0, len(ids), 10)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="a masked LM: a registry name (splade-tiny) or a folder")
    parser.add_argument("out", help="folder for the grown model (Hugging Face layout, with the tokenizer)")
    parser.add_argument("layers", type=int, help="layers of the grown model")
    parser.add_argument("--data", default="scifact", help="corpus whose documents the LayerNorms are fitted on")
    args = parser.parse_args()
    model, tokenizer = load_masked_lm(args.model), load_tokenizer(args.model)
    encoder = model.base_model.encoder
    if args.layers <= len(encoder.layer):
        parser.error(f"{args.model} has {len(encoder.layer)} layers already; give more")
    corpus = Collection(dataset(args.data)).corpus()
    texts = [document.text for _, document in zip(range(FIT_DOCUMENTS), corpus)]
    batch = tokenizer(texts, return_tensors="pt", padding=True, truncation=True, max_length=256)
    with torch.no_grad():
        hidden = model(**batch, output_hidden_states=True).hidden_states[-1][batch["attention_mask"].bool()]
    gain, bias = fitted_layer_norm(hidden, model.config.layer_norm_eps)
    check = {key: value[:CHECK_DOCUMENTS] for key, value in batch.items()}
    before = splade_vectors(model, tokenizer, check)
    last = encoder.layer[-1]
    while len(encoder.layer) < args.layers:
        layer = copy.deepcopy(last)
        for projection in (layer.attention.output.dense, layer.output.dense):
            torch.nn.init.zeros_(projection.weight)
            torch.nn.init.zeros_(projection.bias)
        for norm in (layer.attention.output.LayerNorm, layer.output.LayerNorm):
            norm.weight.data.copy_(gain)
            norm.bias.data.copy_(bias)
        encoder.layer.append(layer)
    model.config.num_hidden_layers = args.layers
    after = splade_vectors(model, tokenizer, check)
    cosine = torch.nn.functional.cosine_similarity(after, before).mean().item()
    model.save_pretrained(args.out)
    tokenizer.save_pretrained(args.out)
    print(json.dumps({"model": args.model, "out": args.out, "layers": args.layers,
                      "splade_vector_cosine_to_start": round(cosine, 5),
                      "max_abs_vector_change": round((after - before).abs().max().item(), 4)}))


if __name__ == "__main__":
    main()
