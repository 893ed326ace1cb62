#!/usr/bin/env python3
"""torchrun that works with Debian's python3-torch 1.13 on Python 3.11.

torch < 2.0 parses --redirects and --tee by iterating the IntFlag `Std`;
Python 3.11 no longer yields its zero and multi-bit members there, so the
default "0" parses to None and every `python3 -m torch.distributed.run`
launch dies with "'NoneType' object has no attribute 'get'"
(meta-llama/llama#86). This launcher repairs that parser when it is broken
and then runs torch.distributed.run unchanged, with the same flags:

    /usr/bin/python3 harnesses/minimal/torchrun.py --standalone \\
        --nproc_per_node N harnesses/minimal/trainer.py ...
"""

import re
import runpy
import sys

from torch.distributed.elastic.multiprocessing import api


def _from_str(cls, vm):
    if re.match(api._VALUE_REGEX, vm):
        return cls(int(vm))
    if re.match(api._MAPPING_REGEX, vm):
        return {int(i): cls(int(v)) for i, v in (m.split(":") for m in vm.split(","))}
    raise ValueError(f"{vm} does not match: <{api._VALUE_REGEX}> or <{api._MAPPING_REGEX}>")


if api.Std.from_str("0") is None:
    api.Std.from_str = classmethod(_from_str)

if __name__ == "__main__":
    sys.argv[0] = "torchrun"
    runpy.run_module("torch.distributed.run", run_name="__main__", alter_sys=True)
