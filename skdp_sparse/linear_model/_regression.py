"""Private linear regression on sparse data: every solver of the registry."""

from __future__ import annotations

from sklearn.base import RegressorMixin

from ..utils.validation import Bound, Options
from ._base import (
    SOLVER_CONSTRAINTS,
    DPMultiSolverModel,
    LinearRegressorMixin,
    TargetRangeMixin,
)

__all__ = ["DPGreedyCDRegressor"]


class DPGreedyCDRegressor(TargetRangeMixin, LinearRegressorMixin, RegressorMixin,
                          DPMultiSolverModel):
    """Linear regression trained with differential privacy on sparse data.

    Minimises ``(1/n) sum_i l(y_i, x_i . w + b) + psi(w)`` with the squared or
    Huber loss ``l`` and an l1, l2 or elastic-net penalty ``psi``, by private
    greedy coordinate descent (DP-GCD, Mangold et al. 2023), private randomised
    coordinate descent (DP-CD, Mangold et al. 2022), one of the stochastic-gradient
    solvers of :mod:`skdp_sparse.solvers`, or output perturbation.

    Privacy
    -------
    The fit is (epsilon, delta)-DP for replace-one neighbouring datasets. Entries
    are clipped to ``[-feature_bound_j, feature_bound_j]`` and every per-example
    coordinate gradient to ``[-C_j, C_j]`` (``gradient_clip``), so each released
    coordinate gradient has sensitivity ``2 C_j / n``.

    * ``solver="greedy_cd"``, ``selection="exponential"`` (what ``"auto"`` takes with
      ``delta > 0``): each step selects
      a coordinate with the exponential mechanism on the scores
      ``u_j = dist(g_j, -d psi_j(w_j)) / sqrt(M_j)`` (sensitivity
      ``max_j 2 C_j / (n sqrt(M_j))``; epsilon_s^2/8-zCDP) and updates it with
      Gaussian noise (``mu^2/2``-zCDP); all steps compose in zCDP and convert to
      (epsilon, delta) (Canonne, Kamath & Steinke 2020).
    * ``solver="greedy_cd"``, ``selection="laplace"``: the paper's Laplace noise:
      report-noisy-max with ``Lap(2 Delta_u / eps0)`` on the scores and a Laplace
      update, each eps0-DP; composed by the tightest of basic and advanced
      composition and zCDP; ``delta=0`` gives pure DP (``selection="auto"`` takes it
      there).
    * ``solver="cd"``: a coordinate drawn uniformly at random, Gaussian update;
      the updates compose exactly as one Gaussian mechanism (GDP).
    * ``solver="sgd"``, ``"bias_reduced_sgd"``, ``"sparse_sgd"``, ``"phased_sgd"``:
      rows are clipped to l2 norm ``norm_bound`` (and l1 norm
      ``norm_bound * sqrt(sparsity)``), per-example derivatives to the loss's bound
      (``target_bound`` for the squared loss); see :mod:`skdp_sparse.solvers` for
      each mechanism and its accounting.
    * ``solver="output_perturbation"``: L2-regularised ERM solved to a certified
      tolerance plus calibrated noise
      (:class:`~skdp_sparse.solvers.output_perturbation.OutputPerturbation`); needs
      ``penalty="l2"``.
    * ``solver="auto"`` (default): chosen by
      :func:`~skdp_sparse.solvers.resolve_solver` from the public n, p, epsilon and
      delta only, never from the data's values or labels (``delta=0``: greedy CD).

    The noise is calibrated so that the accountant's total equals
    ``(epsilon, delta)``; ``epsilon_spent_`` and ``delta_spent_`` report it. For
    multiclass one-vs-rest fits the coordinate-descent solvers, ``"sgd"``,
    ``"sparse_sgd"`` and ``"phased_sgd"`` calibrate all K problems jointly;
    ``"bias_reduced_sgd"`` gives each ``(epsilon/K, delta/K)``.

    Parameters
    ----------
    epsilon : float, default=1.0
        Privacy budget of the whole fit; ``np.inf`` switches noise off (not private).
    delta : float, default=1e-6
        Approximate-DP failure probability, in [0, 1). Choose it below 1/n.
    loss : {"squared", "huber"}, default="squared"
    huber_threshold : float, default=1.35
        Threshold of the Huber loss (quadratic for residuals below it).
    penalty : {"l1", "l2", "elasticnet", "none"} or None, default="l1"
        ``"none"`` and ``None`` fit without a penalty, as does ``alpha=0``.
    alpha : float, default=None
        Penalty strength; ``None`` is 1e-3 (``output_perturbation``: the theorem's
        rule from the public bounds; ``screened_newton``: 0).
    l1_ratio : float, default=0.5
        Elastic-net mixing (scikit-learn's convention).
    feature_bound : float or array of shape (n_features,), default=1.0
        Public bound on ``|x_ij|`` (coordinate-descent solvers); entries are clipped to it.
    norm_bound : float, default=1.0
        Public bound on the l2 norm of a row (gradient solvers, output perturbation,
        and the curvature estimate of the coordinate-descent solvers); rows are
        clipped to it.
    sparsity : int, default=None
        Public bound s on non-zeros per row; rows are also clipped to l1 norm
        ``norm_bound * sqrt(s)`` (projection-mechanism gradients, pure-DP output
        perturbation).
    target_bound : float, default=None
        Public bound on ``|y|``, used for the default gradient clipping of the
        squared loss (``C_j = target_bound * feature_bound_j``); ``None`` is 1
        (targets already scaled to about ``[-1, 1]``, no range stated). A value
        given is also the range ``predict`` clips to (with ``clip_predict``), as for
        ``target_bounds=(-target_bound, target_bound)``. Give either this or
        ``target_bounds``.
    target_bounds : pair (low, high), default=None
        Public range of the targets, in their own units (a price range, a score
        scale), for targets that are not centred: ``y`` is clipped to
        ``[low, high]`` and mapped to ``[-1, 1]`` by ``(y - c) / h``, with
        ``c = (low + high) / 2`` and ``h = (high - low) / 2``, inside ``fit``; the
        model is fitted on the mapped targets with ``target_bound = 1`` (so the
        sensitivities follow from the range: a clip ``C_j = feature_bound_j`` in
        the mapped units is ``h feature_bound_j`` in the targets' units) and
        ``coef_`` and ``intercept_`` are mapped back, so that ``predict`` returns
        the targets' units. ``alpha`` and ``huber_threshold`` apply to the mapped
        targets. With ``fit_intercept=False`` the intercept is the public centre
        ``c``. The range is a public hyperparameter: never take it from the
        training targets.
    gradient_clip : float or array of shape (n_features,), default=None
        Per-example coordinate-gradient clipping ``C_j``; ``None`` derives it from
        the loss and the bounds.
    fit_intercept : bool, default=True
        The intercept is the coefficient of a constant feature 1, unpenalised;
        its gradient is clipped like a feature of bound 1.
    solver : {"auto", "greedy_cd", "cd", "sgd", "bias_reduced_sgd", "sparse_sgd", \
"phased_sgd", "output_perturbation", "screened_newton", "sufficient_statistics", \
"bounded_newton"}, default="auto"
        ``"screened_newton"`` (logistic loss only) screens the features privately and
        takes one diagonal Newton step from the null model
        (:mod:`skdp_sparse.solvers.screened_newton`). ``"sufficient_statistics"``
        (squared loss without an l1 penalty) releases noisy ``X^T X`` and ``X^T y``
        within the bounds and solves a ridge whose strength adapts to their noise
        (AdaSSP, :mod:`skdp_sparse.solvers.sufficient_statistics`).
        ``"bounded_newton"`` (no l1 penalty; up to a few hundred features) releases a
        noisy ``X^T X`` once and takes a few Newton steps with the loss's curvature
        bound, each on one noisy gradient
        (:mod:`skdp_sparse.solvers.bounded_newton`).
        ``"bias_reduced_sgd"`` is for n epsilon well beyond 10^5 with s-sparse rows: up
        to that its noisy steps barely move it from its start
        (:mod:`skdp_sparse.solvers.bias_reduced_sgd` says why).
    selection : {"auto", "exponential", "laplace"}, default="auto"
        Noisy selection of the greedy solver: the exponential mechanism, composed in
        zCDP (needs ``delta > 0``), or Laplace report-noisy-max, which keeps the fit
        pure DP. ``"auto"``: Laplace where ``delta=0``, else the exponential mechanism.
    curvature : {"auto", "private", "bound"}, default="auto"
        Where the coordinate-descent solvers take each coordinate's smoothness
        ``M_j`` (its step is ``1/M_j``) and default clip ``C_j``. ``"bound"``: from
        the feature bounds alone, ``M_j = beta b_j^2`` (``beta`` the loss's
        smoothness) and ``C_j`` as above; safe but very conservative for rare
        features. ``"private"``: ``CURVATURE_SHARE`` (10%) of the budget buys a
        noisy estimate of the column second moments ``mean_i x_ij^2`` of the rows
        clipped to ``norm_bound``
        (:func:`~skdp_sparse.privacy.statistics.release_column_second_moments`;
        Gaussian noise, Laplace for ``selection="laplace"``); then
        ``M_j = beta b_j^2 r_j`` and ``C_j = C_j^bound sqrt(r_j)`` with
        ``r_j`` the estimate over ``b_j^2``, clipped to ``[1e-3, 1]``
        (DP-CD's ``C_j ~ sqrt(M_j)``, Mangold et al. 2022). Set ``norm_bound`` to
        a bound on the row norms: rows above it bias the estimate low. The same
        release counts them, and if the noisy count exceeds half the rows the
        fit warns and keeps the bound's constants. ``"auto"``: the release of
        ``"private"`` when a rule on public values says it can carry signal (the
        average column sum the bounds allow, ``n min(L^2, sum_j b_j^2) / p``, above
        twice the release's noise sd:
        :func:`~skdp_sparse.solvers.coordinate_descent.curvature_release_informative`);
        otherwise no budget is spent on curvature and ``r_j = min(1, L^2 / sum_k
        b_k^2)``, each feature's share of the norm bound
        (:func:`~skdp_sparse.solvers.coordinate_descent.norm_share_ratio`), with rows
        clipped to ``norm_bound``. Without noise (``epsilon=np.inf``) both
        estimate modes use the exact moments and leave ``C_j`` as it is. With an
        explicit ``gradient_clip`` a private fit keeps the bounds' curvature (larger
        steps without matching clips amplify the noise). Ignored by the other solvers.
    max_iter : int, default=None
        Greedy steps (``greedy_cd``), passes over the coordinates (``cd``) or
        gradient steps (gradient solvers). ``None``: for ``greedy_cd`` the largest
        ``T`` whose steps can all gain against their noise, ``T = n sqrt(2 F0 rho / K)
        / (2 kappa ln(2p))`` under zCDP (``F0`` the loss at 0, ``rho`` the steps'
        zCDP budget, ``kappa = max_j C_j / sqrt(M_j)``, ``K`` the one-vs-rest
        problems;
        :func:`~skdp_sparse.solvers.coordinate_descent.default_greedy_iterations`),
        5 passes for ``cd``, or each gradient solver's theory default (200 steps
        for ``sgd`` without noise, ``epsilon=np.inf``, a fixed count that may stop
        short of the optimum). ``bounded_newton`` takes at most 10,000 steps.
    batch_size : int, default=None
        Minibatch size of ``sgd`` and ``sparse_sgd`` (``None``: the solver's default,
        full batch for ``sgd``).
    learning_rate : float, default=None
        Step size of the gradient solvers (``None``: ``1 / smoothness`` from the bounds).
    tol : float, default=1e-7
        Stopping tolerance on the best score, used only when ``epsilon=np.inf``
        (a data-dependent stopping rule would not be private).
    random_state : None, int or Generator, default=None
        ``None`` draws fresh OS entropy, as a private release should.
    ledger : PrivacyLedger, default=None
        A ledger the fit reports to besides the active ones (see
        :func:`~skdp_sparse.privacy_ledger`); it travels with the estimator through
        ``clone`` and pickling, so it reaches fits in processes an activation does not
        (those a worker starts, or a ray or dask task), and its cap holds there.
    verbose : int, default=0
        Print progress: step counts and the privacy spent so far (public quantities;
        a fit without noise may print statistics of the data).
    floating_point_safe : {"auto", True, False}, default="auto"
        ``"auto"`` and True: every noisy release rounds its value to a lattice of
        public step and adds exact discrete noise, so the low-order bits of what is
        released carry nothing about the data (:ref:`security`); discrete Gaussian
        noise is accounted in zCDP. False: noise drawn in doubles, not private against
        an adversary who reads low-order bits; the fit emits
        :class:`~skdp_sparse.exceptions.PrivacyLeakWarning`.
    feature_selection : {"auto", "none"} or int, default="auto"
        Private screening of the features before learning (``sgd`` and
        ``screened_newton``; the other solvers take ``"auto"`` or ``"none"``): a share
        of the budget buys a Gaussian release of every feature's label association
        (the gradient at the null model) and the solver learns on the coordinates it
        keeps; the coefficients of the others are exactly 0 (:ref:`defaults`). An
        integer ``k`` keeps the ``k`` largest; ``"auto"`` is the solver's rule
        (``screened_newton``: those above one noise standard deviation; ``sgd``: no
        screening); ``"sure"`` (:class:`DPSparseLogisticRegression`'s
        ``screened_newton`` only) cuts at the threshold that minimises Stein's unbiased
        risk estimate of the released association, for one-hot data whose few frequent
        values carry the signal (:ref:`defaults`); ``"none"`` keeps every feature. With
        ``solver="auto"``, an integer ``k`` or ``"sure"`` makes the logistic loss's
        choice ``screened_newton``.
    feature_selection_share : float in (0, 1), default=None
        Share of the budget (of the Gaussian ``mu^2``) spent on the association release;
        ``None``: the solver's rule (``sgd``: 1/4; ``screened_newton``: 3/4, the
        association being also its gradient). ``sparse_sgd`` with an integer
        ``frequent_features``: the share of the feature counts' release (``None``: 1/4).
    clip_predict : bool, default=True
        Predict as the fit saw its rows: ``predict`` and ``score`` clip each new row
        with the public bounds the solver clipped the training rows with
        (``input_clipping_``: entries to ``feature_bound`` and rows to ``norm_bound``
        for greedy CD and the sufficient statistics, rows to ``norm_bound`` for the
        gradient solvers and output perturbation; nothing for ``screened_newton``,
        whose decision is calibrated on unclipped scores), so that one outlying row
        cannot get a score far outside those the model was fitted on; with
        ``target_bounds`` (or ``target_bound=T``: ``[-T, T]``), each prediction is
        also clipped to that range, as the training targets were. False predicts on
        the rows as given, unclipped. Uses only the public bounds: costs no privacy.
    decision : {"auto", "calibrated", "fitted"}, default="auto"
        How the fitted score becomes a prediction (squared loss).
        ``"calibrated"`` runs the solver on part of the budget and refits the slope
        and the intercept of its score by least squares on one private release of the
        moment sums of the clipped, centred, scaled scores and the clipped targets
        (:func:`~skdp_sparse.solvers._calibration.calibrate_regression`; the
        smallest share of the Gaussian budget ``mu^2`` at which each sum's noise is
        1% of ``n``, at most 1/2, composed with the solver's steps in one accountant;
        Laplace releases with ``delta=0``); where the noise hides the slope the
        prediction is the private mean of the targets. The share reaches its cap below
        ``n mu`` of about 480, where a solver's own fit is mostly noise and the mean is
        what the budget buys (:data:`~skdp_sparse.solvers.decision.MAX_REGRESSION_SHARE`).
        ``"fitted"`` keeps the solver's own coefficients and intercept. ``"auto"`` is
        ``"calibrated"`` for ``"sgd"``, ``"sparse_sgd"``, ``"phased_sgd"``, ``"cd"``
        and ``"output_perturbation"``, and ``"fitted"`` for the other solvers, for the
        Huber loss and without noise; except that ``"sgd"`` keeps its own prediction
        on the whole budget where, even at the refit's cap, each moment sum's noise
        exceeds 2% of ``n`` (``n mu`` below about 240, where the refit loses the slope
        in it: :func:`~skdp_sparse.solvers.decision.regression_refit_informative`),
        with an l2 term added to the penalty, the ridge the planned noise of its
        averaged gradient calls for, ``2 C2 sqrt(d) / (n mu)`` with ``d`` the number
        of parameters (``p + 1`` with the intercept, ``p`` without;
        :func:`~skdp_sparse.solvers.sgd.noise_ridge`).
    selection_threshold : float, default=None
        ``sparse_sgd`` (DP-AdaFEST) only: a feature's noisy clipped count in the batch
        must exceed it for its coordinate to be updated (and noised) in that step.
        ``None``: ``z_c C_c Phi^-1(1 - min(1, B / d))``, with ``z_c C_c`` the count noise
        and ``B`` the batch size, so that ``B`` features absent from the batch pass per
        step on average: the step costs O(batch non-zeros) and noises about ``d / B``
        times fewer coordinates than dense DP-SGD
        (:func:`~skdp_sparse.solvers.sparse_sgd.default_threshold_tail`). In the
        counts' units (a row's features add up to at most ``contribution_bound`` in l2
        norm); with ``floating_point_safe`` rounded down to the counts' lattice.
    selection_share : float in (0, 1), default=0.5
        ``sparse_sgd`` only: share of each step's ``1 / z^2`` spent on the feature
        counts (the rest on the gradient): count noise ``z C_c / sqrt(share)``, gradient
        noise ``z C2 / sqrt(1 - share)``. 0.5 maximises the product of the two
        signal-to-noise ratios, ``sqrt(share (1 - share))``.
    contribution_bound : float, default=1.0
        ``sparse_sgd`` only: ``C_c``, the l2 norm each row's indicator of its non-zero
        features is scaled down to before the counts are summed. The count noise scales
        with it, so it matters only through rows with fewer than ``C_c^2`` non-zeros,
        whose features then count fully.
    frequent_features : int or array-like of int, default=None
        ``sparse_sgd`` only, DP-FEST: learn on a fixed set of features with dense
        DP-SGD on those coordinates alone (same batches and steps), the others' weights
        exactly 0. A list of column indices is public (e.g. a vocabulary fixed without
        the training data) and costs nothing; an integer ``k`` takes the ``k`` features
        of largest noisy count (the rows' indicators scaled as by
        ``contribution_bound``, summed over all rows, Gaussian noise for the
        replace-one sensitivity ``sqrt(2) C_c``), released once at the share
        ``feature_selection_share`` of the budget (``None``: 1/4, as ``sgd``'s
        screening). ``None``: DP-AdaFEST, a new noisy selection at every step.

    Attributes
    ----------
    coef_ : ndarray of shape (n_features,)
    intercept_ : float
    solver_ : str
        The solver that ran (``solver="auto"`` resolved).
    n_iter_ : int
        Iterations run; a public number fixed before the fit (1 for output perturbation).
    screening_scores_ : ndarray of shape (1, n_features)
        Only after a fit that screened features (``feature_selection``): the noisy
        association of every feature with the target, the statistic the screening
        ranks.
    epsilon_spent_, delta_spent_ : float
    privacy_events_ : tuple of PrivacyEvent
    input_clipping_ : tuple (feature_bound, norm_bound, l1_bound)
        The public clipping the solver applied to the training rows (``None`` or
        ``inf`` where it applied none), which ``clip_predict`` applies to new rows.
    n_features_in_ : int

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> from skdp_sparse import DPGreedyCDRegressor
    >>> X = sp.random(500, 50, density=0.1, format="csr", random_state=0)
    >>> y = X @ np.r_[1.0, -1.0, np.zeros(48)]
    >>> reg = DPGreedyCDRegressor(epsilon=1.0, delta=1e-6, random_state=0).fit(X, y)
    >>> reg.epsilon_spent_ <= 1.0
    True
    """

    _parameter_constraints = {
        **SOLVER_CONSTRAINTS,
        "loss": [Options("squared", "huber")],
        "huber_threshold": [Bound()],
        "target_bound": [Bound(), None],
        "target_bounds": ["no_validation"],
        "decision": [Options("auto", "calibrated", "fitted")],
    }
    _default_alpha = 1e-3

    def __init__(self, *, epsilon=1.0, delta=1e-6, loss="squared", huber_threshold=1.35,
                 penalty="l1", alpha=None, l1_ratio=0.5, feature_bound=1.0, norm_bound=1.0,
                 sparsity=None, target_bound=None, target_bounds=None, gradient_clip=None,
                 fit_intercept=True, solver="auto", selection="auto",
                 curvature="auto", max_iter=None, batch_size=None, learning_rate=None,
                 tol=1e-7, random_state=None, verbose=0, floating_point_safe="auto",
                 feature_selection="auto", feature_selection_share=None, clip_predict=True,
                 selection_threshold=None, selection_share=0.5, contribution_bound=1.0,
                 frequent_features=None, decision="auto", ledger=None):
        self.epsilon = epsilon
        self.delta = delta
        self.loss = loss
        self.huber_threshold = huber_threshold
        self.penalty = penalty
        self.alpha = alpha
        self.l1_ratio = l1_ratio
        self.feature_bound = feature_bound
        self.norm_bound = norm_bound
        self.sparsity = sparsity
        self.target_bound = target_bound
        self.target_bounds = target_bounds
        self.gradient_clip = gradient_clip
        self.fit_intercept = fit_intercept
        self.solver = solver
        self.selection = selection
        self.curvature = curvature
        self.max_iter = max_iter
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.tol = tol
        self.random_state = random_state
        self.ledger = ledger
        self.verbose = verbose
        self.floating_point_safe = floating_point_safe
        self.feature_selection = feature_selection
        self.feature_selection_share = feature_selection_share
        self.selection_threshold = selection_threshold
        self.selection_share = selection_share
        self.contribution_bound = contribution_bound
        self.frequent_features = frequent_features
        self.clip_predict = clip_predict
        self.decision = decision
