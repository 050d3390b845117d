"""A node's answer to the registration query: ids, slices, deletions and, when the method's planning asks,
labels or class counts; never an input. At a retrain a node with its own records first checks that none
of them was edited since training."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

import numpy as np
from flwr.app import Context, Message

from fedforget.federation.client_site import ClientSite, describe
from fedforget.federation.control_messages import (
    NEED_CLASS_COUNTS,
    NEED_LABELS,
    RegisterQuery,
    Registration,
)
from fedforget.federation.node_data import REGISTERED, held_now, load_node_data, registered_key, registered_plan
from fedforget.store.atomic import atomic_write_json
from fedforget.store.secret_files import mkdir_private
from fedforget.store.tombstones import load_tombstones

if TYPE_CHECKING:
    pass

#: How many changed records a refusal names before it only counts them.
SHOWN = 5

def _digests(site: ClientSite) -> dict[str, str]:
    """sha256 of each held record's label and inputs, keyed by sample id: what a retrain compares."""
    train = load_node_data(site).train
    out = {}
    for row, sample in enumerate(train.ids.tolist()):
        h = hashlib.sha256(str(int(train.labels[row])).encode())
        for tensor in train.inputs:
            h.update(np.ascontiguousarray(tensor[row].numpy()).tobytes())
        out[str(int(sample))] = h.hexdigest()
    return out


def _check_unedited(site: ClientSite) -> None:
    """Refuse a retrain when a record the node trained on now holds other content.

    Records added or removed are the server's to judge (it knows which were forgotten): the registration
    reply lists what the node holds, and the server compares it with the manifest."""
    registered = registered_plan(site)
    then = registered.get("digests") if registered else None
    if not isinstance(then, dict):
        raise ValueError(f"node {site.name} has no record of what it registered for training "
                         f"({site.state_dir / REGISTERED}); its state dir must be the one it trained with")
    now = _digests(site)
    edited = sorted(s for s in set(now) & set(then) if now[s] != then[s])
    if edited:
        shown = ", ".join(edited[:SHOWN]) + (", …" if len(edited) > SHOWN else "")
        raise ValueError(f"node {site.name}'s records changed since training: {len(edited)} edited (sample ids "
                         f"{shown}); restore them (a changed record is a new record: train a new store)")


def registration(site: ClientSite, query: RegisterQuery) -> Registration:
    """This node's registration: sample ids, slices, deletions, and labels or class counts when asked."""
    # a reference run of `verify --federation` trains anew on what the node registered for the store: it registers
    # as at a retrain and keeps the registration the store's next retrain checks
    retraining = query.action == "retrain" or site.cfg.reference
    if site.data_dir is not None:
        if retraining and registered_plan(site) is not None and registered_key(site) != (query.record_key or None):
            raise ValueError(f"node {site.name} registered its records for another store (their record key "
                             "differs); start it with the state dir it trained this store with")
        site.given_key = query.record_key  # the store's key of this node's sample ids ("" = unkeyed)
        if retraining:
            _check_unedited(site)
        else:  # what it trains on from now on: the plan is drawn over these, whatever later leaves the file
            mkdir_private(site.state_dir)
            registered = {"node": site.name, "held": held_now(site), "digests": _digests(site)}
            if query.record_key:
                registered["record-key"] = query.record_key
            atomic_write_json(site.state_dir / REGISTERED, registered)
    slices = site.held_slices()
    if site.data_dir is not None and retraining:  # report what it holds now, in the plan's slices
        now = set(held_now(site))
        planned = {i for s in slices for i in s}
        slices = [[i for i in s if i in now] for s in slices]
        slices[0] = sorted(slices[0] + sorted(now - planned))  # records added since: the server refuses them
    samples = np.asarray([i for s in slices for i in s], dtype=np.int64)
    slice_of = np.repeat(np.arange(len(slices), dtype=np.int64), [len(s) for s in slices])
    gone = load_tombstones(site.state_dir, site.dataset_key)
    deleted = np.asarray(sorted(int(i) for i in samples.tolist() if int(i) in gone), dtype=np.int64)
    labels = counts = None
    if {NEED_LABELS, NEED_CLASS_COUNTS} & set(query.needs):
        labels = _labels(site, samples)
        if NEED_CLASS_COUNTS in query.needs:
            counts = np.bincount(labels[labels >= 0], minlength=site.data.num_classes).astype(np.int64)
        if NEED_LABELS not in query.needs:
            labels = None
    return Registration(site.partition, site.num_partitions, site.name, site.records_kind, samples, slice_of,
                        deleted, labels, counts)


def _labels(site: ClientSite, samples: np.ndarray) -> np.ndarray:
    """Each sample's label; -1 where a deleted record's row is gone (only a node's own data loses rows: a
    public-set node's rows are its whole plan, deleted ones included)."""
    train = site.data.train
    row_of = {int(g): r for r, g in enumerate(train.ids.tolist())}
    all_labels = train.labels.numpy()
    return np.asarray([int(all_labels[row_of[int(s)]]) if int(s) in row_of else -1 for s in samples.tolist()],
                      dtype=np.int64)


def register(msg: Message, context: Context) -> Message:
    """``query``: answer the registration query, or (mid-run) the partition query."""
    if not RegisterQuery.asked(msg.content):
        return describe(msg, context)
    query = RegisterQuery.from_record(msg.content)
    site = ClientSite.from_context(context)
    try:
        reply = registration(site, query)
    except (ValueError, OSError) as exc:  # the node's data: one line for the operator, the run refused
        reply = Registration(site.partition, site.num_partitions, site.name, refused=str(exc).splitlines()[0][:500])
    return Message(reply.to_record(), reply_to=msg)
