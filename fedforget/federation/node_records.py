"""What a node holds, computed on the node: its rows, its slices, and its answer to the registration query.

A node's rows are either its own records (``data-dir``) or its partition of a shipped task's public set. Its
slices are drawn here from the seed: for the public set from the partition plan (as flwr-datasets draws it),
for its own records by :func:`~fedforget.core.slicing.split_into_slices` over every record it registered for
training, deleted ones included, so a deletion never moves another record to a different slice. For the
registration reply it sends ids, slices and, when the method's planning asks, labels or class counts; never
an input.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING

import numpy as np
from flwr.app import Context, Message

from fedforget.core.seeds import derive_seed32
from fedforget.core.slicing import split_into_slices
from fedforget.federation.client_site import ClientSite, describe
from fedforget.federation.control_messages import (
    NEED_CLASS_COUNTS,
    NEED_LABELS,
    RegisterQuery,
    Registration,
)
from fedforget.store.atomic import atomic_write_json
from fedforget.store.secret_files import mkdir_private
from fedforget.store.tombstones import load_tombstones

if TYPE_CHECKING:
    from fedforget.tasks.base import Examples, TaskData

#: What a node registered for training, in its state dir: each record's sample id and content digest.
REGISTERED = "registered-records.json"
#: How many changed records a refusal names before it only counts them.
SHOWN = 5

_DATA: dict[tuple[object, ...], TaskData] = {}


def _key(site: ClientSite) -> tuple[object, ...]:
    cfg = site.cfg
    return (cfg.task, cfg.train_size, cfg.test_size, cfg.hf.dataset, cfg.hf.model, cfg.partitioner,
            cfg.dirichlet_alpha, cfg.slices_per_client, cfg.seed, site.partition, site.num_partitions,
            site.name, str(site.data_dir))


def task_classes(site: ClientSite) -> int:
    """How many classes the task's labels range over, for a node that brings its own records."""
    from fedforget.tasks.registry import get_task

    classes = get_task(site.cfg.task).num_classes
    if classes <= 0:
        raise ValueError(f"task {site.cfg.task!r} does not fix its classes, so a node's own data (data-dir) "
                         "cannot be checked against them; use a task that does (see `fedforget data split`)")
    return classes


def _empty_like(examples: Examples) -> Examples:
    return examples.subset([])


def load_node_data(site: ClientSite) -> TaskData:
    """``site``'s own training rows (sample-id order) and test split, loaded once per process."""
    key = _key(site)
    if key not in _DATA:
        _DATA.clear()
        _DATA[key] = _load(site)
    return _DATA[key]


def _load(site: ClientSite) -> TaskData:
    if site.data_dir is None:
        from fedforget.tasks.base import TaskData
        from fedforget.tasks.registry import load_task_data

        whole = load_task_data(site.cfg)
        return TaskData(whole.train.by_ids(site.partition_ids()), whole.test, whole.num_classes)
    from fedforget.tasks.base import TaskData
    from fedforget.tasks.local_records import NodeDataError, find_split_file, read_local_records

    classes = task_classes(site)
    train = read_local_records(site.data_dir, site.cfg, site.name, classes).examples
    try:
        find_split_file(site.data_dir, "test", f"node {site.name}")
    except NodeDataError:  # a node without a test split evaluates nothing locally
        return TaskData(train, _empty_like(train), classes)
    return TaskData(train, read_local_records(site.data_dir, site.cfg, site.name, classes, split="test").examples,
                    classes)


def local_slices(site: ClientSite) -> list[list[int]]:
    """Slices of a node's own records: every record it holds or has deleted, drawn from the seed."""
    held = {int(i) for i in load_node_data(site).train.ids.tolist()}
    held |= load_tombstones(site.state_dir, site.dataset_key)
    return split_into_slices(sorted(held), site.cfg.slices_per_client,
                             derive_seed32(site.cfg.seed, "slices", site.partition))


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


def _check_unchanged(site: ClientSite) -> None:
    """Refuse a retrain when the node's records changed since training other than through ``forget``."""
    path = site.state_dir / REGISTERED
    try:
        then = json.loads(path.read_text(encoding="utf-8"))["digests"]
    except (OSError, ValueError, KeyError, TypeError):
        raise ValueError(f"node {site.name} has no record of what it registered for training ({path}); "
                         "its state dir must be the one it trained with") from None
    now = _digests(site)
    gone = load_tombstones(site.state_dir, site.dataset_key)
    added = sorted(set(now) - set(then))
    edited = sorted(s for s in set(now) & set(then) if now[s] != then[s])
    missing = sorted(s for s in set(then) - set(now) if int(s) not in gone)
    if added or edited or missing:
        parts = [f"{what} {len(ids)} ({', '.join(ids[:SHOWN])}{', …' if len(ids) > SHOWN else ''})"
                 for what, ids in (("added", added), ("edited", edited), ("removed without forget", missing)) if ids]
        raise ValueError(f"node {site.name}'s records changed since training: {'; '.join(parts)} (sample ids); "
                         "restore them, or forget the removed ones with `fedforget forget --record`, then retrain")


def registration(site: ClientSite, query: RegisterQuery) -> Registration:
    """This node's registration: sample ids, slices, deletions, and labels or class counts when asked."""
    slices = site.held_slices()
    samples = np.asarray([i for s in slices for i in s], dtype=np.int64)
    slice_of = np.repeat(np.arange(len(slices), dtype=np.int64), [len(s) for s in slices])
    gone = load_tombstones(site.state_dir, site.dataset_key)
    deleted = np.asarray(sorted(int(i) for i in samples.tolist() if int(i) in gone), dtype=np.int64)
    if site.data_dir is not None:
        if query.action == "retrain" or site.cfg.reference:  # a reference run must not re-register the data
            _check_unchanged(site)
        else:
            mkdir_private(site.state_dir)
            atomic_write_json(site.state_dir / REGISTERED, {"node": site.name, "digests": _digests(site)})
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
    """Each sample's label; -1 where a deleted record's row is gone (only a node's own data loses rows)."""
    train = site.data.train
    row_of = {int(g): r for r, g in enumerate(train.ids.tolist())}
    all_labels = train.labels.numpy()
    if site.data_dir is None:  # the public set keeps every row: labels as the plan was drawn over them
        from fedforget.tasks.registry import load_task_data

        whole = load_task_data(site.cfg).train
        row_of = {int(g): r for r, g in enumerate(whole.ids.tolist())}
        all_labels = whole.labels.numpy()
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
