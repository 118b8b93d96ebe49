"""GT4Py's translation entries and extensions in the shared tier on a real Redis server (ADR 0041).

Each node is a fresh interpreter with its own gridkey cache directory and its own GT4Py cache
(``crates/gridkey-python/proof/gt4py_nodes.py``); the nodes share only the Redis server. Without
``GRIDKEY_TEST_REDIS_URL`` every test skips (and fails when ``GRIDKEY_TEST_REQUIRE`` names ``redis``); run them with
``cargo xtask with-redis -- target/test-venv/bin/python -m pytest crates/gridkey-python/tests/test_gt4py_shared.py``.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest
from typing import Any, Literal

import gridkey
from gridkey import _gridkey

ROOT = pathlib.Path(__file__).resolve().parents[3]
URL_VAR = "GRIDKEY_TEST_REDIS_URL"


def _redis_url() -> str:
    url = os.environ.get(URL_VAR, "").strip()
    if url:
        return url
    if "redis" in os.environ.get("GRIDKEY_TEST_REQUIRE", "").split(","):
        pytest.fail(f"a Redis server is required (GRIDKEY_TEST_REQUIRE) but {URL_VAR} is unset")
    pytest.skip(f"no test Redis server ({URL_VAR} unset); run under `cargo xtask with-redis -- ...`")


@pytest.fixture(scope="module")
def nodes() -> Any:
    pytest.importorskip("gt4py", reason="GT4Py needs CPython 3.12 or later; cargo xtask gt4py installs it")
    if shutil.which("cmake", path=f"{pathlib.Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}") is None:
        pytest.skip("GT4Py's builds need cmake")
    sys.path.insert(0, str(ROOT / "crates" / "gridkey-python" / "proof"))
    import gt4py_nodes

    return gt4py_nodes


@pytest.fixture(scope="module")
def cluster(nodes: Any, tmp_path_factory: Any) -> Any:
    """Two writer nodes started at once on one Redis namespace, then a fresh node: their JSON objects, the
    namespace's variables and the fresh node's gridkey cache directory."""
    url = _redis_url()
    work = tmp_path_factory.mktemp("cluster")
    keys = nodes.cluster_keys(work / "keys")
    env = nodes.shared_env(url, f"gktest-gt4py-{os.getpid()}-{time.time_ns()}", keys)
    started = [nodes.start_node(work / n / ".gt4py_cache", work / n / "gridkey", ["div"], extra_env=env) for n in "ab"]
    a, b = (nodes.finish_node(p) for p in started)
    fresh = nodes.run_node(work / "c" / ".gt4py_cache", work / "c" / "gridkey", ["div"], extra_env=env)
    return {"a": a, "b": b, "fresh": fresh, "env": env, "work": work, "url": url}


def test_two_writers_translate_and_build_each_program_once_cluster_wide(cluster: Any) -> None:
    a, b = cluster["a"], cluster["b"]
    assert a["verified"] and b["verified"]
    # One translation and one build between them: the other node waited on the leases and took both from Redis.
    assert a["translations"] + b["translations"] == 1, (a, b)
    assert a["builds"] + b["builds"] == 1, (a, b)
    assert a["translations_uploaded"] + b["translations_uploaded"] == 1
    assert a["extensions_uploaded"] + b["extensions_uploaded"] == 1
    assert a["extensions_from_remote"] + b["extensions_from_remote"] == 1
    assert a["remote_warnings"] == b["remote_warnings"] == 0


def test_a_fresh_node_warm_from_redis_translates_and_builds_nothing(cluster: Any) -> None:
    fresh = cluster["fresh"]
    assert (fresh["translations"], fresh["builds"]) == (0, 0), fresh
    assert fresh["translations_from_remote"] >= 1 and fresh["extensions_from_remote"] == 1
    assert fresh["verified"] and fresh["remote_rejected"] == 0 and fresh["remote_warnings"] == 0
    # What arrived is in the node's own store now: GT4Py's extension there, under its key.
    store = cluster["work"] / "c" / "gridkey" / gridkey.GT4PY_DIR
    assert len(list((store / "extension").rglob("*.bin"))) == 1


def _marked_folders(gt4py_cache: pathlib.Path) -> dict[str, pathlib.Path]:
    """The build folders under a GT4Py cache that hold gridkey's marker, by the extension key it names."""
    from gridkey import _gt4py_tiers

    marked = (m.parent for m in gt4py_cache.rglob(_gt4py_tiers.MARKER))
    return {key: folder for folder in marked if (key := _gt4py_tiers._read_marker(folder)) is not None}


