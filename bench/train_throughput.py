"""Training throughput of the SiDR, inference-free and HCE defaults on each device: steps and queries per second.

``python bench/train_throughput.py [--devices cpu,cuda] [--methods sidr,inference-free] [--epochs 1]`` runs
each method's default ``semiret train`` command (SciFact train, the defaults' batch, lengths and losses) for
``--epochs`` epochs on the CPU (``--gpu-epochs`` on a GPU), each in a fresh process, and reads the seconds of every epoch from the
run's checkpoint (the trainer times an epoch from its first step to its last: loading, indexing, negative
mining and teacher scoring before training are not counted, since they are the same work on any device).
It prints one JSON object: the machine (CPU count and model, the GPU's name), per method and device the
epochs' seconds, steps and the best epoch's steps and queries per second, and per method the ratio of each
device's rate to the CPU's, measured in the same run.

``hce-cached`` is HCE with ``--cached-negatives`` (the sampled negatives read from the corpus embedding of the
last epoch, not encoded every step); with ``hce`` in the same run, ``ratio_to_peer`` gives its rate over HCE's on
each device. ``--options`` adds options to every command (say ``"--document-max-length 256"``).

The inference-free run fine-tunes only (``--pretrain none``, as the packaged model was trained); its teacher
vectors are computed before training (or read from ``--teacher-cache``) and do not enter the timed steps.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from corpus import SCIFACT, emit, machine

EPOCH_OPTIONS = {"sidr": "--epochs", "inference-free": "--finetune-epochs", "hce": "--epochs", "hce-cached": "--epochs"}
EXTRA_OPTIONS = {"sidr": [], "inference-free": ["--pretrain", "none", "--no-document-threshold"], "hce": [],
                 "hce-cached": ["--cached-negatives"]}
COMMANDS = {"hce-cached": "hce"}
PEERS = {"hce-cached": "hce"}
"""A variant's peer: the method it is a faster way of running, measured in the same run."""


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def gpu_name() -> str | None:
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None


def train_once(method: str, run: str, args, output: Path) -> dict:
    """One default training run of ``method`` on the device ``run`` names (``cuda-fp32``: CUDA without mixed
    precision); the epochs' timings from its checkpoint."""
    device = run.removesuffix("-fp32")
    epochs = args.gpu_epochs if device == "cuda" else args.epochs
    command = [sys.executable, "-m", "semiret.cli", "train", COMMANDS.get(method, method), "--data", str(args.data),
               "--output", str(output), "--device", device, EPOCH_OPTIONS[method], str(epochs),
               *EXTRA_OPTIONS[method], *args.options.split()]
    if run.endswith("-fp32"):
        command.append("--no-mixed-precision")
    if device == "cpu" and args.threads:
        command += ["--threads", str(args.threads)]
    if method == "inference-free" and args.teacher_cache:
        command += ["--teacher-cache", str(args.teacher_cache)]
    started = time.perf_counter()
    finished = subprocess.run(command, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if finished.returncode != 0:
        return {"error": finished.stderr[-2000:], "command": " ".join(command)}
    states = sorted(output.rglob("trainer_state.json"))
    if not states:
        return {"error": f"no trainer_state.json under {output}", "command": " ".join(command)}
    state = json.loads(states[-1].read_text())
    history, batch = state["history"], state["config"]["batch_size"]
    seconds = [round(h["seconds"], 2) for h in history]
    steps = [h["steps"] for h in history]
    best = min(range(len(history)), key=lambda i: seconds[i] / steps[i])
    steps_per_second = steps[best] / seconds[best]
    return {"command": " ".join(command[2:]), "wall_seconds": round(wall, 1), "epoch_seconds": seconds,
            "steps_per_epoch": steps, "batch_size": batch, "steps_per_second": round(steps_per_second, 3),
            "queries_per_second": round(steps_per_second * batch, 1),
            "mixed_precision": bool(state["config"].get("mixed_precision")) and device.startswith("cuda")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", default="cpu,cuda", help="comma-separated: cpu, cuda (mixed precision, the "
                        "default there), cuda-fp32; the CUDA runs are skipped without a GPU")
    parser.add_argument("--methods", default="sidr,inference-free")
    parser.add_argument("--epochs", type=int, default=1, help="epochs on the CPU")
    parser.add_argument("--gpu-epochs", type=int, default=3,
                        help="epochs on a GPU (the first pays for CUDA's start-up; the best epoch is reported)")
    parser.add_argument("--data", type=Path, default=SCIFACT)
    parser.add_argument("--threads", type=int, default=0, help="torch threads on the CPU (0: all cores)")
    parser.add_argument("--teacher-cache", type=Path, default=None)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--options", default="", help="options added to every training command")
    args = parser.parse_args()
    gpu = gpu_name()
    devices = [d for d in args.devices.split(",") if d == "cpu" or gpu]
    result = {"machine": {**machine(), "cpu_model": cpu_model(), "gpu": gpu,
                          "torch_threads_cpu": args.threads or os.cpu_count()},
              "options": args.options, "runs": {}, "ratio_to_cpu": {}, "ratio_to_peer": {}}
    with tempfile.TemporaryDirectory(dir=args.workdir) as workdir:
        for method in args.methods.split(","):
            runs = result["runs"][method] = {}
            for device in devices:
                runs[device] = train_once(method, device, args, Path(workdir) / f"{method}-{device}")
                print(f"{method} on {device}: {json.dumps(runs[device])[:400]}", file=sys.stderr, flush=True)
            ratios = {device: round(run["steps_per_second"] / runs["cpu"]["steps_per_second"], 2)
                      for device, run in runs.items() if device != "cpu" and "steps_per_second" in run
                      and "steps_per_second" in runs.get("cpu", {})}
            if ratios:
                result["ratio_to_cpu"][method] = ratios
    for method, peer in PEERS.items():
        ours, theirs = result["runs"].get(method, {}), result["runs"].get(peer, {})
        rates = {device: round(run["steps_per_second"] / theirs[device]["steps_per_second"], 2)
                 for device, run in ours.items() if "steps_per_second" in run
                 and "steps_per_second" in theirs.get(device, {})}
        if rates:
            result["ratio_to_peer"][method] = {"peer": peer, **rates}
    emit(result)
    if any("error" in run for runs in result["runs"].values() for run in runs.values()):
        sys.exit(1)


if __name__ == "__main__":
    main()
