"""One directory per experiment; the only place runs and the coordinator share state."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import sqlite3
import stat
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import load as st_load
from safetensors.numpy import save as st_save

from fedforget.store.atomic import append_line, atomic_write_bytes, atomic_write_json
from fedforget.store.bounded_read import (
    UnreadableFile,
    is_regular_or_absent,
    open_regular,
    read_bounded,
    sha256_bounded,
)
from fedforget.store.ledger import LEDGER, InvalidationRule, Ledger
from fedforget.store.secret_files import mkdir_private

MANIFEST = "manifest.json"
METRICS = "metrics.jsonl"
ARTIFACTS = "artifacts"
CLIENTS = "clients"
FORMAT_VERSION = 1
#: what SQLite says of a file that is not a database (its header is not SQLite's)
NOT_SQLITE = "file is not a database"
METADATA_KEY = "fedforget"
#: ledger meta: the digests of the whole manifest as the last run that wrote it left it, and as it was before
#: that write (what a run killed between its ledger commit and its file write leaves)
MANIFEST_DIGEST = "manifest-sha256"
#: The manifest fields training writes once and every later step reads (task, config, partitions, backbone):
#: their fingerprint goes into the ledger, so a hand edit of the manifest is caught (``store.check``).
IDENTITY_FIELDS = ("task", "method", "config", "seed", "num-partitions", "partitions", "backbone")
#: Identity fields a store has only since nodes register what they hold (and key their own records' sample
#: ids): pinned when present, so a store written before them keeps its identity.
REGISTERED_FIELDS = ("nodes", "class-counts", "record-ids")
#: Identity fields a store has from its creation since its ledger keeps a log: ``store-id`` (random) says the
#: store was created with a log, which may then never be adopted again, and names the store wherever it lies
#: (``fedforget.store.log_record``).
CREATED_FIELDS = ("store-id",)
#: A safetensors header larger than this is not one of ours (the header length is read from the file).
MAX_HEADER_BYTES = 16 * 2**20
#: No artifact is larger (the largest real one, a full project-trained backbone copy, is a few hundred MB): a file
#: over it is reported as corrupt without being read, so a huge or sparse file cannot exhaust memory or time.
MAX_ARTIFACT_BYTES = 4 * 2**30
#: The manifest lists every sample id by partition and slice: about 10 bytes a sample, so 10⁷ samples fit.
MAX_MANIFEST_BYTES = 256 * 2**20
#: ``metrics.jsonl`` grows by a few hundred bytes per client and round.
MAX_METRICS_BYTES = 512 * 2**20


def ledger_rules() -> tuple[InvalidationRule, ...]:
    """What a forget request does beyond lineage, inside its transaction: every method's rules (each a no-op
    on other methods' stores)."""
    from fedforget.core.known_methods import families

    return tuple(rule for method in families() for rule in method.ledger_rules)


def safetensors_metadata(path: Path) -> dict[str, str] | None:
    """The ``__metadata__`` map of a safetensors file, reading only its header (None if unreadable)."""
    try:
        fd, _ = open_regular(path, MAX_ARTIFACT_BYTES, "artifact")
        with os.fdopen(fd, "rb") as fh:
            size = int.from_bytes(fh.read(8), "little")
            if not 0 < size <= MAX_HEADER_BYTES:
                return None
            header = json.loads(fh.read(size).decode("utf-8"))
    except (OSError, ValueError):
        return None
    meta = header.get("__metadata__") if isinstance(header, dict) else None
    return meta if isinstance(meta, dict) else None


class StoreError(Exception):
    """The path is not a store, or a file in it is missing or corrupt; the message says which."""


def _refuse_special_files(root: Path) -> None:
    """The files every command reads whole or through SQLite must be regular files (a fifo there would block
    the first read, a device never ends), and ``metrics.jsonl`` within :data:`MAX_METRICS_BYTES`: the store
    check reads it whole."""
    for name in (LEDGER, METRICS):
        if not is_regular_or_absent(root / name):
            raise StoreError(f"{root / name} is not a regular file; the store is damaged: restore it from a backup "
                             "or re-run training into a new store")
    try:
        size = (root / METRICS).stat().st_size
    except FileNotFoundError:
        return
    if size > MAX_METRICS_BYTES:
        raise StoreError(f"{root / METRICS} is {size:,} bytes; no metrics file is that large (at most "
                         f"{MAX_METRICS_BYTES:,}): the store is damaged")


def resolve_store_path(path: str | os.PathLike[str]) -> Path:
    """Relative store paths are relative to ``FEDFORGET_HOME`` (set by the venv), else to the cwd.

    The ServerApp runs in a process Flower starts elsewhere, so a bare relative path would land in
    Flower's working directory instead of the user's project.
    """
    p = Path(os.path.expanduser(str(path)))
    if p.is_absolute():
        return p
    base = os.environ.get("FEDFORGET_HOME") or os.getcwd()
    return Path(base) / p