def test_what_a_fresh_node_fetched_is_where_gt4py_reads_it_and_in_its_store(cluster: Any) -> None:
    """The fresh node wrote each object twice (ADR 0049): into GT4Py's cache and, behind, into its own store; a
    translation entry it handed to GT4Py from memory, both of its files behind. It never waited for them: they were
    complete when it exited. Both copies are the bytes a writer built: the build folder's files are the writer's, its
    marker names the entry's key, and GT4Py's translation entry is the stored payload."""
    work = cluster["work"]
    store = _gridkey.Gt4pyStore(work / "c" / "gridkey")
    [key] = [p.stem for p in (store.dir / "extension").rglob("*.bin")]
    fresh, [built] = _marked_folders(work / "c" / ".gt4py_cache"), [
        f for b in "ab" for k, f in _marked_folders(work / b / ".gt4py_cache").items() if k == key
    ][:1]
    assert set(fresh) == {key}, fresh
    for name in ("gt4py.json", *(str(p.relative_to(built)) for p in (built / "build" / "bin").glob("*.so"))):
        assert (fresh[key] / name).read_bytes() == (built / name).read_bytes(), name
    entries = [p for p in (work / "c" / ".gt4py_cache").rglob("*.pkl")]
    assert entries, "no translation entry in GT4Py's cache"
    stored = {p.stem: store.get_translation(p.stem) for p in (store.dir / "translation").rglob("*.bin")}
    assert {e.read_bytes() for e in entries} <= set(stored.values())


def test_an_object_fetched_into_a_folder_it_cannot_fill_leaves_none_of_its_files(cluster: Any, tmp_path: Any) -> None:
    """`fetch_into` writes the build folder as one batch: when the build record cannot be written, the module is not
    left under its name either, nothing counts as fetched, and the error names the file."""
    source = cluster["work"] / "c" / "gridkey"
    [key] = [p.stem for p in (source / gridkey.GT4PY_DIR / "extension").rglob("*.bin")]
    node = tmp_path / "gridkey"
    store = _gridkey.Gt4pyStore(node)
    shared = _gridkey.Gt4pyShared.connect(gridkey.Settings.from_vars(cluster["env"]), node)
    assert shared is not None and shared.is_on, shared and shared.warning
    target = tmp_path / "folder"
    (target / "gt4py.json").mkdir(parents=True)
    with pytest.raises(gridkey.GridkeyOSError, match=r"gt4py\.json.*free space or fix permissions"):
        shared.fetch_into("extension", key, store, target)
    assert not shared.fetched("extension", key)
    assert sorted(str(p.relative_to(target)) for p in target.rglob("*") if p.is_file()) == []
    (target / "gt4py.json").rmdir()
    assert shared.fetch_into("extension", key, store, target)
    assert shared.fetched("extension", key)
    built = _marked_folders(cluster["work"] / "c" / ".gt4py_cache")[key]
    for name in ("gt4py.json", *(str(p.relative_to(built)) for p in (built / "build" / "bin").glob("*.so"))):
        assert (target / name).read_bytes() == (built / name).read_bytes(), name
    # The store entry is written behind (ADR 0049): complete once `flush` returns.
    shared.flush()
    assert pathlib.Path(store.entry_path("extension", key)).is_file()
    assert store.materialize(key, tmp_path / "again") is not None


