"""The summary cache: part summaries, combine steps and whole documents, keyed by content.

An edited document costs only its edits: a part whose text (and every setting that changes its
output) is unchanged has the same key (:mod:`daemon.cache.keys`), so its summary is reused, and so is
every combine step whose children are; the same bytes under the same settings reuse the whole
result. :class:`~daemon.cache.cache.SummaryCache` is what the summarizer calls; it sits on a store
(:mod:`daemon.cache.store`): an embedded SQLite file by default (:mod:`daemon.cache.sqlite`), or a
shared Redis/Valkey server for daemons on several hosts (:mod:`daemon.cache.redis`). Configured by
``[cache]`` (:class:`daemon.config.CacheConfig`) and each profile's ``reuse_cached``. Operators look
into a store and empty it with ``docsumd cache info`` and ``clear`` (:mod:`daemon.cache.admin`).
"""

from daemon.cache.cache import SummaryCache, create_cache, create_store
from daemon.cache.keys import CacheKey, KeyMaker, KeyScope, ModelRevision, Step, model_revision, sha256_of
from daemon.cache.store import CachedSummary, CacheStore, CacheStoreError

__all__ = [
    "CacheKey",
    "CacheStore",
    "CacheStoreError",
    "CachedSummary",
    "KeyMaker",
    "KeyScope",
    "ModelRevision",
    "Step",
    "SummaryCache",
    "create_cache",
    "create_store",
    "model_revision",
    "sha256_of",
]