def arrays_of(sha256: str, data: bytes) -> dict[str, np.ndarray]:
    """The arrays of an artifact's bytes (already checked against ``sha256``): safetensors only, so a planted
    pickle is data, never code."""
    try:
        return st_load(data)
    except Exception as exc:  # noqa: BLE001 - safetensors raises its own error types
        raise StoreError(f"artifact {sha256} is not a safetensors file ({type(exc).__name__})") from None


class Store:
    """A handle on an existing store directory."""

    def __init__(self, root: Path, existing: bool = False) -> None:
        self.root = Path(root)
        #: opened as a finished store: its ledger must already be there (never silently recreated)
        self.existing = existing
        self._verified: dict[tuple[str, int, int, int, int], bool] = {}

    # -- life cycle ---------------------------------------------------------------------------
    @classmethod
    def create(cls, path: str | os.PathLike[str], manifest: dict[str, Any]) -> Store:
        """Start a fresh experiment at ``path``: a new manifest, ledger and metrics.

        Content-addressed artifacts of an earlier run at the same path are kept (and reused when
        identical); nothing else of it survives.
        """
        root = resolve_store_path(path)
        if root.exists() and not root.is_dir():
            raise StoreError(f"{root} exists and is not a directory; pass another --store / store= path")
        ledger_path = root / LEDGER
        if ledger_path.exists():
            old = Ledger(ledger_path)
            try:
                if not old.clear_unless_requested():
                    raise StoreError(f"{root} holds forget requests; a new run there would erase their record. "
                                     "Pick a new store= path (or `fedforget retrain` this one)")
            finally:
                old.close()
        mkdir_private(root)
        for sub in (ARTIFACTS, CLIENTS):
            (root / sub).mkdir(exist_ok=True, mode=0o700)
        os.chmod(root, 0o700)
        store = cls(root)
        atomic_write_json(root / MANIFEST, {"format-version": FORMAT_VERSION, "store-id": secrets.token_hex(16),
                                            **manifest})
        atomic_write_bytes(root / METRICS, b"")
        return store

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> Store:
        """Open an existing store, or raise :class:`StoreError` saying what is wrong."""
        try:
            root = resolve_store_path(path)
            if not root.is_dir():
                raise StoreError(f"{root} is not a store (no such directory); pass the store= path of a run")
            if not (root / MANIFEST).is_file():
                raise StoreError(f"{root} is not a store (no {MANIFEST}); pass the store= path of a run")
            _refuse_special_files(root)
            store = cls(root, existing=True)
            store.manifest()  # parse now so a corrupt manifest is reported here
        except (OSError, ValueError) as exc:  # a name too long, a permission denied, an embedded NUL ...
            raise StoreError(f"cannot open {str(path)[:120]!r} as a store: {exc.__class__.__name__}: "
                             f"{getattr(exc, 'strerror', None) or exc}") from None
        return store

    def ledger(self) -> Ledger:
        """The store's ledger (created on first use by training); close it when done.

        The ledger file is opened by SQLite alone, never by Python's ``open``: on Linux, closing any
        descriptor of a file drops every POSIX lock the process holds on it, the ones SQLite holds for
        another thread's transaction included, which lets two writers corrupt the database.
        """
        path = self.root / LEDGER
        unfinished = StoreError(f"{path} is missing, empty or not a SQLite file: the training run did not finish, "
                                "or the store is damaged; re-run training into a new store")
        if self.existing:
            try:
                st = path.stat()
            except OSError:
                raise unfinished from None
            if not stat.S_ISREG(st.st_mode) or st.st_size == 0:
                raise unfinished
        try:
            return Ledger(path, create=not self.existing, rules=ledger_rules())
        except sqlite3.DatabaseError as exc:
            if self.existing and NOT_SQLITE in str(exc):
                raise unfinished from None
            raise StoreError(f"{self.root / LEDGER} is not a readable ledger ({exc}); restore it from a backup "
                             "or re-run training into a new store") from None

    # -- manifest, metrics ---------------------------------------------------------
    def _read_json(self, name: str) -> Any:
        path = self.root / name
        try:
            return json.loads(read_bounded(path, MAX_MANIFEST_BYTES, "manifest").decode("utf-8"))
        except FileNotFoundError:
            raise StoreError(f"{path} is missing; the store is incomplete") from None
        except UnreadableFile as exc:
            raise StoreError(f"{exc}; it is not a fedforget manifest") from None
        except json.JSONDecodeError as exc:
            raise StoreError(f"{path} is not valid JSON ({exc.msg} at line {exc.lineno})") from None
        except UnicodeDecodeError:
            raise StoreError(f"{path} is not UTF-8 text; the store is corrupt") from None

    def manifest(self) -> dict[str, Any]:
        data = self._read_json(MANIFEST)
        if not isinstance(data, dict) or data.get("format-version") != FORMAT_VERSION:
            raise StoreError(f"{self.root / MANIFEST} is not a fedforget manifest (format-version {FORMAT_VERSION})")
        return data

    def update_manifest(self, **fields: Any) -> None:
        """Rewrite the manifest with ``fields``; when they set its identity, pin it in the ledger too."""
        data = self.manifest()
        before = self.manifest_digest(data)
        data.update(fields)
        ledger = self.ledger()
        try:  # the ledger first: a run killed before the file is written leaves the file its "before" digest names
            with ledger.transaction("manifest"):
                if any(k in fields for k in (*IDENTITY_FIELDS, *REGISTERED_FIELDS, *CREATED_FIELDS)):
                    ledger.set_meta_in("manifest-identity", self.manifest_identity(data))
                ledger.set_meta_in(MANIFEST_DIGEST, [self.manifest_digest(data), before])
        finally:
            ledger.close()
        atomic_write_json(self.root / MANIFEST, data)

    @staticmethod
    def manifest_digest(manifest: dict[str, Any]) -> str:
        """The sha256 of the whole manifest (canonical JSON): every field a run wrote, not only the identity."""
        return hashlib.sha256(json.dumps(manifest, sort_keys=True, separators=(",", ":"),
                                         default=str).encode()).hexdigest()

    @staticmethod
    def manifest_identity(manifest: dict[str, Any]) -> str:
        """The sha256 of the manifest's identity fields (canonical JSON), as the ledger records it."""
        identity = {k: manifest.get(k) for k in IDENTITY_FIELDS}
        identity.update({k: manifest[k] for k in (*REGISTERED_FIELDS, *CREATED_FIELDS) if k in manifest})
        return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()

    def append_metrics(self, record: dict[str, Any]) -> None:
        append_line(self.root / METRICS, json.dumps(record, sort_keys=True))

    def metrics(self) -> list[dict[str, Any]]:
        path = self.root / METRICS
        try:
            data = read_bounded(path, MAX_METRICS_BYTES, "metrics file")
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise StoreError(f"{exc}; the store is damaged") from None
        rows = []
        # a non-UTF-8 byte is reported by the store check; here it only spoils its own line
        for line in data.decode("utf-8", errors="replace").splitlines():
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:
                    continue  # a line cut by a crash is skipped, not fatal
        return rows

    # -- artifacts ----------------------------------------------------------------------------
    def artifact_path(self, sha256: str) -> Path:
        return self.root / ARTIFACTS / f"{sha256}.safetensors"

    def put_arrays(self, arrays: dict[str, np.ndarray], metadata: dict[str, str] | None = None) -> str:
        """Save arrays as safetensors named by the sha256 of the file's bytes; return that hash.

        The metadata go in as one JSON string: safetensors writes a metadata map in hash-map
        order, which differs between processes and would make equal artifacts hash differently.
        """
        header = {METADATA_KEY: json.dumps(metadata or {}, sort_keys=True)}
        data = st_save({k: np.ascontiguousarray(v) for k, v in arrays.items()}, metadata=header)
        digest = hashlib.sha256(data).hexdigest()
        if not self.verify_artifact(digest):  # absent, or corrupt on disk: (re)write it
            atomic_write_bytes(self.artifact_path(digest), data)
        return digest

    def artifact_bytes(self, sha256: str) -> bytes:
        """An artifact's file bytes, refusing one whose bytes no longer match its name."""
        path = self.artifact_path(sha256)
        try:
            data = read_bounded(path, MAX_ARTIFACT_BYTES, "artifact")
        except FileNotFoundError:
            raise StoreError(f"artifact {sha256} is missing from {path.parent}") from None
        except OSError as exc:
            raise StoreError(f"artifact {sha256} is corrupt ({exc.strerror or exc})") from None
        if hashlib.sha256(data).hexdigest() != sha256:
            raise StoreError(f"artifact {sha256} is corrupt (its bytes no longer match its sha256)")
        return data

    def get_arrays(self, sha256: str) -> dict[str, np.ndarray]:
        """Load an artifact, refusing one whose bytes no longer match its name."""
        return arrays_of(sha256, self.artifact_bytes(sha256))

    def verify_artifact(self, sha256: str) -> bool:
        """Whether the file named ``sha256`` holds bytes with that sha256.

        Hashed once per file version in this process: the store check and the command after it ask about
        the same files, and any write to a file changes its ctime (and so the key). Hashed in chunks; a file
        over :data:`MAX_ARTIFACT_BYTES`, or one that is not a regular file, is not ours and is never read.
        """
        path = self.artifact_path(sha256)
        try:
            st = path.stat()
        except (OSError, ValueError):
            return False
        key = (sha256, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        if key not in self._verified:
            try:
                self._verified[key] = sha256_bounded(path, MAX_ARTIFACT_BYTES, "artifact") == sha256
            except OSError:
                self._verified[key] = False
        return self._verified[key]

    def client_dir(self, partition: int) -> Path:
        path = self.root / CLIENTS / str(partition)
        mkdir_private(path)
        return path
