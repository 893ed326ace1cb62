"""A stand-in for Hugging Face transformers, for the trainer tests only.

No real transformers package can be installed on the test machine, so this
one mirrors the parts of its API that harnesses/minimal/trainer.py calls,
shaped after transformers' own source (models/qwen2_vl/
image_processing_qwen2_vl.py and models/qwen2_5_vl/modeling_qwen2_5_vl.py).
The trainer's loading code is the code that runs against the real
library; only the models here are tiny.

Text-only: AutoModelForCausalLM.from_pretrained(dir) reads dir/config.json
({"vocab_size": V, "hidden_size": H, "seed": S}) and returns TinyLM: an
embedding and a linear head over the vocabulary, so the logits at position
t depend on token t alone.

Vision-language, as Qwen2.5-VL: a config.json with "vision_config" loads
through AutoModelForImageTextToText (AutoModelForVision2Seq, its older
name, too) as Qwen2_5_VLForConditionalGeneration. Its forward(input_ids,
attention_mask, position_ids, pixel_values, image_grid_thw, ...) embeds the
tokens, turns pixel_values ([sum patches, 3*temporal_patch_size*patch²], as
Qwen2VLImageProcessor flattens them) into one feature per merge_size²
patches with a tiny "visual" (a linear map per patch, then a linear map
over each group of merge_size² consecutive patches, the order the processor
lays them out in), scatters the features into the positions of
config.image_token_id and raises ValueError("Image features and image
tokens do not match: ...") when the counts differ, as the real one does (it
checks only the totals). Then hidden state t = embedding t + the mean of
embeddings 0..t (causal, so an image changes the logits of later tokens)
and a linear head, over the last logits_to_keep positions when that is
given (recent transformers' models take it). position_ids is accepted and,
as 3-D M-RoPE has no counterpart here, ignored. TinyLM has no
logits_to_keep, as the older models, nor does Qwen2VLForConditionalGeneration
(model_type qwen2_vl, otherwise the same model), so the trainer's fallback
runs too.

AutoProcessor.from_pretrained(dir) needs dir/preprocessor_config.json and
returns a processor with .image_processor (Qwen2VLImageProcessor: convert to
RGB, smart_resize to multiples of patch_size*merge_size within
[min_pixels, max_pixels], BICUBIC, rescale 1/255, normalise with CLIP's
mean/std, patches flattened as the real one does; returns a BatchFeature
with pixel_values float32 and image_grid_thw int64 tensors), .tokenizer
(tokenizer.json passed through unchanged) and .chat_template;
save_pretrained(dir) writes preprocessor_config.json, chat_template.json,
tokenizer.json and tokenizer_config.json.

Models take their parameters from dir/model.pt when present, else from
torch.manual_seed(config seed), rounded to config "init_dtype" when
given (as a checkpoint saved in bfloat16 holds them); save_pretrained(dir, state_dict=None) writes
config.json, generation_config.json and model.pt (a state dict; the real
library writes *.safetensors). gradient_checkpointing_enable() makes
training-mode forwards recompute activations through torch.utils.checkpoint.
"""

import json
import math
import os
import types

import numpy as np
import torch
import torch.utils.checkpoint

__version__ = "0.0-fake"

WEIGHTS = "model.pt"
OPENAI_CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
OPENAI_CLIP_STD = [0.26862954, 0.26130258, 0.27577711]


def _read_json(path, what):
    if not os.path.isfile(path):
        raise OSError(f"{os.path.dirname(path)} does not appear to have a file named {os.path.basename(path)} ({what})")
    with open(path) as f:
        return json.load(f)


class _Config(types.SimpleNamespace):
    """PretrainedConfig's attribute access; vision_config nests."""

    def __init__(self, d):
        d = dict(d)
        if isinstance(d.get("vision_config"), dict):
            d["vision_config"] = _Config(d["vision_config"])
        super().__init__(**d)

    def to_dict(self):
        return {k: (v.to_dict() if isinstance(v, _Config) else v) for k, v in vars(self).items()}


