#!/usr/bin/env python3
"""Dual-clip PPO trainer: the minimal harness's toy policy, and Hugging Face causal and vision-language models.

Launched by the train activity as

    python3 -m torch.distributed.run --standalone --nproc_per_node N \\
        harnesses/minimal/trainer.py --batch batch.npz \\
        --weights-in in/policy.json --weights-out out/policy.json \\
        --metrics-out metrics.json --lr 0.01 --clip-low 0.2 --clip-high 0.28 \\
        --dual-clip 3.0 --is-cap 2.0 --global-batch 128 --epochs 4 --seed S

With Debian's torch 1.13 under Python 3.11 `-m torch.distributed.run` itself
crashes; use `python3 harnesses/minimal/torchrun.py` (same flags) there.
Plain `python3 trainer.py ...` runs it as a single process. torch and
numpy are used, PIL for batches with images (and transformers with --model
hf). The batch is schemas/batch.go's batch.npz, its images files named by
content under --images (the trainer activity fills {images}; each is
checked against its name); the weights are policy.json
("roundhouse-toy-policy/v1"); metrics.json has the fields of
schemas.TrainerMetrics.

The model is the Go package harnesses/minimal/policy, recomputed from the
recorded token ids and the batch's images: the features of a call are the
unique prompt ids after the second-to-last <|im_start|>; logits = b + sum
of W rows of the features over the action tokens, plus, with policy.json's
vision section, the band features of the prompt's last image times V
(policy/image.go: scale * mean redness of each horizontal band, decoded
with PIL as Go decodes the PNG); the first completion token is the sampled
action, every later completion token is forced (log prob 0 under any
weights). Before that, every sample's image placeholder runs
(<|vision_start|> <|image_pad|>... <|vision_end|>) must pair one to one
with its listed images, each as long as the toy's processor makes that
image (ceil(w/patch) * ceil(h/patch)); exit 2 naming sample and image
otherwise. --drop-images zeroes the image features: the ablation the drift
guard must stop. W, b and V are trained.

Temperatures: batch.npz's temperatures (float32, one per sample; all 1
when the array is missing) divide each sample's logits before every
log_softmax, for pi_old and pi_theta alike, on the toy and the Hugging Face
path. A rollout engine that returns processed logprobs (vLLM
--logprobs-mode processed_logprobs) reports the tempered distribution it
sampled from, so pi_old must be tempered the same way for the importance
weight and the drift guard to compare like with like; raw logprobs (vLLM's
default) are the model's own, temperature 1. A temperature that is not
finite and > 0 is refused (exit 2). metrics.json records the smallest and
largest (temperatures: {min, max}) when the batch has the array.

Objective (docs/design.md §4), per completion token t of sample s with
advantage A:
    rho   = exp(logp_theta - logp_old)   (pi_old = the input weights)
    L     = min(rho*A, clip(rho, 1-clip_low, 1+clip_high)*A)
    L     = max(L, dual_clip*A)          if A < 0
    w     = min(exp(logp_old - logp_rollout), is_cap)
    loss  = -sum_s weight_s * mean_t(w*L) / sum_s weight_s   per global batch
Samples are shuffled (seeded) into global batches of --global-batch; each
global batch is sharded over the ranks, which all-reduce gradients, so N=1
and N=2 take the same steps. The flag defaults are docs/design.md §4's
(lr 1e-6, clip 0.2/0.28, dual clip 3.0, IS cap 2.0, global batch 128) and one
epoch; the toy needs lr 0.01 and 4 epochs, which harness.yaml passes. Adam
makes the toy's step size independent of the advantage scale. Rank 0 writes
the outputs, atomically.

Hugging Face path (--model hf, or --model auto with --weights-in a directory
holding config.json and `transformers` importable). The recorded token ids
are used exactly as the rollout engine returned them; nothing is templated
or tokenized again. Per forward of --micro-batch samples (default 1;
right-padded under an attention mask), log_softmax at positions
len(prompt)-1 .. end-1 (of the logits divided by the sample's temperature)
gathered at the completion ids gives log pi_theta (pi_old: the same before
training), and the same loss as the toy applies.

- Causal LMs load with AutoModelForCausalLM.
- Vision-language models (config.json has vision_config): Qwen2-VL and
  Qwen2.5-VL through AutoModelForImageTextToText (transformers >= 4.49, the
  first with Qwen2.5-VL; AutoModelForVision2Seq where the newer name is
  missing), Qwen3-VL the same way from transformers 4.57. The directory
  must hold preprocessor_config.json (else exit 2, naming it); the
  processor is AutoProcessor.from_pretrained(--weights-in). Each sample's
  images (files under --images, each checked against its name) are loaded
  with PIL as vLLM loads them (RGBA composited onto white, any other mode
  through convert("RGB")), processor.image_processor turns them into
  pixel_values and image_grid_thw, and the model's forward gets those with
  the ids (position_ids left to the model, which builds its M-RoPE from
  ids and grids). Before any forward, every sample's runs of
  config.image_token_id must equal, in order, the processor's count per
  image, prod(image_grid_thw) // merge_size**2: vLLM expanded each image
  into that many tokens with its own copy of the processor (exit 2 naming
  sample, image and both counts otherwise); a completion holding an image
  token (the model generated a placeholder) is refused the same way, naming
  the sample, where the forward would fail on it. A text-only model given a batch
  with images stops (exit 2) rather than train on prompts whose pictures
  are gone. --drop-images here passes the ids without pixel_values (the
  placeholders keep their plain token embeddings): the ablation of a
  text-only pipeline, which the drift guard is there to stop.
- Precision: --torch-dtype (auto: bfloat16 on CUDA, float32 on CPU) is the
  compute dtype. Training in bfloat16 or float16 loads the weights in
  float32 and keeps them as master weights: AdamW steps them, the model
  computes with them rounded, and the output saves them in float32 (lr 1e-6
  on a weight of 0.02 is far below bfloat16's step there, 1.2e-4, and would
  round away). The model server casts them to its dtype (rpent_libero passes
  vLLM --dtype bfloat16). float16 has no loss scaling: use bfloat16.
- Memory: logits only from each forward's first completion position on
  (logits_to_keep, where the model's forward takes it);
  --gradient-checkpointing (auto: on with CUDA; the model then runs in
  training mode, as transformers checkpoints only there, with dropout
  rates set to 0); --micro-batch K samples per forward/backward, gradients
  accumulating over a rank's share of a global batch before the all-reduce
  and the step, so N=1 and N=2 ranks take the same steps.
- Data parallelism: --parallel ddp (default) sums the ranks' gradients by
  all_reduce (gloo on CPU, NCCL on CUDA; DDP's result, and it works when a
  rank's share of a global batch is empty). --parallel fsdp wraps the model
  in FullyShardedDataParallel, one unit per language-model block
  (_no_split_modules; the vision tower stays in the root unit, as calls
  without images skip it), with bfloat16 compute over float32 sharded
  parameters; every rank runs as many forwards and backwards as rank 0.
  Each rank computes pi_old for its own samples; the ranks sum them.
- Output: rank 0 writes --weights-out atomically as a directory vLLM
  serves: save_pretrained (config, float32 weights), the processor's
  save_pretrained, then --weights-in's tokenizer, chat template,
  generation_config.json and processor files copied byte for byte, so the
  next round formats, tokenizes, processes images and samples as this one.

--eval-out works there too (per-token logp_theta, logp_old and grad_logp;
no parameter gradients). How it was checked: trainer_hf_test.go and
trainer_vlm_test.go run it on 1 and 2 CPU ranks (gloo) against a stand-in
transformers package (testdata/fake_transformers) that mirrors the API used
here as the real library's source has it (Qwen2VLImageProcessor's
smart_resize and patch layout, Qwen2.5-VL's scatter of image features and
its count check): loss and gradients against internal/rl.PPOLoss, images
changing the logprobs, RGBA on white, every refusal, micro-batches,
gradient checkpointing, a bfloat16 step equal to the float32 one, the
output directory loading again, and --parallel fsdp's lockstep and gradient
scale through testdata/fsdp_standin.py (FSDP's collectives without FSDP). Not run here: real transformers and
models, CUDA, NCCL, bfloat16 kernels on a GPU (torch >= 2.1 is the
target there), and FSDP: Debian's torch 1.13 cannot import it under
Python 3.11, and with the import worked around (in a throwaway script) its
first forward on CPU/gloo asserts "Torch not compiled with CUDA enabled".

With --eval-out FILE (and --weights-theta, default --weights-in) nothing is
trained: the same loss code evaluates the whole batch as one global batch at
pi_theta against pi_old = --weights-in and writes the loss, its gradient with
respect to each completion token's log pi_theta and to W and b, and the clip
fractions as JSON; trainer_test.go checks them against internal/rl.PPOLoss.
"""

import argparse
import hashlib
import json
import os
import re
import sys
import time

# --min-seconds counts from here, before torch's import (a second or more).
STARTED = time.monotonic()

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

FORMAT = "roundhouse-toy-policy/v1"
IM_START = "<|im_start|>"


class InputError(Exception):
    """Bad arguments, weights or batch: reported and exit status 2."""


class DriftError(Exception):
    """The drift guard fired: the trainer's pi_old disagrees with what the
    rollout engine recorded, so the batch is not what the model saw.
    Reported and exit status 3, before any update."""


