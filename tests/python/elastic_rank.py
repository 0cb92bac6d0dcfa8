"""One rank of a torchrun job that saves its loader's state part-way through an
epoch, or resumes from it (at whatever number of ranks this job has), and
writes what it read to OUT/<mode>-<rank>.json.

    python elastic_rank.py DATA OUT save|resume
"""
import json
import os
import sys

import nostall

data, out, mode = sys.argv[1:4]
loader = nostall.Loader(data, batch_size=2, shuffle=True, seed=5, return_indices=True,
                        transforms=[nostall.Resize((8, 8))])
read = []
if mode == "save":
    loader.set_epoch(1)
    for n, (_, _, idx) in enumerate(loader):
        read += [int(i) for i in idx]
        if n == 2:
            break
    if loader.spec["rank"] == 0:  # as trainers do: rank 0 writes the checkpoint
        with open(os.path.join(out, "state.json"), "w") as f:
            json.dump(loader.state_dict(), f)
else:
    with open(os.path.join(out, "state.json")) as f:
        loader.load_state_dict(json.load(f))
    batches = len(loader)
    read = [int(i) for _, _, idx in loader for i in idx]
    read = {"batches": batches, "read": read}
with open(os.path.join(out, f"{mode}-{loader.spec['rank']}-of-{loader.spec['world_size']}.json"), "w") as f:
    json.dump(read, f)
