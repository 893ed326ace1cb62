#!/usr/bin/env python3
"""Dual-clip PPO trainer for the minimal harness's toy policy.

Launched by the train activity as

    python3 -m torch.distributed.run --standalone --nproc_per_node N \\
        harnesses/minimal/trainer.py --batch batch.npz \\
        --weights-in in/policy.json --weights-out out/policy.json \\
        --metrics-out metrics.json --lr 0.01 --clip-low 0.2 --clip-high 0.28 \\
        --dual-clip 3.0 --is-cap 2.0 --global-batch 128 --epochs 4 --seed S

With Debian's torch 1.13 under Python 3.11 `-m torch.distributed.run` itself
crashes; use `python3 harnesses/minimal/torchrun.py` (same flags) there.
Plain `python3 trainer.py ...` runs it as a single process. Only torch and
numpy are used. The batch is schemas/batch.go's batch.npz; the weights are
policy.json ("roundhouse-toy-policy/v1"); metrics.json has the fields of
schemas.TrainerMetrics.

The model is the Go package harnesses/minimal/policy, recomputed from token
ids alone: the features of a call are the unique prompt ids after the
second-to-last <|im_start|>; logits = b + sum of W rows of the features over
the action tokens; the first completion token is the sampled action, every
later completion token is forced (log prob 0 under any weights).

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
holding config.json and `transformers` importable): the model is
AutoModelForCausalLM.from_pretrained(--weights-in, torch_dtype=--torch-dtype:
float32 on CPU, bfloat16 on CUDA by default). Per selected call, one forward
pass over prompt+completion; log_softmax at positions len(prompt)-1 .. end-1
gathered at the completion ids gives log pi_theta (pi_old: the same before
training), and the same loss as the toy applies. Ranks sum gradients by
all_reduce (gloo on CPU, NCCL on CUDA), AdamW steps, and rank 0 writes
model.save_pretrained(--weights-out) plus --weights-in's tokenizer files and
metrics.json. --eval-out works there too (per-token logp_theta, logp_old and
grad_logp; no parameter gradients). trainer_hf_test.go checks it with a fake
transformers package (testdata/fake_transformers).

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

import numpy as np
import torch
import torch.distributed as dist

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
    a = ap.parse_args(argv)
    checks = [
        (a.lr > 0, "--lr must be > 0"),
        (0 < a.clip_low < 1, "--clip-low must be in (0, 1)"),
        (a.clip_high > 0, "--clip-high must be > 0"),
        (a.dual_clip > 1, "--dual-clip must be > 1"),
        (a.is_cap > 0, "--is-cap must be > 0"),
        (a.global_batch >= 1, "--global-batch must be >= 1"),
        (a.epochs >= 1, "--epochs must be >= 1"),
        (a.eval_out or (a.weights_out and a.metrics_out), "--weights-out and --metrics-out are required to train"),
        (a.eval_out or not a.weights_theta, "--weights-theta needs --eval-out"),
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
    return arr, n


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
    """log pi(action) of samples idx under (W, b, V)."""
    feats, act = B["feats"], B["act"]
    flat = torch.from_numpy(np.concatenate([feats[i] for i in idx]))
    lens = torch.tensor([len(feats[i]) for i in idx], dtype=torch.int64)
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(lens, 0)[:-1]])
    logits = torch.nn.functional.embedding_bag(flat, W, offsets, mode="sum") + b + torch.from_numpy(B["phi"][idx]) @ V
    lp = torch.log_softmax(logits, dim=1)
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


def drift(B, limit):
    """The drift guard's figures, from pi_old as this trainer computes it and
    the logprobs the proxy recorded: mean and max |difference| over
    completion tokens, and per sample its mean, with the share and the
    first indices of samples whose mean exceeds limit (when limit > 0)."""
    d = np.abs(B["old_tok"] - B["roll"])
    if len(d) == 0:
        return 0.0, 0.0, 0.0, []
    co, ntok = B["co"], np.maximum(np.diff(B["co"]), 1)
    per_sample = np.add.reduceat(d, co[:-1]) / ntok if len(co) > 1 else np.zeros(0)
    bad = np.flatnonzero(per_sample > limit) if limit > 0 else np.zeros(0, np.int64)
    share = len(bad) / len(per_sample) if len(per_sample) else 0.0
    return float(d.mean()), float(d.max()), share, [(int(i), float(per_sample[i])) for i in bad[:5]]


def check_drift(a, B):
    """Returns the drift figures for metrics.json; raises DriftError when
    the mean exceeds --drift-limit."""
    mean, mx, share, first = drift(B, a.drift_limit)
    if a.drift_limit > 0 and mean > a.drift_limit:
        named = ", ".join(f"sample {i} ({m:.3g})" for i, m in first)
        raise DriftError(
            f"drift guard: mean |log pi_old - log pi_rollout| {mean:.3g} exceeds --drift-limit {a.drift_limit:g} "
            f"(max {mx:.3g}, {100 * share:.1f}% of samples over the limit; first: {named}): the trainer does not "
            "see what the model saw (chat template, processor, images or weights differ from the rollout)")
    return {"logprob_mismatch": mean, "logprob_mismatch_max": mx, "drift_share": share}


def optimize(a, rank, world, B, params, opt, device, loss_of):
    """The update both policies share: --epochs passes over the batch in
    global batches of --global-batch samples, each split over the ranks;
    loss_of(mine, total_weight) returns batch_loss's tuple for this rank's
    share. The drift guard runs first. Returns metrics.json's content."""
    n, weight = len(B["adv"]), B["weight"]
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
            if len(mine) and total_weight > 0:
                loss, _, tok, rho, clip, dual = loss_of(mine, total_weight)
                loss.backward()
                with torch.no_grad():
                    stats += torch.tensor([
                        loss.item(), float(clip.sum()), float(dual.sum()), float(rho.sum()), float(len(tok)),
                    ], dtype=torch.float64)
            all_reduce_grads(params, world)
            opt.step()
            steps += 1
            if rank == 0:
                # The progress line the trainer activity heartbeats: this
                # rank's share of the loss, tokens/s over all ranks.
                rate = float(stats[4]) * world / max(time.monotonic() - t0, 1e-9)
                step_loss = loss.item() if len(mine) and total_weight > 0 else 0.0
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
    }