def test_a_translation_from_the_shared_tier_is_handed_over_at_once_and_its_files_written_behind(
    cluster: Any, tmp_path: Any
) -> None:
    """`fetch_translation` returns the checked pickle without waiting for its files (ADR 0049): GT4Py's entry file
    and the store entry are complete once `flush` returns, each the bytes the writer stored, and no temp file is left.
    A key the tier lacks is None and writes nothing."""
    source = _gridkey.Gt4pyStore(cluster["work"] / "c" / "gridkey")
    keys = [p.stem for p in (source.dir / "translation").rglob("*.bin")]
    assert keys
    node = tmp_path / "gridkey"
    store = _gridkey.Gt4pyStore(node)
    shared = _gridkey.Gt4pyShared.connect(gridkey.Settings.from_vars(cluster["env"]), node)
    assert shared is not None and shared.is_on, shared and shared.warning
    cache = tmp_path / "translation_cache"
    cache.mkdir()
    handed = {key: shared.fetch_translation(key, store, cache / f"{key}.pkl") for key in keys}
    assert handed == {key: source.get_translation(key) for key in keys}
    assert all(shared.fetched("translation", key) for key in keys)
    shared.flush()
    for key in keys:
        assert (cache / f"{key}.pkl").read_bytes() == handed[key]
        assert store.get_translation(key) == handed[key]
    assert shared.fetch_translation("0" * 32, store, cache / "absent.pkl") is None
    shared.flush()
    assert sorted(p.name for p in cache.iterdir()) == sorted(f"{key}.pkl" for key in keys)
    assert not [p for p in node.rglob(".tmp*")]


def test_a_translation_taken_from_memory_that_does_not_unpickle_is_a_miss_and_rejected(
    cluster: Any, tmp_path: Any
) -> None:
    """A translation entry the shared tier holds, signed by the cluster's key, that is not a pickle: handed over from
    memory (ADR 0049), it is a miss for GT4Py (``KeyError``, as GT4Py's own ``FileCache`` answers an entry that does
    not unpickle), rejected with one warning, and neither GT4Py's file nor the store entry is left once the writes
    behind are done; the next lookup does not fetch it again."""
    from gt4py._core import filecache

    from gridkey import _gt4py_tiers as tiers

    env = cluster["env"]
    settings = gridkey.Settings.from_vars(env)
    node = tmp_path / "gridkey"
    cache = filecache.FileCache(tmp_path / "gt4py" / "translation_cache" / "gtfn")
    tiers.install(cache_dir=node, settings=settings)
    try:
        path, gk = tiers._translation_key(cache, "gtfn", "not-a-pickle")
        forged = tmp_path / "forged"
        _gridkey.Gt4pyStore(forged).put_translation(gk, b"int translated; // not a pickle")
        assert _upload_as(env, forged, "translation") == 1
        with pytest.warns(RuntimeWarning, match="does not unpickle here"):
            with pytest.raises(KeyError):
                cache["not-a-pickle"]
        assert tiers.counters().remote_rejected == 1
        tiers.flush()
        assert not path.exists()
        assert tiers._state.store.get_translation(gk) is None
        shared = tiers.shared()
        assert shared is not None
        before = shared.stats()["fetches"]
        # Quarantined for this node: looked up again, it is not fetched again.
        assert "not-a-pickle" not in cache
        assert shared.stats()["fetches"] == before
    finally:
        tiers.uninstall()


def _upload_as(settings_vars: dict[str, str], source: pathlib.Path, kind: Literal["translation", "extension"]) -> int:
    """Uploads every ``kind`` entry of the gridkey store ``source`` with a client of ``settings_vars``; returns how
    many."""
    settings = gridkey.Settings.from_vars(settings_vars)
    store = _gridkey.Gt4pyStore(source)
    shared = _gridkey.Gt4pyShared.connect(settings, source)
    assert shared is not None and shared.is_on, shared and shared.warning
    keys = [p.stem for p in (source / gridkey.GT4PY_DIR / kind).rglob("*.bin")]
    for key in keys:
        assert shared.upload(kind, key, "here-upload", store), (kind, key, shared.warning)
    return len(keys)


