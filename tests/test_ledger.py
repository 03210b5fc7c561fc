"""The privacy ledger: shared across clones, processes and pickles; totals; budget caps."""

import copy
import functools
import json
import math
import os
import pickle
import subprocess
import sys
import threading
import time
import warnings
from types import SimpleNamespace

import numpy as np
import pytest
from joblib import Parallel, delayed, parallel_config
from sklearn.base import BaseEstimator, ClassifierMixin, clone
from sklearn.model_selection import GridSearchCV, cross_val_score
from sklearn.utils.validation import check_is_fitted

from skdp_sparse.base import DPEstimatorMixin
from skdp_sparse.exceptions import BudgetExceededError, LedgerUnreachableError
from skdp_sparse.privacy.accounting import PrivacyAccountant, PrivacyEvent, compose
from skdp_sparse.privacy.ledger import (
    LedgerRecord,
    PrivacyLedger,
    active_ledgers,
    ledgers_for,
    privacy_ledger,
    report_fit,
)
from skdp_sparse.privacy.ledger._suspension import suspended_reporting
from skdp_sparse.privacy.mechanisms import GaussianMechanism, LaplaceMechanism

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


@functools.cache
def _gaussian_sigma(sensitivity, epsilon, delta):
    return GaussianMechanism(sensitivity, epsilon=epsilon, delta=delta).sigma


class NoisyFrequencyClassifier(DPEstimatorMixin, ClassifierMixin, BaseEstimator):
    """Predicts the majority class from a private frequency of the last class.

    A private estimator written on the fit hooks of :class:`DPEstimatorMixin`. The
    frequency has sensitivity 1/n (replace-one); it is released with the Gaussian
    mechanism (delta > 0) or the Laplace mechanism (delta = 0). ``private_calls``
    counts the private computations run in this process; ``fail`` makes the private
    step raise before (``"before_noise"``) or after (``"after_noise"``) its draw.
    """

    private_calls = 0

    def __init__(self, *, epsilon=1.0, delta=1e-6, shift=0.0, ledger=None, random_state=None,
                 fail=None):
        self.epsilon = epsilon
        self.delta = delta
        self.shift = shift
        self.ledger = ledger
        self.random_state = random_state
        self.fail = fail

    def fit(self, X, y):
        return self._fit(X, y)

    def _validate_fit_data(self, X, y):
        X, y = np.asarray(X), np.asarray(y)
        if X.ndim != 2 or y.shape != (X.shape[0],):
            raise ValueError("X must be 2-d with one label per row")
        self.n_features_in_ = X.shape[1]
        return y, {"n": y.shape[0], "classes": np.unique(y)}

    def _plan(self, public):
        n = public["n"]
        if self.delta > 0:
            mech = GaussianMechanism(1 / n, sigma=_gaussian_sigma(1 / n, self.epsilon,
                                                                   self.delta))
        else:
            mech = LaplaceMechanism(1 / n, epsilon=self.epsilon)
        return SimpleNamespace(epsilon=self.epsilon, delta=self.delta,
                               events=(mech.event(),), mechanism=mech,
                               classes=public["classes"])

    def _solve(self, y, plan, rng):
        type(self).private_calls += 1
        if self.fail == "before_noise":
            raise FloatingPointError("failed before drawing noise")
        freq = float(np.mean(y == plan.classes[-1]))
        value = float(plan.mechanism.randomise(freq, rng))
        if self.fail == "after_noise":
            raise FloatingPointError("failed after drawing noise")
        return SimpleNamespace(value=value, events=plan.events)

    def _fitted_attributes(self, public, plan, result):
        return {"classes_": public["classes"], "freq_": result.value}

    def predict(self, X):
        check_is_fitted(self)
        label = self.classes_[-1] if self.freq_ + self.shift > 0.5 else self.classes_[0]
        return np.full(len(X), label)


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((60, 3))
    y = (rng.random(60) < 0.6).astype(int)
    return X, y


def _assert_totals_match(ledger, fitted_spends, delta=None):
    records = ledger.records()
    assert len(records) == len(fitted_spends)
    basic = ledger.spent(composition="basic")
    assert basic[0] == pytest.approx(sum(e for e, _ in fitted_spends), rel=1e-12)
    assert basic[1] == pytest.approx(sum(d for _, d in fitted_spends), rel=1e-12)
    events = [e for r in records for e in r.events]
    target = basic[1] if delta is None else delta
    tight = ledger.spent(delta=delta)
    expected = compose(events, target)
    assert tight[0] == pytest.approx(min(expected[0], basic[0]), rel=1e-9)
    assert tight[0] <= basic[0] + 1e-12


# --------------------------------------------------------------------------
# Sharing by reference
# --------------------------------------------------------------------------
def test_copies_and_clones_are_the_ledger():
    ledger = PrivacyLedger()
    assert copy.copy(ledger) is ledger
    assert copy.deepcopy(ledger) is ledger
    est = NoisyFrequencyClassifier(ledger=ledger)
    cloned = clone(est)
    assert cloned.ledger is ledger
    assert clone(cloned).get_params()["ledger"] is ledger
    assert pickle.loads(pickle.dumps(ledger)) is ledger


def test_direct_fits_are_recorded_once(data):
    X, y = data
    ledger = PrivacyLedger()
    est = NoisyFrequencyClassifier(epsilon=0.5, ledger=ledger, random_state=0)
    spends = []
    for _ in range(3):
        est.fit(X, y)
        spends.append((est.epsilon_spent_, est.delta_spent_))
    _assert_totals_match(ledger, spends)
    rec = ledger.records()[0]
    assert isinstance(rec, LedgerRecord)
    assert rec.estimator == "NoisyFrequencyClassifier"
    assert rec.epsilon == 0.5 and rec.delta == 1e-6
    assert rec.pid == os.getpid()
    assert repr(rec.events) == repr(est.privacy_events_)  # NaN != NaN: compare reprs
    assert "ledger" not in rec.params


