"""``query.forget`` on a node: delete the named samples for good (tombstones in its state dir) and the
node's copies of the artifacts the server purged (named by sha256).

Needs only the partition plan and the tombstones, so the handler imports neither torch nor the
task's data: a forget message pays flwr + numpy in a fresh ClientApp process.
"""

from __future__ import annotations

from flwr.app import Context, Message

from fedforget.federation.client_site import ClientSite
from fedforget.federation.control_messages import ForgetAck, ForgetSamples
from fedforget.store.purge import delete_files_named_by
from fedforget.store.tombstones import add_tombstones


def forget_samples(msg: Message, context: Context) -> Message:
    """Tombstone the requested ids this node holds; refuse (raise) if any is not this node's."""
    site = ClientSite.from_context(context)
    request = ForgetSamples.from_record(msg.content)
    ids = list(request.samples)
    held = {i for s in site.held_slices() for i in s}
    foreign = sorted(set(ids) - held)
    if foreign:
        raise ValueError(f"partition {site.partition} does not hold sample(s) {foreign[:5]}")
    new = add_tombstones(site.state_dir, site.dataset_key, ids)
    delete_files_named_by(site.state_dir, list(request.purged))
    ack = ForgetAck(site.partition, new, len(ids), {"remaining": len(site.slice_ids(None))})
    return Message(ack.to_record(), reply_to=msg)
