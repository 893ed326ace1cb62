"""Runs trainer.py with a stand-in for FullyShardedDataParallel, for
trainer_vlm_test.go only: the test machine's torch 1.13 cannot run FSDP
(it does not import under Python 3.11 and asserts CUDA past that).

The stand-in keeps what trainer.py's FSDP path depends on, and what breaks
when it is wrong:
- a collective in every forward (FSDP all-gathers the parameters there), so
  ranks that run different numbers of forwards hang, as under FSDP;
- after every backward, the gradients that backward added are averaged over
  the ranks (FSDP's reduce-scatter divides by the world size), for every
  parameter, those the forward did not use included (the root unit's flat
  parameter);
- the full state dict is a collective, returned on rank 0 only.
It does not shard anything or change the numerics. Rank 0 also prints the
L1 norm of the gradients at every AdamW step (with any --parallel), which
AdamW's updates cannot show: they do not change with the gradients' scale.

Usage: python3 torchrun.py ... testdata/fsdp_standin.py TRAINER_FLAGS...
"""

import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import trainer  # noqa: E402


class StandinFSDP(torch.nn.Module):
    def __init__(self, module):
        super().__init__()
        self.module = module
        self.params = [p for p in module.parameters() if p.requires_grad]
        self.forwards = 0

    def forward(self, **kw):
        # The all-gather: every rank must get here as often as the others.
        t = torch.ones(1)
        dist.all_reduce(t)
        self.forwards += 1
        out = self.module(**kw)
        if torch.is_grad_enabled():
            before = [p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in self.params]

            def reduce():
                for p, b in zip(self.params, before):
                    g = (p.grad if p.grad is not None else torch.zeros_like(p)) - b
                    dist.all_reduce(g)
                    p.grad = b + g / dist.get_world_size()

            out.logits.register_hook(
                lambda g: (torch.autograd.Variable._execution_engine.queue_callback(reduce), g)[1])
        return out


def wrap_fsdp(model, device, dtype):
    return StandinFSDP(model)


def full_state_dict(wrapped, rank):
    dist.barrier()
    print(f"fsdp-standin: rank {rank}: {wrapped.forwards} forwards", flush=True)
    return {k: v.detach().clone() for k, v in wrapped.module.state_dict().items()} if rank == 0 else None


class LoggingAdamW(torch.optim.AdamW):
    def step(self, closure=None):
        if not dist.is_initialized() or dist.get_rank() == 0:
            total = sum(float(p.grad.double().abs().sum()) for g in self.param_groups for p in g["params"]
                        if p.grad is not None)
            print(f"fsdp-standin: grad L1 {total!r}", flush=True)
        return super().step(closure)


torch.optim.AdamW = LoggingAdamW
trainer.wrap_fsdp = wrap_fsdp
trainer.full_state_dict = full_state_dict

if __name__ == "__main__":
    sys.exit(trainer.main(sys.argv[1:]))