DRIFT_EXIT = 3


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", required=True, help="batch.npz")
    ap.add_argument("--weights-in", required=True,
                    help="pi_old: the toy's policy.json, or a Hugging Face model directory (with config.json)")
    ap.add_argument("--weights-out", help="output policy.json, or for --model hf the output model directory "
                    "(required unless --eval-out)")
    ap.add_argument("--model", choices=("auto", "toy", "hf"), default="auto",
                    help="hf: a Hugging Face causal LM via transformers; toy: policy.json; auto (default): hf when "
                    "--weights-in is a directory with config.json and transformers is importable, else toy")
    ap.add_argument("--torch-dtype", choices=("auto", "float32", "bfloat16", "float16"), default="auto",
                    help="--model hf: parameter dtype (auto: bfloat16 on CUDA, float32 on CPU)")
    ap.add_argument("--metrics-out", help="metrics.json (required unless --eval-out)")
    ap.add_argument("--eval-out", help="evaluate instead of training: write the loss of the whole batch "
                    "as one global batch at --weights-theta, and its gradients, to this JSON file")
    ap.add_argument("--drift-report", help="measure instead of training (starter drift): score the batch under "
                    "--weights-in as the drift guard does, write every completion token's |log pi_old - log "
                    "pi_rollout| and each sample's token count to this JSON file, and write no weights")
    ap.add_argument("--weights-theta", help="with --eval-out: pi_theta, a policy.json or model directory (default --weights-in)")
    ap.add_argument("--lr", type=float, default=1e-6, help="learning rate (Adam on the toy, AdamW on hf)")
    ap.add_argument("--clip-low", type=float, default=0.2)
    ap.add_argument("--clip-high", type=float, default=0.28)
    ap.add_argument("--dual-clip", type=float, default=3.0)
    ap.add_argument("--is-cap", type=float, default=2.0, help="cap of the rollout importance weight")
    ap.add_argument("--global-batch", type=int, default=128, help="samples per optimizer step")
    ap.add_argument("--epochs", type=int, default=1, help="passes over the batch")
    ap.add_argument("--seed", type=int, default=0, help="shuffling seed")
    ap.add_argument("--images", help="folder holding the batch's images as <sha256>.<ext> files (the trainer "
                    "activity fetches them from the run's blobs/ and fills {images}); required when the batch has images")
    ap.add_argument("--drop-images", action="store_true",
                    help="ablation: train as if the requests carried no images, what a text-only pipeline does to a "
                         "VLM's batch; the drift guard should stop it")
    ap.add_argument("--drift-limit", type=float, default=0.0,
                    help="stop before the first update when the mean |log pi_old - log pi_rollout| over completion "
                         "tokens exceeds this (0: report only)")
    ap.add_argument("--drift-call-limit", type=float, default=0.0,
                    help="stop before the first update when one call's mean |log pi_old - log pi_rollout| exceeds "
                         "this (0: off)")
    ap.add_argument("--drift-token-limit", type=float, default=0.0,
                    help="a completion token whose |log pi_old - log pi_rollout| exceeds this counts against "
                         "--drift-token-share (0: off)")
    ap.add_argument("--drift-token-share", type=float, default=0.0,
                    help="stop before the first update when more than this share of tokens (0.001 = 0.1%%) are "
                         "past --drift-token-limit (default 0: any one)")
    ap.add_argument("--image-processor", choices=("fast", "slow"), default="fast",
                    help="--model hf vision-language models: the image processor variant, as the model server "
                         "uses it (vLLM: fast for Qwen2-VL and Qwen2.5-VL unless --mm-processor-kwargs says use_fast false)")
    ap.add_argument("--rollout-processor", help="JSON file with the model server's processor info (image_processor, "
                    "transformers, torchvision): a different image processor class is refused before any forward, "
                    "different versions are flagged in metrics.json")
    ap.add_argument("--micro-batch", type=int, help="samples per forward/backward on each rank; gradients "
                    "accumulate over the rank's share of a global batch before the all-reduce and the step "
                    "(default: 1 for --model hf, the whole share for the toy)")
    ap.add_argument("--gradient-checkpointing", choices=("auto", "on", "off"), default="auto",
                    help="--model hf: recompute activations in backward to save memory (auto: on with CUDA)")
    ap.add_argument("--min-seconds", type=float, default=0.0,
                    help="pace a training: the trainer lasts at least this many seconds from its start, sleeping "
                         "out the rest once weights and metrics are written (0: no pacing), so a benchmark's "
                         "round has a real trainer's length with the same outputs")
    ap.add_argument("--parallel", choices=("ddp", "fsdp"), default="ddp",
                    help="--model hf data parallelism: ddp sums the ranks' gradients by all_reduce (a full model "
                         "and optimizer per rank); fsdp shards parameters, gradients and AdamW state with "
                         "FullyShardedDataParallel (CUDA; not run on the test machine)")
    a = ap.parse_args(argv)
    checks = [
        (a.lr > 0, "--lr must be > 0"),
        (0 < a.clip_low < 1, "--clip-low must be in (0, 1)"),
        (a.clip_high > 0, "--clip-high must be > 0"),
        (a.dual_clip > 1, "--dual-clip must be > 1"),
        (a.is_cap > 0, "--is-cap must be > 0"),
        (a.global_batch >= 1, "--global-batch must be >= 1"),
        (a.epochs >= 1, "--epochs must be >= 1"),
        (a.micro_batch is None or a.micro_batch >= 1, "--micro-batch must be >= 1"),
        (a.eval_out or (a.weights_out and a.metrics_out), "--weights-out and --metrics-out are required to train"),
        (a.eval_out or not a.weights_theta, "--weights-theta needs --eval-out"),
        (min(a.drift_limit, a.drift_call_limit, a.drift_token_limit) >= 0, "drift limits must be >= 0"),
        (0 <= a.drift_token_share < 1, "--drift-token-share must be in [0, 1)"),
        (0 <= a.min_seconds <= 86400, "--min-seconds must be in [0, 86400]"),
    ]
    for ok, msg in checks:
        if not ok:
            raise InputError(msg)
    return a


def load_weights(path):
    try:
        with open(path) as f:
            w = json.load(f)
    except (OSError, ValueError) as e:
        raise InputError(f"weights {path}: {e}") from e
    if not isinstance(w, dict) or w.get("format") != FORMAT:
        raise InputError(f"weights {path}: format is not {FORMAT!r}")
    vocab, actions = w.get("vocab"), w.get("actions")
    if not isinstance(vocab, list) or IM_START not in vocab:
        raise InputError(f"weights {path}: vocab missing or lacks {IM_START}")
    if not isinstance(actions, list) or not actions or len(set(actions)) != len(actions):
        raise InputError(f"weights {path}: actions must be a non-empty list of distinct token ids")
    if any(not isinstance(a, int) or not 0 <= a < len(vocab) for a in actions):
        raise InputError(f"weights {path}: an action id is outside the vocabulary")
    try:
        W = np.array(w["W"], dtype=np.float64)
        b = np.array(w["b"], dtype=np.float64)
    except (KeyError, ValueError, TypeError) as e:
        raise InputError(f"weights {path}: W/b: {e}") from e
    if W.shape != (len(vocab), len(actions)) or b.shape != (len(actions),):
        raise InputError(f"weights {path}: W is {W.shape}, b is {b.shape}; want ({len(vocab)}, {len(actions)}) and ({len(actions)},)")
    if not (np.isfinite(W).all() and np.isfinite(b).all()):
        raise InputError(f"weights {path}: W or b is not finite")
    return w, W, b, load_vision(path, w)


VISION_TOKENS = ("<|vision_start|>", "<|image_pad|>", "<|vision_end|>")


def load_vision(path, w):
    """The image projection V (bands x actions) of policy.json's vision
    section; a (0, actions) array for a text-only toy, whose image term is
    then zero."""
    v = w.get("vision")
    if v is None:
        return np.zeros((0, len(w["actions"])))
    try:
        patch, bands, scale = int(v["patch"]), int(v["bands"]), float(v["scale"])
        V = np.array(v["V"], dtype=np.float64)
    except (KeyError, ValueError, TypeError) as e:
        raise InputError(f"weights {path}: vision: {e}") from e
    if patch < 1 or bands < 1 or not 0 < scale < np.inf or V.shape != (bands, len(w["actions"])) or not np.isfinite(V).all():
        raise InputError(f"weights {path}: vision needs patch >= 1, bands >= 1, scale > 0 and a finite V of "
                         f"({bands}, {len(w['actions'])}), got V {V.shape}")
    if any(t not in w["vocab"] for t in VISION_TOKENS):
        raise InputError(f"weights {path}: a vision model's vocabulary needs {', '.join(VISION_TOKENS)}")
    return V


def image_runs(p, start, pad, end):
    """The image placeholder runs of prompt p: per image, its number of
    <|image_pad|> tokens between <|vision_start|> and <|vision_end|>; None
    when the markers do not pair up."""
    runs = []
    for s in np.flatnonzero(p == start):
        k = s + 1
        while k < len(p) and p[k] == pad:
            k += 1
        if k >= len(p) or p[k] != end:
            return None
        runs.append(k - s - 1)
    return runs if len(runs) == int((p == end).sum()) else None


