"""One node of a data-parallel job (run by test_cluster_cache.py): a loader
with RANK and WORLD_SIZE from the environment, as torchrun sets them, and a
cluster cache on the servers given.

    RANK=r WORLD_SIZE=n python cluster_node.py DATA OUT.json EPOCHS SERVERS CACHE_BYTES SLEEP

Writes, per epoch, the dataset indices it saw with a CRC of each sample's
pixels, its cache stats and its longest wait; touches OUT.epochK after the
first batch of epoch K so the test can act mid-epoch. The nodes start each
epoch together (barrier), as a data-parallel job's gradient all-reduce keeps
its ranks in step.
"""

import json
import os
import sys
import time
import zlib
from pathlib import Path

import nostall
from conftest import augment


def barrier(out, epoch):
    """Waits until every node of the job has reached `epoch` (a file each,
    beside OUT: nodeR.json.atK). Without it the nodes drift apart with the
    machine's load (start-up alone differs by seconds on a busy machine), and
    a node still in epoch 0 would hit items a faster node cached in epoch 1."""
    here = Path(out)
    Path(f"{out}.at{epoch}").touch()
    world = int(os.environ["WORLD_SIZE"])
    deadline = time.monotonic() + 120
    while not all((here.parent / f"node{r}.json.at{epoch}").exists() for r in range(world)):
        if time.monotonic() > deadline:
            raise SystemExit(f"nodes did not all reach epoch {epoch}")
        time.sleep(0.005)


def main():
    data, out, epochs, servers, cache_bytes, sleep = sys.argv[1:7]
    cache = nostall.Cache("cluster-node", size=int(cache_bytes), servers=servers.split(","))
    loader = nostall.Loader(data, batch_size=4, shuffle=True, seed=5, transforms=augment(),
                            return_indices=True, output="numpy", cache=cache, num_threads=1)
    result = {"epochs": [], "max_wait_s": []}
    for epoch in range(int(epochs)):
        barrier(out, epoch)
        loader.set_epoch(epoch)
        seen = []
        longest = 0.0
        t = time.perf_counter()
        for k, (images, labels, indices) in enumerate(loader):
            longest = max(longest, time.perf_counter() - t)
            for j, i in enumerate(indices.tolist()):
                seen.append([i, zlib.crc32(images[j].tobytes())])
            if k == 0:
                open(f"{out}.epoch{epoch}", "w").close()
            time.sleep(float(sleep))
            t = time.perf_counter()
        result["epochs"].append(seen)
        result["max_wait_s"].append(longest)
    result["cache"] = loader.stats()["cache"]
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
