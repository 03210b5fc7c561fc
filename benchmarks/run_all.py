"""Run every benchmark, save its tables, and plot accuracy vs epsilon and time vs size.

    python benchmarks/run_all.py            # full runs (tens of minutes)
    python benchmarks/run_all.py --quick    # a few minutes

Each script runs in its own process (so one failure does not stop the others)
with its own ``--quick`` option. Their markdown output goes to
``benchmarks/results/<script>.md``, all of it to ``benchmarks/results/summary.md``,
and two figures to ``benchmarks/results/``:

* ``accuracy_vs_epsilon.png``: test accuracy and ROC AUC of each method of
  ``bench_cd.py`` against epsilon, per data set, with the non-private level;
* ``time_vs_features.png``: fit time of the private classifier's solvers and of
  scikit-learn against the number of features, on generated sparse data.
"""

import argparse
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SCRIPTS = {
    "bench_cd": {"quick": ["--quick"], "full": []},
    "bench_output_perturbation": {"quick": ["--quick"], "full": []},
    "bench_mean": {"quick": ["--quick"], "full": []},
    "bench_sgd": {"quick": ["--quick"], "full": []},
    "bench_bias_reduced": {"quick": ["--quick"], "full": []},
    "bench_model_selection": {"quick": ["--quick"], "full": []},
    "bench_preprocessing": {"quick": ["--quick"], "full": []},
    "bench_regression_decision": {"quick": ["--seeds", "1"], "full": []},
    "bench_sufficient_statistics": {"quick": ["--quick"], "full": []},
    "bench_fp_safe": {"quick": ["--quick"], "full": []},
    "bench_fp_safe_cd": {"quick": ["--quick"], "full": []},
    "bench_fp_safe_sparse": {"quick": ["--quick"], "full": []},
    "bench_fp_safe_defaults": {"quick": ["--quick"], "full": []},
    "bench_text": {"quick": ["--quick"], "full": []},
    "bench_text_pipeline": {"quick": ["--quick"], "full": []},
    "bench_multiclass": {"quick": ["--quick"], "full": []},
    "bench_speed": {"quick": ["--quick", "--repeats", "3"], "full": []},
    "bench_speed_sparse": {"quick": ["--quick"], "full": []},
    "bench_scale": {"quick": ["--quick", "--no-sklearn"],
                    "full": ["--sklearn-for", "logistic (default)", "greedy CD regressor",
                             "--sklearn-timeout", "300", "--timeout", "900"]},
}


def parse_markdown_tables(text):
    """Every markdown table in ``text`` as a list of dicts (one per row)."""
    tables, current = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            current.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif current:
            header, *rows = [r for r in current if not set("".join(r)) <= set("-: ")]
            tables.append([dict(zip(header, r, strict=False)) for r in rows])
            current = []
    return tables


def _float(value):
    try:
        return float(value.split()[0])
    except (ValueError, IndexError, AttributeError):
        return np.nan