def toy_image_features(path, patch, bands, scale):
    """The toy's vision encoder, as harnesses/minimal/policy/image.go
    computes it: the number of placeholder tokens (ceil(w/patch) *
    ceil(h/patch)) and the redness of each horizontal band, scale times the
    mean over its pixels of (R - (G+B)/2)/255 on the 8-bit RGB values."""
    from PIL import Image  # Debian's python3-pil; only batches with images need it
    try:
        with Image.open(path) as im:
            rgb = np.asarray(im.convert("RGB"), dtype=np.float64)
    except OSError as e:
        raise InputError(f"image {path}: {e}") from e
    h, w = rgb.shape[:2]
    red = (rgb[:, :, 0] - (rgb[:, :, 1] + rgb[:, :, 2]) / 2) / 255
    f = np.zeros(bands)
    for k in range(bands):
        lo, hi = k * h // bands, (k + 1) * h // bands
        if hi > lo and w > 0:
            f[k] = scale * red[lo:hi].mean()
    return -(-w // patch) * -(-h // patch), f


def load_arrays(path, vocab_size):
    """The validated arrays of batch.npz (schemas/batch.go) and the sample count."""
    try:
        z = np.load(path)
        arr = {k: z[k] for k in z.files}
    except Exception as e:  # np.load raises many kinds on a bad file
        raise InputError(f"batch {path}: {e}") from e
    need = {
        "prompt_ids": "i", "prompt_offsets": "i", "completion_ids": "i", "completion_offsets": "i",
        "rollout_logprobs": "f", "advantages": "f", "weights": "f",
    }
    for k, kind in need.items():
        if k not in arr:
            raise InputError(f"batch {path}: missing array {k!r}")
        if arr[k].ndim != 1 or arr[k].dtype.kind != kind:
            raise InputError(f"batch {path}: {k} must be 1-D {'integer' if kind == 'i' else 'float'}, got {arr[k].dtype} {arr[k].shape}")
    n = len(arr["advantages"])
    if n == 0:
        raise InputError(f"batch {path}: no samples")
    for ids, off in (("prompt_ids", "prompt_offsets"), ("completion_ids", "completion_offsets")):
        o = arr[off]
        if len(o) != n + 1 or o[0] != 0 or o[-1] != len(arr[ids]) or (np.diff(o) < 0).any():
            raise InputError(f"batch {path}: {off} must have n+1={n + 1} non-decreasing entries from 0 to len({ids})={len(arr[ids])}")
        if len(arr[ids]) and (arr[ids].min() < 0 or arr[ids].max() >= vocab_size):
            raise InputError(f"batch {path}: {ids} has a token id outside the vocabulary (size {vocab_size})")
    if len(arr["weights"]) != n:
        raise InputError(f"batch {path}: weights has {len(arr['weights'])} entries, advantages {n}")
    if len(arr["rollout_logprobs"]) != len(arr["completion_ids"]):
        raise InputError(f"batch {path}: rollout_logprobs has {len(arr['rollout_logprobs'])} entries, completion_ids {len(arr['completion_ids'])}")
    for k in ("rollout_logprobs", "advantages", "weights"):
        if not np.isfinite(arr[k]).all():
            raise InputError(f"batch {path}: {k} is not finite")
    if (arr["weights"] < 0).any() or arr["weights"].sum() <= 0:
        raise InputError(f"batch {path}: weights must be >= 0 with a positive sum")
    for i in range(n):
        if arr["completion_offsets"][i + 1] == arr["completion_offsets"][i]:
            raise InputError(f"batch {path}: sample {i} has no completion tokens")
    load_image_arrays(path, arr, n)
    load_temperatures(path, arr, n)
    load_staleness(path, arr, n)
    return arr, n


def load_staleness(path, arr, n):
    """Validates the staleness array (schemas/batch.go) in place: how many
    weights versions older than --weights-in the weights that sampled
    sample i are (0: sampled by them). A stale sample's gap between pi_old
    and pi_rollout is policy lag, which the behaviour correction weighs,
    not drift: the drift guard judges the samples at 0 only. A batch
    written before the array existed has none: all 0."""
    if "staleness" not in arr:
        arr["staleness"] = np.zeros(n, np.int64)
        return
    s = arr["staleness"]
    if s.ndim != 1 or s.dtype.kind not in "iu" or len(s) != n:
        raise InputError(f"batch {path}: staleness must be 1-D integer with one entry per sample ({n}), got {s.dtype} {s.shape}")
    if len(s) and s.min() < 0:
        raise InputError(f"batch {path}: staleness must be >= 0; sample {int(np.argmin(s))} has {int(s.min())}")
    arr["staleness"] = s.astype(np.int64)


def load_temperatures(path, arr, n):
    """Validates the temperatures array (schemas/batch.go) in place: what
    sample i's logits are divided by before their log_softmax, so that
    pi_old is the distribution the rollout engine's logprobs describe (its
    processed logprobs at temperature T are the tempered softmax's). A
    batch written before the array existed has none: all 1, the model's own
    distribution, which raw logprobs describe."""
    if "temperatures" not in arr:
        arr["temperatures"] = np.ones(n, np.float32)
        arr["temperatures_given"] = False
        return
    t = arr["temperatures"]
    if t.ndim != 1 or t.dtype.kind != "f" or len(t) != n:
        raise InputError(f"batch {path}: temperatures must be 1-D float with one entry per sample ({n}), "
                         f"got {t.dtype} {t.shape}")
    bad = np.flatnonzero(~(np.isfinite(t) & (t > 0)))
    if len(bad):
        raise InputError(f"batch {path}: temperatures must be finite and > 0; sample {int(bad[0])} has "
                         f"{float(t[bad[0]])} ({len(bad)} such): a greedy or unknown temperature has no "
                         "distribution to train against; leave such calls out of the batch")
    arr["temperatures_given"] = True


def temperature_metrics(arr):
    """metrics.json's record of the temperatures the trainer divided by;
    absent when the batch had no temperatures array (all 1)."""
    if not arr["temperatures_given"]:
        return {}
    t = arr["temperatures"].astype(np.float64)
    return {"temperatures": {"min": float(t.min()), "max": float(t.max())}}


def load_image_arrays(path, arr, n):
    """Validates the image arrays (schemas/batch.go) in place; a batch
    written before images existed has none, which means no images."""
    if "images" not in arr and "image_index" not in arr and "image_offsets" not in arr:
        arr["images"] = np.zeros(0, "S1")
        arr["image_index"] = np.zeros(0, np.int32)
        arr["image_offsets"] = np.zeros(n + 1, np.int64)
        return
    for k, kind in (("images", "S"), ("image_index", "i"), ("image_offsets", "i")):
        if k not in arr:
            raise InputError(f"batch {path}: has some image arrays but not {k!r}")
        if arr[k].ndim != 1 or arr[k].dtype.kind != kind:
            raise InputError(f"batch {path}: {k} must be 1-D {'bytes' if kind == 'S' else 'integer'}, got {arr[k].dtype} {arr[k].shape}")
    o, idx = arr["image_offsets"], arr["image_index"]
    if len(o) != n + 1 or o[0] != 0 or o[-1] != len(idx) or (np.diff(o) < 0).any():
        raise InputError(f"batch {path}: image_offsets must have n+1={n + 1} non-decreasing entries from 0 to len(image_index)={len(idx)}")
    if len(idx) and (idx.min() < 0 or idx.max() >= len(arr["images"])):
        raise InputError(f"batch {path}: image_index points outside images (size {len(arr['images'])})")
    for name in arr["images"]:
        if not BLOB_NAME.fullmatch(name.decode("ascii", "replace")):
            raise InputError(f"batch {path}: image name {name!r} is not <sha256>.<ext>")


BLOB_NAME = re.compile(r"[0-9a-f]{64}\.[A-Za-z0-9]+")


def sample_images(arr, i):
    """The blob names of sample i's request, in prompt order."""
    o = arr["image_offsets"]
    return [arr["images"][j].decode("ascii") for j in arr["image_index"][o[i]:o[i + 1]]]


def image_files(a, arr):
    """Maps each image of the batch to its file under --images, checking
    that it is there and that its content hashes to its name: a trainer must
    never look at a different picture than the model did. Empty with
    --drop-images (the ablation) or a batch without images."""
    names = [x.decode("ascii") for x in arr["images"]]
    if not names or a.drop_images:
        return {}
    if not a.images:
        raise InputError(f"batch {a.batch}: its requests carry {len(names)} images; pass --images DIR "
                         "(the harness's trainer command takes {images})")
    used = np.zeros(len(names), bool)
    used[arr["image_index"]] = True
    out = {}
    for j, name in enumerate(names):
        if not used[j]:
            continue
        path = os.path.join(a.images, name)
        first = int(np.searchsorted(arr["image_offsets"], np.flatnonzero(arr["image_index"] == j)[0], side="right") - 1)
        try:
            with open(path, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
        except OSError as e:
            raise InputError(f"image {name} of sample {first}: {e}") from e
        if digest != name.split(".")[0]:
            raise InputError(f"image {path} of sample {first}: its content hashes to {digest}, not its name: refused")
        out[name] = path
    return out


def load_batch(a, wfile, V):
    """Returns per-sample features, image features (of the prompt's last
    image; zeros without one), action index, completion length, rollout
    logprobs, advantage and weight, all validated. Every image must match
    its placeholders: as many runs as the sample lists images, each as long
    as the toy's processor makes that image (what the model server did)."""
    path, vocab, actions = a.batch, wfile["vocab"], wfile["actions"]
    im_start = vocab.index(IM_START)
    arr, n = load_arrays(path, len(vocab))
    files = image_files(a, arr)
    vision = wfile.get("vision")
    if len(arr["image_index"]) and vision is None and not a.drop_images:
        raise InputError(f"batch {path}: its requests carry images but the weights {a.weights_in} have no vision "
                         "section: this is a text-only model")
    tokens = [vocab.index(t) for t in VISION_TOKENS] if vision else None
    cache = {}
    phi = np.zeros((n, V.shape[0]))
    action_index = {t: k for k, t in enumerate(actions)}
    po, co = arr["prompt_offsets"], arr["completion_offsets"]
    feats, act, ntok = [], np.zeros(n, np.int64), np.zeros(n, np.int64)
    for i in range(n):
        names = sample_images(arr, i)
        if tokens and not a.drop_images:
            p = arr["prompt_ids"][po[i]:po[i + 1]]
            runs = image_runs(p, *tokens)
            if runs is None or len(runs) != len(names):
                raise InputError(f"batch {path}: sample {i}: the prompt holds {'unpaired image markers' if runs is None else f'{len(runs)} images'}, "
                                 f"the batch lists {len(names)}")
            for j, (name, got) in enumerate(zip(names, runs)):
                if name not in cache:
                    cache[name] = toy_image_features(files[name], int(vision["patch"]), int(vision["bands"]), float(vision["scale"]))
                want, f = cache[name]
                if got != want:
                    raise InputError(f"batch {path}: sample {i} image {j} ({name}): the prompt has {got} placeholder tokens, "
                                     f"this model's processor makes {want}: the processor differs from the model server's")
            if names:
                phi[i] = cache[names[-1]][1]
        p = arr["prompt_ids"][po[i]:po[i + 1]].astype(np.int64)
        c = arr["completion_ids"][co[i]:co[i + 1]]
        if len(c) == 0:
            raise InputError(f"batch {path}: sample {i} has no completion tokens")
        if int(c[0]) not in action_index:
            raise InputError(f"batch {path}: sample {i}: first completion token {int(c[0])} is not an action token")
        starts = np.flatnonzero(p == im_start)
        start = starts[-2] + 1 if len(starts) >= 2 else 0
        feats.append(np.unique(p[start:]))
        act[i] = action_index[int(c[0])]
        ntok[i] = len(c)
    roll = arr["rollout_logprobs"].astype(np.float64)
    return {
        "feats": feats, "phi": phi, "act": act, "ntok": ntok, "first": co[:-1].astype(np.int64),
        "roll": roll, "co": co.astype(np.int64),
        "adv": arr["advantages"].astype(np.float64), "weight": arr["weights"].astype(np.float64),
        "temp": arr["temperatures"].astype(np.float64), "metrics": temperature_metrics(arr),
        "stale": arr["staleness"],
    }


def ppo_objective(rho, A, clip_low, clip_high, dual_clip):
    """Dual-clip PPO per token: returns L and the masks of tokens where the
    clip and where the dual clip decided the value (their gradient is 0)."""
    clipped = torch.clamp(rho, 1 - clip_low, 1 + clip_high)
    L = torch.minimum(rho * A, clipped * A)
    dual = (A < 0) & (dual_clip * A > L)
    L = torch.where(A < 0, torch.maximum(L, dual_clip * A), L)
    clip = (clipped * A < rho * A) & ~dual
    return L, clip, dual


def action_logprobs(W, b, V, B, idx):
    """log pi(action) of samples idx under (W, b, V), each sample's logits
    divided by its temperature (the batch's temperatures; 1 unless the
    rollout's logprobs were processed at another)."""
    feats, act = B["feats"], B["act"]
    flat = torch.from_numpy(np.concatenate([feats[i] for i in idx]))
    lens = torch.tensor([len(feats[i]) for i in idx], dtype=torch.int64)
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(lens, 0)[:-1]])
    logits = torch.nn.functional.embedding_bag(flat, W, offsets, mode="sum") + b + torch.from_numpy(B["phi"][idx]) @ V
    lp = torch.log_softmax(logits / torch.from_numpy(B["temp"][idx])[:, None], dim=1)
    return lp[torch.arange(len(idx)), torch.from_numpy(act[idx])]