class _PreTrained(torch.nn.Module):
    """What PreTrainedModel gives the trainer: config, save_pretrained,
    gradient checkpointing."""

    def __init__(self, config):
        super().__init__()
        self.config = _Config(config)
        self.gradient_checkpointing = False

    def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs=None):
        self.gradient_checkpointing = True
        self._ckpt_kwargs = dict(gradient_checkpointing_kwargs or {"use_reentrant": True})

    def _maybe_checkpoint(self, fn, *args):
        # As in transformers, checkpointing applies to training-mode forwards only.
        if self.gradient_checkpointing and self.training and torch.is_grad_enabled():
            return torch.utils.checkpoint.checkpoint(fn, *args, **self._ckpt_kwargs)
        return fn(*args)

    def get_input_embeddings(self):
        return self.embed

    def save_pretrained(self, path, state_dict=None, **kwargs):
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, "config.json"), "w") as f:
            json.dump(self.config.to_dict(), f)
        with open(os.path.join(path, "generation_config.json"), "w") as f:
            json.dump({"_from_model_config": True, "transformers_version": __version__}, f)
        torch.save(state_dict if state_dict is not None else self.state_dict(), os.path.join(path, WEIGHTS))

    @classmethod
    def _load(cls, path, config, torch_dtype):
        model = cls(config)
        weights = os.path.join(path, WEIGHTS)
        if os.path.isfile(weights):
            model.load_state_dict(torch.load(weights))
        elif config.get("init_dtype"):
            # Seeded weights as a checkpoint saved in that dtype holds them.
            with torch.no_grad():
                for p in model.parameters():
                    p.copy_(p.to(getattr(torch, config["init_dtype"])).float())
        if torch_dtype is not None:
            model.to(torch_dtype)
        return model


class TinyLM(_PreTrained):
    def __init__(self, config):
        super().__init__(config)
        g = torch.Generator().manual_seed(int(config.get("seed", 0)))
        v, h = int(config["vocab_size"]), int(config["hidden_size"])
        self.embed = torch.nn.Embedding(v, h)
        self.head = torch.nn.Linear(h, v)
        with torch.no_grad():
            self.embed.weight.copy_(torch.randn(v, h, generator=g))
            self.head.weight.copy_(torch.randn(v, h, generator=g) / h ** 0.5)
            self.head.bias.copy_(torch.randn(v, generator=g) * 0.1)

    def forward(self, input_ids=None, attention_mask=None, **kwargs):
        return types.SimpleNamespace(logits=self._maybe_checkpoint(lambda x: self.head(self.embed(x)), input_ids))


class Qwen2_5_VisionTransformer(torch.nn.Module):
    """The "visual" tower: one feature per merge_size² patches."""

    def __init__(self, vc, out, g):
        super().__init__()
        self.spatial_merge_size = int(getattr(vc, "spatial_merge_size", 2))
        patch_dim = 3 * int(getattr(vc, "temporal_patch_size", 2)) * int(getattr(vc, "patch_size", 14)) ** 2
        hid = int(getattr(vc, "hidden_size", 8))
        self.patch_embed = torch.nn.Linear(patch_dim, hid, bias=False)
        self.merger = torch.nn.Linear(hid * self.spatial_merge_size ** 2, out)
        with torch.no_grad():
            self.patch_embed.weight.copy_(torch.randn(hid, patch_dim, generator=g) / patch_dim ** 0.5)
            self.merger.weight.copy_(torch.randn(out, hid * self.spatial_merge_size ** 2, generator=g))
            self.merger.bias.copy_(torch.randn(out, generator=g) * 0.1)

    def forward(self, pixel_values, grid_thw):
        if pixel_values.shape[0] != int(grid_thw.prod(-1).sum()):
            raise ValueError(f"pixel_values has {pixel_values.shape[0]} patches, image_grid_thw {grid_thw.tolist()} "
                             f"says {int(grid_thw.prod(-1).sum())}")
        x = self.patch_embed(pixel_values)
        return self.merger(x.reshape(-1, x.shape[-1] * self.spatial_merge_size ** 2))