def test_gaussian_fits_compose_tighter_than_basic(data):
    X, y = data
    with privacy_ledger() as ledger:
        for _ in range(10):
            NoisyFrequencyClassifier(epsilon=1.0, delta=1e-6, random_state=0).fit(X, y)
    eps_basic, delta_basic = ledger.spent(composition="basic")
    assert eps_basic == pytest.approx(10.0, rel=1e-6)
    assert delta_basic == pytest.approx(1e-5)
    eps_tight, delta_tight = ledger.spent()
    assert delta_tight == pytest.approx(1e-5)
    assert eps_tight < 0.5 * eps_basic
    # Gaussian mechanisms compose exactly: sqrt(10) times the per-fit ratio.
    mu = ledger.records()[0].events[0].mu
    ref = compose([PrivacyEvent.gaussian(mu * math.sqrt(10))], 1e-5)
    assert eps_tight == pytest.approx(ref[0], rel=1e-9)
    # At another delta on request.
    assert ledger.spent(delta=1e-6)[0] > eps_tight
    text = ledger.summary()
    assert "10 fits" in text and "basic composition" in text and "tight composition" in text


def test_pure_fits_basic_total(data):
    X, y = data
    with privacy_ledger() as ledger:
        for eps in (0.25, 0.5, 1.0):
            NoisyFrequencyClassifier(epsilon=eps, delta=0.0).fit(X, y)
    assert ledger.spent(composition="basic") == pytest.approx((1.75, 0.0))
    assert ledger.spent() == pytest.approx((1.75, 0.0))


# --------------------------------------------------------------------------
# scikit-learn meta-estimators and processes
# --------------------------------------------------------------------------
GRID = {"shift": [-0.1, 0.0, 0.1]}


def _fitted_spends_of_search(search, n_fits):
    est = search.best_estimator_
    return [(est.epsilon_spent_, est.delta_spent_)] * n_fits


@pytest.mark.parametrize("n_jobs", [1, 2])
def test_grid_search_with_ledger_parameter(data, n_jobs):
    X, y = data
    ledger = PrivacyLedger()
    search = GridSearchCV(NoisyFrequencyClassifier(epsilon=0.7, ledger=ledger), GRID, cv=4,
                          n_jobs=n_jobs).fit(X, y)
    n_fits = len(GRID["shift"]) * 4 + 1  # every candidate on every fold, and the refit
    _assert_totals_match(ledger, _fitted_spends_of_search(search, n_fits))
    assert search.best_estimator_.ledger is ledger
    pids = {r.pid for r in ledger.records()}
    if n_jobs == 2:
        assert pids - {os.getpid()}, "the fits should have run in worker processes"


@pytest.mark.parametrize("n_jobs", [1, 2])
def test_grid_search_with_activated_ledger(data, n_jobs):
    X, y = data
    with privacy_ledger() as ledger:
        search = GridSearchCV(NoisyFrequencyClassifier(epsilon=0.7), GRID, cv=3,
                              n_jobs=n_jobs).fit(X, y)
    n_fits = len(GRID["shift"]) * 3 + 1
    _assert_totals_match(ledger, _fitted_spends_of_search(search, n_fits))
    assert ledger not in active_ledgers()


def test_threading_backend_reports_to_activated_ledger(data):
    X, y = data
    with privacy_ledger() as ledger, parallel_config(backend="threading", n_jobs=2):
        cross_val_score(NoisyFrequencyClassifier(epsilon=0.3), X, y, cv=5)
    assert len(ledger) == 5


@pytest.mark.parametrize("n_jobs", [1, 2])
def test_cross_val_score(data, n_jobs):
    X, y = data
    with privacy_ledger() as ledger:
        cross_val_score(NoisyFrequencyClassifier(epsilon=0.4, delta=0.0), X, y, cv=5,
                        n_jobs=n_jobs)
    _assert_totals_match(ledger, [(0.4, 0.0)] * 5)


def test_inactive_after_the_block(data):
    X, y = data
    with privacy_ledger() as ledger:
        NoisyFrequencyClassifier().fit(X, y)
    NoisyFrequencyClassifier().fit(X, y)
    assert len(ledger) == 1
    manual = PrivacyLedger()
    activation = manual.activate()
    NoisyFrequencyClassifier().fit(X, y)
    manual.deactivate()
    NoisyFrequencyClassifier().fit(X, y)
    assert len(manual) == 1
    with pytest.raises(RuntimeError):
        activation.__exit__(None, None, None)


def test_both_parameter_and_activated_ledger_receive_the_fit(data):
    X, y = data
    own = PrivacyLedger()
    with privacy_ledger() as outer, own.activate():
        NoisyFrequencyClassifier(ledger=own).fit(X, y)  # own is both param and active
    assert len(own) == 1 and len(outer) == 1


def _fit_and_return(est, X, y):
    return est.fit(X, y)


