"""Cost of floating-point-safe noise against the textbook float path.

For the Laplace and Gaussian mechanisms at d = 10^4 and 10^6 coordinates, times one
``randomise`` call of

* the float path (``floating_point_safe=False``): ``value + rng.laplace(...)`` or
  ``value + rng.normal(...)`` in doubles;
* the safe path (``floating_point_safe=True``): rounding to the lattice and exact
  discrete Laplace / discrete Gaussian noise (:mod:`skdp_sparse.privacy.discrete`).

Times are CPU seconds of the calling thread (both paths are single-threaded), the
minimum over ``--repeats`` interleaved runs, so other load on the machine inflates
them less. "first call" is a safe release at a noise scale not seen before: the
Laplace path then builds its exact inversion table (cached afterwards; the Gaussian
path always uses the same table).

Run: ``python benchmarks/bench_fp_safe.py [--repeats 7]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import markdown_table  # noqa: E402

from skdp_sparse.privacy.mechanisms import GaussianMechanism, LaplaceMechanism  # noqa: E402


def _mechanisms(safe, sensitivity=1.0):
    return {
        "Laplace": LaplaceMechanism(sensitivity, epsilon=1.0, floating_point_safe=safe),
        "Gaussian": GaussianMechanism(sensitivity, epsilon=1.0, delta=1e-6,
                                      floating_point_safe=safe),
    }


def _cpu_time(mech, value, rng):
    start = time.process_time()
    mech.randomise(value, rng)
    return time.process_time() - start


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--dims", type=int, nargs="+", default=[10**4, 10**6])
    args = parser.parse_args(argv)

    rng = np.random.default_rng(0)
    float_mechs, safe_mechs = _mechanisms(False), _mechanisms(True)
    # Compile the kernels (cached on disk after the first run) before timing.
    for mech in safe_mechs.values():
        mech.randomise(np.zeros(8), rng)

    rows = []
    for d in args.dims:
        value = np.random.default_rng(1).normal(size=d)
        for mech in (*float_mechs.values(), *safe_mechs.values()):
            mech.randomise(value, rng)  # first touch of arrays this large
        for name in ("Laplace", "Gaussian"):
            # A sensitivity not used before, so the safe path meets a new noise scale.
            fresh = _mechanisms(True, sensitivity=1.0 + d * 1e-9 + (name == "Gaussian"))[name]
            first = _cpu_time(fresh, value, rng)
            times = {"float": [], "safe": []}
            for _ in range(args.repeats):
                for path, mechs in (("float", float_mechs), ("safe", safe_mechs)):
                    times[path].append(_cpu_time(mechs[name], value, rng))
            t_float, t_safe = min(times["float"]), min(times["safe"])
            rows.append({
                "mechanism": name, "d": f"{d:.0e}",
                "float path (ms)": 1e3 * t_float, "safe path (ms)": 1e3 * t_safe,
                "safe / float": t_safe / t_float, "safe, first call (ms)": 1e3 * first,
                "ns per coordinate (safe)": 1e9 * t_safe / d,
            })
    columns = ["mechanism", "d", "float path (ms)", "safe path (ms)", "safe / float",
               "safe, first call (ms)", "ns per coordinate (safe)"]
    print(markdown_table(rows, columns, floatfmt=".2f"))


if __name__ == "__main__":
    main()