def test_unsigned_and_forged_objects_are_never_loaded_where_keys_are_trusted(cluster: Any, nodes: Any, tmp_path: Any) -> None:
    """A namespace whose translation entry is unsigned and whose extension is signed by a key nobody trusts, both
    holding exactly what the cluster built: a node that trusts the cluster's key takes neither, and builds here."""
    namespace = f"gktest-gt4py-forged-{os.getpid()}-{time.time_ns()}"
    base = {"GRIDKEY_REMOTE_URL": cluster["url"], "GRIDKEY_REMOTE_NAMESPACE": namespace, "GRIDKEY_REMOTE_WRITER": "1"}
    source = cluster["work"] / "c" / "gridkey"
    assert _upload_as({**base, "GRIDKEY_REMOTE_TRUST": "acl"}, source, "translation") >= 1
    forger = tmp_path / "forger"
    forger.mkdir(mode=0o700)
    forger_public = _gridkey.remote_keygen(forger / "signing.key")
    assert _upload_as({**base, "GRIDKEY_REMOTE_TRUST": "acl", "GRIDKEY_REMOTE_SIGNING_KEY": str(forger / "signing.key")}, source, "extension") == 1

    # Read-only, so that the objects stay as planted for the second node.
    env = {**cluster["env"], "GRIDKEY_REMOTE_NAMESPACE": namespace}
    env.pop("GRIDKEY_REMOTE_WRITER")
    reader = nodes.run_node(tmp_path / "r" / ".gt4py_cache", tmp_path / "r" / "gridkey", ["div"], extra_env=env)
    assert (reader["translations_from_remote"], reader["extensions_from_remote"]) == (0, 0), reader
    assert (reader["translations"], reader["builds"], reader["verified"]) == (1, 1, True), reader
    # Not silently: one warning names the first object refused and why, and that it was made here.
    said = [line for line in reader["stderr"].splitlines() if "looked up failed a check here" in line]
    assert len(said) == 1, reader["stderr"][-3000:]
    assert "GT4Py translation entry" in said[0] and "is not signed" in said[0], said
    assert "(a reader uploads nothing)" in said[0], said

    # The forged extension, looked up alone: the sentence names its signer, and what a key not trusted here means.
    [extension] = [p.stem for p in (source / gridkey.GT4PY_DIR / "extension").rglob("*.bin")]
    client = _gridkey.Gt4pyShared.connect(gridkey.Settings.from_vars(env), tmp_path / "c")
    assert client is not None and client.rejections is None
    assert not client.fetch("extension", extension, _gridkey.Gt4pyStore(tmp_path / "c"))
    # Looked up again: still one object.
    assert not client.fetch("extension", extension, _gridkey.Gt4pyStore(tmp_path / "c"))
    assert client.rejections is not None and "1 object looked up failed a check here" in client.rejections
    assert "revoked writer's key" in client.rejections and "trust a key only once" in client.rejections, client.rejections
    assert "trusted keys (GRIDKEY_REMOTE_TRUSTED_KEYS)" in client.rejections, client.rejections
    assert f"signed by {forger_public}, which is not a trusted key" in client.rejections, client.rejections

    # The same objects are taken by a node that trusts the ACL instead: the refusal above is the signature policy's.
    acl = {**env, "GRIDKEY_REMOTE_TRUST": "acl"}
    acl.pop("GRIDKEY_REMOTE_TRUSTED_KEYS")
    taker = nodes.run_node(tmp_path / "t" / ".gt4py_cache", tmp_path / "t" / "gridkey", ["div"], extra_env=acl)
    assert (taker["translations"], taker["builds"], taker["extensions_from_remote"]) == (0, 0, 1), taker
    assert taker["verified"]
    assert "failed a check here" not in taker["stderr"], taker["stderr"][-3000:]


def test_a_dead_redis_costs_one_warning_and_local_builds(nodes: Any, tmp_path: Any) -> None:
    _redis_url()
    # A server that takes the connection and never answers: the first request waits its whole timeout.
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    try:
        url = f"redis://127.0.0.1:{silent.getsockname()[1]}/"
        keys = nodes.cluster_keys(tmp_path / "keys")
        env = {
            **nodes.shared_env(url, "gktest-dead", keys),
            "GRIDKEY_REMOTE_CONNECT_TIMEOUT": "0.5",
            "GRIDKEY_REMOTE_TIMEOUT": "0.5",
        }
        row = nodes.run_node(tmp_path / "n" / ".gt4py_cache", tmp_path / "n" / "gridkey", ["div"], extra_env=env)
    finally:
        silent.close()
    assert (row["translations"], row["builds"], row["verified"]) == (1, 1, True), row
    assert row["remote_warnings"] == 1
    assert row["stderr"].count("GT4Py translates and builds locally") == 1, row["stderr"][-3000:]