def test_pickled_estimator_reports_from_other_processes(data, tmp_path):
    X, y = data
    ledger = PrivacyLedger(tmp_path / "ledger.jsonl")
    est = NoisyFrequencyClassifier(epsilon=0.2, ledger=ledger)
    restored = pickle.loads(pickle.dumps(est))
    assert restored.ledger is ledger  # same process: the very object
    # Loky workers unpickle the estimator and append to the same store.
    fitted = Parallel(n_jobs=2)(delayed(_fit_and_return)(clone(est), X, y) for _ in range(4))
    assert all(f.ledger == ledger for f in fitted)
    # A separate interpreter loads a pickle from disk and fits.
    blob = tmp_path / "est.pkl"
    blob.write_bytes(pickle.dumps(est))
    code = (
        "import pickle, numpy as np\n"
        f"est = pickle.load(open({str(blob)!r}, 'rb'))\n"
        "X = np.zeros((10, 3)); y = np.arange(10) % 2\n"
        "est.fit(X, y)\n"
        "print(len(est.ledger))\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([HERE, ROOT]))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True)
    assert int(out.stdout.strip()) == 5
    assert len(ledger) == 5
    assert len({r.pid for r in ledger.records()}) >= 2
    # The fitted estimator pickles and unpickles with its ledger.
    back = pickle.loads(pickle.dumps(fitted[0]))
    assert back.ledger is ledger and back.predict(X).shape == (X.shape[0],)


def test_activated_ledger_reaches_child_interpreters(data):
    X, y = data
    code = (
        "import numpy as np\n"
        "from test_ledger import NoisyFrequencyClassifier\n"
        "X = np.zeros((10, 3)); y = np.arange(10) % 2\n"
        "NoisyFrequencyClassifier(epsilon=0.1).fit(X, y)\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([HERE, ROOT]))
    with privacy_ledger() as ledger:
        subprocess.run([sys.executable, "-c", code], env=env, check=True)
    subprocess.run([sys.executable, "-c", code], env=env, check=True)  # no longer active
    assert len(ledger) == 1
    assert ledger.records()[0].pid != os.getpid()


def test_activated_ledger_reaches_forkserver_workers_and_their_children(tmp_path):
    # Fits in a forkserver's workers (grandchildren of the process that activated the
    # ledger) used to find no active ledger and ran past its cap unrecorded. The fits
    # are pure DP, whose epsilons add up: one at 0.9 leaves no room under 1.
    script = tmp_path / "forkserver_fits.py"
    script.write_text(
        "import multiprocessing as mp\n"
        "from concurrent.futures import ProcessPoolExecutor\n"
        "import numpy as np\n"
        "from skdp_sparse import BudgetExceededError, privacy_ledger\n"
        "from test_ledger import NoisyFrequencyClassifier\n"
        "def work(epsilon):\n"
        "    X = np.zeros((10, 3)); y = np.arange(10) % 2\n"
        "    try:\n"
        "        NoisyFrequencyClassifier(epsilon=epsilon, delta=0.0).fit(X, y)\n"
        "        return 'ran'\n"
        "    except BudgetExceededError:\n"
        "        return 'refused'\n"
        "if __name__ == '__main__':\n"
        "    ctx = mp.get_context('forkserver')\n"
        "    with privacy_ledger(max_epsilon=1.0, max_delta=1e-3) as ledger:\n"
        "        with ProcessPoolExecutor(2, mp_context=ctx) as pool:\n"
        "            outcomes = sorted(pool.map(work, [0.9] * 3))\n"
        "    print(outcomes, len(ledger))\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([HERE, ROOT]))
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                         text=True, check=True)
    assert out.stdout.strip() == "['ran', 'refused', 'refused'] 1"


def test_a_damaged_registry_entry_makes_child_fits_refuse(data):
    from skdp_sparse.privacy.ledger._registry import _registry_dirs

    code = (
        "import numpy as np\n"
        "from skdp_sparse.exceptions import LedgerUnreachableError\n"
        "from test_ledger import NoisyFrequencyClassifier\n"
        "X = np.zeros((10, 3)); y = np.arange(10) % 2\n"
        "try:\n"
        "    NoisyFrequencyClassifier(epsilon=0.1).fit(X, y)\n"
        "    print('ran')\n"
        "except LedgerUnreachableError:\n"
        "    print('refused')\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([HERE, ROOT]))
    entry = os.path.join(_registry_dirs()[-1], f"active-{os.getpid()}.json")
    with privacy_ledger() as ledger:
        with open(entry, "r+") as f:
            f.truncate(10)  # it used to read as "no active ledger"
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, check=True)
    assert out.stdout.strip() == "refused"
    assert len(ledger) == 0


def test_a_child_with_another_temporary_directory_finds_the_active_ledger(data, tmp_path):
    # The registry lived in tempfile.gettempdir(): a child started with another TMPDIR
    # looked elsewhere, found no ledger and fitted past the cap, unrecorded.
    code = (
        "import numpy as np\n"
        "from skdp_sparse.exceptions import BudgetExceededError\n"
        "from test_ledger import NoisyFrequencyClassifier\n"
        "X = np.zeros((10, 3)); y = np.arange(10) % 2\n"
        "try:\n"
        "    NoisyFrequencyClassifier(epsilon=1.0, delta=0.0).fit(X, y)\n"
        "    print('ran')\n"
        "except BudgetExceededError:\n"
        "    print('refused')\n"
    )
    other = tmp_path / "other_tmp"
    other.mkdir()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([HERE, ROOT]), TMPDIR=str(other))
    with privacy_ledger(max_epsilon=1.5, max_delta=0.0) as ledger:
        runs = [subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                               text=True, check=True).stdout.strip() for _ in range(3)]
    assert runs == ["ran", "refused", "refused"]
    assert len(ledger) == 1


def test_handles_to_one_store_reserve_and_record_a_fit_once(data, tmp_path):
    # Handles with different caps, or paths spelt differently (a symbolic link), were
    # different ledgers to a fit: each reserved and recorded it, so one fit counted
    # twice and a later fit within the cap was refused.
    X, y = data
    path = tmp_path / "l.jsonl"
    capped = PrivacyLedger(path, max_epsilon=3.0, max_delta=0.0)
    link = tmp_path / "link.jsonl"
    os.symlink(path, link)
    for other in (PrivacyLedger(path), PrivacyLedger(link)):
        with other.activate():
            NoisyFrequencyClassifier(epsilon=1.0, delta=0.0, ledger=capped).fit(X, y)
    assert len(capped) == 2 and capped.spent(composition="basic") == (2.0, 0.0)
    NoisyFrequencyClassifier(epsilon=1.0, delta=0.0, ledger=capped).fit(X, y)  # within 3
    with pytest.raises(BudgetExceededError):
        NoisyFrequencyClassifier(epsilon=0.5, delta=0.0, ledger=capped).fit(X, y)