class Qwen2_5_VLForConditionalGeneration(_PreTrained):
    def __init__(self, config):
        super().__init__(config)
        g = torch.Generator().manual_seed(int(config.get("seed", 0)))
        v, h = int(config["vocab_size"]), int(config["hidden_size"])
        self.embed = torch.nn.Embedding(v, h)
        self.visual = Qwen2_5_VisionTransformer(self.config.vision_config, h, g)
        self.head = torch.nn.Linear(h, v)
        with torch.no_grad():
            self.embed.weight.copy_(torch.randn(v, h, generator=g))
            self.head.weight.copy_(torch.randn(v, h, generator=g) / h ** 0.5)
            self.head.bias.copy_(torch.randn(v, generator=g) * 0.1)

    def get_image_features(self, pixel_values, image_grid_thw):
        embeds = self.visual(pixel_values.type(self.visual.patch_embed.weight.dtype), image_grid_thw)
        split = (image_grid_thw.prod(-1) // self.visual.spatial_merge_size ** 2).tolist()
        return torch.split(embeds, split)

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, past_key_values=None,
                inputs_embeds=None, use_cache=None, pixel_values=None, image_grid_thw=None, logits_to_keep=0,
                **kwargs):
        if inputs_embeds is None:
            inputs_embeds = self.embed(input_ids)
        if pixel_values is not None:
            image_embeds = torch.cat(self.get_image_features(pixel_values, image_grid_thw), dim=0)
            image_mask = input_ids == self.config.image_token_id
            n_image_tokens, n_image_features = int(image_mask.sum()), image_embeds.shape[0]
            if n_image_tokens != n_image_features:
                raise ValueError(f"Image features and image tokens do not match: tokens: {n_image_tokens}, "
                                 f"features {n_image_features}")
            image_mask = image_mask.unsqueeze(-1).expand_as(inputs_embeds)
            inputs_embeds = inputs_embeds.masked_scatter(image_mask, image_embeds.to(inputs_embeds.dtype))
        if attention_mask is None:
            attention_mask = torch.ones(inputs_embeds.shape[:2], dtype=torch.long, device=inputs_embeds.device)

        def mix(e, m):
            m = m.to(e.dtype).unsqueeze(-1)
            csum = torch.cumsum(e * m, dim=1)
            count = torch.cumsum(m, dim=1).clamp(min=1)
            h = e + csum / count
            # As recent transformers: logits of the last logits_to_keep positions (0: all).
            return self.head(h[:, -logits_to_keep:] if logits_to_keep else h)

        return types.SimpleNamespace(logits=self._maybe_checkpoint(mix, inputs_embeds, attention_mask))


class Qwen2VLForConditionalGeneration(Qwen2_5_VLForConditionalGeneration):
    """Qwen2-VL (model_type qwen2_vl) with a forward that, as in the
    transformers versions that lack it, takes no logits_to_keep."""

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, past_key_values=None,
                inputs_embeds=None, use_cache=None, pixel_values=None, image_grid_thw=None, **kwargs):
        return super().forward(input_ids, attention_mask, position_ids, past_key_values, inputs_embeds, use_cache,
                               pixel_values, image_grid_thw)


def _load_config(path):
    return _read_json(os.path.join(path, "config.json"), "the model's configuration")


class AutoModelForCausalLM:
    @classmethod
    def from_pretrained(cls, path, torch_dtype=None, **kwargs):
        config = _load_config(path)
        if "vision_config" in config:
            raise ValueError(f"Unrecognized configuration class for this kind of AutoModel: AutoModelForCausalLM "
                             f"(model_type {config.get('model_type')!r})")
        return TinyLM._load(path, config, torch_dtype)


class AutoModelForImageTextToText:
    @classmethod
    def from_pretrained(cls, path, torch_dtype=None, **kwargs):
        config = _load_config(path)
        if "vision_config" not in config:
            raise ValueError(f"Unrecognized configuration class for this kind of AutoModel: {cls.__name__} "
                             f"(model_type {config.get('model_type')!r})")
        cls_ = Qwen2VLForConditionalGeneration if config.get("model_type") == "qwen2_vl" else Qwen2_5_VLForConditionalGeneration
        return cls_._load(path, config, torch_dtype)


class AutoModelForVision2Seq(AutoModelForImageTextToText):
    """The older name of the same Auto class (the real library deprecates it)."""


class BatchFeature(dict):
    """A dict with attribute access, as transformers' BatchFeature."""

    def __getattr__(self, k):
        try:
            return self[k]
        except KeyError as e:
            raise AttributeError(k) from e


def smart_resize(height, width, factor=28, min_pixels=56 * 56, max_pixels=14 * 14 * 4 * 1280):
    """Qwen2-VL's: both sides multiples of factor, the pixel count within
    [min_pixels, max_pixels], the aspect ratio kept as closely as possible."""
    if max(height, width) / min(height, width) > 200:
        raise ValueError(f"absolute aspect ratio must be smaller than 200, got {max(height, width) / min(height, width)}")
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


