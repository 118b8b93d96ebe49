"""icon4py as the client of the GT4Py proof: real icon4py 0.4.1 stencils on the grid its grid manager reads, across
build-jobs modes, without and with ``gridkey.gt4py``. Run by ``cargo xtask gt4py --icon4py`` in the virtual
environment ``target/icon4py-venv`` (``icon4py-atmosphere-diffusion``, ``icon4py-atmosphere-dycore`` and
``icon4py-common`` 0.4.1 from PyPI, the GT4Py 1.2.1 they pin, the ``gridkey`` wheel).

The programs are icon4py's own, imported from its wheels (``PROGRAMS``); the offset provider is the one icon4py's
``GridManager`` builds from the shipped ICON R02B04 grid (every table it constructs, derived ones included), in three
layouts: icon4py's own (GT4Py's default allocator), and copies made with ``allocator=np`` in C and in Fortran order.

1. Seed: the programs' C++ built once (serial, without the adapter) into a GT4Py cache whose translation cache is then
   removed, so that every fill translates but finds its builds.
2. Cells: for each layout and adapter setting, a copy of the seed is filled in mode A and a copy of that is run in mode
   B, for (A, B) in ``PAIRS``; the entries B adds to GT4Py's translation cache directory are the re-translations (read
   from the directory, not assumed). Every run checks each program's output against a NumPy reference computed on the
   grid manager's tables, and that running the compiled programs translated nothing more.
3. Warm start: in each mode, the seconds of compiling every program and waiting for it on a cache warm for that mode
   (icon4py's layout): the median of ``--warm-repeats`` runs (5) on the cache of the cell serial -> that mode, which
   must translate and build nothing, without and with the adapter alternating (``gt4py_proof.alternating``);
   printed with the ratios thread / serial and process / serial with the adapter (goal 1.2) and serial with / without
   the adapter (goal 1.0): timings on a shared machine, printed, not the exit status.
4. DaCe (``--dace``): the cell serial -> process with GT4Py's DaCe CPU backend (``run_dace_cpu``) on ``allocator=np``
   tables, without and with the adapter.

5. Scale (``--redis URL``): icon4py's programs cold in N = 1, 4 and 8 ranks (separate interpreters started together,
   serial mode, with the adapter) on one empty GT4Py cache and gridkey cache directory: the translations and C++
   builds counted in every rank, added up, must equal the programs, and the compile wall time of the N ranks is
   printed against 1.3x one rank; then 4 nodes (each its own GT4Py cache and gridkey cache directory, all writers of
   the shared tier at ``URL`` signing with one key) started together: translations and builds cluster-wide must equal
   the programs; then a fresh node warm from the shared tier (0 translations, 0 builds, every extension from Redis)
   against the same node warm from its local caches, medians of 7 (alternating), printed against 1.2x.

Writes ``<work>/icon4py-proof.json`` and prints a table naming each program. Exit status 0 when every run verifies,
every cell with the adapter re-translates 0, no run with the adapter builds anything the seed did not hold, every
warm start translates nothing, the N ranks and N nodes (``--redis``) translate and build each program once, and the
control shows: without the adapter, ``allocator=np`` tables re-translate serial -> process.

``--cell`` runs one cell's side in this interpreter (the driver starts it in a fresh one per run, with GT4Py's
environment set); it imports icon4py and GT4Py only there, so that a process-mode worker, which re-imports this file,
starts without them.
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
import time

#: (icon4py package, module = program name, offset, output dimension, input field, coefficient field, output field):
#: each computes ``out(x, k) = sum_j coeff(x, j) * inp(offset(x, j), k)``, as icon4py's own references do.
PROGRAMS = (
    ("diffusion", "calculate_nabla2_of_theta", "C2E", "Cell", "z_nabla2_e", "geofac_div", "z_temp"),
    ("diffusion", "calculate_nabla2_for_w", "C2E2CO", "Cell", "w", "geofac_n2s", "z_nabla2_c"),
    ("dycore", "compute_tangential_wind", "E2C2E", "Edge", "vn", "rbf_vec_coeff_e", "vt"),
)
LAYOUTS = ("icon4py", "np-C", "np-F")
MODES = ("serial", "thread", "process")
#: The ordered pairs (fill mode, run mode) of every layout and adapter setting; serial -> serial only in icon4py's
#: layout, where it is the serial warm start.
PAIRS = (("serial", "serial"), ("serial", "thread"), ("serial", "process"), ("process", "serial"))


def pairs(layout: str) -> list[tuple[str, str]]:
    return [(a, b) for a, b in PAIRS if layout == "icon4py" or a != b]
#: Vertical levels of every field.
NLEV = 4
GT4PY_CACHE = ".gt4py_cache"
HERE = pathlib.Path(__file__).resolve()


# One run (--cell), in a fresh interpreter with GT4Py's environment set.


def _backend(name: str):
    if name == "gtfn":
        from gt4py.next.program_processors.runners.gtfn import run_gtfn

        return run_gtfn
    from gt4py.next.program_processors.runners.dace import run_dace_cpu

    return run_dace_cpu


def _translation_dir(backend) -> pathlib.Path:
    """GT4Py's persistent translation cache directory of ``backend`` (``gtfn_cache`` in 1.2.1, ``translation_cache``
    for DaCe), from the cached translation step itself."""
    return pathlib.Path(backend.executor.translation.cache.path)


def _entries(directory: pathlib.Path) -> set[str]:
    """The translation-cache entries (``<hash>.pkl``; their ``.lock`` files are not entries)."""
    return {p.name for p in directory.glob("*.pkl")} if directory.is_dir() else set()


def _provider(grid, layout: str):
    import numpy as np
    import gt4py.next as gtx

    connectivities = dict(grid.connectivities)
    if layout == "icon4py":
        return connectivities
    copy = np.ascontiguousarray if layout == "np-C" else np.asfortranarray
    return {
        name: gtx.as_connectivity(
            c.domain.dims, c.codomain, copy(c.ndarray), skip_value=c.skip_value, allocator=np
        )
        for name, c in connectivities.items()
    }


def run_cell(args) -> dict:
    import importlib
    import warnings

    warnings.filterwarnings("ignore", message="Python is not running in optimized mode")
    import numpy as np
    import gt4py
    import gt4py.next as gtx
    from gt4py.next import config
    from gt4py.next.otf import compiled_program
    from icon4py.model.common import dimension as dims
    from icon4py.model.common.grid import grid_manager, vertical

    assert config.BUILD_CACHE_LIFETIME is config.BuildCacheLifetime.PERSISTENT, os.environ.get("GT4PY_BUILD_CACHE_LIFETIME")
    manager = grid_manager.GridManager(args.grid, vertical.VerticalGridConfig(num_levels=NLEV))
    manager(allocator=None, keep_skip_values=True)
    grid = manager.grid
    provider = _provider(grid, args.layout)
    backend = _backend(args.backend)
    translations = _translation_dir(backend)
    root = config.BUILD_CACHE_DIR
    programs = {}
    for package, name, *_ in PROGRAMS:
        module = importlib.import_module(f"icon4py.model.atmosphere.{package}.stencils.{name}")
        programs[name] = getattr(module, name).with_backend(backend)

    import gt4py_nodes

    work = gt4py_nodes.count_work()
    before = _entries(translations)
    builds_before = _builds(root)
    started_at = time.time()
    started = time.perf_counter()
    if args.adapter:
        import gridkey.gt4py

        assert gridkey.gt4py.install(), "gridkey.gt4py.install() found GT4Py's own compile-time connectivities"
    for program in programs.values():
        program.compile(offset_provider=provider)
    compiled_program.wait_for_compilation()
    compile_seconds = time.perf_counter() - started
    compile_window = (started_at, time.time())
    after = _entries(translations)
    builds_after = _builds(root)

    rng = np.random.default_rng(13)
    dim = {"Cell": dims.CellDim, "Edge": dims.EdgeDim, "Vertex": dims.VertexDim}
    errors = {}
    for _, name, offset, out_dim, inp, coeff, out in PROGRAMS:
        table = grid.connectivities[offset]
        source = table.codomain
        n, k = table.ndarray.shape
        inp_np = rng.standard_normal((grid.size[source], NLEV))
        coeff_np = rng.standard_normal((n, k))
        index = np.asarray(table.ndarray)
        valid = index >= 0
        reference = np.sum(np.where(valid[:, :, None], coeff_np[:, :, None] * inp_np[np.where(valid, index, 0)], 0.0), axis=1)
        fields = {
            inp: gtx.as_field([source, dims.KDim], inp_np),
            coeff: gtx.as_field([table.domain.dims[0], table.domain.dims[1]], coeff_np),
            out: gtx.as_field([dim[out_dim], dims.KDim], np.zeros_like(reference)),
        }
        programs[name](
            **fields, horizontal_start=0, horizontal_end=n, vertical_start=0, vertical_end=NLEV, offset_provider=provider
        )
        got = fields[out].asnumpy()
        errors[name] = float(np.max(np.abs(got - reference)) / max(float(np.max(np.abs(reference))), 1e-300))
    after_runs = _entries(translations)
    tiers = {}
    if args.adapter:
        from gridkey import _gt4py_tiers

        c = _gt4py_tiers.counters()
        tiers = {name: getattr(c, name) for name in TIER_COUNTERS}
    return {
        "gt4py": gt4py.__version__,
        "backend": backend.name,
        "mode": config.BUILD_JOBS_MODE.name.lower(),
        "layout": args.layout,
        "adapter": bool(args.adapter),
        "compile_seconds": compile_seconds,
        "compile_window": compile_window,
        "translations": work["translations"],
        "builds": work["builds"],
        **tiers,
        "new_translations": len(after - before),
        "translations_while_running": len(after_runs - after),
        "new_builds": len(builds_after - builds_before),
        "translation_dir": str(translations),
        "max_rel_error": errors,
        "verified": all(e <= 1e-12 for e in errors.values()) and after_runs == after,
    }


#: The counters of gridkey's tiers a run with the adapter reports (``gridkey._gt4py_tiers.counters()``).
TIER_COUNTERS = (
    "translations_from_remote", "extensions_from_remote", "translations_uploaded", "extensions_uploaded", "rejected",
    "remote_rejected",
)  # fmt: skip


def _builds(root: pathlib.Path) -> set[str]:
    """GT4Py's build folders of the programs (``<program>_pyext_...``; not the shared build-system prototype)."""
    names = tuple(f"{p[1]}_" for p in PROGRAMS)
    return {p.name for p in root.iterdir() if p.is_dir() and p.name.startswith(names)} if root.is_dir() else set()


