"""One node of a data-parallel job (run by test_cluster_cache.py): a loader
with RANK and WORLD_SIZE from the environment, as torchrun sets them, and a
cluster cache on the servers given.

    RANK=r WORLD_SIZE=n python cluster_node.py DATA OUT.json EPOCHS SERVERS CACHE_BYTES SLEEP

Writes, per epoch, the dataset indices it saw with a CRC of each sample's
pixels, its cache stats and its longest wait; touches OUT.epochK after the
first batch of epoch K so the test can act mid-epoch.
"""

import json
import sys
import time
import zlib

import nostall
from conftest import augment


def main():
    data, out, epochs, servers, cache_bytes, sleep = sys.argv[1:7]
    cache = nostall.Cache("cluster-node", size=int(cache_bytes), servers=servers.split(","))
    loader = nostall.Loader(data, batch_size=4, shuffle=True, seed=5, transforms=augment(),
                            return_indices=True, output="numpy", cache=cache, num_threads=1)
    result = {"epochs": [], "max_wait_s": []}
    for epoch in range(int(epochs)):
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
