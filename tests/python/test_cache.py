"""The MinIO cache through the loader: hit rate, identical batches, sharing across processes."""

import json
import os
import textwrap

import pytest
import torch

import nostall
from nostall.datasets import fashion_mnist_to_folder
import warm


@pytest.fixture(scope="module")
def small_items(tmp_path_factory):
    """2,000 small PNGs: many items, so one item is a tiny share of the dataset."""
    return fashion_mnist_to_folder(tmp_path_factory.mktemp("fm-cache"), "train", limit=2000)


@pytest.fixture
def cache_name(request):
    name = f"test-{request.node.name.replace('[', '-').replace(']', '')}-{os.getpid()}"
    yield name
    try:
        nostall.Cache(name, 1).remove()
    except FileNotFoundError:
        pass


def dataset_bytes(folder):
    # The cache stores each item rounded up to 8 bytes.
    return sum((p.stat().st_size + 7) // 8 * 8 for p in folder.rglob("*.png"))


def run_epochs(loader, epochs):
    out = []
    for e in range(epochs):
        loader.set_epoch(e)
        out.append([tuple(t.clone() for t in batch) for batch in loader])
    return out


@pytest.mark.parametrize("fraction", [0.25, 0.5, 0.8, 1.5])
def test_hit_rate_from_the_second_epoch_is_cache_over_dataset(small_items, cache_name, fraction):
    d = dataset_bytes(small_items)
    loader = nostall.Loader(small_items, batch_size=100, shuffle=True, mode="L",
                            cache=nostall.Cache(cache_name, int(fraction * d)))
    run_epochs(loader, 3)
    stats = loader.stats()["cache"]
    budget = stats["budget_bytes"]
    epochs = {e["epoch"]: e for e in stats["epochs"]}
    assert epochs[0]["hits"] == 0
    expected = min(1.0, budget / d)
    for e in (1, 2):
        assert abs(epochs[e]["byte_hit_rate"] - expected) <= 0.01, (e, epochs[e], expected)
        assert epochs[e]["hits"] + epochs[e]["misses"] == 2000
    assert stats["fill"] > (0.99 if fraction < 1 else d / budget - 0.01)


def test_batches_are_identical_with_and_without_the_cache(small_items, cache_name):
    kw = dict(batch_size=128, shuffle=True, seed=4, mode="L", return_indices=True,
              transforms=[nostall.RandomResizedCrop(24), nostall.RandomHorizontalFlip()])
    plain = run_epochs(nostall.Loader(small_items, **kw), 2)
    cached = run_epochs(nostall.Loader(small_items, cache=nostall.Cache(cache_name, "400KB"), **kw), 2)
    for a, b in zip(plain, cached):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert all(torch.equal(p, q) for p, q in zip(x, y))


def test_a_second_process_hits_on_its_first_epoch(small_items, cache_name):
    first = nostall.Loader(small_items, batch_size=200, mode="L",
                           cache=nostall.Cache(cache_name, "4MB"))
    run_epochs(first, 1)
    script = textwrap.dedent(f"""
        import json, nostall
        loader = nostall.Loader({str(small_items)!r}, batch_size=200, mode="L", shuffle=True,
                                cache=nostall.Cache({cache_name!r}, "4MB"))
        for _ in loader:
            pass
        print(json.dumps(loader.stats()["cache"]["epochs"][0]))
    """)
    out = warm.run(code=script, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    epoch0 = json.loads(out.stdout.strip().splitlines()[-1])
    assert epoch0["epoch"] == 0 and epoch0["hit_rate"] == 1.0


def test_cache_of_another_dataset_and_oversized_caches_are_refused(small_items, jpeg_folder,
                                                                   cache_name):
    nostall.Loader(small_items, mode="L", cache=nostall.Cache(cache_name, "1MB"))
    with pytest.raises(nostall.NostallError, match="another dataset"):
        nostall.Loader(jpeg_folder, cache=nostall.Cache(cache_name, "1MB"))
    free = os.statvfs("/dev/shm")
    with pytest.raises(nostall.ResourceError, match="free"):
        nostall.Loader(small_items, mode="L",
                       cache=nostall.Cache(cache_name + "-big", free.f_blocks * free.f_frsize * 2))
    with pytest.raises(ValueError, match="size"):
        nostall.Cache("x", "lots")


def test_lru_at_the_same_memory_hits_far_less(small_items, cache_name):
    d = dataset_bytes(small_items)
    rates = {}
    for policy in ("minio", "lru"):
        loader = nostall.Loader(small_items, batch_size=100, shuffle=True, mode="L",
                                cache=nostall.Cache(cache_name, d // 2, policy=policy))
        run_epochs(loader, 2)
        rates[policy] = loader.stats()["cache"]["epochs"][1]["byte_hit_rate"]
        loader.close()
    assert abs(rates["minio"] - 0.5) <= 0.01
    assert rates["lru"] < 0.35, rates  # random order each epoch: LRU evicts what comes next


def test_the_cache_is_a_list_of_tiers_in_the_spec(small_items, cache_name):
    kw = dict(batch_size=100, mode="L")
    loader = nostall.Loader(small_items, cache=nostall.Cache(cache_name, "4MB"), **kw)
    assert loader.spec["cache"] == [{"driver": "minio", "name": cache_name, "bytes": 4_000_000}]
    # With a cache, the local driver keeps read files out of the page cache.
    assert loader.spec["source"]["options"]["drop_page_cache"] is True
    run_epochs(loader, 1)
    # The spec's own form, a size as people write it, builds the same loader.
    same = nostall.Loader(small_items, cache=[{"driver": "minio", "name": cache_name,
                                               "bytes": "4MB"}], **kw)
    assert same.spec == loader.spec
    assert same.stats()["cache"]["name"] == cache_name
    with pytest.raises(ValueError, match=r"cache\[0\]: unknown key 'servers' in a minio cache tier"):
        nostall.Loader(small_items, cache=[{"name": cache_name, "bytes": 9, "servers": ["a:1"]}])
    # A saved spec of the flat form gives the same tiers.
    with pytest.warns(FutureWarning, match="cache_name, cache_bytes, cache_policy"):
        old = nostall.Loader.from_spec({"source": str(small_items), **kw, "cache_name": cache_name,
                                        "cache_bytes": 4_000_000, "cache_policy": "minio"})
    assert old.spec["cache"] == loader.spec["cache"]
