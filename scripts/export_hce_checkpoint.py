"""Export the encoder of an HCE run's last checkpoint (a run still training) as a dense model directory:
``python scripts/export_hce_checkpoint.py RUN OUT`` (then ``semiret eval -r dense --model OUT``)."""
import sys

from safetensors.torch import load_file

from semiret.models.encoders import load_encoder

run, out = sys.argv[1], sys.argv[2]
encoder = load_encoder("minilm", "dense", max_length=256)
state = load_file(f"{run}/checkpoint/model.safetensors")
missing, unexpected = encoder.load_state_dict({k[len("encoder."):]: v for k, v in state.items()
                                               if k.startswith("encoder.")}, strict=False)
assert not unexpected, unexpected
print("missing", missing)
encoder.save(out, fp16=True, max_length=256)