def test_a_fork_while_another_thread_holds_the_lock_does_not_hang_the_child(data):
    # The child inherited the descriptor holding the lock, which then outlived the
    # thread that took it: the child's own locking waited for ever.
    if not hasattr(os, "fork"):
        pytest.skip("needs os.fork")
    X, y = data
    ledger = PrivacyLedger()
    stop = threading.Event()

    def read():
        while not stop.is_set():
            ledger.spent()

    reader = threading.Thread(target=read)
    reader.start()
    try:
        pids = []
        for _ in range(8):
            pid = os.fork()
            if pid == 0:  # the child fits once and leaves
                code = 1
                try:
                    NoisyFrequencyClassifier(epsilon=0.1, delta=0.0, ledger=ledger).fit(X, y)
                    code = 0
                finally:
                    os._exit(code)
            pids.append(pid)
        deadline = time.monotonic() + 60
        codes = []
        for pid in pids:
            while True:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    codes.append(os.waitstatus_to_exitcode(status))
                    break
                if time.monotonic() > deadline:
                    os.kill(pid, 9)
                    os.waitpid(pid, 0)
                    codes.append("hung")
                    break
                time.sleep(0.01)
    finally:
        stop.set()
        reader.join()
    assert codes == [0] * 8
    assert len(ledger) == 8


@pytest.mark.parametrize("line", [
    {"kind": "cap", "max_epsilon": 0.5},
    {"kind": "cap", "max_epsilon": 0.5, "max_delta": None},
    {"kind": "cap", "epsilon": 0.5, "delta": 0.0},
])
def test_a_cap_line_that_cannot_be_read_makes_the_ledger_refuse(data, tmp_path, line):
    # It was skipped as a damaged line with a warning: the cap it held was lifted.
    X, y = data
    ledger = PrivacyLedger(tmp_path / "l.jsonl")
    with open(ledger.path, "a") as f:
        f.write(json.dumps(line) + "\n")
    with pytest.raises(LedgerUnreachableError, match="kind 'cap' cannot be read"):
        NoisyFrequencyClassifier(ledger=PrivacyLedger(ledger.path)).fit(X, y)


def test_a_ledger_of_a_newer_format_is_refused(tmp_path):
    path = tmp_path / "l.jsonl"
    path.write_text(json.dumps({"kind": "header", "v": 99, "id": "abc"}) + "\n")
    with pytest.raises(LedgerUnreachableError, match="newer than this version"):
        PrivacyLedger(path)


@pytest.mark.parametrize("spend", [(-0.5, 0.0), (0.5, -1e-6), (math.nan, 0.0)])
def test_a_record_of_a_negative_or_undefined_spend_is_refused(data, spend):
    # It was written: the totals fell (budget freed), or every later total raised.
    X, y = data
    ledger = PrivacyLedger()
    NoisyFrequencyClassifier(epsilon=1.0, delta=1e-6, ledger=ledger).fit(X, y)
    before = ledger.spent()
    with pytest.raises(ValueError, match="spends >= 0"):
        ledger.record("x", (), *spend)
    assert ledger.spent() == before and len(ledger) == 1


def test_persistent_store_is_reopened(data, tmp_path):
    X, y = data
    path = tmp_path / "budget.jsonl"
    first = PrivacyLedger(path)
    NoisyFrequencyClassifier(epsilon=0.5, delta=0.0, ledger=first).fit(X, y)
    again = PrivacyLedger(path)
    assert again.id == first.id and again == first
    NoisyFrequencyClassifier(epsilon=0.5, delta=0.0, ledger=again).fit(X, y)
    assert len(first) == 2 and first.spent() == pytest.approx((1.0, 0.0))
    bogus = tmp_path / "other.txt"
    bogus.write_text("hello\n")
    with pytest.raises(ValueError, match="not a privacy ledger"):
        PrivacyLedger(bogus)


def test_temporary_store_is_removed_with_its_ledger():
    ledger = PrivacyLedger()
    path = ledger.path
    assert os.path.exists(path)
    del ledger
    import gc

    gc.collect()
    assert not os.path.exists(path)


def test_damaged_line_is_skipped(data, tmp_path):
    X, y = data
    ledger = PrivacyLedger(tmp_path / "l.jsonl")
    NoisyFrequencyClassifier(ledger=ledger).fit(X, y)
    with open(ledger.path, "a") as f:
        f.write('{"kind": "fit", "id": "trunc')  # a writer killed mid-line
    fresh = PrivacyLedger(ledger.path)
    with pytest.warns(RuntimeWarning, match="damaged"):
        NoisyFrequencyClassifier(ledger=fresh).fit(X, y)
    assert len(fresh) == 2  # the damage stays confined to its own line