def train(a, rank, world):
    wfile, params0, B = prepare(a)
    W, b, V = (torch.tensor(x, requires_grad=True) for x in params0)
    opt = torch.optim.Adam([W, b, V], lr=a.lr)
    metrics = optimize(a, rank, world, B, [W, b, V], opt, torch.device("cpu"),
                       lambda mine, total_weight: batch_loss(W, b, V, B, mine, total_weight, a))
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
# Hugging Face causal LM (--model hf). Same batch, same loss_of_logprobs; the
# per-token log probs come from one forward pass over prompt+completion.

TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
    "vocab.json", "merges.txt", "tokenizer.model", "chat_template.jinja", "chat_template.json",
    "generation_config.json",
)


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


def load_hf(path, a, device):
    if not os.path.isfile(os.path.join(path, "config.json")):
        raise InputError(f"weights {path}: not a Hugging Face model directory (no config.json)")
    from transformers import AutoModelForCausalLM
    try:
        model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=hf_dtype(a))
    except (OSError, ValueError) as e:
        raise InputError(f"weights {path}: {e}") from e
    model.to(device)
    # No dropout: pi_old and pi_theta are the same deterministic function.
    model.eval()
    return model


def hf_vocab_size(model):
    try:
        return int(model.get_input_embeddings().num_embeddings)
    except (AttributeError, TypeError):
        return int(getattr(getattr(model, "config", None), "vocab_size", 1 << 62))


def hf_logprobs(model, B, idx, device):
    """log pi(completion token | prompt, earlier completion) of samples idx,
    concatenated in sample order, float64 on the CPU (with the graph to the
    model when grad is enabled): per sample one forward pass over
    prompt+completion, log_softmax at positions len(prompt)-1 .. end-1,
    gathered at the completion ids."""
    out = []
    for i in idx:
        p, c = B["prompts"][i], B["completions"][i]
        ids = torch.from_numpy(np.concatenate([p, c])).to(device)[None]
        res = model(input_ids=ids)
        logits = res.logits if hasattr(res, "logits") else res[0]
        logits = logits[0, len(p) - 1:len(p) + len(c) - 1].float()
        lp = torch.log_softmax(logits, dim=-1).gather(1, torch.from_numpy(c).to(device)[:, None])[:, 0]
        out.append(lp.double().cpu())
    return torch.cat(out)