def write_json(path, obj):
    """Write atomically so a retried activity never sees half a file."""
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f)
        f.write("\n")
    os.replace(tmp, path)


def prepare(a):
    """Loads the weights and the batch and adds to the batch what does not
    depend on theta: per token, the pi_old log prob (0 for forced tokens) and
    the truncated importance weight against what the rollout engine reported."""
    wfile, W0, b0, V0 = load_weights(a.weights_in)
    B = load_batch(a, wfile, V0)
    n = len(B["adv"])
    with torch.no_grad():
        old = action_logprobs(torch.from_numpy(W0), torch.from_numpy(b0), torch.from_numpy(V0), B, np.arange(n)).numpy()
    old_tok = np.zeros_like(B["roll"])
    old_tok[B["first"]] = old
    B["old_tok"] = old_tok
    B["w_tok"] = np.minimum(np.exp(old_tok - B["roll"]), a.is_cap)
    return wfile, (W0, b0, V0), B


def batch_loss(W, b, V, B, idx, total_weight, a):
    """The section-4 loss of samples idx divided by total_weight, the weight
    of their whole global batch, so that the ranks' shards add up to it.
    Every completion token goes through the objective; forced tokens have
    log pi_theta = log pi_old = 0, hence rho = 1. Returns the loss, the
    per-token log pi_theta (a graph node, for its gradient), the batch
    positions of those tokens, rho and the clip masks."""
    co, ntok = B["co"], B["ntok"][idx]
    tok = np.concatenate([np.arange(co[i], co[i + 1]) for i in idx])
    first = torch.from_numpy(np.concatenate([[0], np.cumsum(ntok)[:-1]]).astype(np.int64))
    lp = torch.zeros(len(tok), dtype=torch.float64).index_put((first,), action_logprobs(W, b, V, B, idx))
    return loss_of_logprobs(lp, B, idx, tok, total_weight, a)


def loss_of_logprobs(lp, B, idx, tok, total_weight, a):
    """The section-4 loss of samples idx given lp, the float64 log pi_theta
    of their completion tokens (batch positions tok, in sample order):
    shared by the toy and the Hugging Face path. B holds per batch token
    the pi_old log prob "old_tok" and the truncated importance weight
    "w_tok", and per sample "co" (completion offsets), "ntok", "adv" and
    "weight"."""
    ntok = B["ntok"][idx]
    seg = torch.from_numpy(np.repeat(np.arange(len(idx)), ntok))
    rho = torch.exp(lp - torch.from_numpy(B["old_tok"][tok]))
    A = torch.from_numpy(B["adv"][idx])[seg]
    L, clip, dual = ppo_objective(rho, A, a.clip_low, a.clip_high, a.dual_clip)
    wl = torch.from_numpy(B["w_tok"][tok]) * L
    per_sample = torch.zeros(len(idx), dtype=torch.float64).index_add(0, seg, wl) / torch.from_numpy(ntok).double()
    loss = -(torch.from_numpy(B["weight"][idx]) * per_sample).sum() / total_weight
    return loss, lp, tok, rho, clip, dual


def drift(B, a):
    """The drift guard's figures, from pi_old as this trainer computes it and
    the logprobs the proxy recorded (|d| = |log pi_old - log pi_rollout| per
    completion token): the mean and max of |d| over the batch; per call
    (sample) the mean of its tokens' |d|, its largest, and the share of
    calls over --drift-call-limit (else --drift-limit, as before there was
    one); the share of tokens past --drift-token-limit; and the first calls
    over the call limit, in batch order."""
    d_all = np.abs(B["old_tok"] - B["roll"])
    co = B["co"]
    stale = B.get("stale", np.zeros(len(co) - 1, np.int64))
    tok_stale = np.repeat(stale > 0, np.diff(co))
    lag = d_all[tok_stale]
    lag_figures = {"lag_mean": float(lag.mean()) if len(lag) else 0.0, "lag_max": float(lag.max()) if len(lag) else 0.0,
                   "stale": int((stale > 0).sum())}
    # The guard judges the samples the starting weights produced; a stale
    # sample's gap is how far the policy moved since, reported as lag.
    d = d_all[~tok_stale]
    if len(d) == 0:
        return {"mean": 0.0, "max": 0.0, "call_max": 0.0, "share": 0.0, "token_share": 0.0, "first": [], **lag_figures}
    ntok = np.maximum(np.diff(co), 1)
    per_call = np.add.reduceat(d_all, co[:-1]) / ntok if len(co) > 1 else np.zeros(0)
    # reduceat gives an empty call its next call's first token: zero it;
    # stale calls are not judged either.
    per_call = np.where((np.diff(co) > 0) & (stale == 0), per_call, 0.0)
    fresh = int((stale == 0).sum())
    call_limit = a.drift_call_limit or a.drift_limit
    bad = np.flatnonzero(per_call > call_limit) if call_limit > 0 else np.zeros(0, np.int64)
    token_share = float((d > a.drift_token_limit).mean()) if a.drift_token_limit > 0 else 0.0
    return {
        "mean": float(d.mean()), "max": float(d.max()),
        "call_max": float(per_call.max()) if len(per_call) else 0.0,
        "share": len(bad) / fresh if fresh else 0.0,
        "token_share": token_share,
        "first": [(int(i), float(per_call[i])) for i in bad[:5]],
        **lag_figures,
    }