def test_a_damaged_fit_record_still_counts_with_its_reservation(data, tmp_path):
    # A ledger without a cap used to skip the damaged record and total less than
    # the fit spent.
    X, y = data
    ledger = PrivacyLedger(tmp_path / "l.jsonl")
    est = NoisyFrequencyClassifier(ledger=ledger).fit(X, y)
    with open(ledger.path, "rb") as f:
        lines = f.read().split(b"\n")
    fit_line = next(i for i, line in enumerate(lines) if b'"kind":"fit"' in line)
    lines[fit_line] = lines[fit_line][1:]  # its first byte lost
    copy_path = tmp_path / "copy.jsonl"  # read afresh, as another process would
    copy_path.write_bytes(b"\n".join(lines))
    fresh = PrivacyLedger(copy_path)
    with pytest.warns(RuntimeWarning, match="damaged"):
        eps, dlt = fresh.spent(composition="basic")
    assert len(fresh.records()) == 0 and len(fresh.pending()) == 1
    assert eps >= est.epsilon_spent_ and dlt >= est.delta_spent_


def _damage(path, how):
    if how == "deleted":
        os.remove(path)
    elif how == "truncated":
        open(path, "w").close()
    else:  # another ledger's file in its place
        other = PrivacyLedger(str(path) + ".other")
        os.replace(other.path, path)


@pytest.mark.parametrize("how", ["deleted", "truncated", "replaced"])
def test_a_ledger_whose_records_were_lost_fails_closed(data, tmp_path, how):
    # It used to start again empty: spent() read (0, 0) and a capped ledger let a fit
    # through that the lost records would have refused.
    X, y = data
    ledger = PrivacyLedger(tmp_path / "l.jsonl", max_epsilon=1.5, max_delta=1e-5)
    NoisyFrequencyClassifier(ledger=ledger).fit(X, y)
    _damage(ledger.path, how)
    with pytest.raises(LedgerUnreachableError, match="refuse to run"):
        ledger.spent()
    est = NoisyFrequencyClassifier(ledger=ledger)
    with pytest.raises(LedgerUnreachableError):
        est.fit(X, y)
    assert not hasattr(est, "epsilon_spent_")
    if how == "deleted":
        assert not os.path.exists(ledger.path)  # never made again empty


def test_records_are_json_lines_without_data(data):
    X, y = data
    ledger = PrivacyLedger()
    NoisyFrequencyClassifier(ledger=ledger).fit(X, y)
    with open(ledger.path) as f:
        lines = [json.loads(line) for line in f]
    assert [item["kind"] for item in lines] == ["header", "reserve", "fit"]
    fit = lines[2]
    assert fit["reservation"] == lines[1]["id"]
    assert set(fit) == {"kind", "id", "estimator", "params", "epsilon_spent", "delta_spent",
                        "events", "time", "pid", "reservation"}
    assert fit["events"][0]["name"] == "gaussian"


def test_non_private_fit_is_recorded_as_infinite(data):
    X, y = data
    ledger = PrivacyLedger()
    est = NoisyFrequencyClassifier(epsilon=np.inf, delta=0.0, ledger=ledger)
    acc = PrivacyAccountant()  # noise off: no events
    report_fit(est, acc, 0.0)
    assert ledger.records()[0].epsilon_spent == math.inf
    assert ledger.spent()[0] == math.inf


def test_suspended_reporting_records_nothing(data):
    X, y = data
    ledger = PrivacyLedger(max_epsilon=10, max_delta=1e-3)
    with suspended_reporting():
        NoisyFrequencyClassifier(ledger=ledger).fit(X, y)
    assert len(ledger) == 0 and ledger.pending() == []


def test_ledger_parameter_type_is_checked(data):
    with pytest.raises(TypeError, match="PrivacyLedger"):
        ledgers_for(NoisyFrequencyClassifier(ledger="ledger.jsonl"))


# --------------------------------------------------------------------------
# Budget cap
# --------------------------------------------------------------------------
def test_cap_refuses_before_private_work(data):
    X, y = data
    ledger = PrivacyLedger(max_epsilon=2.5, max_delta=0.0)
    est = NoisyFrequencyClassifier(epsilon=1.0, delta=0.0, ledger=ledger)
    est.fit(X, y).fit(X, y)
    calls = NoisyFrequencyClassifier.private_calls
    with pytest.raises(BudgetExceededError, match="cap"):
        clone(est).fit(X, y)
    assert NoisyFrequencyClassifier.private_calls == calls  # nothing private ran
    assert len(ledger) == 2 and ledger.pending() == []
    # A smaller fit still fits in the budget.
    NoisyFrequencyClassifier(epsilon=0.5, delta=0.0, ledger=ledger).fit(X, y)
    assert ledger.spent() == pytest.approx((2.5, 0.0))
    with pytest.raises(BudgetExceededError):
        ledger.check(1e-3, 0.0)


def test_a_fit_whose_delta_alone_exceeds_the_cap_is_told_so(data):
    # A pure-DP cap (max_delta=0, diffprivlib's default) and a fit at the default
    # delta=1e-6: the refusal quoted a total of epsilon=inf and nothing else.
    X, y = data
    ledger = PrivacyLedger(max_epsilon=3.0, max_delta=0.0)
    with pytest.raises(BudgetExceededError, match=r"its delta alone is above the cap's "
                                                  r"delta=0.*max_delta=0 admits"):
        NoisyFrequencyClassifier(epsilon=1.0, delta=1e-6, ledger=ledger).fit(X, y)
    with pytest.raises(BudgetExceededError, match="its delta alone is above the cap's "
                                                  "delta=1e-05, which no epsilon covers$"):
        PrivacyLedger(max_epsilon=3.0, max_delta=1e-5).check(1.0, 1e-4)
    with pytest.raises(BudgetExceededError) as refusal:
        PrivacyLedger(max_epsilon=3.0, max_delta=1e-5).check(4.0, 1e-6)
    assert "alone" not in str(refusal.value)
    assert len(ledger) == 0 and ledger.pending() == []