# The driver.


def cell_env(cache: pathlib.Path, mode: str, jobs: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GT4PY_", "GRIDKEY_", "ICON4PY_"))}
    env.update(
        GT4PY_BUILD_CACHE_LIFETIME="persistent",
        GT4PY_BUILD_CACHE_DIR=str(cache),
        GT4PY_BUILD_JOBS=str(jobs),
        GT4PY_BUILD_JOBS_MODE=mode,
        GRIDKEY_CACHE_DIR=str(cache / "gridkey"),
        # cmake and ninja of the virtual environment
        PATH=f"{pathlib.Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    return env


def start(cache: pathlib.Path, mode: str, args, layout: str, adapter: bool, backend: str = "gtfn", extra_env=None):
    """Starts one run (``--cell``) in a fresh interpreter on ``cache``; `finish` waits for it."""
    command = [
        sys.executable, str(HERE), "--cell", "--grid", str(args.grid), "--layout", layout,
        "--adapter", str(int(adapter)), "--backend", backend,
    ]  # fmt: skip
    env = {**cell_env(cache, mode, args.jobs), **(extra_env or {})}
    child = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return child, time.perf_counter(), f"{mode} {layout} adapter={adapter} {backend} in {cache}"


def finish(started) -> dict:
    """The JSON object of a run `start` started, with its process's wall time (exits with its output on a failure)."""
    child, at, what = started
    out, err = child.communicate()
    if child.returncode != 0:
        sys.stdout.write(out[-4000:])
        sys.stdout.write(err[-8000:])
        raise SystemExit(f"icon4py proof: the run {what} failed ({child.returncode})")
    result = json.loads(out.strip().splitlines()[-1])
    result["wall_seconds"] = time.perf_counter() - at
    return result


def run(cache: pathlib.Path, mode: str, args, layout: str, adapter: bool, backend: str = "gtfn", extra_env=None) -> dict:
    return finish(start(cache, mode, args, layout, adapter, backend, extra_env))


def copy_cache(source: pathlib.Path, target: pathlib.Path) -> pathlib.Path:
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target, symlinks=True)
    return target


def fresh(path: pathlib.Path) -> pathlib.Path:
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


def seed_key(args, backend: str) -> str:
    """What the seed's builds depend on: GT4Py's and icon4py's versions, the programs, the backend and the grid."""
    import hashlib
    from importlib import metadata

    h = hashlib.sha256()
    for part in (metadata.version("gt4py"), metadata.version("icon4py-common"), repr(PROGRAMS), str(NLEV), backend):
        h.update(part.encode() + b"\0")
    h.update(args.grid.read_bytes())
    return h.hexdigest()


def make_seed(args, backend: str) -> pathlib.Path:
    """A cache holding the builds of every program and no translation entry (serial, without the adapter); reused
    while its key (``seed_key``) matches, since the C++ builds are the slow part."""
    seed = args.work / f"seed-{backend}"
    stamp = args.work / f"seed-{backend}.key"
    key = seed_key(args, backend)
    if seed.is_dir() and stamp.is_file() and stamp.read_text() == key:
        print(f"seed ({backend}): reused (same GT4Py, icon4py, programs, grid)", flush=True)
        return seed
    stamp.unlink(missing_ok=True)
    fresh(seed)
    result = run(seed, "serial", args, "np-C", False, backend)
    if not result["verified"]:
        raise SystemExit(f"icon4py proof: the seed run ({backend}) did not verify: {result['max_rel_error']}")
    shutil.rmtree(result["translation_dir"])
    stamp.write_text(key)
    print(
        f"seed ({backend}): {result['new_translations']} translations, {result['new_builds']} builds,"
        f" {result['wall_seconds']:.0f} s",
        flush=True,
    )
    return seed


def cell(args, seed: pathlib.Path, layout: str, adapter: bool, a: str, bs: list[str], backend: str = "gtfn") -> list[dict]:
    """Fills a copy of ``seed`` in mode ``a``, then runs a copy of that in each mode of ``bs``."""
    fill_dir = copy_cache(seed, args.work / "fill")
    fill = run(fill_dir, a, args, layout, adapter, backend)
    cells = []
    for b in bs:
        warm_dir = copy_cache(fill_dir, args.work / f"warm-{backend}-{layout}-{int(adapter)}-{a}-{b}")
        warm = run(warm_dir, b, args, layout, adapter, backend)
        c = {
            "backend": warm["backend"],
            "layout": layout,
            "adapter": adapter,
            "fill_mode": a,
            "run_mode": b,
            "fill_translations": fill["new_translations"],
            "retranslations": warm["new_translations"],
            "new_builds": fill["new_builds"] + warm["new_builds"],
            "run_new_builds": warm["new_builds"],
            "fill_compile_seconds": fill["compile_seconds"],
            "run_compile_seconds": warm["compile_seconds"],
            "max_rel_error": max([*fill["max_rel_error"].values(), *warm["max_rel_error"].values()]),
            "verified": fill["verified"] and warm["verified"],
            "cache": str(warm_dir),
        }
        cells.append(c)
        print(
            f"  {warm['backend']:<16} {layout:<8} {'with' if adapter else 'without':<8} {a:>7} -> {b:<7}"
            f" re-translated {c['retranslations']}/{len(PROGRAMS)} (fill {c['fill_translations']}/{len(PROGRAMS)},"
            f" new builds {c['new_builds']}, {'verified' if c['verified'] else 'NOT VERIFIED'})",
            flush=True,
        )
    return cells


#: The compile wall time of N ranks cold on one cache against one rank cold (ADR 0039), and of a fresh node warm
#: from the shared tier against the same node warm from its local caches: timings, printed, not the exit status.
RANKS_LIMIT = 1.3
NODES_LIMIT = 1.2


def ranks(args, n: int) -> dict:
    """``n`` ranks (serial mode, icon4py's layout, with the adapter) started together on one empty GT4Py cache and
    gridkey cache directory: the compile wall time (the first rank's ``compile()`` to the last rank's
    ``wait_for_compilation()``) and the translations and C++ builds counted in the ranks, added up."""
    cache = fresh(args.work / f"ranks-{n}")
    results = [finish(s) for s in [start(cache, "serial", args, "icon4py", True) for _ in range(n)]]
    return {
        "ranks": n,
        "compile_wall_seconds": max(r["compile_window"][1] for r in results) - min(r["compile_window"][0] for r in results),
        "wall_seconds": max(r["wall_seconds"] for r in results),
        "translations": sum(r["translations"] for r in results),
        "builds": sum(r["builds"] for r in results),
        "verified": all(r["verified"] for r in results),
    }


def nodes(args, n: int, repeats: int = 7) -> dict:
    """``n`` writer nodes of the shared tier ``args.redis`` (each its own GT4Py cache and gridkey cache directory,
    one signing key) started together, then a fresh node warm from the shared tier against the same node warm from
    its local caches, ``repeats`` times."""
    sys.path.insert(0, str(HERE.parent))
    import gt4py_nodes

    keys = gt4py_nodes.cluster_keys(fresh(args.work / "keys"))
    env = gt4py_nodes.shared_env(args.redis, f"icon4py-proof-{os.getpid()}-{time.time_ns()}", keys)
    started = [start(fresh(args.work / f"node{i}"), "serial", args, "icon4py", True, extra_env=env) for i in range(n)]
    rows = [finish(s) for s in started]
    fresh_runs, local_runs = [], []
    for r in range(repeats):
        place = fresh(args.work / f"fresh{r}")
        fresh_runs.append(run(place, "serial", args, "icon4py", True, extra_env=env))
        local_runs.append(run(place, "serial", args, "icon4py", True, extra_env=env))
    fresh_s = statistics.median(r["compile_seconds"] for r in fresh_runs)
    local_s = statistics.median(r["compile_seconds"] for r in local_runs)
    p = len(PROGRAMS)
    return {
        "nodes": n,
        "repeats": repeats,
        "translations": sum(r["translations"] for r in rows),
        "builds": sum(r["builds"] for r in rows),
        "extensions_uploaded": sum(r["extensions_uploaded"] for r in rows),
        "fresh_translations": max(r["translations"] for r in fresh_runs),
        "fresh_builds": max(r["builds"] for r in fresh_runs),
        "fresh_extensions_from_remote": min(r["extensions_from_remote"] for r in fresh_runs),
        "local_translations": max(r["translations"] for r in local_runs),
        "local_builds": max(r["builds"] for r in local_runs),
        "fresh_seconds": fresh_s,
        "local_seconds": local_s,
        "ratio": fresh_s / max(local_s, 1e-9),
        "ok": all(r["verified"] for r in [*rows, *fresh_runs, *local_runs])
        and sum(r["translations"] for r in rows) == p
        and sum(r["builds"] for r in rows) == p
        and all(r["translations"] == 0 and r["builds"] == 0 for r in fresh_runs + local_runs)
        and all(r["extensions_from_remote"] == p for r in fresh_runs),
    }


def scale(args) -> dict:
    """The N ranks and N nodes of the proof (module documentation, step 5), printed."""
    p = len(PROGRAMS)
    one = ranks(args, 1)
    many = {n: ranks(args, n) for n in (4, 8)}
    ok = all(r["verified"] and r["translations"] == p and r["builds"] == p for r in [one, *many.values()])
    within = all(r["compile_wall_seconds"] <= RANKS_LIMIT * one["compile_wall_seconds"] for r in many.values())
    print(f"\nN ranks cold on one cache (serial, with the adapter; {p} programs)")
    for r in [one, *many.values()]:
        print(
            f"  {r['ranks']} rank{'s' if r['ranks'] > 1 else ' '}: compile {r['compile_wall_seconds']:.1f} s"
            f" ({r['compile_wall_seconds'] / one['compile_wall_seconds']:.2f}x one rank, limit {RANKS_LIMIT}x;"
            f" processes {r['wall_seconds']:.1f} s),"
            f" {r['translations']} translations and {r['builds']} C++ builds in all (of {p}),"
            f" {'verified' if r['verified'] else 'NOT VERIFIED'}",
            flush=True,
        )
    cluster = nodes(args, 4)
    print(
        f"\n4 nodes on Redis (each its own caches, all writers): {cluster['translations']} translations,"
        f" {cluster['builds']} C++ builds cluster-wide (of {p}), {cluster['extensions_uploaded']} extensions uploaded;"
        f" a fresh node: {cluster['fresh_translations']} translations, {cluster['fresh_builds']} builds,"
        f" {cluster['fresh_extensions_from_remote']} extensions from Redis; warm from Redis / warm from local, median"
        f" of {cluster['repeats']}: {cluster['fresh_seconds']:.2f} s / {cluster['local_seconds']:.2f} s = {cluster['ratio']:.2f}x (limit"
        f" {NODES_LIMIT}x); {'ok' if cluster['ok'] else 'FAILED'}",
        flush=True,
    )
    return {
        "one_rank": one,
        **{f"{n}_ranks": r for n, r in many.items()},
        "ranks_ok": ok,
        "ranks_within_limit": within,
        "nodes": cluster,
        "nodes_within_limit": cluster["ratio"] <= NODES_LIMIT,
        "ok": ok and cluster["ok"],
    }


def main_proof(args) -> int:
    import gt4py

    started = time.perf_counter()
    args.work.mkdir(parents=True, exist_ok=True)
    print(f"icon4py proof: GT4Py {gt4py.__version__}, Python {sys.version.split()[0]}, grid {args.grid.name}")
    print("programs: " + ", ".join(f"{p[1]} (icon4py.model.atmosphere.{p[0]}, {p[2]})" for p in PROGRAMS), flush=True)
    if args.scale_only:
        if not args.redis:
            raise SystemExit("icon4py proof: --scale-only runs the N nodes on a shared tier: give --redis URL too")
        scaled = scale(args)
        (args.json or args.work / "icon4py-proof.json").write_text(json.dumps({"gt4py": gt4py.__version__, "scale": scaled}, indent=1))
        print(f"\nicon4py proof (N ranks and N nodes only): {'ok' if scaled['ok'] else 'FAILED'}; {time.perf_counter() - started:.0f} s")
        return 0 if scaled["ok"] else 1
    seed = make_seed(args, "gtfn")
    cells = []
    for layout in LAYOUTS:
        for adapter in (False, True):
            wanted = pairs(layout)
            for a in dict.fromkeys(a for a, _ in wanted):
                cells += cell(args, seed, layout, adapter, a, [b for a2, b in wanted if a2 == a])

    # Warm start per mode: every program compiled and waited for on the cache of the cell serial -> that mode (warm
    # for that mode; where that cell translated or built, the cache it filled is run again instead), --warm-repeats
    # runs each, without and with the adapter alternating, in the GT4Py proof's schedule. The cell's own run is not
    # one of them: it was the first start after the fill.
    import gt4py_proof

    sources = {
        (mode, adapter): pathlib.Path(next(c for c in cells if (c["layout"], c["adapter"], c["fill_mode"], c["run_mode"]) == ("icon4py", adapter, "serial", mode))["cache"])
        for mode in MODES
        for adapter in (False, True)
    }  # fmt: skip
    schedule = gt4py_proof.alternating(
        args.warm_repeats, lambda mode, adapter: run(sources[(mode, adapter)], mode, args, "icon4py", adapter)
    )
    warm = {
        key: {
            "compile_seconds": statistics.median(r["compile_seconds"] for r in runs),
            "runs_seconds": [r["compile_seconds"] for r in runs],
            "new_translations": max(r["new_translations"] for r in runs),
            "new_builds": max(r["new_builds"] for r in runs),
            "verified": all(r["verified"] for r in runs),
        }
        for key, runs in schedule.items()
    }
    dace_cells = []
    if args.dace:
        dace_seed = make_seed(args, "dace")
        for adapter in (False, True):
            dace_cells += cell(args, dace_seed, "np-C", adapter, "serial", ["process"], "dace")

    scaled = scale(args) if args.redis else None

    every = cells + dace_cells
    ok = all(c["verified"] for c in every) and all(w["verified"] for w in warm.values())
    ok &= all(c["retranslations"] == 0 and c["new_builds"] == 0 for c in every if c["adapter"])
    ok &= all(w["new_translations"] == 0 and w["new_builds"] == 0 for w in warm.values())
    # The control: GT4Py's own misses show without the adapter (allocator=np tables, serial -> process).
    control = [c for c in cells if not c["adapter"] and c["layout"] != "icon4py" and (c["fill_mode"], c["run_mode"]) == ("serial", "process")]
    ok &= bool(control) and all(c["retranslations"] > 0 for c in control)
    ok &= scaled is None or scaled["ok"]

    print(f"\nre-translations in mode B of a cache filled in mode A (of {len(PROGRAMS)} programs:"
          f" {', '.join(p[1] for p in PROGRAMS)})")
    header = f"  {'backend':<16} {'layout':<8} {'adapter':<8} " + "".join(f"{f'{a}->{b}':>17}" for a, b in PAIRS)
    print(header)
    for backend in dict.fromkeys(c["backend"] for c in every):
        for layout in LAYOUTS:
            for adapter in (False, True):
                row = []
                for a, b in PAIRS:
                    hit = [c for c in every if (c["backend"], c["layout"], c["adapter"], c["fill_mode"], c["run_mode"]) == (backend, layout, adapter, a, b)]
                    row.append(f"{hit[0]['retranslations']:>17}" if hit else f"{'-':>17}")
                if any(r.strip() != "-" for r in row):
                    print(f"  {backend:<16} {layout:<8} {'with' if adapter else 'without':<8} " + "".join(row))
    print(f"\nwarm start (icon4py layout; compile + wait of every program, all hits; median of {args.warm_repeats} runs, without and with the adapter alternating)")
    for mode in MODES:
        w0, w1 = warm[(mode, False)], warm[(mode, True)]
        print(
            f"  {mode:<7}: without {w0['compile_seconds']:.2f} s ({w0['new_translations']} translated), "
            f"with {w1['compile_seconds']:.2f} s ({w1['new_translations']} translated)"
        )
    # The ratios and their limits are the GT4Py proof's (timings on a shared machine: printed, not the exit status).
    ratios, _ = gt4py_proof.warm_start_ratios({k: w["runs_seconds"] for k, w in warm.items()})
    worst = max(c["max_rel_error"] for c in every)
    print(f"\nlargest relative error against NumPy on the grid manager's tables: {worst:.1e} (limit 1e-12)")

    without = [c for c in every if not c["adapter"]]
    with_ = [c for c in every if c["adapter"]]
    results = {
        "gt4py": gt4py.__version__,
        "programs": [f"icon4py.model.atmosphere.{p[0]}.stencils.{p[1]}" for p in PROGRAMS],
        "grid": args.grid.name,
        "cells": every,
        "warm_start": {f"{m} {'with' if a else 'without'}": w for (m, a), w in warm.items()},
        "warm_start_ratios": ratios,
        "scale": scaled,
        "seconds": time.perf_counter() - started,
        "ok": ok,
    }
    (args.json or args.work / "icon4py-proof.json").write_text(json.dumps(results, indent=1))
    print(
        f"\nicon4py proof: with gridkey.gt4py {sum(c['retranslations'] == 0 for c in with_)}/{len(with_)} cells"
        f" re-translated 0; without it {sum(c['retranslations'] > 0 for c in without)}/{len(without)} cells missed"
        f" ({sum(c['retranslations'] for c in without)} re-translations);"
        + (
            ""
            if scaled is None
            else f" N ranks {'ok' if scaled['ranks_ok'] else 'FAILED'} (wall {'within' if scaled['ranks_within_limit'] else 'over'}"
            f" {RANKS_LIMIT}x), 4 nodes {'ok' if scaled['nodes']['ok'] else 'FAILED'} (warm from Redis"
            f" {scaled['nodes']['ratio']:.2f}x local);"
        )
        + f" {'ok' if ok else 'FAILED'};"
        f" {time.perf_counter() - started:.0f} s"
    )
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", type=pathlib.Path, required=True)
    parser.add_argument("--work", type=pathlib.Path, help="scratch directory (caches of every run)")
    parser.add_argument("--json", type=pathlib.Path, help="where the results go (default <work>/icon4py-proof.json)")
    parser.add_argument("--jobs", type=int, default=2, help="GT4PY_BUILD_JOBS of thread and process mode")
    parser.add_argument("--warm-repeats", type=int, default=5, help="runs of each warm start (the median is shown)")
    parser.add_argument("--dace", action="store_true", help="also the DaCe CPU backend's cell serial -> process")
    parser.add_argument("--redis", help="Redis URL of the shared tier: also the N ranks and N nodes (step 5)")
    parser.add_argument("--scale-only", action="store_true", help="with --redis: only step 5 (the N ranks and N nodes)")
    parser.add_argument("--cell", action="store_true", help="one run in this interpreter (see the module documentation)")
    parser.add_argument("--layout", choices=LAYOUTS, default="icon4py")
    parser.add_argument("--adapter", type=int, choices=[0, 1], default=0)
    parser.add_argument("--backend", choices=["gtfn", "dace"], default="gtfn")
    args = parser.parse_args()
    args.grid = args.grid.resolve()
    if args.cell:
        print(json.dumps(run_cell(args)), flush=True)
        return 0
    if args.work is None:
        parser.error("--work is required")
    args.work = args.work.resolve()
    return main_proof(args)


if __name__ == "__main__":
    sys.exit(main())