def plot_accuracy_vs_epsilon(cd_text, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for table in parse_markdown_tables(cd_text) for r in table]
    datasets = sorted({r["dataset"] for r in rows})
    if not datasets:
        return False
    fig, axes = plt.subplots(2, len(datasets), figsize=(4.5 * len(datasets), 7), squeeze=False)
    for col, name in enumerate(datasets):
        mine = [r for r in rows if r["dataset"] == name]
        methods = sorted({r["method"].split(" -> ")[0] for r in mine if r["epsilon"] != "inf"})
        for row, metric in enumerate(("accuracy", "roc_auc")):
            ax = axes[row, col]
            for method in methods:
                pts = sorted((_float(r["epsilon"]), _float(r[metric])) for r in mine
                             if r["method"].split(" -> ")[0] == method and r["epsilon"] != "inf")
                if pts:
                    ax.plot(*zip(*pts, strict=True), marker="o", label=method)
            for r in mine:
                if r["epsilon"] == "inf" and r["method"] == "sklearn LogisticRegression":
                    ax.axhline(_float(r[metric]), color="k", ls="--", label="non-private")
            ax.set_xscale("log")
            ax.set_xlabel("epsilon")
            ax.set_ylabel(metric)
            ax.set_title(name)
        axes[0, col].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def plot_time_vs_features(path, quick):
    """Fit time against p at fixed n and non-zeros per row, each solver and scikit-learn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import scipy.sparse as sp
    from sklearn.linear_model import LogisticRegression

    from skdp_sparse import DPSparseLogisticRegression

    rng = np.random.default_rng(0)
    n, nnz_row = 20_000, 20
    sizes = [10**3, 10**4, 10**5] if quick else [10**3, 10**4, 10**5, 10**6]
    methods = {
        "sklearn (non-private)": lambda: LogisticRegression(max_iter=200),
        "greedy_cd": lambda: DPSparseLogisticRegression(solver="greedy_cd", random_state=0),
        "cd": lambda: DPSparseLogisticRegression(solver="cd", max_iter=1, random_state=0),
        "sgd": lambda: DPSparseLogisticRegression(solver="sgd", random_state=0),
        "sparse_sgd": lambda: DPSparseLogisticRegression(solver="sparse_sgd", random_state=0),
    }
    times = {m: [] for m in methods}
    for p in sizes:
        cols = rng.integers(0, p, size=n * nnz_row)
        X = sp.csr_matrix((np.full(cols.size, 1 / np.sqrt(nnz_row)), cols,
                           np.arange(0, cols.size + 1, nnz_row)), shape=(n, p))
        w = rng.standard_normal(p)
        y = (X @ w > 0).astype(int)
        for name, make in methods.items():
            make().fit(X[:200], y[:200])  # compile the kernels outside the timing
            start = time.perf_counter()
            make().fit(X, y)
            times[name].append(time.perf_counter() - start)
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, ts in times.items():
        ax.plot(sizes, ts, marker="o", label=name)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("number of features p (n = 20,000, 20 non-zeros per row)")
    ax.set_ylabel("fit time (s)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    lines = ["| p | " + " | ".join(times) + " |", "|---" * (len(times) + 1) + "|"]
    for i, p in enumerate(sizes):
        lines.append(f"| {p} | " + " | ".join(f"{times[m][i]:.3f}" for m in times) + " |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="each script's quick mode")
    parser.add_argument("--only", nargs="+", choices=sorted(SCRIPTS), help="run these only")
    parser.add_argument("--out", default=str(HERE / "results"))
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    mode = "quick" if args.quick else "full"
    summary = [f"# skdp_sparse benchmarks ({mode})", ""]
    outputs = {}
    for name in args.only or SCRIPTS:
        cmd = [sys.executable, str(HERE / f"{name}.py"), *SCRIPTS[name][mode]]
        print(f"running {' '.join(cmd[1:])}", flush=True)
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=HERE)
        elapsed = time.perf_counter() - start
        text = proc.stdout if proc.returncode == 0 else (
            proc.stdout + f"\n\nFAILED (exit {proc.returncode}):\n```\n{proc.stderr[-3000:]}\n```")
        outputs[name] = text
        (out / f"{name}.md").write_text(text)
        summary += [f"## {name} ({elapsed:.0f} s)", "", text.strip(), ""]
        print(f"  done in {elapsed:.0f} s, exit {proc.returncode}", flush=True)
    if "bench_cd" in outputs and plot_accuracy_vs_epsilon(outputs["bench_cd"],
                                                          out / "accuracy_vs_epsilon.png"):
        summary += ["![accuracy vs epsilon](accuracy_vs_epsilon.png)", ""]
    table = plot_time_vs_features(out / "time_vs_features.png", args.quick)
    summary += ["## Fit time vs number of features", "", table, "",
                "![time vs features](time_vs_features.png)", ""]
    (out / "summary.md").write_text("\n".join(summary))
    print(f"wrote {out / 'summary.md'}")


if __name__ == "__main__":
    main()