def hf_prepare(a, device):
    """The model at --weights-in (pi_old) and the batch with per token the
    pi_old log prob and the truncated importance weight."""
    model = load_hf(a.weights_in, a, device)
    arr, n = load_arrays(a.batch, hf_vocab_size(model))
    po, co = arr["prompt_offsets"].astype(np.int64), arr["completion_offsets"].astype(np.int64)
    B = {
        "prompts": [arr["prompt_ids"][po[i]:po[i + 1]].astype(np.int64) for i in range(n)],
        "completions": [arr["completion_ids"][co[i]:co[i + 1]].astype(np.int64) for i in range(n)],
        "co": co, "ntok": np.diff(co), "roll": arr["rollout_logprobs"].astype(np.float64),
        "adv": arr["advantages"].astype(np.float64), "weight": arr["weights"].astype(np.float64),
    }
    for i in range(n):
        if len(B["prompts"][i]) == 0:
            raise InputError(f"batch {a.batch}: sample {i} has an empty prompt")
    with torch.no_grad():
        B["old_tok"] = hf_logprobs(model, B, np.arange(n), device).numpy()
    B["w_tok"] = np.minimum(np.exp(B["old_tok"] - B["roll"]), a.is_cap)
    return model, B


def tokens_of(B, idx):
    return np.concatenate([np.arange(B["co"][i], B["co"][i + 1]) for i in idx])


def all_reduce_grads(params, world):
    """Data parallel by hand: sum the ranks' gradients (each rank's loss is
    already divided by the global batch's weight). Unlike DDP's hooks this
    works when a rank's shard of a global batch is empty."""
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        if world > 1:
            dist.all_reduce(p.grad)


def all_reduce_cpu(t, device):
    """Sums the CPU tensor t over the ranks in place (NCCL needs it on the GPU)."""
    if device.type == "cuda":
        h = t.to(device)
        dist.all_reduce(h)
        t.copy_(h.cpu())
    else:
        dist.all_reduce(t)


def save_hf(model, a):
    """model.save_pretrained into --weights-out plus the tokenizer files of
    --weights-in, via a temporary directory so a reader sees whole files."""
    import shutil
    out = os.path.abspath(a.weights_out)
    tmp = out.rstrip("/") + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    model.save_pretrained(tmp)
    for name in TOKENIZER_FILES:
        src = os.path.join(a.weights_in, name)
        if os.path.isfile(src) and not os.path.exists(os.path.join(tmp, name)):
            shutil.copy2(src, os.path.join(tmp, name))
    os.makedirs(out, exist_ok=True)
    for name in os.listdir(tmp):
        os.replace(os.path.join(tmp, name), os.path.join(out, name))
    os.rmdir(tmp)


def hf_train(a, rank, world):
    device = hf_device()
    model, B = hf_prepare(a, device)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=a.lr)

    def loss(mine, total_weight):
        lp = hf_logprobs(model, B, mine, device)
        return loss_of_logprobs(lp, B, mine, tokens_of(B, mine), total_weight, a)

    metrics = optimize(a, rank, world, B, params, opt, device, loss)
    if rank == 0:
        save_hf(model, a)
        write_json(a.metrics_out, metrics)
        print(f"trainer: {json.dumps(metrics)}", flush=True)
    return metrics


def hf_evaluate(a, rank, world):
    """--eval-out for --model hf: like evaluate, with pi_theta the model
    directory --weights-theta; reports the per-token log pi_old and log
    pi_theta as well (no parameter gradients)."""
    device = hf_device()
    _, B = hf_prepare(a, device)
    theta = load_hf(a.weights_theta or a.weights_in, a, device)
    tok_n = len(B["roll"])
    mine = np.arange(len(B["adv"]))[rank::world]
    grad_tok = torch.zeros(tok_n, dtype=torch.float64)
    lp_tok = torch.zeros(tok_n, dtype=torch.float64)
    stats = torch.zeros(3, dtype=torch.float64)  # loss, clipped, dual
    if len(mine):
        tok = tokens_of(B, mine)
        lp = hf_logprobs(theta, B, mine, device)
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
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
