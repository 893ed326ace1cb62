"""processor_probe.py WEIGHTS [--use-fast true|false]

Prints, as one JSON line, the processor the model server makes pixels
with for the planner model that WEIGHTS ({weights}) names: the model
directory itself, or model_dir.txt whose first line is its absolute path
(as serve_vllm.sh reads it). Run by the rollout host once per weights
(model_server.processor_probe) in the planner's Python environment, so
the transformers and torchvision are vLLM's own; the trainer compares its
processor with this one before training (docs/design.md §4).

vLLM loads Qwen2-VL and Qwen2.5-VL processors with use_fast=True unless
--mm-processor-kwargs says otherwise: --use-fast mirrors that choice.
"""
import argparse
import json
import os
import sys


def model_dir(weights):
    if os.path.isdir(weights):
        return weights
    if os.path.isfile(weights):
        with open(weights) as f:
            d = f.readline().strip()
        if not os.path.isabs(d):
            sys.exit(f"processor_probe.py: {weights} must hold an absolute model directory path, has {d!r}")
        return d
    sys.exit(f"processor_probe.py: weights {weights} do not exist")


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("weights")
    ap.add_argument("--use-fast", choices=["true", "false"], default="true")
    a = ap.parse_args(argv)
    from transformers import AutoProcessor
    import transformers
    try:
        import torchvision
        tv = torchvision.__version__
    except ImportError:
        tv = ""
    proc = AutoProcessor.from_pretrained(model_dir(a.weights), use_fast=a.use_fast == "true")
    print(json.dumps({"processor": type(proc).__name__, "image_processor": type(proc.image_processor).__name__,
                      "transformers": transformers.__version__, "torchvision": tv}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
