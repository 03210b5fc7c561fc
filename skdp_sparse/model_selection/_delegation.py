"""The prediction methods of :class:`PrivateHyperparameterSearch`: those of its
released model, ``best_estimator_``."""

from sklearn.utils.metaestimators import available_if
from sklearn.utils.validation import check_is_fitted


def _best_has(name):
    # Before fit the searched estimator answers, as for GridSearchCV: tools ask an
    # unfitted estimator for its methods (cross_val_score's default scorer looks for
    # ``score``, a Pipeline ending in the search for ``predict``).
    def check(self):
        return hasattr(getattr(self, "best_estimator_", self.estimator), name)

    return check


class DelegatesToBest:
    """Prediction, scoring and ``classes_`` read from ``best_estimator_``."""

    def _best(self):
        check_is_fitted(self, "best_estimator_")
        return self.best_estimator_

    @available_if(_best_has("predict"))
    def predict(self, X):
        return self._best().predict(X)

    @available_if(_best_has("predict_proba"))
    def predict_proba(self, X):
        return self._best().predict_proba(X)

    @available_if(_best_has("predict_log_proba"))
    def predict_log_proba(self, X):
        return self._best().predict_log_proba(X)

    @available_if(_best_has("decision_function"))
    def decision_function(self, X):
        return self._best().decision_function(X)

    @available_if(_best_has("transform"))
    def transform(self, X):
        return self._best().transform(X)

    @available_if(_best_has("score"))
    def score(self, X, y=None):
        """The best estimator's own ``score`` (on data you pass: not private)."""
        return self._best().score(X, y)

    @property
    def classes_(self):
        return self._best().classes_
