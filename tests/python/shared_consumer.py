"""A training process that attaches to a shared loader (run by test_shared.py).

    python shared_consumer.py NAME BATCH EPOCHS SLEEP[,STALL[,AFTER]] OUT.json [private]

SLEEP seconds after each batch; STALL seconds instead after the first one,
counted from when the file AFTER exists if given (a consumer that stops while
another is attached: it holds that one back however fast the producer and
however busy the machine, where starting a process takes seconds).

Writes, per epoch, the dataset indices it saw and a CRC of each sample's
pixels, plus its shared stats and timings.
"""

import json
import os
import sys
import time
import zlib

import nostall


def main():
    name, batch, epochs, sleep, out = sys.argv[1:6]
    sleep, _, stall = sleep.partition(",")
    stall, _, after = stall.partition(",")
    mode = sys.argv[6] if len(sys.argv) > 6 else "raise"
    loader = nostall.Loader.attach(name, int(batch), return_indices=True, output="numpy",
                                   on_producer_exit=mode, wait=30)
    open(out + ".attached", "w").close()
    result = {"epochs": [], "seconds": []}
    for epoch in range(int(epochs)):
        seen = []
        t0 = time.perf_counter()
        for images, labels, indices in loader:
            for k, i in enumerate(indices.tolist()):
                seen.append([i, zlib.crc32(images[k].tobytes())])
            if stall and epoch == 0 and len(seen) == len(indices):
                deadline = time.monotonic() + 60
                while after and not os.path.exists(after) and time.monotonic() < deadline:
                    time.sleep(0.01)
                time.sleep(float(stall))
            elif float(sleep) > 0:
                time.sleep(float(sleep))
        result["seconds"].append(time.perf_counter() - t0)
        result["epochs"].append(seen)
    result["shared"] = loader.stats()["shared"]
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
