"""The privacy ledger on a dask cluster: every fit recorded, or the fit refuses.

Workers of a cluster do not share the client's process tree (a nanny starts them)
nor, on other machines, its file system. Activating a ledger while a dask client
is around activates it on every worker too (a worker plugin); a worker that cannot
reach the ledger's store refuses to fit (fail closed) instead of fitting unrecorded.
"""

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest
import scipy.sparse as sp

distributed = pytest.importorskip("distributed")
joblib = pytest.importorskip("joblib")

from sklearn.model_selection import GridSearchCV  # noqa: E402

from skdp_sparse import DPSparseLogisticRegression  # noqa: E402
from skdp_sparse.exceptions import BudgetExceededError, LedgerUnreachableError  # noqa: E402
from skdp_sparse.privacy.ledger import DaskLedgerStore, PrivacyLedger  # noqa: E402

pytestmark = pytest.mark.dask

#: A grid of 2 values under 3-fold cross-validation: 6 fits on workers, 1 refit.
N_FITS = 7


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    X = sp.random(300, 20, density=0.2, format="csr", random_state=0)
    return X, (rng.random(300) < 0.5).astype(int)


def _search():
    model = DPSparseLogisticRegression(solver="sgd", delta=1e-6, classes=[0, 1],
                                       max_iter=5, random_state=0)
    return GridSearchCV(model, {"epsilon": [0.5, 1.0]}, cv=3, error_score="raise")


def _assert_every_fit_recorded(records):
    # The search's 6 cross-validation fits and its refit, each at least once; a task the
    # cluster ran again (a worker lost under load) spent again, and counts again.
    counts = {}
    for r in records:
        counts[r.params["epsilon"]] = counts.get(r.params["epsilon"], 0) + 1
    assert sorted(counts) == [0.5, 1.0]
    assert min(counts.values()) >= 3 and sum(counts.values()) >= N_FITS
    assert len(records) <= N_FITS + 2


def _fit_on_workers(client, ledger, X, y):
    # The ledger is activated on the current client's cluster, where joblib sends the fits.
    with client.as_current(), ledger.activate(), joblib.parallel_config(backend="dask"):
        return _search().fit(X, y)


def _compile_kernels_here(data):
    # Workers inherit this session's Numba cache directory: compiled once here, the
    # kernels load from the cache there instead of compiling in every worker.
    _search().estimator.fit(*data)


@pytest.fixture(scope="module")
def cluster(data):
    _compile_kernels_here(data)
    # Workers whose temporary directory differs from the client's: the ledger
    # registry of the client's /tmp is invisible to them.
    other_tmp = tempfile.mkdtemp(prefix="skdp_sparse-worker-tmp-")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None, env={"TMPDIR": other_tmp}) as cl, \
            distributed.Client(cl) as client:
        assert set(client.run(tempfile.gettempdir).values()) == {other_tmp}
        yield client
    shutil.rmtree(other_tmp, ignore_errors=True)


def test_cluster_store_records_every_fit_of_a_grid_search(cluster, data):
    ledger = PrivacyLedger(store=DaskLedgerStore(cluster))
    search = _fit_on_workers(cluster, ledger, *data)
    records = ledger.records()
    assert len(records) == N_FITS
    worker_pids = set(cluster.run(os.getpid).values())
    assert {r.pid for r in records} & worker_pids  # the cross-validation ran on workers
    total = sum(r.epsilon_spent for r in records)
    assert total == pytest.approx(3 * (0.5 + 1.0) + search.best_params_["epsilon"], rel=1e-6)
    # a handle pickled to a worker is the same ledger
    assert cluster.submit(len, ledger).result() == N_FITS


def test_file_store_reached_from_workers_records_every_fit(cluster, data):
    ledger = PrivacyLedger()  # a file in the client's temporary directory
    _fit_on_workers(cluster, ledger, *data)
    _assert_every_fit_recorded(ledger.records())


def test_cap_holds_across_the_workers(cluster, data):
    # A cap of (1, 1e-6): one fit at epsilon = 1 fills it, so the search's 7 fits
    # cannot all run; a fit on a worker is refused and the total stays under the cap.
    ledger = PrivacyLedger(store=DaskLedgerStore(cluster), max_epsilon=1.0, max_delta=1e-6)
    with pytest.raises(BudgetExceededError):
        _fit_on_workers(cluster, ledger, *data)
    # Fits that passed reserved first: recorded since, still reserved if the search
    # stopped them mid-fit (a reservation counts until its fit reports), or released
    # by a fit that failed before drawing noise. Never all of them.
    entries = _raw_log(cluster, ledger)
    reserved = [e for e in entries if e["kind"] == "reserve"]
    assert 0 < len(reserved) < N_FITS, entries
    assert len(ledger.records()) + len(ledger.pending()) < N_FITS, entries
    assert ledger.spent(delta=1e-6)[0] <= 1.0 * (1 + 1e-9), entries


