"""One process of a multi-process job, as a launcher starts it: builds a
Loader with no rank or world size given, runs two epochs and writes what it
read to OUT/rank-<pid>.json. With --init, torch.distributed is initialised
first (gloo), as a DDP script does.

    python rank_epochs.py DATA OUT [--init]
"""
import json
import os
import sys

import nostall

data, out = sys.argv[1], sys.argv[2]
if "--init" in sys.argv[3:]:
    import torch.distributed as dist

    dist.init_process_group("gloo")
loader = nostall.Loader(data, batch_size=4, shuffle=True, seed=3, return_indices=True,
                        transforms=[nostall.Resize((8, 8))])
epochs = [[int(i) for _, _, idx in loader for i in idx] for _ in range(2)]
with open(os.path.join(out, f"rank-{os.getpid()}.json"), "w") as f:
    json.dump({"rank": loader.spec["rank"], "world_size": loader.spec["world_size"],
               "epochs": epochs}, f)