def test_cap_uses_tight_composition(data):
    X, y = data
    # Ten Gaussian fits at (1, 1e-6) compose to well under 10 at delta 1e-5.
    ledger = PrivacyLedger(max_epsilon=6.0, max_delta=1e-5)
    est = NoisyFrequencyClassifier(epsilon=1.0, delta=1e-6, ledger=ledger)
    n_ok = 0
    for _ in range(12):
        try:
            est.fit(X, y)
            n_ok += 1
        except BudgetExceededError:
            break
    assert n_ok > 6  # more than basic composition would allow
    assert ledger.spent(delta=1e-5)[0] <= 6.0


def test_cap_admits_fits_on_the_tight_composition_of_their_planned_events(data):
    # A fit's plan was composed as an (epsilon, delta) pair: under a cap of (1.2, 1e-5)
    # Gaussian fits at (0.5, 1e-6) were refused from the 4th on, at a tight total of
    # 0.79, when 6 of them compose to 1.15.
    X, y = data
    ledger = PrivacyLedger(max_epsilon=1.2, max_delta=1e-5)
    est = NoisyFrequencyClassifier(epsilon=0.5, delta=1e-6, ledger=ledger)
    fits = 0
    with pytest.raises(BudgetExceededError, match="cap"):
        for _ in range(20):
            est.fit(X, y)
            fits += 1
    assert fits >= 6 and ledger.pending() == []
    assert ledger.spent(delta=1e-5)[0] <= 1.2
    one_more = compose(ledger.events() + list(ledger.records()[0].events), 1e-5)[0]
    assert one_more > 1.2


class UnderplannedClassifier(NoisyFrequencyClassifier):
    """Plans a quarter of the epsilon its release spends."""

    def _plan(self, public):
        plan = super()._plan(public)
        small = GaussianMechanism(1 / public["n"], sigma=4 * plan.mechanism.sigma)
        return SimpleNamespace(**{**vars(plan), "events": (small.event(),)})

    def _solve(self, y, plan, rng):
        result = super()._solve(y, plan, rng)
        return SimpleNamespace(value=result.value, events=(plan.mechanism.event(),))


def test_a_fit_that_records_more_than_it_planned_is_recorded_then_refused(data):
    X, y = data
    # Two fits at (0.5, 1e-6) compose to 0.64 at 1e-5; each plans about a quarter.
    ledger = PrivacyLedger(max_epsilon=0.6, max_delta=1e-5)
    UnderplannedClassifier(epsilon=0.5, delta=1e-6, ledger=ledger).fit(X, y)
    with pytest.raises(BudgetExceededError, match="other events than it reserved"):
        UnderplannedClassifier(epsilon=0.5, delta=1e-6, ledger=ledger).fit(X, y)
    assert len(ledger) == 2 and ledger.pending() == []
    assert ledger.spent(delta=1e-5)[0] > 0.6


def test_a_cap_binds_the_store_so_reopening_without_it_cannot_lift_it(data, tmp_path):
    # The cap used to travel with the handle only: the same file reopened without a
    # cap (another session, another process) let fits run past it.
    X, y = data
    path = tmp_path / "budget.jsonl"
    capped = PrivacyLedger(path, max_epsilon=2.5, max_delta=0.0)
    NoisyFrequencyClassifier(epsilon=1.0, delta=0.0, ledger=capped).fit(X, y)
    for reopened in (PrivacyLedger(path), PrivacyLedger(path, max_epsilon=100.0, max_delta=0.5)):
        assert (2.5, 0.0) in reopened.caps
        est = NoisyFrequencyClassifier(epsilon=2.0, delta=0.0, ledger=reopened)
        calls = NoisyFrequencyClassifier.private_calls
        with pytest.raises(BudgetExceededError, match=r"cap \(epsilon=2.5, delta=0\)"):
            est.fit(X, y)
        assert NoisyFrequencyClassifier.private_calls == calls
        with pytest.raises(BudgetExceededError):
            reopened.check(2.0, 0.0)
    # A tighter cap added by a later handle binds the first one too.
    PrivacyLedger(path, max_epsilon=1.2, max_delta=0.0)
    assert capped.caps == [(1.2, 0.0), (2.5, 0.0), (100.0, 0.5)]
    with pytest.raises(BudgetExceededError, match=r"cap \(epsilon=1.2"):
        NoisyFrequencyClassifier(epsilon=0.5, delta=0.0, ledger=capped).fit(X, y)
    NoisyFrequencyClassifier(epsilon=0.2, delta=0.0, ledger=capped).fit(X, y)
    assert "cap: epsilon=1.2 at delta=0" in PrivacyLedger(path).summary()
    # Each cap is written once, however often a handle with it is opened.
    PrivacyLedger(path, max_epsilon=2.5, max_delta=0.0)
    with open(path) as f:
        assert sum(json.loads(line)["kind"] == "cap" for line in f) == 3


def test_a_line_of_an_unknown_kind_makes_the_ledger_refuse(data, tmp_path):
    # Such a line used to be skipped: a spend or a cap written by a newer version
    # went uncounted.
    X, y = data
    ledger = PrivacyLedger(tmp_path / "l.jsonl")
    NoisyFrequencyClassifier(ledger=ledger).fit(X, y)
    with open(ledger.path, "a") as f:
        f.write(json.dumps({"kind": "group_fit", "epsilon_spent": 5.0}) + "\n")
    fresh = PrivacyLedger(ledger.path)
    with pytest.raises(LedgerUnreachableError, match="kind 'group_fit'.*newer version"):
        fresh.spent()
    with pytest.raises(LedgerUnreachableError):
        NoisyFrequencyClassifier(ledger=ledger).fit(X, y)


