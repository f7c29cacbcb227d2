# torchrun, as `python -m torch.distributed.run`, on a torch whose CLI breaks on this Python.
"""torch 1.13's torchrun fails on Python 3.11 before it starts a worker: its Std.from_str
checks `Std(0) in Std`, which Python 3.11's IntFlag answers False, so --redirects/--tee
default to None ("'NoneType' object has no attribute 'get'"). This runs torchrun's own main
with that one parser fixed; everything else (the agent, rendezvous, the workers'
environment) is torchrun's."""
import re
import sys

from torch.distributed.elastic.multiprocessing import api
from torch.distributed.run import main

_broken = api.Std.from_str("0") is None
if _broken:
    _number = re.compile(r"^[0-3]$")

    def _from_str(vm):
        if _number.match(vm):
            return api.Std(int(vm))
        return {int(k): api.Std(int(v)) for k, v in
                (part.split(":") for part in vm.split(","))}

    api.Std.from_str = staticmethod(_from_str)

if __name__ == "__main__":
    main(sys.argv[1:])