def check_drift(a, B):
    """Returns the drift figures for metrics.json; raises DriftError, before
    any update, when one of the guard's three limits is passed: the batch
    mean (--drift-limit), one call's mean (--drift-call-limit), or the
    share of tokens past --drift-token-limit (--drift-token-share). The
    mean alone misses a few wrong decision tokens among hundreds of
    near-certain ones (3 of 400 tokens off by 1.0 move it by 0.0075); the
    other two see them."""
    f = drift(B, a)
    named = ", ".join(f"sample {i} ({m:.3g})" for i, m in f["first"])
    where = (f"(max {f['max']:.3g}, {100 * f['share']:.1f}% of samples over the limit; first: {named}): the trainer "
             "does not see what the model saw (chat template, processor, images, sampling settings or weights "
             "differ from the rollout)")
    if a.drift_limit > 0 and f["mean"] > a.drift_limit:
        raise DriftError(f"drift guard: mean |log pi_old - log pi_rollout| {f['mean']:.3g} exceeds "
                         f"--drift-limit {a.drift_limit:g} {where}")
    if a.drift_call_limit > 0 and f["call_max"] > a.drift_call_limit:
        raise DriftError(f"drift guard: a call's mean |log pi_old - log pi_rollout| {f['call_max']:.3g} exceeds "
                         f"--drift-call-limit {a.drift_call_limit:g} {where}")
    if a.drift_token_limit > 0 and f["token_share"] > a.drift_token_share:
        raise DriftError(f"drift guard: {100 * f['token_share']:.2f}% of tokens differ by more than "
                         f"--drift-token-limit {a.drift_token_limit:g}, over --drift-token-share "
                         f"{100 * a.drift_token_share:g}% {where}")
    out = {"logprob_mismatch": f["mean"], "logprob_mismatch_max": f["max"], "drift_share": f["share"],
           "drift_call_max": f["call_max"], "drift_token_share": f["token_share"]}
    if f["stale"]:
        out.update(stale_samples=f["stale"], policy_lag_mean=f["lag_mean"], policy_lag_max=f["lag_max"])
    return out