def _lease_names(url: str, pattern: str) -> list[str]:
    """The names matching ``pattern`` on the server ``url``, through Debian's ``redis-cli`` (installed with
    ``redis-server``)."""
    cli = shutil.which("redis-cli")
    if cli is None:
        pytest.skip("redis-cli is not installed (Debian's redis-tools, installed with redis-server)")
    command = [cli, "--no-auth-warning", "-u", url, "--scan", "--pattern", pattern]
    out = subprocess.run(command, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_a_lease_holder_killed_while_it_builds_costs_no_run(nodes: Any, tmp_path: Any) -> None:
    """A writer SIGKILLed (with its build) while it holds the GT4Py extension's lease (``gx``): its lease ends with
    its heartbeat (``GRIDKEY_REMOTE_LEASE_TTL``), the next node takes it over, builds, verifies and uploads; a fresh
    node after it then takes everything from Redis."""
    url = _redis_url()
    keys = nodes.cluster_keys(tmp_path / "keys")
    namespace = f"gktest-gt4py-killed-{os.getpid()}-{time.time_ns()}"
    env = {**nodes.shared_env(url, namespace, keys), "GRIDKEY_REMOTE_LEASE_TTL": "2"}
    command = [sys.executable, nodes.__file__, "--node", "--grid", str(nodes.GRID), "div"]
    holder = subprocess.Popen(
        command,
        env=nodes.node_env(tmp_path / "a" / ".gt4py_cache", tmp_path / "a" / "gridkey", env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 300
        while not _lease_names(url, f"{namespace}:lease-v1:gx:*"):
            assert holder.poll() is None, "the holder ended before it claimed the extension's lease"
            assert time.monotonic() < deadline, "the holder claimed no extension lease in 300 s"
            time.sleep(0.05)
    finally:
        if holder.poll() is None:
            os.killpg(holder.pid, signal.SIGKILL)
        holder.wait()

    # Bounded below the lease wait: a lease left behind by the dead holder would hold the taker for all of it.
    waits = {**env, "GRIDKEY_REMOTE_LEASE_WAIT": "240"}
    taker = nodes.run_node(tmp_path / "b" / ".gt4py_cache", tmp_path / "b" / "gridkey", ["div"], extra_env=waits)
    assert taker["compile_seconds"] < 240, taker
    assert taker["verified"] and taker["builds"] == 1 and taker["extensions_uploaded"] == 1, taker
    assert taker["remote_warnings"] == 0 and taker["remote_rejected"] == 0, taker
    assert _lease_names(url, f"{namespace}:lease-v1:*") == []

    fresh = nodes.run_node(tmp_path / "c" / ".gt4py_cache", tmp_path / "c" / "gridkey", ["div"], extra_env=env)
    assert (fresh["translations"], fresh["builds"], fresh["extensions_from_remote"]) == (0, 0, 1), fresh
    assert fresh["verified"]


def test_a_server_lost_while_a_writer_builds_costs_one_warning(nodes: Any, tmp_path: Any) -> None:
    """A writer's server stops answering while it builds (it holds the extension's lease, renewed by its heartbeat):
    the build finishes here and verifies, nothing is uploaded, and the process says once that the tier is off,
    although no lookup came after the loss."""
    _redis_url()
    server_binary = shutil.which("redis-server")
    if server_binary is None:
        pytest.skip("redis-server is not installed (Debian's redis-server)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [server_binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        url = f"redis://127.0.0.1:{port}/"
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the private redis-server did not start in 30 s"
                time.sleep(0.05)
        keys = nodes.cluster_keys(tmp_path / "keys")
        namespace = "gktest-gt4py-lost"
        env = {**nodes.shared_env(url, namespace, keys), "GRIDKEY_REMOTE_TIMEOUT": "1", "GRIDKEY_REMOTE_LEASE_TTL": "2"}
        writer = nodes.start_node(tmp_path / "a" / ".gt4py_cache", tmp_path / "a" / "gridkey", ["div"], extra_env=env)
        deadline = time.monotonic() + 300
        while not _lease_names(url, f"{namespace}:lease-v1:gx:*"):
            assert writer.poll() is None, "the writer ended before it claimed the extension's lease"
            assert time.monotonic() < deadline, "the writer claimed no extension lease in 300 s"
            time.sleep(0.05)
        # Stopped, not killed: the heartbeat's renewal and the upload meet a server that never answers.
        server.send_signal(signal.SIGSTOP)
        row = nodes.finish_node(writer)
    finally:
        server.send_signal(signal.SIGCONT)
        server.kill()
        server.wait()
    assert (row["builds"], row["verified"], row["extensions_uploaded"]) == (1, True, 0), row
    assert row["remote_warnings"] == 1, row
    assert row["stderr"].count("GT4Py translates and builds locally") == 1, row["stderr"][-3000:]
