"""The Loader: nostall's pipeline as a Python iterable of torch tensors."""

from __future__ import annotations

import json
import operator
import os
import warnings
from typing import Iterable, Optional

from . import _cuda, _nostall, _ranks
from ._iterate import LoaderDataset, _EpochHook, _EpochIterator
from ._lifetime import Closeable
from ._progress import EpochProgress
from ._spec import (_batch_pair, _check_hook_args, _consumer_hooks, _integer, _sharding, build_spec,
                    read_spec, spec_uri)
from .cache import Cache
from .records import Records
from .video import clip_audio_shape as _clip_audio_shape
from .transforms import Transform



def _attach_core(name, batch_size, on_producer_exit, producer_timeout, spec, wait, output):
    """The C++ consumer of the shared loader `name` (Loader.attach's arguments checked)."""
    if on_producer_exit not in ("raise", "private"):
        raise ValueError(f'on_producer_exit must be "raise" or "private", not {on_producer_exit!r}')
    batch_size = _integer("batch_size", batch_size)  # C++ checks its range
    expect, expect_spec = 0, ""
    if spec is not None:
        spec = spec.spec if isinstance(spec, Loader) else spec
        expect_spec = spec if isinstance(spec, str) else json.dumps(spec)
        expect = _nostall.spec_fingerprint(expect_spec)
    if output == "torch":
        import torch  # noqa: F401  (before attaching: its import takes a while)
    return _nostall.Loader.attach(name, batch_size, float(producer_timeout),
                                  on_producer_exit == "private", expect, float(wait), expect_spec)

