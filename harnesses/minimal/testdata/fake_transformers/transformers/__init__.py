"""A stand-in for Hugging Face transformers, for trainer_test.go only.

AutoModelForCausalLM.from_pretrained(dir) reads dir/config.json
({"vocab_size": V, "hidden_size": H, "seed": S}) and returns TinyLM: an
embedding and a linear head over the vocabulary, so the logits at position
t depend on token t alone. Its parameters come from dir/model.pt when
present, else from torch.manual_seed(S). save_pretrained(dir) writes
config.json and model.pt (a state dict).
"""

import json
import os
import types

import torch

__version__ = "0.0-fake"

WEIGHTS = "model.pt"


class TinyLM(torch.nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = types.SimpleNamespace(**config)
        g = torch.Generator().manual_seed(int(config.get("seed", 0)))
        v, h = int(config["vocab_size"]), int(config["hidden_size"])
        self.embed = torch.nn.Embedding(v, h)
        self.head = torch.nn.Linear(h, v)
        with torch.no_grad():
            self.embed.weight.copy_(torch.randn(v, h, generator=g))
            self.head.weight.copy_(torch.randn(v, h, generator=g) / h ** 0.5)
            self.head.bias.copy_(torch.randn(v, generator=g) * 0.1)

    def get_input_embeddings(self):
        return self.embed

    def forward(self, input_ids=None, attention_mask=None):
        return types.SimpleNamespace(logits=self.head(self.embed(input_ids)))

    def save_pretrained(self, path):
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, "config.json"), "w") as f:
            json.dump(vars(self.config), f)
        torch.save(self.state_dict(), os.path.join(path, WEIGHTS))


class AutoModelForCausalLM:
    @classmethod
    def from_pretrained(cls, path, torch_dtype=None, **kwargs):
        cfg_path = os.path.join(path, "config.json")
        if not os.path.isfile(cfg_path):
            raise OSError(f"{path} does not contain config.json")
        with open(cfg_path) as f:
            config = json.load(f)
        model = TinyLM(config)
        weights = os.path.join(path, WEIGHTS)
        if os.path.isfile(weights):
            model.load_state_dict(torch.load(weights))
        if torch_dtype is not None:
            model.to(torch_dtype)
        return model
