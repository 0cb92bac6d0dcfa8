"""The MinIO cache: encoded item bytes in shared memory, shared by every loader on the node."""

from __future__ import annotations

import re


def parse_size(size) -> int:
    """Bytes from an int or a string such as "40GiB", "512MB", "1.5G".

    One definition for Python, the CLI and specs (C++'s ParseByteSize): KB,
    MB, GB, TB are powers of 1000; KiB, MiB, GiB, TiB and the bare K, M, G,
    T powers of 1024.
    """
    if isinstance(size, bool):
        raise TypeError(f"a size must be an int or a string, not {size!r}")
    if isinstance(size, int):
        if size <= 0:
            raise ValueError(f"a cache size must be positive, got {size!r}")
        return size
    from . import _nostall

    return _nostall.parse_size(str(size))


class Cache:
    """Names a MinIO cache: ``nostall.Loader(..., cache=nostall.Cache("imagenet-train", size="40GiB"))``.

    Items are cached the first time they are read, while there is room, and
    never evicted: from the second epoch on the hit rate is size/dataset, the
    best any policy can do for a random order. Every loader on the node that
    names the same cache attaches to it and reads what is already there. The
    memory lives in /dev/shm until removed; with a cache, reads of missed items
    bypass the OS page cache (drop_page_cache) so the bytes are not held twice.

    With ``servers=["node1:11211", ...]`` (or ``policy="memcached"`` and
    NOSTALL_CACHE_SERVERS) the items are kept in the nodes' memcached servers
    instead, partitioned across them (each item on one server), so every
    node's cache memory serves every node.

    ``size`` is one thing in both: the memory this loader's rank brings. A
    node cache (MinIO) is one shared-memory segment of ``size`` that every
    loader on the node naming it shares (the first to create it sets it);
    a cluster cache pools every rank's ``size``: ``size x world_size`` in
    all, each rank inserting at most its share (docs/cluster_cache.md). Start the servers with ``memcached -M`` (refuse, never evict):
    ``nostall cache serve --size 40GiB`` starts one the right way or prints
    the command. ``local_size="8GiB"`` adds a node-local MinIO tier (shared
    memory, named ``name``) in front of the cluster tier: items this node
    reads stay on the node too. ``loader.stats()["cache"]["tiers"]`` reports
    each tier (hits, misses, errors, bytes found, lookup time).
    """

    def __init__(self, name: str, size, policy: str | None = None, servers=None,
                 local_size=None):
        """``name``: letters, digits, ``-_.``; ``size``: bytes, or "40GiB", "512MB"
        (GB = 10^9, GiB and G = 2^30); ``policy``: "minio" (default), "memcached"
        (with ``servers``) or "lru" (in-process, for comparisons)."""
        if not re.fullmatch(r"[A-Za-z0-9._-]{1,200}", name or ""):
            raise ValueError(f"cache name {name!r} may hold only letters, digits, - _ .")
        if servers is not None:
            if isinstance(servers, str) or not all(isinstance(x, str) for x in servers):
                raise TypeError('servers must be a list of "host:port" strings')
            servers = list(servers)
        policy = policy or ("memcached" if servers else "minio")
        if policy not in ("minio", "lru", "memcached"):
            raise ValueError('policy must be "minio", "memcached" (with servers) or "lru" '
                             f"(in-process, for comparisons), not {policy!r}")
        if servers and policy != "memcached":
            raise ValueError(f'servers go with policy="memcached", not {policy!r}')
        self.name = name
        self.size = parse_size(size)
        self.policy = policy
        self.servers = servers or []
        self.local_size = parse_size(local_size) if local_size is not None else 0
        if self.local_size and policy != "memcached":
            raise ValueError("local_size is a node-local tier in front of a cluster cache: "
                             "give servers (or policy=\"memcached\") with it")

    def tiers(self) -> list:
        """The loader spec's ``"cache"``: the tiers, front first (docs/spec.md)."""
        tiers = []
        if self.local_size:
            tiers.append({"driver": "minio", "name": self.name, "bytes": self.local_size})
        tier = {"driver": self.policy, "name": self.name, "bytes": self.size}
        if self.policy == "memcached":
            tier["servers"] = list(self.servers)
        tiers.append(tier)
        return tiers

    def remove(self) -> None:
        """Removes the cache's shared memory; loaders attached keep theirs until they close."""
        from . import _nostall

        _nostall.remove_cache(self.name)

    def __repr__(self):
        extra = f", servers={self.servers!r}" if self.servers else ""
        extra += f", local_size={self.local_size}" if self.local_size else ""
        return f"Cache({self.name!r}, size={self.size}, policy={self.policy!r}{extra})"