def optimize(a, rank, world, B, params, opt, device, loss_of, fsdp=False):
    """The update both policies share: --epochs passes over the batch in
    global batches of --global-batch samples, each split over the ranks and
    each rank's share into micro-batches of --micro-batch samples (default:
    the whole share); loss_of(samples, total_weight) returns batch_loss's
    tuple for those samples. The loss is a sum over samples divided by the
    global batch's weight, so the micro-batches' gradients add up to the
    share's and the ranks' to the global batch's: N=1 and N=2 ranks take
    the same steps. With fsdp the gradients are reduced inside backward
    instead of by all_reduce_grads. The drift guard runs first. Returns
    metrics.json's content."""
    n, weight = len(B["adv"]), B["weight"]
    if a.drift_report:
        # starter drift: the guard's own differences, before any limit is
        # applied (a measurement must not stop where the guard would).
        if rank == 0:
            write_json(a.drift_report, {
                "token_abs_diff": np.abs(B["old_tok"] - B["roll"]).tolist(),
                "sample_tokens": [int(x) for x in np.diff(B["co"])],
            })
            print(f"trainer: drift report of {n} samples written to {a.drift_report}; nothing trained", flush=True)
        return None
    guard = check_drift(a, B)
    rng = np.random.default_rng(a.seed)
    stats = torch.zeros(5, dtype=torch.float64)  # loss sum, clipped, dual, ratio sum, tokens
    steps = 0
    total_steps = a.epochs * -(-n // a.global_batch)
    t0 = time.monotonic()
    for _ in range(a.epochs):
        perm = rng.permutation(n)
        for lo in range(0, n, a.global_batch):
            gb = perm[lo:lo + a.global_batch]
            total_weight = weight[gb].sum()
            mine = gb[rank::world]
            opt.zero_grad()
            step_loss = 0.0
            if total_weight > 0:
                k = a.micro_batch or max(len(mine), 1)
                # FSDP gathers parameters in every forward and reduces
                # gradients in every backward, collectively: each rank runs
                # as many micro-batches as the busiest (rank 0, which gets
                # the rounded-up share), the extra ones on a stand-in sample
                # with weight 0.
                chunks = -(-len(gb[0::world]) // k) if fsdp else -(-len(mine) // k)
                for c in range(chunks):
                    part = mine[c * k:(c + 1) * k]
                    real = len(part) > 0
                    loss, _, tok, rho, clip, dual = loss_of(part if real else gb[:1], total_weight)
                    # FSDP averages the ranks' gradients; the loss is already
                    # a share of the global batch's, so scale back to a sum.
                    (loss * (world if fsdp else 1) * (1.0 if real else 0.0)).backward()
                    if real:
                        step_loss += loss.item()
                        with torch.no_grad():
                            stats += torch.tensor([
                                loss.item(), float(clip.sum()), float(dual.sum()), float(rho.sum()), float(len(tok)),
                            ], dtype=torch.float64)
            if not fsdp:
                all_reduce_grads(params, world)
            opt.step()
            steps += 1
            if rank == 0:
                # The progress line the trainer activity heartbeats: this
                # rank's share of the loss, tokens/s over all ranks.
                rate = float(stats[4]) * world / max(time.monotonic() - t0, 1e-9)
                print(f"step {steps}/{total_steps} loss {step_loss:.6f} tokens/s {rate:.0f}", flush=True)
    if world > 1:
        all_reduce_cpu(stats, device)
    loss_sum, clipped_n, dual_n, ratio_sum, tok_n = stats.tolist()
    return {
        "loss": loss_sum / steps,
        "steps": steps,
        "samples": n,
        "tokens": int(len(B["roll"])),
        "clip_fraction": clipped_n / tok_n if tok_n else 0.0,
        "dual_clip_fraction": dual_n / tok_n if tok_n else 0.0,
        "mean_ratio": ratio_sum / tok_n if tok_n else 1.0,
        **guard,
        **B["metrics"],
    }


def train(a, rank, world):
    wfile, params0, B = prepare(a)
    W, b, V = (torch.tensor(x, requires_grad=True) for x in params0)
    opt = torch.optim.Adam([W, b, V], lr=a.lr)
    metrics = optimize(a, rank, world, B, [W, b, V], opt, torch.device("cpu"),
                       lambda mine, total_weight: batch_loss(W, b, V, B, mine, total_weight, a))
    if metrics is None:  # --drift-report: measured, not trained
        return None
    if rank == 0:
        out = dict(wfile)
        out["W"] = W.detach().numpy().tolist()
        out["b"] = b.detach().numpy().tolist()
        if "vision" in out:
            out["vision"] = dict(out["vision"], V=V.detach().numpy().tolist())
        write_json(a.weights_out, out)
        write_json(a.metrics_out, metrics)
        print(f"trainer: {json.dumps(metrics)}", flush=True)
    return metrics


def write_eval(a, B, stats, grad_tok, world, **extra):
    """Writes --eval-out: the loss, clip fractions (stats: loss, clipped,
    dual-clipped, summed over ranks) and d loss / d log pi_theta per token."""
    tok_n = len(B["roll"])
    out = {
        "loss": stats[0].item(),
        "tokens": tok_n,
        "clip_fraction": stats[1].item() / tok_n,
        "dual_clip_fraction": stats[2].item() / tok_n,
        "grad_logp": grad_tok.tolist(),
        "ranks": world,
    }
    out.update(extra)
    write_json(a.eval_out, out)


def evaluate(a, rank, world):
    """--eval-out: the loss of the whole batch as one global batch at
    pi_theta = --weights-theta (pi_old = --weights-in), its gradient with
    respect to every completion token's log pi_theta and to W and b, and the
    clip fractions, computed by the code that trains and without a step.
    The golden test in trainer_test.go compares it with internal/rl.PPOLoss."""
    wfile, _, B = prepare(a)
    tfile, Wt, bt, Vt = load_weights(a.weights_theta or a.weights_in)
    if tfile["vocab"] != wfile["vocab"] or tfile["actions"] != wfile["actions"] or tfile.get("vision", {}).get("bands") != wfile.get("vision", {}).get("bands"):
        raise InputError(f"weights {a.weights_theta}: vocab, actions or vision bands differ from {a.weights_in}")
    W, b, V = (torch.tensor(x, requires_grad=True) for x in (Wt, bt, Vt))
    mine = np.arange(len(B["adv"]))[rank::world]
    grad_tok = torch.zeros(len(B["roll"]), dtype=torch.float64)
    stats = torch.zeros(3, dtype=torch.float64)  # loss, clipped, dual
    if len(mine):
        loss, lp, tok, _, clip, dual = batch_loss(W, b, V, B, mine, B["weight"].sum(), a)
        lp.retain_grad()
        loss.backward()
        grad_tok[torch.from_numpy(tok)] = lp.grad
        stats += torch.tensor([loss.item(), float(clip.sum()), float(dual.sum())], dtype=torch.float64)
    grads = [grad_tok, stats] + [p.grad if p.grad is not None else torch.zeros_like(p) for p in (W, b, V)]
    if world > 1:
        for g in grads:
            dist.all_reduce(g)
    if rank == 0:
        write_eval(a, B, stats, grad_tok, world, grad_W=grads[2].tolist(), grad_b=grads[3].tolist(),
                   grad_V=grads[4].tolist(), logp_old=B["old_tok"].tolist())


# ---------------------------------------------------------------------------
# Hugging Face models (--model hf): causal LMs and vision-language models.
# Same batch, same loss_of_logprobs; the per-token log probs come from one
# forward pass over the recorded prompt+completion ids, with the request's
# images for a vision-language model.

TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
    "vocab.json", "merges.txt", "tokenizer.model", "chat_template.jinja", "chat_template.json",
    "generation_config.json",
)
# What vLLM (and AutoProcessor) read besides the tokenizer to serve a
# vision-language model: the image and video processors' settings.
PROCESSOR_FILES = ("preprocessor_config.json", "video_preprocessor_config.json", "processor_config.json")
# The files without which a vision-language model directory cannot be trained
# here: the processor decides how many placeholder tokens each image takes.
VLM_REQUIRED = ("preprocessor_config.json",)


def transformers_available():
    try:
        import transformers  # noqa: F401
    except ImportError:
        return False
    return True


def use_hf(a):
    """Whether this run trains a Hugging Face model rather than the toy."""
    if a.model == "hf":
        if not transformers_available():
            raise InputError("--model hf needs the transformers package, which is not importable")
        return True
    if a.model == "toy":
        return False
    return os.path.isfile(os.path.join(a.weights_in, "config.json")) and transformers_available()


def hf_device():
    if torch.cuda.is_available():
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        return torch.device("cuda", local)
    return torch.device("cpu")


def hf_dtype(a):
    if a.torch_dtype == "auto":
        return torch.bfloat16 if torch.cuda.is_available() else torch.float32
    return getattr(torch, a.torch_dtype)


def hf_config(path):
    """config.json of a model directory, as a dict."""
    try:
        with open(os.path.join(path, "config.json")) as f:
            cfg = json.load(f)
    except FileNotFoundError as e:
        raise InputError(f"weights {path}: not a Hugging Face model directory (no config.json)") from e
    except (OSError, ValueError) as e:
        raise InputError(f"weights {path}: config.json: {e}") from e
    if not isinstance(cfg, dict):
        raise InputError(f"weights {path}: config.json is not a JSON object")
    return cfg


def is_vlm(cfg):
    """A vision-language model declares its vision tower in config.json
    (Qwen2-VL, Qwen2.5-VL, Qwen3-VL: vision_config)."""
    return isinstance(cfg.get("vision_config"), dict)


def load_hf(path, a, device, dtype=None):
    """The model at path: AutoModelForImageTextToText for a vision-language
    model (AutoModelForVision2Seq where that name is missing), else
    AutoModelForCausalLM, with parameters of dtype (default --torch-dtype).
    Dropout stays off, so pi_old and pi_theta are the same deterministic
    function; with gradient checkpointing the model is in training mode
    (transformers checkpoints only there) with every dropout module's rate
    set to 0."""
    cfg = hf_config(path)
    import transformers
    if is_vlm(cfg):
        missing = [f for f in VLM_REQUIRED if not os.path.isfile(os.path.join(path, f))]
        if missing:
            raise InputError(
                f"weights {path}: config.json declares a vision-language model (vision_config) but the directory "
                f"lacks {', '.join(missing)}: copy the processor files (preprocessor_config.json, chat template, "
                "video_preprocessor_config.json) from the base model into it")
        cls = getattr(transformers, "AutoModelForImageTextToText", None) or transformers.AutoModelForVision2Seq
    else:
        cls = transformers.AutoModelForCausalLM
    try:
        model = cls.from_pretrained(path, torch_dtype=dtype or hf_dtype(a))
    except (OSError, ValueError) as e:
        raise InputError(f"weights {path}: {e}") from e
    model.to(device)
    checkpointing = a.gradient_checkpointing == "on" or (a.gradient_checkpointing == "auto" and device.type == "cuda")
    if checkpointing:
        # use_reentrant=False: the reentrant form drops the gradients of
        # blocks whose inputs do not require grad (frozen embeddings).
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.train()
        for m in model.modules():
            if isinstance(m, torch.nn.Dropout):
                m.p = 0.0
        rates = {k: v for k, v in vars(getattr(model, "config", object())).items()
                 if "dropout" in k and isinstance(v, (int, float)) and v}
        if rates:
            print(f"trainer: warning: {path}: config has dropout {rates}, which training mode turns on "
                  "(gradient checkpointing); pi_old and pi_theta then differ by noise", file=sys.stderr, flush=True)
    else:
        model.eval()
    return model


def processor_info(proc):
    """What produced the pixels: the processor and image processor classes
    and the transformers and torchvision versions (schemas.ProcessorInfo)."""
    import transformers
    try:
        import torchvision
        tv = torchvision.__version__
    except ImportError:
        tv = ""
    return {"processor": type(proc).__name__, "image_processor": type(proc.image_processor).__name__,
            "transformers": transformers.__version__, "torchvision": tv}


def load_processor(a):
    """The processor of --weights-in in the variant the model server uses.
    vLLM asks for the fast image processor (torchvision resize) for Qwen2-VL
    and Qwen2.5-VL; transformers before about 4.54 hands out the slow one
    (PIL resize) unless asked, and the two give the same token counts but
    slightly different pixels, which the per-image count check cannot see.
    So the variant is asked for (--image-processor) and checked, and
    compared with the rollout side's (--rollout-processor) before any
    forward. Returns the processor, its info and the mismatches to flag."""
    from transformers import AutoProcessor
    path, fast = a.weights_in, a.image_processor == "fast"
    try:
        proc = AutoProcessor.from_pretrained(path, use_fast=fast)
    except (OSError, ValueError) as e:
        raise InputError(f"weights {path}: processor: {e}") from e
    info = processor_info(proc)
    if info["image_processor"].endswith("Fast") != fast:
        raise InputError(
            f"weights {path}: --image-processor {a.image_processor} asked for, transformers "
            f"{info['transformers']} gave {info['image_processor']}: install torchvision and a transformers with the "
            "fast image processor, or serve vLLM with --mm-processor-kwargs '{\"use_fast\": false}' and pass "
            "--image-processor slow, so both sides make the same pixels")
    flags = []
    if a.rollout_processor:
        try:
            with open(a.rollout_processor) as f:
                want = json.load(f)
        except (OSError, ValueError) as e:
            raise InputError(f"--rollout-processor {a.rollout_processor}: {e}") from e
        if want.get("image_processor") and want["image_processor"] != info["image_processor"]:
            raise InputError(
                f"--rollout-processor {a.rollout_processor}: the model server made pixels with "
                f"{want['image_processor']}, this trainer would use {info['image_processor']} (transformers "
                f"{info['transformers']}): pin the same variant on both sides (--image-processor, vLLM's "
                "--mm-processor-kwargs use_fast)")
        for k in ("transformers", "torchvision"):
            if want.get(k) and want[k] != info[k]:
                flags.append(f"{k} {want[k]} at the model server, {info[k] or 'none'} here")
        for m in flags:
            print(f"trainer: warning: processor: {m}: resize and normalisation may differ by version; the "
                  "drift guard judges the result", file=sys.stderr, flush=True)
    return proc, info, flags


def hf_vocab_size(model):
    try:
        return int(model.get_input_embeddings().num_embeddings)
    except (AttributeError, TypeError):
        return int(getattr(getattr(model, "config", None), "vocab_size", 1 << 62))


def load_rgb(path):
    """The image as vLLM hands it to its processor (vllm/multimodal/image.py
    convert_image_mode): RGBA composited onto white, every other mode through
    PIL's convert("RGB"), which for LA and P drops the transparency rather
    than compositing it. Hugging Face's processor would drop RGBA's alpha
    too, so doing it here keeps the pixels the model saw."""
    from PIL import Image
    with Image.open(path) as im:
        im.load()
        if im.mode == "RGB":
            return im.copy()
        if im.mode == "RGBA":
            out = Image.new("RGB", im.size, (255, 255, 255))
            out.paste(im, mask=im.split()[3])
            return out
        return im.convert("RGB")


def token_runs(ids, token):
    """Lengths of the maximal runs of token in ids, in order."""
    hit = np.concatenate([[False], ids == token, [False]])
    edges = np.flatnonzero(np.diff(hit.astype(np.int8)))
    return (edges[1::2] - edges[::2]).tolist()


def check_completion_images(a, completions, token):
    """Refuses a sample whose completion holds the image token: the model
    generated a placeholder no image stands behind, and the forward would
    fail on it (the image features no longer match the image tokens) or,
    without images, train on a token the model cannot mean. A call like it
    is best dropped from the round (its episode's other calls stay)."""
    for i, c in enumerate(completions):
        at = np.flatnonzero(c == token)
        if len(at):
            raise InputError(
                f"batch {a.batch}: sample {i}: its completion holds {len(at)} image tokens (id {token}, first at "
                f"completion position {int(at[0])}): the model generated an image placeholder, which no image fills "
                "and the model cannot be trained on; leave the call out of the batch (its calls row names it by the "
                "sample's index in the round's samples table)")


def hf_vision(a, arr, n, model, prompts, completions):
    """The images of the batch for model: None for a text-only model (a
    batch with images is refused unless --drop-images), else the processor,
    the image files and per sample its image names, with every sample's
    placeholder runs checked against the processor's per-image counts, and
    no sample's completion holding an image token."""
    if is_vlm(hf_config(a.weights_in)):
        check_completion_images(a, completions, int(model.config.image_token_id))
    refs = len(arr["image_index"])
    if not is_vlm(hf_config(a.weights_in)):
        if refs and not a.drop_images:
            raise InputError(
                f"weights {a.weights_in}: config.json declares a text-only model but the batch carries {refs} images "
                f"({len(arr['images'])} distinct): train a vision-language model directory (config.json with "
                "vision_config), or pass --drop-images for the text-only ablation")
        return None
    files = image_files(a, arr)
    names = [[] if a.drop_images else sample_images(arr, i) for i in range(n)]
    proc, info, flags = load_processor(a)
    V = {"proc": proc, "info": info, "mismatch": flags, "files": files, "names": names}
    if a.drop_images:
        # The ablation: the recorded ids, placeholders and all, without
        # pixels; the placeholders keep their plain token embeddings, as in a
        # text-only pipeline. Nothing to check; the drift guard judges it.
        return V
    ip = V["proc"].image_processor
    merge = int(getattr(ip, "merge_size", 2))
    token = int(model.config.image_token_id)
    counts = {}
    # Why this check, and why it suffices: vLLM expanded each image's single
    # placeholder into N image tokens with its own copy of this processor, N
    # = prod(image_grid_thw) // merge_size²; the model then scatters the
    # image features into those positions in order and checks only the
    # total. Per sample, the runs of image tokens in the recorded ids must
    # therefore be the images' counts in prompt order: then every image's
    # features land on its own placeholders, and with the same pixels
    # (image_files checked each file's hash) the model sees the rollout's
    # input. A different resize (min/max_pixels, patch or merge size)
    # changes a count and is refused here, naming sample and image; what a
    # count cannot show (normalisation, resampling, the fast or slow
    # processor) moves the logprobs, and the drift guard catches that.
    for i in range(n):
        for name in names[i]:
            if name not in counts:
                feat = ip(images=[load_rgb(files[name])], return_tensors="pt")
                counts[name] = int(torch.as_tensor(feat["image_grid_thw"])[0].prod()) // merge ** 2
        runs, want = token_runs(prompts[i], token), [counts[x] for x in names[i]]
        if runs == want:
            continue
        if len(runs) != len(want):
            raise InputError(
                f"batch {a.batch}: sample {i}: its prompt has {len(runs)} runs of image tokens (id {token}) "
                f"but the request carried {len(want)} images: the batch's ids and images do not belong together")
        j = next(j for j in range(len(want)) if runs[j] != want[j])
        raise InputError(
            f"batch {a.batch}: sample {i}: image {j} ({names[i][j]}) has {runs[j]} placeholder tokens in the recorded "
            f"prompt but the processor of {a.weights_in} makes {want[j]}: the rollout's processor settings "
            "(min_pixels/max_pixels, patch or merge size) differ from this directory's preprocessor_config.json")
    return V


def hf_inputs(B, idx, device, pad):
    """Model inputs for samples idx in one forward: the recorded ids of
    prompt+completion, right-padded with pad under attention_mask 0, and for
    a vision-language model the samples' images in order (the model
    scatters features into image-token positions row by row, i.e. in sample
    and prompt order)."""
    seqs = [np.concatenate([B["prompts"][i], B["completions"][i]]) for i in idx]
    width = max(len(s) for s in seqs)
    ids = np.full((len(seqs), width), pad, np.int64)
    mask = np.zeros((len(seqs), width), np.int64)
    for r, s in enumerate(seqs):
        ids[r, :len(s)], mask[r, :len(s)] = s, 1
    kw = {"input_ids": torch.from_numpy(ids).to(device), "attention_mask": torch.from_numpy(mask).to(device),
          "use_cache": False}
    V = B.get("vision")
    if V is not None:
        images = [load_rgb(V["files"][name]) for i in idx for name in V["names"][i]]
        if images:
            feat = V["proc"].image_processor(images=images, return_tensors="pt")
            kw["pixel_values"] = torch.as_tensor(feat["pixel_values"]).to(device)
            kw["image_grid_thw"] = torch.as_tensor(feat["image_grid_thw"]).to(device)
    return kw


def keep_arg(model):
    """The forward argument that limits the logits to the last positions:
    logits_to_keep (recent transformers, where the model has it),
    num_logits_to_keep (its earlier name), or None. A prompt of 10k tokens times a
    vocabulary of 150k is gigabytes of logits, of which a completion needs a
    few hundred rows."""
    import inspect
    inner = getattr(model, "module", model)  # FSDP's wrapped module
    try:
        names = inspect.signature(inner.forward).parameters
    except (TypeError, ValueError):
        return None
    return next((n for n in ("logits_to_keep", "num_logits_to_keep") if n in names), None)


def hf_logprobs(model, B, idx, device, micro=None):
    """log pi(completion token | prompt, earlier completion) of samples idx,
    concatenated in sample order, float64 on the CPU (with the graph to the
    model when grad is enabled): per micro samples one forward pass over
    prompt+completion, log_softmax at positions len(prompt)-1 .. end-1,
    gathered at the completion ids. Logits are computed from the earliest
    of those positions on when the model can (keep_arg)."""
    micro = micro or max(len(idx), 1)
    arg = keep_arg(model)
    out = []
    for lo in range(0, len(idx), micro):
        part = idx[lo:lo + micro]
        kw = hf_inputs(B, part, device, B["pad"])
        first = 0
        if arg:
            first = min(len(B["prompts"][i]) - 1 for i in part)
            kw[arg] = kw["input_ids"].shape[1] - first
        res = model(**kw)
        logits = res.logits if hasattr(res, "logits") else res[0]
        for r, i in enumerate(part):
            p, c = B["prompts"][i], B["completions"][i]
            # Divided by the sample's temperature (batch.npz temperatures)
            # in float32, as vLLM divides its float32 logits.
            lg = logits[r, len(p) - 1 - first:len(p) + len(c) - 1 - first].float() / float(B["temp"][i])
            lp = torch.log_softmax(lg, dim=-1).gather(1, torch.from_numpy(c).to(device)[:, None])[:, 0]
            out.append(lp.double().cpu())
    return torch.cat(out) if out else torch.zeros(0, dtype=torch.float64)


def hf_prepare(a, device, rank, world, train=False):
    """The model at --weights-in (pi_old) and the batch with per token the
    pi_old log prob and the truncated importance weight. Each rank computes
    pi_old of its own samples and the ranks sum them (every token has one
    owner), so all hold the same figures.

    To train with a low-precision --torch-dtype, the weights load in float32
    and stay there as master weights: returned as a list beside the model
    (--parallel ddp, the model cast to --torch-dtype for compute), or kept
    by FSDP's mixed precision (the model returned wrapped). bfloat16 cannot
    hold an update of lr 1e-6 to a weight of 0.02 (its step there is
    1.2e-4), so AdamW on bfloat16 parameters would round the updates away.
    pi_old is computed by the compute-precision model, as pi_theta is."""
    dtype = hf_dtype(a)
    keep32 = train and dtype != torch.float32
    fsdp = train and a.parallel == "fsdp" and world > 1
    model = load_hf(a.weights_in, a, device, torch.float32 if keep32 else dtype)
    arr, n = load_arrays(a.batch, hf_vocab_size(model))
    po, co = arr["prompt_offsets"].astype(np.int64), arr["completion_offsets"].astype(np.int64)
    B = {
        "prompts": [arr["prompt_ids"][po[i]:po[i + 1]].astype(np.int64) for i in range(n)],
        "completions": [arr["completion_ids"][co[i]:co[i + 1]].astype(np.int64) for i in range(n)],
        "co": co, "ntok": np.diff(co), "roll": arr["rollout_logprobs"].astype(np.float64),
        "adv": arr["advantages"].astype(np.float64), "weight": arr["weights"].astype(np.float64),
        "temp": arr["temperatures"].astype(np.float64), "metrics": temperature_metrics(arr),
        "stale": arr["staleness"],
    }
    for i in range(n):
        if len(B["prompts"][i]) == 0:
            raise InputError(f"batch {a.batch}: sample {i} has an empty prompt")
    B["vision"] = hf_vision(a, arr, n, model, B["prompts"], B["completions"])
    # Padding never reaches a logit we read, but it must not be an image
    # token: the model counts those over the whole micro-batch.
    B["pad"] = 1 if int(getattr(model.config, "image_token_id", -1)) == 0 else 0
    B["model"] = model
    master = None
    if fsdp:
        model = wrap_fsdp(model, device, dtype)
    elif keep32:
        master = [p.detach().clone() for p in model.parameters() if p.requires_grad]
        # Parameters only: model.to(dtype) would round float buffers too,
        # RoPE's inv_freq among them, whose error grows with the position.
        with torch.no_grad():
            for p in model.parameters():
                p.data = p.data.to(dtype)
    mine, k = np.arange(n)[rank::world], a.micro_batch or 1
    # FSDP gathers parameters collectively in every forward: each rank runs
    # as many as rank 0 (the rounded-up share), extra ones on sample 0.
    chunks = -(-len(np.arange(n)[0::world]) // k) if fsdp else -(-len(mine) // k)
    old = torch.zeros(len(B["roll"]), dtype=torch.float64)
    with torch.no_grad():
        for c in range(chunks):
            part = mine[c * k:(c + 1) * k]
            if len(part):
                old[torch.from_numpy(tokens_of(B, part))] = hf_logprobs(model, B, part, device)
            else:
                hf_logprobs(model, B, np.arange(1), device)
    if world > 1:
        all_reduce_cpu(old, device)
    B["old_tok"] = old.numpy()
    B["w_tok"] = np.minimum(np.exp(B["old_tok"] - B["roll"]), a.is_cap)
    return model, B, master


class MasterAdamW:
    """AdamW on float32 master copies of low-precision parameters: the
    gradients (already summed over the ranks) are copied up, AdamW steps the
    masters, and the parameters get the masters rounded to their dtype, so
    updates smaller than a bfloat16 step accumulate instead of vanishing."""

    def __init__(self, params, master, lr):
        self.params, self.master = params, master
        self.opt = torch.optim.AdamW(master, lr=lr)

    def zero_grad(self):
        for p in self.params:
            p.grad = None

    def step(self):
        for p, m in zip(self.params, self.master):
            m.grad = p.grad.float() if p.grad is not None else torch.zeros_like(m)
        self.opt.step()
        with torch.no_grad():
            for p, m in zip(self.params, self.master):
                p.copy_(m)
                m.grad = None


def tokens_of(B, idx):
    return np.concatenate([np.arange(B["co"][i], B["co"][i + 1]) for i in idx])


def all_reduce_grads(params, world):
    """Data parallel by hand: sum the ranks' gradients (each rank's loss is
    already divided by the global batch's weight). Unlike DDP's hooks this
    works when a rank's shard of a global batch is empty. Low-precision
    gradients are summed in float32 and rounded once."""
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        if world > 1 and p.grad.dtype in (torch.bfloat16, torch.float16):
            g = p.grad.float()
            dist.all_reduce(g)
            p.grad.copy_(g)
        elif world > 1:
            dist.all_reduce(p.grad)


def all_reduce_cpu(t, device):
    """Sums the CPU tensor t over the ranks in place (NCCL needs it on the GPU)."""
    if device.type == "cuda":
        h = t.to(device)
        dist.all_reduce(h)
        t.copy_(h.cpu())
    else:
        dist.all_reduce(t)


def fsdp_module():
    """torch.distributed.fsdp, or an InputError saying why not (torch 1.13's
    does not import under Python 3.11)."""
    try:
        from torch.distributed import fsdp
    except Exception as e:  # an import-time crash of torch itself
        raise InputError(f"--parallel fsdp: torch {torch.__version__} cannot import torch.distributed.fsdp ({e}); "
                         "use --parallel ddp") from e
    return fsdp


def wrap_fsdp(model, device, dtype):
    """FullyShardedDataParallel over the float32 model, one unit per
    language-model block (the model's _no_split_modules, decoder layers),
    so a rank holds whole parameters of one block at a time; forward and
    backward run in dtype (FSDP's mixed precision), the sharded float32
    parameters are the master weights AdamW steps, and gradients are
    reduced in float32. The vision tower stays in the root unit, which
    every forward gathers: a micro-batch without images never calls it, and
    a unit that one rank calls while another does not hangs both."""
    import functools
    fsdp = fsdp_module()
    from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy
    names = set(getattr(model, "_no_split_modules", None) or [])
    visual = getattr(model, "visual", None)
    if not isinstance(visual, torch.nn.Module):
        visual = getattr(getattr(model, "model", None), "visual", None)
    vision = {type(m) for m in visual.modules()} if isinstance(visual, torch.nn.Module) else set()
    blocks = {type(m) for m in model.modules() if type(m).__name__ in names} - vision
    policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls=blocks) if blocks else None
    mp = None
    if dtype != torch.float32:
        # Buffers keep their float32 (RoPE's inv_freq, see hf_prepare).
        mp = fsdp.MixedPrecision(param_dtype=dtype, reduce_dtype=torch.float32)
    return fsdp.FullyShardedDataParallel(model, auto_wrap_policy=policy, mixed_precision=mp,
                                         device_id=device if device.type == "cuda" else None)


def full_state_dict(wrapped, rank):
    """The whole model's state dict on rank 0 (None elsewhere); every rank must call it."""
    fsdp = fsdp_module()
    cfg = fsdp.FullStateDictConfig(offload_to_cpu=True, rank0_only=True)
    with fsdp.FullyShardedDataParallel.state_dict_type(wrapped, fsdp.StateDictType.FULL_STATE_DICT, cfg):
        sd = wrapped.state_dict()
    return sd if rank == 0 else None


def save_hf(model, a, vision, state_dict=None):
    """A directory vLLM serves as the next round's model: save_pretrained's
    config and weights, the processor's files (save_pretrained) for a
    vision-language model, then --weights-in's own tokenizer, chat template
    and processor files and generation_config.json copied over them byte
    for byte (the next rollout formats, tokenizes, processes images and
    samples exactly as this one did). Written into a temporary directory
    first, so a reader sees whole files."""
    import shutil
    out = os.path.abspath(a.weights_out)
    tmp = out.rstrip("/") + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    if state_dict is None:
        model.save_pretrained(tmp)
    else:
        model.save_pretrained(tmp, state_dict=state_dict)
    if vision is not None:
        vision["proc"].save_pretrained(tmp)
    for name in TOKENIZER_FILES + PROCESSOR_FILES:
        src = os.path.join(a.weights_in, name)
        if os.path.isfile(src):
            shutil.copy2(src, os.path.join(tmp, name))
    os.makedirs(out, exist_ok=True)
    for name in os.listdir(tmp):
        os.replace(os.path.join(tmp, name), os.path.join(out, name))
    os.rmdir(tmp)


def hf_train(a, rank, world):
    device = hf_device()
    a.micro_batch = a.micro_batch or 1
    model, B, master = hf_prepare(a, device, rank, world, train=True)
    inner, fsdp = B["model"], a.parallel == "fsdp" and world > 1
    params = [p for p in model.parameters() if p.requires_grad]
    opt = MasterAdamW(params, master, a.lr) if master else torch.optim.AdamW(params, lr=a.lr)

    def loss(part, total_weight):
        lp = hf_logprobs(model, B, part, device)
        return loss_of_logprobs(lp, B, part, tokens_of(B, part), total_weight, a)

    metrics = optimize(a, rank, world, B, params, opt, device, loss, fsdp=fsdp)
    if metrics is None:  # --drift-report: measured, not trained
        return None
    # The output keeps float32 master weights (the model server casts them
    # to its own dtype): rounding them at every save would lose, round after
    # round, every update smaller than a bfloat16 step.
    state = full_state_dict(model, rank) if fsdp else None
    if master:
        with torch.no_grad():
            for p, m in zip(params, master):
                p.data = m
    if B["vision"] is not None:
        metrics["processor"] = B["vision"]["info"]
        if B["vision"]["mismatch"]:
            metrics["processor_mismatch"] = "; ".join(B["vision"]["mismatch"])
    if rank == 0:
        save_hf(inner, a, B["vision"], state)
        write_json(a.metrics_out, metrics)
        print(f"trainer: {json.dumps(metrics)}", flush=True)
    return metrics


def hf_evaluate(a, rank, world):
    """--eval-out for --model hf: like evaluate, with pi_theta the model
    directory --weights-theta; reports the per-token log pi_old and log
    pi_theta as well (no parameter gradients)."""
    device = hf_device()
    _, B, _ = hf_prepare(a, device, rank, world)
    path = a.weights_theta or a.weights_in
    if is_vlm(hf_config(path)) != (is_vlm(hf_config(a.weights_in))):
        raise InputError(f"weights {path}: pi_theta and pi_old ({a.weights_in}) must both be vision-language "
                         "models or both text-only")
    theta = load_hf(path, a, device)
    tok_n = len(B["roll"])
    mine = np.arange(len(B["adv"]))[rank::world]
    grad_tok = torch.zeros(tok_n, dtype=torch.float64)
    lp_tok = torch.zeros(tok_n, dtype=torch.float64)
    stats = torch.zeros(3, dtype=torch.float64)  # loss, clipped, dual
    if len(mine):
        tok = tokens_of(B, mine)
        lp = hf_logprobs(theta, B, mine, device, a.micro_batch or 1)
        lp.retain_grad()
        loss, _, tok, _, clip, dual = loss_of_logprobs(lp, B, mine, tok, B["weight"].sum(), a)
        loss.backward()
        grad_tok[torch.from_numpy(tok)] = lp.grad
        lp_tok[torch.from_numpy(tok)] = lp.detach()
        stats += torch.tensor([loss.item(), float(clip.sum()), float(dual.sum())], dtype=torch.float64)
    if world > 1:
        for g in (grad_tok, lp_tok, stats):
            all_reduce_cpu(g, device)
    if rank == 0:
        write_eval(a, B, stats, grad_tok, world, logp_theta=lp_tok.tolist(), logp_old=B["old_tok"].tolist(), model="hf")


def main(argv):
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    distributed = "RANK" in os.environ and world > 1
    try:
        a = parse_args(argv)
        hf = use_hf(a)
    except InputError as e:
        print(f"trainer: error: {e}", file=sys.stderr, flush=True)
        return 2
    if distributed:
        # The toy's tensors live on the CPU; a Hugging Face model uses the GPU when there is one.
        dist.init_process_group("nccl" if hf and torch.cuda.is_available() else "gloo")
    try:
        torch.manual_seed(a.seed)
        if hf:
            (hf_evaluate if a.eval_out else hf_train)(a, rank, world if distributed else 1)
        else:
            (evaluate if a.eval_out else train)(a, rank, world if distributed else 1)
    except InputError as e:
        print(f"trainer: error: {e}", file=sys.stderr, flush=True)
        return 2
    except DriftError as e:
        print(f"trainer: {e}", file=sys.stderr, flush=True)
        return DRIFT_EXIT
    finally:
        if distributed:
            dist.destroy_process_group()
    if not (a.eval_out or a.drift_report):
        # After the outputs, so pacing changes how long a training takes
        # and nothing it writes.
        time.sleep(max(0.0, STARTED + a.min_seconds - time.monotonic()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
