"""Datasets behind a plain web server (the http store, docs/http.md): Parquet
and Arrow IPC files served by a real nginx on loopback, read by ranged GETs,
give the batches the same files give on disk; what a server does not do
(list a folder, answer a Range request) is said, naming the URL."""

import http.server
import shutil
import threading

import pytest
import torch

import nostall
from conftest import Nginx, epoch_batches, save_folder_with_datasets, write_shards
from nostall.errors import DataError

KW = dict(batch_size=4, shuffle=True, seed=3, transforms=[nostall.Resize((16, 16))], return_indices=True)


@pytest.fixture(scope="module")
def web(tmp_path_factory):
    """nginx serving a folder (conftest.Nginx): its root and its URL."""
    base = tmp_path_factory.mktemp("nginx")
    (base / "www" / "plain").mkdir(parents=True)
    server = Nginx(base / "www", base / "work")
    yield base / "www", server.url
    server.kill()


def same_epochs(remote, here, batches, epochs=2):
    for epoch in range(epochs):
        a, b = epoch_batches(remote, epoch), epoch_batches(here, epoch)
        assert len(a) == len(b) == batches
        for (ia, la, xa), (ib, lb, xb) in zip(a, b):
            assert torch.equal(ia, ib) and torch.equal(la, lb) and torch.equal(xa, xb)


def test_parquet_files_behind_a_web_server_give_the_local_batches(web, jpeg_folder, tmp_path):
    """Named by a brace pattern (no listing needed) and by a glob (listed
    from the folder's index page): footers and pages by ranged GETs, the
    same batches as the files on disk."""
    from nostall.datasets import folder_to_parquet

    root, url = web
    pattern = folder_to_parquet(jpeg_folder, tmp_path, files=3, row_group_size=4, max_page_bytes=1)
    (root / "pq").mkdir()
    for f in sorted(tmp_path.glob("train-*.parquet")):
        shutil.copy(f, root / "pq" / f.name)
    here = nostall.Loader(pattern, **KW)
    batches = len(here)
    for uri in (f"{url}/pq/train-{{00000..00002}}-of-00003.parquet", f"{url}/pq/train-*-of-00003.parquet"):
        remote = nostall.Loader(uri, source_options={"decoded_cache_mb": 0}, **KW)
        assert remote.spec["source"]["driver"] == "parquet" and remote.classes == here.classes
        same_epochs(remote, here, batches)
        storage = remote.stats()["storage"]
        # Ranged reads, many of them, each page about once an epoch (two
        # epochs, no decoded-page cache): never a file whole for a page.
        total = sum(f.stat().st_size for f in (root / "pq").iterdir())
        assert storage["requests"] > 3 * batches and storage["bytes"] / 2 < 1.5 * total, (storage, total)
        remote.close()


def test_a_saved_arrow_dataset_behind_a_web_server_gives_the_local_batches(web, jpeg_folder, tmp_path):
    root, url = web
    classes = save_folder_with_datasets(jpeg_folder, root / "saved")
    here = nostall.Loader(str(root / "saved"), **KW)
    remote = nostall.Loader({"uri": f"{url}/saved/", "driver": "arrow"}, **KW)
    assert remote.spec["source"]["driver"] == "arrow" and remote.classes == here.classes == classes
    same_epochs(remote, here, len(here))
    remote.close()


def test_webdataset_shards_behind_a_web_server_give_the_local_batches(web, jpeg_folder, tmp_path):
    """https://HOST/train-{0..2}.tar: sizes by HEAD, each shard indexed by
    ranged GETs once (then from the index cache), each sample one ranged GET
    of its members, as the same shards on disk."""
    root, url = web
    local = write_shards(jpeg_folder, root / "shards", shards=3)
    here = nostall.Loader(local, **KW)
    remote = nostall.Loader(f"{url}/shards/train-{{0..2}}.tar", **KW)
    assert remote.spec["source"]["driver"] == "http-tar-shards"
    same_epochs(remote, here, len(here))
    remote.close()
    # Made again: the index comes from the cache (the shards' ETags held).
    again = nostall.Loader(f"{url}/shards/train-{{0..2}}.tar", **KW)
    assert "index cache" in again.index_origin
    # A missing shard is named.
    with pytest.raises(FileNotFoundError, match="train-3.tar"):  # the first not there
        nostall.Loader(f"{url}/shards/train-{{0..7}}.tar", **KW)


def test_an_image_folder_behind_a_web_server_gives_the_local_batches(web, jpeg_folder):
    """https://HOST/train/: the classes from the folder's index page, each
    class's images from its own (subfolders followed, names as the page
    escapes them), ordered as the folder on disk: the same batches."""
    root, url = web
    shutil.copytree(jpeg_folder, root / "folder")
    odd = sorted((root / "folder").rglob("*.jpg"))[0]
    odd.rename(odd.with_name("a b%20&c.jpg"))  # escaped by the index page, read back as named
    (root / "folder" / sorted(p.name for p in jpeg_folder.iterdir())[0] / "notes.txt").write_text("x")
    here = nostall.Loader(str(root / "folder"), **KW)
    remote = nostall.Loader(f"{url}/folder/", **KW)
    assert remote.spec["source"]["driver"] == "http-image-folder"
    assert remote.classes == here.classes and len(remote.dataset) == len(here.dataset)
    same_epochs(remote, here, len(here))
    remote.close()
    # A folder with no class folders of images says what it expected.
    (root / "flat").mkdir()
    shutil.copy(odd.with_name("a b%20&c.jpg"), root / "flat" / "x.jpg")
    with pytest.raises(FileNotFoundError, match="PREFIX/CLASS/IMAGE") as e:
        nostall.Loader(f"{url}/flat/", batch_size=4)
    assert f"{url}/flat/" in str(e.value)


def test_what_the_server_cannot_do_is_said_naming_the_url(web, jpeg_folder, tmp_path):
    from nostall.datasets import folder_to_parquet

    root, url = web
    folder_to_parquet(jpeg_folder, tmp_path, files=1)
    shutil.copy(next(tmp_path.glob("train-*.parquet")), root / "plain" / "one.parquet")
    # A file that is not there.
    with pytest.raises(FileNotFoundError, match=f"{url}/missing/x.parquet"):
        nostall.Loader(f"{url}/missing/x.parquet", batch_size=4)
    # A folder without an index page: name the files instead.
    with pytest.raises(Exception, match="brace pattern|index page|HTTP 403") as e:
        nostall.Loader(f"{url}/plain/*.parquet", batch_size=4)
    assert f"{url}/plain/" in str(e.value)
    # Named exactly, the same file there is read.
    assert len(nostall.Loader(f"{url}/plain/one.parquet", batch_size=4)) > 0


def test_a_server_that_ignores_range_requests_is_named_as_such(jpeg_folder, tmp_path):
    """Python's http.server answers every GET with the whole file: a ranged
    read of it is refused, saying so (not the whole file taken for a page)."""
    from nostall.datasets import folder_to_parquet

    folder_to_parquet(jpeg_folder, tmp_path, files=1)
    name = next(tmp_path.glob("train-*.parquet")).name
    handler = lambda *a, **k: http.server.SimpleHTTPRequestHandler(*a, directory=str(tmp_path), **k)  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.RequestHandlerClass.log_message = lambda *a: None
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with pytest.raises((DataError, OSError, ValueError), match="[Rr]ange") as e:
            nostall.Loader(f"http://127.0.0.1:{server.server_address[1]}/{name}", batch_size=4)
        assert name in str(e.value)
    finally:
        server.shutdown()