def _raw_log(client, ledger):
    from skdp_sparse.privacy.ledger._dask_store import _read_log

    data, _ = client.run_on_scheduler(_read_log, ledger._store.name, 0)
    return [json.loads(line) for line in data.splitlines() if line.strip()]


def test_fits_refuse_when_the_cluster_ledger_is_gone(cluster, data):
    X, y = data
    store = DaskLedgerStore(cluster)
    ledger = PrivacyLedger(store=store)
    # The scheduler loses the log (as after a restart).
    cluster.run_on_scheduler(_drop_log, store.name)
    model = DPSparseLogisticRegression(solver="sgd", delta=1e-6, classes=[0, 1], max_iter=5)
    with ledger.activate(), pytest.raises(LedgerUnreachableError):
        model.fit(X, y)
    assert not hasattr(model, "coef_")
    with pytest.raises(LedgerUnreachableError):
        _fit_on_workers(cluster, ledger, X, y)


def _drop_log(name):
    from skdp_sparse.privacy.ledger import _dask_store

    _dask_store._LOGS.pop(name)


def test_a_handle_to_a_store_out_of_reach_refuses_fits(data, tmp_path):
    # The handle of a ledger whose file this process cannot see (another machine's
    # /tmp): restoring it gives a ledger that refuses, never an empty copy.
    ledger = PrivacyLedger(tmp_path / "ledger.jsonl")
    handle = ledger.__reduce__()[1]
    elsewhere = (handle[0], str(tmp_path / "elsewhere" / "ledger.jsonl"), *handle[2:])
    unreachable = ledger.__reduce__()[0](*elsewhere)
    model = DPSparseLogisticRegression(solver="sgd", delta=1e-6, classes=[0, 1], max_iter=5)
    with unreachable.activate(), pytest.raises(LedgerUnreachableError,
                                               match="cannot be reached"):
        model.fit(*data)
    assert not hasattr(model, "coef_")
    assert not os.path.exists(elsewhere[1])


# --------------------------------------------------------------------------
# Workers started as separate processes with a /tmp of their own
# --------------------------------------------------------------------------
def _own_tmp_available():
    if not sys.platform.startswith("linux") or shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                            "mount -t tmpfs tmpfs /tmp"], capture_output=True)
    return probe.returncode == 0


@contextlib.contextmanager
def _workers_with_their_own_tmp():
    """A scheduler and 2 workers started as separate processes with a /tmp of their
    own: the scheduler's address (no client is made here)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    scheduler = distributed.LocalCluster(n_workers=0, scheduler_port=port,
                                         dashboard_address=None)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    worker_cmd = (f"mount -t tmpfs tmpfs /tmp && exec {sys.executable} -m distributed.cli."
                  f"dask_worker {scheduler.scheduler_address} --nworkers 1 --nthreads 1 "
                  "--no-dashboard")
    procs = [subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", "-c",
                               worker_cmd], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL) for _ in range(2)]
    try:
        yield scheduler.scheduler_address
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        scheduler.close()


@pytest.fixture(scope="module")
def separate_workers(data):
    if not _own_tmp_available():
        pytest.skip("needs unshare -m (a private /tmp for the workers)")
    _compile_kernels_here(data)
    with _workers_with_their_own_tmp() as address, distributed.Client(address) as client:
        client.wait_for_workers(2, timeout=120)
        yield client


def test_workers_with_their_own_tmp_refuse_a_file_ledger(separate_workers, data):
    ledger = PrivacyLedger()  # in the client's /tmp, which the workers do not see
    assert not any(separate_workers.run(os.path.exists, ledger.path).values())
    with pytest.raises(LedgerUnreachableError):
        _fit_on_workers(separate_workers, ledger, *data)


def test_workers_with_their_own_tmp_record_in_a_cluster_ledger(separate_workers, data):
    ledger = PrivacyLedger(store=DaskLedgerStore(separate_workers))
    start = time.time()
    _fit_on_workers(separate_workers, ledger, *data)
    records = ledger.records()
    _assert_every_fit_recorded(records)
    assert all(r.timestamp >= start for r in records)


def test_a_client_created_after_the_activation_activates_the_ledger_too(separate_workers,
                                                                         data):
    # Only a client current at the activation was told of it: fits sent through a client
    # created inside the block ran on the cluster's own workers unrecorded. Workers with
    # a /tmp of their own cannot reach a file ledger: told of it, they refuse.
    ledger = PrivacyLedger()
    with _workers_with_their_own_tmp() as address, ledger.activate():
        with distributed.Client(address) as late, joblib.parallel_config(backend="dask"):
            late.wait_for_workers(2, timeout=120)
            with pytest.raises(LedgerUnreachableError):
                _search().fit(*data)
    assert len(ledger) == 0
