"""The one forget handler every node runs, whatever the method: ``query.forget`` and SAFE's ``query.safeforget``
(the same request under the type SAFE's servers send). It deletes the named samples for good (tombstones in
the node's state dir), the node's copies of the artifacts the server purged (named by sha256), and every
feature cache a method declares (``Method.feature_caches``: files derived from raw samples, recomputed on
demand, so a deleted sample's features go with it).

Needs only the partition plan and the tombstones, so the handler imports neither torch nor the
task's data: a forget message pays flwr + numpy in a fresh ClientApp process.
"""

from __future__ import annotations

from pathlib import Path

from flwr.app import Context, Message

from fedforget.federation.client_site import ClientSite
from fedforget.federation.control_messages import ForgetAck, ForgetSamples
from fedforget.store.purge import delete_files_named_by, feature_cache_patterns
from fedforget.store.tombstones import add_tombstones


def drop_feature_caches(state_dir: Path) -> int:
    """Delete the files of every declared feature cache in ``state_dir``; how many went."""
    gone = 0
    for pattern in feature_cache_patterns(None):
        for path in state_dir.glob(pattern):
            if path.is_file():
                path.unlink()
                gone += 1
    return gone


def forget_samples(msg: Message, context: Context) -> Message:
    """Tombstone the requested ids this node holds; refuse (raise) if any is not this node's."""
    site = ClientSite.from_context(context)
    request = ForgetSamples.from_record(msg.content)
    ids = list(request.samples)
    foreign = sorted(set(ids) - set(site.partition_ids()))
    if foreign:
        raise ValueError(f"partition {site.partition} does not hold sample(s) {foreign[:5]}")
    new = add_tombstones(site.state_dir, site.dataset_key, ids)
    delete_files_named_by(site.state_dir, list(request.purged))
    counts = {"remaining": len(site.slice_ids(None)), "purged-cache-files": drop_feature_caches(site.state_dir)}
    return Message(ForgetAck(site.partition, new, len(ids), counts).to_record(), reply_to=msg)
