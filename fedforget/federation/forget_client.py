"""``query.forget`` on a node: delete the named samples for good (tombstones in its state dir) and the
node's copies of the artifacts the server purged (named by sha256).

Needs only the partition plan and the tombstones, so the handler imports neither torch nor the
task's data: a forget message pays flwr + numpy in a fresh ClientApp process.
"""

from __future__ import annotations

import numpy as np
from flwr.app import ConfigRecord, Context, Message, RecordDict

from fedforget.federation.client_site import ClientSite
from fedforget.federation.messaging import PARTITION_KEY, to_numpy
from fedforget.store.purge import drop_purged_copies
from fedforget.store.tombstones import add_tombstones


def forget_samples(msg: Message, context: Context) -> Message:
    """Tombstone the requested ids this node holds; refuse (raise) if any is not this node's."""
    site = ClientSite.from_context(context)
    ids = [int(i) for i in np.asarray(to_numpy(msg.content["arrays"])["samples"]).ravel()]
    held = {i for s in site.held_slices() for i in s}
    foreign = sorted(set(ids) - held)
    if foreign:
        raise ValueError(f"partition {site.partition} does not hold sample(s) {foreign[:5]}")
    new = add_tombstones(site.state_dir, site.dataset_key, ids)
    drop_purged_copies(msg, site.state_dir)
    info = ConfigRecord({PARTITION_KEY: site.partition, "deleted": new, "requested": len(ids),
                         "remaining": len(site.slice_ids(None))})
    return Message(RecordDict({"info": info}), reply_to=msg)