class Loader(Closeable):
    """Loads, decodes, augments and batches images with C++ threads.

    Iterating yields ``(images, labels)`` (or ``(images, labels, indices)``
    with ``return_indices=True``): torch tensors that are zero-copy views of a
    batch slot in shared memory. A slot is reused only when every view of it
    is gone, so keeping a batch is safe; ``copy=True`` hands out private copies
    instead (and frees the slot at once).

    Args:
        source: an image folder (one subfolder per class, as torchvision's
            ImageFolder) or WebDataset tar shards, e.g.
            ``"shards/train-{0000..0099}.tar"``, or either under
            ``s3://bucket/prefix``; or the spec's form, ``{"uri": ...,
            "driver": ..., "options": {...}}``; or a detection dataset,
            :class:`nostall.datasets.Coco` (batches are then ``(images,
            targets)``: docs/detection.md).
        source_options: the options of the driver that reads ``source``
            (docs/spec.md): for local files ``throttle_bandwidth`` and
            ``throttle_latency_ms`` (emulate slow storage: bytes/s shared by
            all reads, a wait per read; for benchmarks and tests) and
            ``drop_page_cache`` (drop each file's pages from the OS page
            cache after reading it, so storage stays cold between epochs; no
            root needed; default: on with a cache); for ``s3://``
            ``endpoint``, ``region``, ``profile``, ``addressing``,
            ``unsigned`` and ``max_attempts``, over what the environment and
            ``~/.aws`` say (docs/s3.md; the keys themselves only ever come
            from there).
        batch_size: samples per batch.
        shuffle: a new random order each epoch, fixed by ``(seed, epoch)``.
        seed: seeds the order and every sample's augmentation.
        transforms: a list of :mod:`nostall.transforms`. Normalize (if used)
            must be last and makes the output float32. Python callables may
            follow them: each is applied to every sample's image afterwards
            (see ``hook_threads``). With ``fields``, a dict giving each field
            its own: the image field's list, a callable (or a list of them)
            for any other field.
        num_threads: decode+augment threads; default: tuned while the loader
            runs (see ``autotune``), starting from the cores this process may use.
        reads_in_flight: concurrent reads from storage; default: tuned, starting
            from 4 fetch threads for local files, 16 requests for s3://.
        prefetch: batches prepared ahead of the one being used; default: tuned,
            starting from 2.
        autotune: ``None`` (default) tunes the three knobs above that are left
            unset, online: the fewest threads, reads and batches ahead with
            which the training loop never waits (docs/autotune.md); each change
            is in ``stats()["autotune"]``. ``True`` tunes all three, starting
            from the values given; ``False`` tunes none (unset knobs take the
            defaults: all cores, 4 reads, 2 batches).
        rank, world_size: shard the data across processes; default: from
            ``torch.distributed`` where it is initialised (also when that
            happens after the loader is built: Lightning's DDP launch), else
            from the launcher's variables (torchrun, Lightning, SLURM, MPI:
            docs/trainers.md), else 0 and 1. A line on stderr says which.
        drop_last: drop the final incomplete batch of each epoch.
        pad_ranks: with several ranks, every rank gets the same number of
            samples, the epoch's first samples again where the dataset does
            not divide (torch's DistributedSampler rule: DDP training needs
            equal batch counts on every rank). ``False`` for validation and
            test loaders: each sample exactly once over the ranks (none
            counted twice in a metric); the ranks' counts then differ by at
            most one sample (docs/trainers.md).
        on_error: ``"raise"`` a :class:`nostall.DataError` naming the bad
            item, or ``"skip"`` it (batches then hold fewer samples; skipped
            items are counted in ``stats()``).
        dtype: ``"uint8"`` or ``"float32"``; default float32 with Normalize,
            else uint8 (float32 without Normalize is scaled to [0, 1]).
        layout: ``"NCHW"`` (default, as torch expects) or ``"NHWC"``.
        mode: ``"RGB"`` (default) or ``"L"`` (grayscale, one channel).
        max_pixels: images with more pixels are a DataError (PIL's limit).
        output: ``"torch"`` (default) or ``"numpy"``.
        copy: hand out private copies of every batch (the slot is refilled at
            once) instead of views of the shared-memory slot.
        pin_memory: hand out batches in page-locked (pinned) host memory, so
            that ``.cuda(non_blocking=True)`` copies asynchronously. The
            batch slots themselves are registered page-locked (no copy), and
            a slot is refilled only once the copies the loop enqueued from
            it on the current stream, before it asked for the next batch,
            are done (docs/gpu.md). Without it batches are pageable shared
            memory: ``.cuda(non_blocking=True)`` then waits for the copy as
            ``.cuda()`` does. Without a CUDA device it warns and changes
            nothing, as torch's DataLoader does.
        device: ``"cuda"`` (or ``"cuda:N"``): hand out batches on that GPU.
            The loader copies each batch from its page-locked slot on a
            stream of its own; the current stream waits for the copy, the
            CPU does not. A trailing ``Normalize`` of float32 image batches
            runs on the GPU: the CPU makes uint8 pixels (a quarter of the
            bytes to copy) and ``loader.spec`` is that CPU part. Needs
            ``output="torch"``; without a CUDA device it is an error.
        return_indices: yield ``(images, labels, indices)``, the dataset
            item of each sample (for ``loader.key(i)``; in a buffered first
            epoch, its shard and place: docs/sampling.md).
        dct_scaling: shrink JPEGs inside the decoder when the output is much
            smaller than its source region (default; much faster). False
            decodes at full resolution, for pixels closest to PIL's.
        index_cache: keep the dataset's index on disk between runs (in
            ``$NOSTALL_CACHE_DIR``, else ``~/.cache/nostall``).
        index_beside: the index kept beside the dataset, which every node
            and job finds (an image folder's ``PATH/.nostall-index``; tar
            shards' ``PATTERN.nostall-index``; written by ``nostall index
            PATH``): ``"read"`` uses it when it is there and still matches
            the data (default); ``"write"`` also writes it whenever the index
            had to be built; ``"off"`` never looks. ``loader.index_origin``
            says where this loader's index came from.
        first_epoch: tar shards with no index yet (docs/sampling.md):
            ``"buffered"`` starts at once and indexes each shard as the first
            epoch first reads it, that epoch in WebDataset's order (shards
            shuffled by ``seed`` and the epoch, samples through a shuffle
            buffer); ``"exact"`` builds the whole index first; ``"auto"``
            (default): buffered for shards on S3, exact for local ones. Every
            later epoch is the exact shuffle either way, and every epoch
            holds each sample once. ``len(loader)`` waits for the index;
            ``nostall index PATH`` writes it beside the data so that every
            job starts exact.
        shuffle_buffer: the buffered epoch's shuffle buffer, in samples
            (default 8192; it gives its first sample once it holds an
            eighth of that, at most 256).
        shard_shuffle: every epoch in the buffered order: shards (tar
            shards, Parquet row groups) in a random order of ``seed`` and
            the epoch, samples mixed through ``shuffle_buffer``. A block
            shuffle for Parquet files without a page index, whose rows
            cost their row group's read (docs/parquet.md); off by default
            (every epoch an exact shuffle).
        shuffle_window: with ``shuffle=True``, a shuffle that reads each
            Parquet page once per epoch: the pages (read units) are shuffled
            by ``seed`` and the epoch, taken into windows of at least this
            many samples, and each window's samples shuffled. ``"auto"``
            sizes the window so its pages fill half of ``decoded_cache_mb``.
            Every sample still comes once per epoch; the trade-off is that
            rows of one page always come within one window
            (docs/parquet.md). ``None`` or 0 (default): the exact shuffle.
        bucketing: how samples are put together in batches beyond their
            order: ``"aspect_ratio"`` (or ``{"by": "aspect_ratio",
            "group_factor": 3}``) batches images of one aspect-ratio bin
            together, as torchvision's detection references do
            (``--aspect-ratio-group-factor 3``): the padded batches of a
            recipe of many sizes then pad little. Every sample still comes
            once an epoch, and every rank the same number of batches. Needs
            each image's size from the index (a COCO dataset's file);
            docs/sampling.md.
        throttle_bandwidth, throttle_latency_ms, drop_page_cache, s3_endpoint,
            s3_region, s3_profile, s3_addressing, s3_unsigned: deprecated
            (a FutureWarning): the same as ``source_options`` of the
            driver's names (``s3_endpoint`` is ``"endpoint"``).
        cache: a :class:`nostall.Cache` of the encoded items: in shared
            memory, shared by every loader on the node that names it (the
            default, MinIO: cached on first read, never evicted); or
            partitioned across the nodes' memcached servers (``servers=``),
            optionally behind a node-local tier (``local_size=``); what its
            ``size`` means is in :class:`nostall.Cache`. ``stats()["cache"]``
            reports fill and per-epoch hit rates, per tier. Or the spec's
            form: a list of tiers, ``[{"driver": "minio", "name": ...,
            "bytes": ...}, ...]``, front first.
        subset: use only this many items, the same random sample every epoch
            (fixed by ``seed``); default: all.
        progress: ``True`` shows a live bar on stderr (images/s and the
            share of time the training loop waited on data) and a one-line
            summary at each epoch end; ``"epoch"`` prints only the summaries.
        fields: a dict naming what each batch carries from a sample's tar
            members (docs/records.md): ``{"image": "jpg;png", "label": "cls",
            "meta": "json"}``; a value is the member extensions (preferred
            first) or ``{"ext": ..., "kind": ..., "optional": True}``. Batches
            are then dicts: the image field a tensor, the label field
            ``(B,)`` int64, every other field a list of ``B`` values (json
            parsed, text a str, bytes as they are; None for an absent
            optional member). ``transforms`` may then be a dict per field.
        max_field_bytes: a member of a field other than the image and label
            larger than this is a DataError naming it (default 16 MiB).
        batch_transform: a Python callable applied to each batch (the dict,
            or ``{"image", "label"}`` without ``fields``), after the hooks.
        hook_threads: Python threads that run the per-sample callables given
            in ``transforms`` (default 2); a callable that releases the GIL
            runs in parallel. Their time is ``stats()["stages"]["hooks"]``.
        remote: a :class:`nostall.ray.Prep`: batches made also by Ray actors
            on other nodes' CPUs, the very batches this loader would make, in
            its order, each exactly once when a worker dies; this process's
            own threads then run in the background (docs/remote.md).
        dataloader_args: torch DataLoader's own arguments (``num_workers``,
            ``collate_fn``, ``sampler``, ...) are not taken: each is a
            TypeError naming nostall's equivalent (docs/from_torch.md).

    Whatever ``progress`` says, ``stats()`` records the wait of every batch:
    ``stats()["consumer"]`` has the stall fraction, per-epoch figures and the
    p50/p99 wait of recent batches.
    """

    def __init__(
        self,
        source,
        batch_size: int = 1,
        shuffle: bool = False,
        seed: int = 0,
        transforms: Iterable[Transform] = (),
        num_threads: Optional[int] = None,
        reads_in_flight: Optional[int] = None,
        prefetch: Optional[int] = None,
        autotune: Optional[bool] = None,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        drop_last: bool = False,
        pad_ranks: bool = True,
        on_error: str = "raise",
        dtype: Optional[str] = None,
        layout: str = "NCHW",
        mode: str = "RGB",
        max_pixels: int = 89478485,
        copy: bool = False,
        pin_memory: bool = False,
        device=None,
        return_indices: bool = False,
        output: str = "torch",
        index_cache: bool = True,
        index_beside: str = "read",
        first_epoch: str = "auto",
        shuffle_buffer: Optional[int] = None,
        shard_shuffle: bool = False,
        shuffle_window=None,
        bucketing=None,
        dct_scaling: bool = True,
        throttle_bandwidth: Optional[float] = None,
        throttle_latency_ms: Optional[float] = None,
        drop_page_cache: Optional[bool] = None,
        cache: Optional["Cache"] = None,
        subset: Optional[int] = None,
        progress=False,
        s3_endpoint: Optional[str] = None,
        s3_region: Optional[str] = None,
        s3_profile: Optional[str] = None,
        s3_addressing: Optional[str] = None,
        s3_unsigned: Optional[bool] = None,
        fields: Optional[dict] = None,
        max_field_bytes: Optional[int] = None,
        batch_transform=None,
        hook_threads: int = 2,
        source_options: Optional[dict] = None,
        remote=None,
        **dataloader_args,
    ):
        given = dict(locals())
        del given["self"]
        self._remote_prep = given.pop("remote")
        spec, hooks, ranks_from = build_spec(given)
        # A folder of videos read through a Clip, fields not given: (clips, labels), as images.
        _check_hook_args(batch_transform, hook_threads)
        self._hooks = (hooks, batch_transform, hook_threads)
        self._init(spec, copy=copy, return_indices=return_indices, output=output,
                   progress=progress, pin_memory=pin_memory, ranks_from=ranks_from,
                   device=device)

    @classmethod
    def from_spec(cls, spec, *, copy=False, pin_memory=False, return_indices=False,
                  output="torch", progress=False, device=None):
        """Builds a loader from a spec: a dict, its JSON text, a path to a JSON
        file (as ``nostall bench --spec``), or another Loader (its ``spec``).

        ``loader.spec`` saved and given back builds the same pipeline: the
        knobs the autotuner chose are not in it, so they are tuned again.
        ``rank`` and ``world_size`` the spec leaves out come from torchrun's
        environment (``RANK``, ``WORLD_SIZE``), as for the constructor.
        ``copy``, ``pin_memory``, ``device``, ``return_indices``, ``output``
        and ``progress`` are the constructor's (they are not part of a spec).
        """
        return cls._built(read_spec(spec, stacklevel=3), None, copy=copy, pin_memory=pin_memory,
                          return_indices=return_indices, output=output, progress=progress,
                          device=device)

    def _take_remote(self, spec: dict) -> dict:
        """The spec without its "remote" object (prep on other machines, run
        here in Python, not by the core), which becomes the loader's."""
        if "remote" not in spec:
            return spec
        from . import ray as remote_prep

        spec = dict(spec)
        self._remote_prep = remote_prep.Prep.from_spec(spec.pop("remote"))
        return spec

    @classmethod
    def _built(cls, spec: dict, hooks, **kw):
        """from_spec's loader, with another loader's Python hooks when `hooks`
        is its ``_hooks`` (analyze runs them in every loader it makes)."""
        self = cls.__new__(cls)
        if hooks is not None:
            self._hooks = hooks
        spec = self._take_remote(spec)
        rank, world_size, ranks_from = _sharding(spec.get("rank"), spec.get("world_size"))
        spec["rank"], spec["world_size"] = rank, world_size
        self._init(spec, ranks_from=ranks_from, **kw)
        return self

    @classmethod
    def attach(cls, name: str, batch_size: int, *, on_producer_exit: str = "raise",
               producer_timeout: float = 5.0, spec=None, wait: float = 0.0, copy=None,
               return_indices=False, output="torch", progress=False, transforms=None,
               batch_transform=None, hook_threads: int = 2, pin_memory=False, device=None):
        """A consumer of the shared loader ``name`` (started by ``nostall serve`` or nostall.serve).

        It iterates like any Loader, in the producer's order, with its own
        ``batch_size``: each of its epochs holds every sample once, starting
        where it attached. Batches inside one producer chunk are zero-copy;
        others are copied once.

        on_producer_exit: ``"raise"`` (a NostallError at the next batch when
            the producer stops, dies or is silent for ``producer_timeout``
            seconds) or ``"private"`` (continue on a private pipeline built
            from the same spec, at the exact position).
        spec: if given, the producer must serve this spec (else an error).
            Required to attach to another user's loader, ``"OWNER:NAME"``
            (served with ``nostall serve --group``): nostall runs no spec
            another user chose.
        wait: seconds to wait for the producer's segment to appear.
        copy: the batches are the producer's shared memory, mapped read-only
            in every consumer, so that no consumer's in-place edit reaches
            another's. ``output="numpy"`` hands out read-only arrays (an
            in-place edit raises ValueError); torch tensors have no
            read-only flag, so ``output="torch"`` copies each batch unless
            ``copy=False`` (zero-copy: then an in-place edit of a batch
            kills the process with SIGSEGV).

        return_indices, output, progress: as for the constructor.
        pin_memory, device: as for the constructor. The served slots are
            the producer's, read-only here: with ``device`` they are
            registered page-locked read-only to the device
            (``cudaHostRegisterReadOnly``) and copied from in place; a batch
            that is a copy (a batch size that does not divide the producer's
            chunks), and every batch with ``pin_memory`` alone (host tensors
            the caller may edit in place), is copied into pinned memory
            (``stats()["cuda"]["host_copies"]``). The served spec decides
            the pixels (a Normalize stays where the producer runs it). Every consumer's
            device memory is its own process's: a consumer that dies frees
            it, and the others go on (docs/gpu.md).
        transforms, batch_transform, hook_threads: the Python callables this
            consumer runs on the served batches, as the constructor's (a
            callable or a list of them for the image field, or a dict per
            field): a served pipeline is C++ only, so the callables a loader
            ran are given here, in each consumer (``serve`` refuses a Loader
            that has any, naming them).

        A consumer that holds every other consumer back for longer than the
        producer's ``max_lag`` continues on a private pipeline (see
        ``stats()["shared"]``), and rejoins when it catches up, or at its
        next epoch. ``state_dict()`` / ``load_state_dict()`` resume a consumer
        mid-epoch (in a new process too): the same batches, in the same order.
        """
        core = _attach_core(name, batch_size, on_producer_exit, producer_timeout, spec, wait, output)
        self = cls.__new__(cls)
        if copy is None:  # (a pinned or device copy is the consumer's own already)
            copy = output == "torch" and not pin_memory and device in (None, "cpu")
        try:
            self._hooks = _consumer_hooks(json.loads(core.spec_json()), transforms,
                                          batch_transform, hook_threads)
        except BaseException:
            core.close()
            raise
        try:
            self._init(None, copy=copy, return_indices=return_indices, output=output,
                       progress=progress, core=core, pin_memory=pin_memory, device=device)
        except BaseException:
            core.close()
            raise
        self._shared = name
        return self

    def _init(self, spec, *, copy, return_indices, output, progress=False, core=None,
              pin_memory=False, ranks_from=_ranks.ARGUMENTS, device=None):
        self._core = None
        self._pinned = self._to_device = None
        self._owner_pid = os.getpid()
        if progress not in (False, True, "epoch"):
            raise ValueError(f'progress must be True, False or "epoch", not {progress!r}')
        spec, self._pinned, to_device, normalize = _cuda.host_side(
            spec, output=output, pin_memory=pin_memory, device=device)
        # What the caller asked for, before C++ fills in defaults: the knobs
        # left to the autotuner stay unset in `spec` (see the property).
        self._asked = {k: spec.get(k) for k in ("num_threads", "reads_in_flight", "prefetch")
                       } if spec is not None else {}
        self._progress = EpochProgress(progress) if progress else None
        self._core = core if core is not None else _nostall.Loader(json.dumps(spec))
        # The spec C++ was given, and who chose its shard: a loader built
        # before torch.distributed was initialised (Lightning's launcher
        # initialises it in trainer.fit) follows it once it is.
        self._built_from = spec if core is None else None
        self._ranks_from = ranks_from
        if core is None:
            _ranks.say(spec["rank"], spec["world_size"], ranks_from)
        if spec is None:
            spec = json.loads(self._core.spec_json())
        if to_device is not None:
            self._to_device = _cuda.DeviceCopies(to_device, self._pinned, normalize,
                                                 channels_last=spec.get("layout") == "NHWC")
        self._copy = copy
        self._return_indices = return_indices
        self._torch = output == "torch"
        if self._torch:
            import torch  # fails here, clearly, if torch is missing

            self._from_numpy = torch.from_numpy
        self._seed = spec.get("seed", 0)
        left_out = self._core.left_out if core is None else ""
        if left_out:  # said once, when the loader is built
            warnings.warn(f"{spec_uri(spec) or 'the dataset'}: {left_out}", UserWarning,
                          stacklevel=3)
            if self._progress is not None:
                self._progress.left_out(left_out)
        index_note = self._core.index_note if core is None else ""
        if index_note:  # an index beside the data there and not used
            warnings.warn(f"{spec_uri(spec) or 'the dataset'}: {index_note}", UserWarning,
                          stacklevel=3)
        self._copies_warned = False
        self._records = None
        hooks, batch_transform, hook_threads = getattr(self, "_hooks", ({}, None, 2))
        # The fields as the core resolved them (a spec may give them as an
        # object, {"image": "jpg", ...}; the core's spec is the list).
        resolved = json.loads(self._core.spec_json())
        fields = resolved.get("fields") if spec.get("fields") else None
        self._pair = _batch_pair(resolved)
        if fields or hooks or batch_transform is not None:
            if not fields:  # hooks on a loader of (images, labels): the tuple stays
                fields = [{"name": "image", "kind": "image"}, {"name": "label", "kind": "label"}]
                self._tuple = True
            else:
                self._tuple = False
            self._records = Records(fields, hooks, batch_transform, hook_threads,
                                    spec.get("on_error", "raise"), self.key, return_indices,
                                    torch=output == "torch", image_meta=self._core.image_meta,
                                    clip_audio_shape=_clip_audio_shape(resolved))
        self.sampler = _EpochHook(self)
        # The epoch, the position in it and a loaded state are the core's
        # epoch cursor (nostall/epoch_cursor.h), as for the CLI and serve.
        self._shared = None      # the shared loader's name, for a consumer
        self._generation = 0     # which iterator is current
        self._remote = self._remote_pass = None
        prep = getattr(self, "_remote_prep", None)
        if prep is not None:
            from . import ray as remote_prep
            if not isinstance(prep, remote_prep.Prep):
                raise TypeError(f"remote must be a nostall.ray.Prep, not {type(prep).__name__}")
            self._remote = remote_prep.Remote(self._core, prep)

    # ------------------------------------------------------------ iteration
    def set_epoch(self, epoch: int) -> None:
        """Selects the epoch (its order and augmentations) the next iteration runs.

        Trainers call it through ``loader.sampler.set_epoch`` (Lightning) or
        ``loader.set_epoch`` (Accelerate, Hugging Face's Trainer). Naming
        the epoch that is running while it runs changes nothing.
        """
        self._require_core().set_epoch(operator.index(epoch))

    @property
    def _epoch(self):
        return self._core.epoch if self._core is not None else 0

    def __iter__(self):
        """Starts an epoch (the one set_epoch chose, or the next) and returns its iterator.

        An epoch is over once its last batch has been handed out (a trainer
        that stops at ``len(loader)`` batches need not ask for more): the
        next ``iter()`` starts the next epoch. So does an ``iter()`` after a
        pass abandoned part-way (a ``break``, a peek with
        ``next(iter(loader))``), as a DataLoader draws a new order for each,
        unless ``set_epoch`` named an epoch (then that one, from its start).
        An ``iter()`` never advanced uses up nothing. Starting another
        iteration abandons the previous one: its iterator then raises an
        error rather than end the epoch early.
        """
        core = self._require_core()
        self._generation += 1
        if self._remote is not None:
            if self._remote_pass is not None:
                self._remote_pass.close()
            self._remote_pass = self._remote.begin()
        else:
            core.begin()
        return _EpochIterator(self, self._generation)

    def __len__(self):
        """Batches per epoch for this rank (the last one partial unless ``drop_last``).
        While tar shards are being indexed as the first epoch reads them
        (``first_epoch``), this waits for the index."""
        return self._require_core().batches_per_epoch

    # ------------------------------------------------------------ resume
    def state_dict(self) -> dict:
        """Where the loader is: resuming from it continues with the very next batch."""
        # Written and checked in C++ (nostall/epoch_cursor.h, nostall/resume.h).
        return json.loads(self._require_core().state_json())

    def load_state_dict(self, state: dict) -> None:
        """Makes the next iteration continue where ``state`` was taken."""
        self._require_core().load_state_json(json.dumps(state))
        self._generation += 1  # an iterator from before the load stops being valid

    # ------------------------------------------------------------ info
    def stats(self) -> dict:
        """Per-stage counters and the consumer's waits; ``["consumer"]["stall_fraction"]``.
        With Python hooks (docs/records.md), ``["stages"]["hooks"]`` is their
        time on the training process."""
        st = json.loads(self._require_core().stats_json())
        if self._records is not None and (self._records.hooks or self._records.batch_transform
                                          or self._records.extra):
            st["stages"]["hooks"] = self._records.stats()
        if self._records is not None and self._records.skipped:
            # Samples whose fields failed here, in Python, are skips as the core's are.
            st["skipped"] = st.get("skipped", 0) + self._records.skipped
            st["errors"] = st.get("errors", 0) + self._records.skipped
        if self._pinned is not None:  # page-locked slots and the copies made
            st["cuda"] = self._pinned.stats()
            if self._to_device is not None:
                st["cuda"]["device"] = str(self._to_device.device)
                st["cuda"]["device_batches"] = self._to_device.batches
        return st

    def stats_table(self) -> str:
        """``stats()`` as a table to print: per stage (fetch, decode+augment, batch), its
        threads, busy time and rate, the cache's hits, and the training loop's waits."""
        return self._require_core().stats_table()

    @property
    def spec(self) -> dict:
        """The loader spec, as JSON would hold it (docs/spec.md), defaults filled in.

        Thread counts, reads in flight and prefetch left to the autotuner
        stay unset (0, 0, -1): ``Loader.from_spec(loader.spec)`` tunes them
        again; what it chose is in ``stats()["autotune"]``.
        """
        spec = json.loads(self._require_core().spec_json())
        asked = getattr(self, "_asked", {})
        if spec.get("autotune") == "auto" and asked:
            for knob, unset in (("num_threads", 0), ("reads_in_flight", 0), ("prefetch", -1)):
                if asked.get(knob) in (None, unset):
                    spec[knob] = unset
        prep = getattr(self, "_remote_prep", None)
        if prep is not None:  # prep on other machines (run here, not by the core)
            spec["remote"] = prep.to_spec()
        return spec

    # What training scripts and trainers read of a DataLoader.
    batch_sampler = None
    """None: the loader batches itself (Lightning reads it to tell whether a
    loader shuffles, as of a DataLoader)."""

    @property
    def batch_size(self) -> int:
        """Samples per batch (the last one of an epoch fewer, unless ``drop_last``)."""
        return int(json.loads(self._require_core().spec_json())["batch_size"])

    @property
    def drop_last(self) -> bool:
        """Whether each epoch's last, incomplete batch is dropped."""
        return bool(json.loads(self._require_core().spec_json()).get("drop_last", False))

    @property
    def dataset(self) -> "LoaderDataset":
        """The items the loader reads, as ``DataLoader.dataset``: ``len()`` is
        their number over all ranks (after ``subset``), so
        ``correct / len(loader.dataset)`` is a whole pass's accuracy on one
        process; a rank's share of a pass is ``samples_per_epoch``."""
        return LoaderDataset(self)

    @property
    def classes(self):
        """Class names: an image folder's class folders, in label order.
        Empty for tar shards, whose labels are numbers (``.cls``); see
        ``num_classes``."""
        return list(self._require_core().classes)

    @property
    def num_classes(self) -> int:
        """How many classes the labels index: the class folders of an image
        folder, else the largest label in the dataset plus one."""
        return self._require_core().num_classes

    @property
    def num_items(self) -> int:
        """Items in the dataset (all ranks, before ``subset``; bad items skipped
        while indexing are not counted)."""
        return self._require_core().num_items

    @property
    def samples_per_epoch(self) -> int:
        """Samples this rank sees per epoch (its shard, after ``subset`` and
        ``drop_last``)."""
        return self._require_core().samples_per_epoch

    @property
    def sample_shape(self):
        """One sample's shape in a batch: ``(C, H, W)`` for NCHW, ``(H, W, C)`` for NHWC;
        audio: ``(C, frames)`` for a waveform, ``(C, bins, frames)`` for a spectrogram."""
        return tuple(self._require_core().sample_shape)

    def key(self, index: int) -> str:
        """The name (path, or shard:member) of dataset item ``index``."""
        return self._require_core().key(index)

    @property
    def index_origin(self) -> str:
        """Where the dataset's index came from: ``"beside the data: PATH"``,
        ``"the index cache: PATH"``, or ``"built in 1.2 s; saved to ..."``
        ("" for a loader attached to a shared one)."""
        return self._require_core().index_origin

    def __repr__(self):
        core = getattr(self, "_core", None)
        if core is None:
            return "<nostall.Loader (closed)>"
        if self._shared is not None:
            return (f"<nostall.Loader attached to {self._shared!r}: {len(self)} batches per "
                    f"epoch, epoch {self._epoch}>")
        spec = json.loads(core.spec_json())
        ts = ", ".join(t["type"] for t in spec.get("audio") or spec.get("transforms", [])) or "no transforms"
        if spec.get("audio"):
            spec["layout"] = "audio " + "x".join(str(d) for d in self.sample_shape)
        where = f" rank {spec['rank']} of {spec['world_size']}," if spec.get("world_size", 1) > 1 else ""
        if not core.counts_known:  # shards being indexed as read: say so, not wait
            return (f"<nostall.Loader {spec_uri(spec)!r}: items being indexed (buffered first "
                    f"epoch),{where} batches of {spec['batch_size']}, epoch {self._epoch}; "
                    f"{ts} -> {spec['dtype']} {spec['layout']}>")
        return (f"<nostall.Loader {spec_uri(spec)!r}: {self.num_items:,} items,{where} "
                f"{len(self)} batches of {spec['batch_size']} per epoch, epoch {self._epoch}; "
                f"{ts} -> {spec['dtype']} {spec['layout']}>")

    # ------------------------------------------------------------ lifetime
    def close(self) -> None:
        """Stops and joins every thread. Batches already handed out stay valid."""
        pinned, self._pinned = getattr(self, "_pinned", None), None
        if pinned is not None:  # (before the slots can be unmapped)
            pinned.close()
        remote, self._remote = getattr(self, "_remote", None), None
        if remote is not None:
            if self._remote_pass is not None:
                self._remote_pass.close()
            remote.close()
        core, self._core = getattr(self, "_core", None), None
        if core is not None:
            core.close()
        records = getattr(self, "_records", None)
        if records is not None:
            records.close()

    def _require_core(self):
        if self._core is None:
            raise RuntimeError("the loader is closed")
        if self._ranks_from not in (_ranks.ARGUMENTS, _ranks.TORCH_DISTRIBUTED):
            self._follow_torch_distributed()
        return self._core

    def _follow_torch_distributed(self):
        """Rebuilds the pipeline on torch.distributed's shard when it was
        initialised after this loader was built with another (or with none:
        Lightning's DDP launch starts the other processes and initialises
        torch.distributed inside trainer.fit, after the script built the
        loader). The epoch the loader was at is kept."""
        found = _ranks.from_torch_distributed()
        if found is None or self._built_from is None:
            return
        spec = self._built_from
        self._ranks_from = _ranks.TORCH_DISTRIBUTED
        if (spec["rank"], spec["world_size"]) == found:
            return
        old = self._core
        epoch = json.loads(old.state_json())["epoch"]
        spec = dict(spec, rank=found[0], world_size=found[1])
        self._core = _nostall.Loader(json.dumps(spec))
        old.close()
        self._built_from = spec
        self._generation += 1  # an iterator over the old shard is over
        if epoch:
            self._core.set_epoch(epoch)
        _ranks.say(found[0], found[1], _ranks.TORCH_DISTRIBUTED)


