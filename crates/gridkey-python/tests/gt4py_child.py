"""A fresh interpreter for the adapter's cross-process tests (test_gt4py_adapter.py), run with the environment GT4Py
reads at import (``GT4PY_BUILD_CACHE_LIFETIME=persistent``, ``GT4PY_BUILD_CACHE_DIR``, ``GT4PY_BUILD_JOBS_MODE``) and
``GRIDKEY_CACHE_DIR``. It prints one JSON object on its last line.

``translate``: GT4Py's translation step of ``div`` (the task's own executor, as a runner would run it), with every real
translation counted in ``--count`` (one line per translation, this process's pid) and slowed by ``--sleep`` seconds,
after ``--start`` exists (so that several children translate at the same time).

``run``: compiles ``--programs`` in the environment's build-jobs mode, reports the adapter's `stats`, whether GT4Py's
default runner (its pool) exists after compiling and how many worker processes it has, waits, and checks each result
against NumPy.
"""

from __future__ import annotations

from typing import Any

import argparse
import json
import multiprocessing
import os
import pathlib
import sys
import time
import warnings

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "crates" / "gridkey-python" / "proof"))
GRID = ROOT / "data" / "grids" / "icon_grid_0013_R02B04_R.nc"


def translate(args: Any) -> dict[str, Any]:
    import concurrent.futures

    import gt4py.next as gtx
    from gt4py.next.otf import runners
    from gt4py.next.program_processors.runners.gtfn import run_gtfn

    import icon_programs as ip

    tables = ip.read_icon_tables(GRID)
    provider = ip.offset_provider(tables, order="C", allocator=np)
    if args.adapter:
        import gridkey.gt4py

        assert gridkey.gt4py.install()

    class Recording:
        tasks: list[Any] = []

        def submit(self, task: Any) -> Any:
            self.tasks.append(task)
            return concurrent.futures.Future()

        def shutdown(self, wait: Any=True) -> Any:
            pass

    recording = Recording()
    runners._default_runner = recording
    gtx.program(backend=run_gtfn)(ip.div.definition_stage.definition).compile(offset_provider=provider)
    runners._default_runner = None
    task = recording.tasks[-1]
    translation = task.executor.translation
    cached = getattr(translation, "cached", translation)
    step_type = type(cached.step)
    original = step_type.__call__

    def counted(self: Any, inp: Any) -> Any:
        with open(args.count, "a") as f:
            f.write(f"{os.getpid()}\n")
        time.sleep(args.sleep)
        return original(self, inp)

    step_type.__call__ = counted
    print("ready", flush=True)
    while not pathlib.Path(args.start).exists():
        time.sleep(0.01)
    started = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        source = translation(task.construct_compilable(False))
    return {
        "seconds": time.perf_counter() - started,
        "entry_point": source.entry_point.name,
        "source_bytes": len(source.source_code),
        "warnings": [str(w.message) for w in caught],
        "stats": _stats(),
    }


def _stats() -> Any:
    if "gridkey.gt4py" not in sys.modules:
        return None
    return {**sys.modules["gridkey.gt4py"].stats(), "tiers": sys.modules["gridkey._gt4py_tiers"].counters()._asdict()}


def run(args: Any) -> dict[str, Any]:
    import gt4py.next  # noqa: F401
    from gt4py.next.otf import compiled_program, runners

    import icon_programs as ip

    tables = ip.read_icon_tables(GRID)
    provider = ip.offset_provider(tables, order="C", allocator=np)
    if args.adapter:
        import gridkey.gt4py

        assert gridkey.gt4py.install()
    started = time.perf_counter()
    for name in args.programs:
        ip.PROGRAMS[name].compile(offset_provider=provider)
    runner = runners._default_runner
    pool = getattr(runner, "_pool", None)
    workers = len(getattr(pool, "_processes", None) or {})
    compiled_program.wait_for_compilation()
    compile_seconds = time.perf_counter() - started
    errors = {}
    for name, (inputs, out, reference) in ip.cases(tables).items():
        if name not in args.programs:
            continue
        fields = ip.as_fields({**inputs, out: np.zeros_like(reference)})
        ip.PROGRAMS[name](**fields, offset_provider=provider)
        got = fields[out].asnumpy()
        errors[name] = float(np.max(np.abs(got - reference)) / max(float(np.max(np.abs(reference))), 1e-300))
    return {
        "default_runner": None if runner is None else type(runner).__name__,
        "pool_workers": workers,
        "children": len(multiprocessing.active_children()),
        "compile_seconds": compile_seconds,
        "stats": _stats(),
        "max_rel_error": errors,
        "verified": bool(errors) and all(e <= 1e-12 for e in errors.values()),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("what", choices=["translate", "run"])
    parser.add_argument("--adapter", type=int, choices=[0, 1], default=1)
    parser.add_argument("--count", type=pathlib.Path)
    parser.add_argument("--start", type=pathlib.Path)
    parser.add_argument("--sleep", type=float, default=0.0)
    parser.add_argument("--programs", nargs="*", default=["div"])
    args = parser.parse_args()
    result = translate(args) if args.what == "translate" else run(args)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