def test_cap_is_race_free_across_processes(data):
    X, y = data
    ledger = PrivacyLedger(max_epsilon=3.5, max_delta=0.0)
    est = NoisyFrequencyClassifier(epsilon=1.0, delta=0.0, ledger=ledger)

    search = GridSearchCV(est, {"shift": [0.0, 0.1, 0.2, 0.3]}, cv=2, n_jobs=2,
                          error_score=np.nan, refit=False)
    with pytest.warns(Warning):  # scikit-learn reports the refused fits
        search.fit(X, y)
    assert len(ledger) == 3  # exactly the fits the cap allows, no more
    assert ledger.pending() == []
    assert ledger.spent() == pytest.approx((3.0, 0.0))


def test_cap_race_free_across_threads(data):
    X, y = data
    ledger = PrivacyLedger(max_epsilon=5.0, max_delta=0.0)
    errors = []

    def work():
        try:
            NoisyFrequencyClassifier(epsilon=1.0, delta=0.0, ledger=ledger).fit(X, y)
        except BudgetExceededError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(ledger) == 5 and len(errors) == 7


def test_refusal_by_one_ledger_releases_the_others(data):
    X, y = data
    roomy = PrivacyLedger(max_epsilon=10.0, max_delta=0.0)
    tight = PrivacyLedger(max_epsilon=0.5, max_delta=0.0)
    with tight.activate(), pytest.raises(BudgetExceededError):
        NoisyFrequencyClassifier(epsilon=1.0, delta=0.0, ledger=roomy).fit(X, y)
    assert roomy.pending() == [] and roomy.spent() == (0.0, 0.0)


def test_unreserved_fit_over_cap_is_recorded_then_refused(data):
    X, y = data
    ledger = PrivacyLedger(max_epsilon=1.0, max_delta=0.0)
    est = NoisyFrequencyClassifier(epsilon=2.0, delta=0.0, ledger=ledger)
    acc = PrivacyAccountant([PrivacyEvent.pure(2.0)])
    with pytest.raises(BudgetExceededError, match="recorded"):
        report_fit(est, acc, 0.0)  # a fit that ran without check_budget
    assert ledger.spent() == pytest.approx((2.0, 0.0))


def test_invalid_data_fails_before_reserving(data):
    X, y = data
    ledger = PrivacyLedger(max_epsilon=3.0, max_delta=0.0)
    est = NoisyFrequencyClassifier(epsilon=1.0, delta=0.0, ledger=ledger)
    calls = NoisyFrequencyClassifier.private_calls
    with pytest.raises(ValueError, match="2-d"):
        est.fit(np.zeros(5), y[:5])
    assert NoisyFrequencyClassifier.private_calls == calls
    assert ledger.pending() == [] and len(ledger) == 0


def test_failure_before_any_noise_releases_the_reservation(data):
    X, y = data
    ledger = PrivacyLedger(max_epsilon=3.0, max_delta=0.0)
    est = NoisyFrequencyClassifier(epsilon=1.0, delta=0.0, ledger=ledger, fail="before_noise")
    with pytest.raises(FloatingPointError):
        est.fit(X, y)
    assert ledger.pending() == [] and len(ledger) == 0
    assert ledger.spent() == (0.0, 0.0)


def test_failure_after_noise_keeps_the_spend(data):
    X, y = data
    ledger = PrivacyLedger(max_epsilon=3.0, max_delta=0.0)
    est = NoisyFrequencyClassifier(epsilon=1.0, delta=0.0, ledger=ledger, fail="after_noise")
    with pytest.raises(FloatingPointError):
        est.fit(X, y)
    assert ledger.pending() == []
    assert ledger.spent() == pytest.approx((1.0, 0.0))  # it may have released something
    assert ledger.records()[0].events[0].epsilon == pytest.approx(1.0)


def test_failed_fit_leaves_the_estimator_unfitted(data):
    from sklearn.exceptions import NotFittedError

    X, y = data
    est = NoisyFrequencyClassifier(epsilon=1.0, delta=0.0).fit(X, y)
    est.set_params(fail="after_noise")
    with pytest.raises(FloatingPointError):
        est.fit(X, y)
    assert not hasattr(est, "n_features_in_") and not hasattr(est, "classes_")
    with pytest.raises(NotFittedError):
        est.predict(X)


def test_cap_parameters_are_validated():
    with pytest.raises(ValueError, match="both"):
        PrivacyLedger(max_epsilon=1.0)
    with pytest.raises(ValueError):
        PrivacyLedger(max_epsilon=-1.0, max_delta=0.0)
    with pytest.raises(ValueError):
        PrivacyLedger(max_epsilon=1.0, max_delta=1.0)


# --------------------------------------------------------------------------
# The library's estimators
# --------------------------------------------------------------------------
from skdp_sparse.linear_model import DPSparseLogisticRegression  # noqa: E402


def test_grid_search_of_library_estimator():
    import scipy.sparse as sp

    X = sp.random(300, 10, density=0.3, format="csr", random_state=0)
    y = (X @ np.arange(10.0) > 1).astype(int)
    grid = {"alpha": [1e-4, 1e-3], "max_iter": [5, 10]}
    with privacy_ledger() as ledger:
        search = GridSearchCV(DPSparseLogisticRegression(epsilon=0.5, delta=1e-6,
                                                         classes=[0, 1]), grid,
                              cv=3, n_jobs=2).fit(X, y)
    n_fits = 4 * 3 + 1
    assert len(ledger) == n_fits
    spends = [(r.epsilon_spent, r.delta_spent) for r in ledger.records()]
    assert all(e == pytest.approx(search.best_estimator_.epsilon_spent_) for e, _ in spends)
    _assert_totals_match(ledger, spends)
    assert ledger.spent()[0] < ledger.spent(composition="basic")[0]


