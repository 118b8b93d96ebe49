"""GT4Py builds shared across nodes through gridkey's tiers: each node a fresh interpreter with its own GT4Py cache
and its own gridkey cache directory (ADR 0040).

``--node`` runs one node: it compiles the given programs (serially, so that every count is this process's) with
``gridkey.gt4py`` installed, runs each on the runtime provider, checks it against the NumPy reference and prints one
JSON object on its last line: the translations GT4Py ran and the C++ builds it ran (counted on GT4Py's translation
cache writes and ``CompiledbProject.build``), what gridkey's store materialized, stored and rejected, the seconds of
the compile phase and whether every result verified.

Without ``--node`` it is the proof: ``--nodes N`` nodes fill their caches one after the other from a common store
(the gridkey cache directory they share), then a fresh node (empty GT4Py cache) is timed warm from that store against
the same node warm from its own GT4Py cache. Exit status 0 when translations and builds equal the programs
cluster-wide, the fresh node translated and built nothing, and its compile phase took at most 1.2x the local warm one.

``--redis URL`` shares the Redis tier instead (ADR 0041): the N nodes, all writers signing with one cluster key and
each with its own gridkey cache directory and GT4Py cache, start at once; then a fresh node (empty caches) is timed
warm from Redis against the same node warm from its local caches. Exit status 0 when translations and builds equal
the programs cluster-wide, the fresh node translated and built nothing and took every extension from Redis, every
result verified; the ratio is a timing on a shared machine, printed against ``--max-ratio``.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[2]
GRID = ROOT / "data" / "grids" / "icon_grid_0013_R02B04_R.nc"


def count_work() -> dict[str, int]:
    """Counts, in this process from now on, the translations GT4Py makes and the C++ builds it runs: the writes to a
    GT4Py translation cache (``<build cache>/translation_cache/<backend>`` in GT4Py 1.2.3, ``gtfn_cache`` in 1.2.1;
    one per translation made) and the calls of ``CompiledbProject.build`` (one per C++ build). Returns the dict
    ``{"translations": n, "builds": n}`` that the wrapped methods keep counting into."""
    from gt4py._core import filecache
    from gt4py.next.otf.compilation.build_systems import compiledb

    counts = {"translations": 0, "builds": 0}
    original_set = filecache.FileCache.__setitem__
    original_build = compiledb.CompiledbProject.build

    def counted_set(self, key, value):
        path = pathlib.Path(self.path)
        if path.parent.name == "translation_cache" or path.name == "gtfn_cache":
            counts["translations"] += 1
        return original_set(self, key, value)

    def counted_build(self):
        counts["builds"] += 1
        return original_build(self)

    filecache.FileCache.__setitem__ = counted_set
    compiledb.CompiledbProject.build = counted_build
    return counts


def node(args) -> dict:
    warnings.filterwarnings("ignore", message="Python is not running in optimized mode")
    import numpy as np

    sys.path.insert(0, str(HERE))
    from gt4py.next.otf import compiled_program

    import icon_programs as ip

    counts = count_work()

    import gridkey.gt4py
    from gridkey import _gt4py_tiers

    tables = ip.read_icon_tables(args.grid)
    provider = ip.offset_provider(tables)
    started = time.perf_counter()
    gridkey.gt4py.install()
    programs = [ip.PROGRAMS[name] for name in args.programs]
    for program in programs:
        program.compile(offset_provider=provider)
    compiled_program.wait_for_compilation()
    compile_seconds = time.perf_counter() - started
    errors = {}
    cases = ip.cases(tables)
    for name in args.programs:
        inputs, out, reference = cases[name]
        fields = ip.as_fields({**inputs, out: np.zeros_like(reference)})
        ip.PROGRAMS[name](**fields, offset_provider=provider)
        got = fields[out].asnumpy()
        errors[name] = float(np.max(np.abs(got - reference)) / max(float(np.max(np.abs(reference))), 1e-300))
    c = _gt4py_tiers.counters()
    return {
        **counts,
        **c._asdict(),  # every counter of the hooks, the build-folder memo's included (ADR 0058)
        "compile_seconds": compile_seconds,
        "max_rel_error": errors,
        "verified": all(e <= 1e-12 for e in errors.values()),
    }


def node_env(gt4py_cache: pathlib.Path, gridkey_cache: pathlib.Path, extra: dict | None = None) -> dict[str, str]:
    """The environment of a node: its GT4Py cache, its gridkey cache directory, serial builds, the venv's cmake."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GT4PY_", "GRIDKEY_"))}
    env.update(
        GT4PY_BUILD_CACHE_LIFETIME="persistent",
        GT4PY_BUILD_CACHE_DIR=str(gt4py_cache),
        GT4PY_BUILD_JOBS_MODE="serial",
        GRIDKEY_CACHE_DIR=str(gridkey_cache),
        PATH=f"{pathlib.Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    env.update(extra or {})
    return env


def start_node(gt4py_cache, gridkey_cache, programs, *, grid=GRID, extra_env=None) -> subprocess.Popen:
    """Starts one node in a fresh interpreter; `finish_node` waits for it."""
    command = [sys.executable, str(pathlib.Path(__file__).resolve()), "--node", "--grid", str(grid), *programs]
    return subprocess.Popen(
        command,
        env=node_env(gt4py_cache, gridkey_cache, extra_env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish_node(process: subprocess.Popen) -> dict:
    """The JSON object of a node `start_node` started, with its standard error as ``stderr`` (raises with its output
    when it fails)."""
    stdout, stderr = process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"node {process.args} failed ({process.returncode}):\n{stdout[-3000:]}\n{stderr[-6000:]}")
    return {**json.loads(stdout.strip().splitlines()[-1]), "stderr": stderr}


def run_node(gt4py_cache, gridkey_cache, programs, *, grid=GRID, extra_env=None) -> dict:
    """Runs one node in a fresh interpreter and returns its JSON object (raises with its output when it fails)."""
    return finish_node(start_node(gt4py_cache, gridkey_cache, programs, grid=grid, extra_env=extra_env))


def shared_env(url: str, namespace: str, keys: pathlib.Path) -> dict[str, str]:
    """The variables of a writer node of the shared tier ``url`` in ``namespace``: it signs with the cluster's key
    ``keys/signing.key`` and trusts only ``keys/trusted.keys`` (made by `cluster_keys`)."""
    return {
        "GRIDKEY_REMOTE_URL": url,
        "GRIDKEY_REMOTE_NAMESPACE": namespace,
        "GRIDKEY_REMOTE_WRITER": "1",
        "GRIDKEY_REMOTE_SIGNING_KEY": str(keys / "signing.key"),
        "GRIDKEY_REMOTE_TRUSTED_KEYS": str(keys / "trusted.keys"),
        "GRIDKEY_REMOTE_LEASE_WAIT": "600",
    }


def cluster_keys(folder: pathlib.Path) -> pathlib.Path:
    """A signing key and the trusted keys file naming it, in ``folder`` (mode 0700, as trust anchors need)."""
    from gridkey import _gridkey

    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)
    public = _gridkey.remote_keygen(folder / "signing.key")
    (folder / "trusted.keys").write_text(public + "\n")
    (folder / "trusted.keys").chmod(0o600)
    return folder


def _shown(row: dict) -> str:
    return json.dumps({k: v for k, v in row.items() if k != "stderr"})


def redis_proof(args, work: pathlib.Path) -> int:
    """``--redis URL``: N writer nodes, each with its own gridkey cache directory and GT4Py cache, started at once
    against one Redis server; then a fresh node warm from Redis against the same node warm from its local caches."""
    keys = cluster_keys(work / "keys")
    namespace = f"gt4py-proof-{os.getpid()}-{time.time_ns()}"
    env = shared_env(args.redis, namespace, keys)
    started = [
        start_node(work / f"node{n}" / ".gt4py_cache", work / f"node{n}" / "gridkey", args.programs, grid=args.grid, extra_env=env)
        for n in range(args.nodes)
    ]
    rows = [finish_node(p) for p in started]
    for n, row in enumerate(rows):
        print(f"node {n}: {_shown(row)}", flush=True)
    translations = sum(r["translations"] for r in rows)
    builds = sum(r["builds"] for r in rows)
    fresh_runs, local_runs = [], []
    for r in range(args.repeats):
        place = work / f"fresh{r}"
        fresh_runs.append(run_node(place / ".gt4py_cache", place / "gridkey", args.programs, grid=args.grid, extra_env=env))
        local_runs.append(run_node(place / ".gt4py_cache", place / "gridkey", args.programs, grid=args.grid, extra_env=env))
    fresh, local = fresh_runs[0], local_runs[0]
    print(f"fresh node warm from Redis: {_shown(fresh)}")
    print(f"same node warm from its local caches: {_shown(local)}")
    fresh_s = statistics.median(r["compile_seconds"] for r in fresh_runs)
    local_s = statistics.median(r["compile_seconds"] for r in local_runs)
    ratio = fresh_s / max(local_s, 1e-9)
    n = len(args.programs)
    counted = (
        translations == n
        and builds == n
        and all(r["translations"] == 0 and r["builds"] == 0 for r in fresh_runs + local_runs)
        and all(r["extensions_from_remote"] == n for r in fresh_runs)
        and all(r["verified"] for r in [*rows, *fresh_runs, *local_runs])
    )
    print(
        f"{args.nodes} nodes on Redis, {n} programs: {translations} translations, {builds} builds cluster-wide;"
        f" fresh node {fresh['translations']} translations, {fresh['builds']} builds,"
        f" {fresh['extensions_from_remote']} extensions from Redis; warm from Redis / warm from local, median of"
        f" {args.repeats}: {fresh_s:.2f} s / {local_s:.2f} s = {ratio:.2f}x, {'within' if ratio <= args.max_ratio else 'over'}"
        f" its limit of {args.max_ratio}x (a timing on a shared machine, not in the exit status): {'ok' if counted else 'FAILED'}"
    )
    if args.json is not None:
        args.json.write_text(json.dumps({
            "nodes": args.nodes, "programs": args.programs, "translations": translations, "builds": builds,
            "fresh_seconds": fresh_s, "local_seconds": local_s, "ratio": ratio,
            "fresh": {k: v for k, v in fresh.items() if k != "stderr"},
        }, indent=2))
    if args.work is None and counted:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if counted else 1


def proof(args) -> int:
    work = pathlib.Path(tempfile.mkdtemp(prefix="gt4py-nodes-")) if args.work is None else args.work
    if args.redis is not None:
        return redis_proof(args, work)
    shared = work / "gridkey"
    rows = []
    for n in range(args.nodes):
        rows.append(run_node(work / f"node{n}" / ".gt4py_cache", shared, args.programs, grid=args.grid))
        print(f"node {n}: {_shown(rows[-1])}", flush=True)
    translations = sum(r["translations"] for r in rows)
    builds = sum(r["builds"] for r in rows)
    # Alternating, so that the load of a shared machine weighs on both sides alike; medians compared.
    fresh_runs, local_runs = [], []
    for r in range(args.repeats):
        cache = work / f"fresh{r}" / ".gt4py_cache"
        fresh_runs.append(run_node(cache, shared, args.programs, grid=args.grid))
        local_runs.append(run_node(cache, shared, args.programs, grid=args.grid))
    fresh, local = fresh_runs[0], local_runs[0]
    print(f"fresh node warm from the store: {_shown(fresh)}")
    print(f"same node warm from its own cache: {_shown(local)}")
    fresh_s = statistics.median(r["compile_seconds"] for r in fresh_runs)
    local_s = statistics.median(r["compile_seconds"] for r in local_runs)
    ratio = fresh_s / max(local_s, 1e-9)
    ok = (
        translations == len(args.programs)
        and builds == len(args.programs)
        and all(r["translations"] == 0 and r["builds"] == 0 for r in fresh_runs + local_runs)
        and ratio <= 1.2
        and all(r["verified"] for r in [*rows, *fresh_runs, *local_runs])
    )
    print(
        f"{args.nodes} nodes, {len(args.programs)} programs: {translations} translations, {builds} builds cluster-wide;"
        f" fresh node {fresh['translations']} translations, {fresh['builds']} builds,"
        f" median of {args.repeats}: {fresh_s:.2f} s vs {local_s:.2f} s local ({ratio:.2f}x): {'ok' if ok else 'FAILED'}"
    )
    if args.work is None and ok:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--node", action="store_true", help="run one node and print its JSON object")
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--grid", type=pathlib.Path, default=GRID)
    parser.add_argument("--work", type=pathlib.Path, default=None)
    parser.add_argument(
        "--repeats",
        type=int,
        default=7,
        help="fresh and local warm starts, alternating (a few in ten of either run slow on a shared machine: 7 keep "
        "them out of the medians)",
    )
    parser.add_argument("--redis", default=None, help="URL of a Redis server: the nodes share it as their shared tier")
    parser.add_argument("--max-ratio", type=float, default=1.2, help="--redis: the warm-from-Redis ratio's limit")
    parser.add_argument("--json", type=pathlib.Path, default=None, help="--redis: write the figures to this file")
    parser.add_argument("programs", nargs="*", default=["div", "rot", "grad_n"])
    args = parser.parse_args()
    if args.node:
        print(json.dumps(node(args)), flush=True)
        return 0
    return proof(args)


if __name__ == "__main__":
    sys.exit(main())