class Qwen2VLImageProcessor:
    def __init__(self, min_pixels=56 * 56, max_pixels=28 * 28 * 1280, patch_size=14, temporal_patch_size=2,
                 merge_size=2, image_mean=None, image_std=None, **kwargs):
        self.min_pixels, self.max_pixels = min_pixels, max_pixels
        self.patch_size, self.temporal_patch_size, self.merge_size = patch_size, temporal_patch_size, merge_size
        self.image_mean = image_mean or OPENAI_CLIP_MEAN
        self.image_std = image_std or OPENAI_CLIP_STD
        self.extra = kwargs

    def to_dict(self):
        return {"image_processor_type": "Qwen2VLImageProcessor", "min_pixels": self.min_pixels,
                "max_pixels": self.max_pixels, "patch_size": self.patch_size,
                "temporal_patch_size": self.temporal_patch_size, "merge_size": self.merge_size,
                "image_mean": self.image_mean, "image_std": self.image_std, **self.extra}

    def _one(self, image):
        from PIL import Image
        image = image.convert("RGB")
        h, w = smart_resize(image.height, image.width, factor=self.patch_size * self.merge_size,
                            min_pixels=self.min_pixels, max_pixels=self.max_pixels)
        x = np.asarray(image.resize((w, h), Image.BICUBIC), dtype=np.float32) / 255.0
        x = (x - np.array(self.image_mean, np.float32)) / np.array(self.image_std, np.float32)
        patches = torch.from_numpy(x.transpose(2, 0, 1).copy())[None].expand(self.temporal_patch_size, -1, -1, -1)
        c, m, p, tp = 3, self.merge_size, self.patch_size, self.temporal_patch_size
        gt, gh, gw = 1, h // p, w // p
        flat = (patches.reshape(gt, tp, c, gh // m, m, p, gw // m, m, p)
                .permute(0, 3, 6, 4, 7, 2, 1, 5, 8)
                .reshape(gt * gh * gw, c * tp * p * p))
        return flat, (gt, gh, gw)

    def __call__(self, images=None, return_tensors=None, **kwargs):
        if not isinstance(images, (list, tuple)):
            images = [images]
        out = [self._one(im) for im in images]
        return BatchFeature(pixel_values=torch.cat([f for f, _ in out]).float(),
                            image_grid_thw=torch.tensor([g for _, g in out], dtype=torch.int64))


class Qwen2VLImageProcessorFast(Qwen2VLImageProcessor):
    """The torchvision variant: the fake computes the same pixels."""

    def to_dict(self):
        return dict(super().to_dict(), image_processor_type="Qwen2VLImageProcessorFast")


class _Tokenizer:
    """Keeps the tokenizer files as they are: the trainer never tokenizes."""

    FILES = ("tokenizer.json", "tokenizer_config.json")

    def __init__(self, path):
        self.files = {}
        for name in self.FILES:
            p = os.path.join(path, name)
            if os.path.isfile(p):
                with open(p, "rb") as f:
                    self.files[name] = f.read()

    def save_pretrained(self, path):
        os.makedirs(path, exist_ok=True)
        for name, body in self.files.items():
            with open(os.path.join(path, name), "wb") as f:
                f.write(body)


class Qwen2_5_VLProcessor:
    def __init__(self, image_processor, tokenizer, chat_template=None):
        self.image_processor, self.tokenizer, self.chat_template = image_processor, tokenizer, chat_template

    def save_pretrained(self, path):
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, "preprocessor_config.json"), "w") as f:
            json.dump({**self.image_processor.to_dict(), "processor_class": "Qwen2_5_VLProcessor"}, f)
        if self.chat_template is not None:
            with open(os.path.join(path, "chat_template.json"), "w") as f:
                json.dump({"chat_template": self.chat_template}, f)
        self.tokenizer.save_pretrained(path)


class AutoProcessor:
    @classmethod
    def from_pretrained(cls, path, **kwargs):
        cfg = _read_json(os.path.join(path, "preprocessor_config.json"), "the image processor's configuration")
        cfg.pop("processor_class", None)
        cfg.pop("image_processor_type", None)
        template = None
        if os.path.isfile(os.path.join(path, "chat_template.jinja")):
            with open(os.path.join(path, "chat_template.jinja")) as f:
                template = f.read()
        elif os.path.isfile(os.path.join(path, "chat_template.json")):
            template = _read_json(os.path.join(path, "chat_template.json"), "chat template")["chat_template"]
        # As releases before the fast default: slow unless asked.
        ip = Qwen2VLImageProcessorFast if kwargs.get("use_fast") else Qwen2VLImageProcessor
        return Qwen2_5_VLProcessor(ip(**cfg), _Tokenizer(path), template)