def _library_cases():
    """Every private estimator and transformer of the library, with data it fits."""
    import scipy.sparse as sp

    from skdp_sparse import (
        DPGreedyCDRegressor,
        DPOutputPerturbationClassifier,
        DPOutputPerturbationRegressor,
        DPSparseMeanEstimator,
    )
    from skdp_sparse.feature_extraction.text import DPTfidfVectorizer
    from skdp_sparse.feature_selection import DPSelectKBest
    from skdp_sparse.preprocessing import DPStandardScaler

    X = sp.random(300, 10, density=0.3, format="csr", random_state=0)
    y = (X @ np.arange(10.0) > 1).astype(int)
    t = np.asarray(X @ np.ones(10)) / 10
    docs = [f"word{i % 7} word{i % 5} common" for i in range(300)]
    return {
        "logistic": (DPSparseLogisticRegression(epsilon=0.5, classes=[0, 1]), X, y),
        "regressor": (DPGreedyCDRegressor(epsilon=0.5, target_bound=1.0), X, t),
        "output-perturbation": (DPOutputPerturbationClassifier(epsilon=0.5, classes=[0, 1]),
                                X, y),
        "output-perturbation-regressor": (DPOutputPerturbationRegressor(
            epsilon=0.5, target_bound=1.0), X, t),
        "mean": (DPSparseMeanEstimator(epsilon=0.5), X, None),
        "standard-scaler": (DPStandardScaler(bounds=(-1, 1), epsilon=0.5, with_mean=False),
                            X, None),
        "select-k-best": (DPSelectKBest(k=3, epsilon=0.5, sparsity=10), X, None),
        "tfidf": (DPTfidfVectorizer(epsilon=0.5, max_terms_per_document=3), docs, None),
    }


LIBRARY_CASES = _library_cases()


@pytest.mark.parametrize("name", sorted(LIBRARY_CASES))
def test_library_estimators_report_to_their_ledger_parameter(name):
    # Without any activation: the parameter alone is what reaches processes an
    # activation does not; it survives clone, and its cap refuses before any spend.
    est, X, y = LIBRARY_CASES[name]
    ledger = PrivacyLedger()
    fitted = clone(est.set_params(ledger=ledger))
    assert fitted.get_params()["ledger"] is ledger
    fitted.fit(X) if y is None else fitted.fit(X, y)
    assert [r.estimator for r in ledger.records()] == [type(est).__name__]
    assert ledger.spent()[0] == pytest.approx(fitted.epsilon_spent_)
    capped = PrivacyLedger(max_epsilon=0.25, max_delta=1e-3)
    refused = clone(est).set_params(ledger=capped)
    with pytest.raises(BudgetExceededError):
        refused.fit(X) if y is None else refused.fit(X, y)
    assert len(capped) == 0 and capped.pending() == []
    with pytest.raises(TypeError, match="PrivacyLedger"):
        wrong = clone(est).set_params(ledger="ledger.jsonl")
        wrong.fit(X) if y is None else wrong.fit(X, y)


def test_grid_search_reports_to_a_library_estimator_ledger_parameter():
    est, X, y = LIBRARY_CASES["logistic"]
    ledger = PrivacyLedger()
    GridSearchCV(clone(est).set_params(ledger=ledger), {"alpha": [1e-4, 1e-3]}, cv=3,
                 n_jobs=2).fit(X, y)
    assert len(ledger) == 2 * 3 + 1
    assert {r.pid for r in ledger.records()} - {os.getpid()}  # worker processes too


def test_a_record_does_not_tell_how_long_its_fit_ran(tmp_path):
    # A fit's record carried the time it was written, its reservation the time it
    # started: their difference was the fit's running time, which for a private search
    # tells its number of runs K (correlation 0.999 over 12 searches).
    ledger = PrivacyLedger(tmp_path / "ledger.jsonl")
    rid = ledger.reserve(1.0, 1e-6, estimator="slow fit")
    (pending,) = ledger.pending()
    reserved = pending.timestamp
    time.sleep(0.05)
    record = ledger.record("slow fit", (), 1.0, 1e-6, reservation=rid)
    assert record.timestamp == reserved
    times = {json.loads(line).get("time")
             for line in (tmp_path / "ledger.jsonl").read_text().splitlines()}
    assert times - {None} == {reserved}
    # Without a reservation a record has the time it is written.
    before = time.time()
    assert ledger.record("other", (), 0.5, 0.0).timestamp >= before


# --------------------------------------------------------------------------
# Fits that share their noise
# --------------------------------------------------------------------------
def _shared_noise_warnings(make, folds=3):
    from skdp_sparse import DPSparseLogisticRegression, privacy_ledger
    from skdp_sparse.exceptions import PrivacyLeakWarning

    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 4))
    y = (X[:, 0] > 0).astype(int)
    with warnings.catch_warnings(record=True) as caught, privacy_ledger():
        warnings.simplefilter("always")
        cross_val_score(make(DPSparseLogisticRegression), X, y, cv=folds)
    return [w for w in caught if issubclass(w.category, PrivacyLeakWarning)
            and "same generator state" in str(w.message)]


@pytest.mark.parametrize("seed", [0, "generator"])
def test_fits_that_draw_the_same_noise_in_one_ledger_are_flagged(seed):
    """Every fold of a seeded estimator (an int, or a Generator that clone copies with
    its state) draws the same noise: the ledger's composition does not cover them."""
    def make(cls):
        rs = np.random.default_rng(7) if seed == "generator" else seed
        return cls(classes=[0, 1], random_state=rs)

    caught = _shared_noise_warnings(make)
    assert len(caught) == 2
    # Other settings on the same rows leak as much as the same settings on other rows.
    assert all("other settings on the same rows" in str(w.message) for w in caught)


def test_fits_with_fresh_noise_are_not_flagged():
    assert _shared_noise_warnings(lambda cls: cls(classes=[0, 1])) == []
