# SPDX-License-Identifier: Apache-2.0
"""Dense linear algebra for the converter: a matrix product that stays fast
where numpy links the slow reference BLAS, and principal subspaces.

Eigen-decompositions are always float64 and kept small (at most a few
hundred, sized by the token count or a head dimension); the large products
run in the working dtype (float64 for float64 weights, else float32).
"""

import functools

import numpy as np

try:  # optional: torch's BLAS is fast everywhere
    import torch as _torch
except Exception:  # pragma: no cover - torch is not installed here
    _torch = None


@functools.lru_cache(maxsize=None)
def _blas_is_fast():
    # Debian's numpy may link the reference BLAS (about 1 GFLOP/s); numpy's
    # own einsum loops are then 2-4x faster. Time both once on a small case.
    import time
    rng = np.random.default_rng(0)
    a = rng.standard_normal((160, 512)).astype(np.float32)
    b = rng.standard_normal((512, 384)).astype(np.float32)
    best = {}
    for name, fn in (("blas", lambda: a @ b), ("einsum", lambda: _einsum_product(a, b))):
        fn()
        start = time.perf_counter()
        fn()
        best[name] = time.perf_counter() - start
    return best["blas"] <= best["einsum"]


def _einsum_product(a, b, col_block=256, row_block=64):
    # Blocked so that a column block of b (k x 256) stays in cache while the
    # rows of a stream past it.
    rows, cols = a.shape[0], b.shape[1]
    out = np.empty((rows, cols), np.result_type(a, b))
    for c0 in range(0, cols, col_block):
        block = np.ascontiguousarray(b[:, c0:c0 + col_block])
        for r0 in range(0, rows, row_block):
            np.einsum("ij,jk->ik", a[r0:r0 + row_block], block,
                      out=out[r0:r0 + row_block, c0:c0 + col_block], optimize=False)
    return out


def matmul(a, b):
    """a [m, k] @ b [k, n] in the common dtype of a and b."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape[0] * a.shape[1] * b.shape[1] < 1 << 21:
        return a @ b
    if _torch is not None:
        return (_torch.from_numpy(np.ascontiguousarray(a)) @ _torch.from_numpy(np.ascontiguousarray(b))).numpy()
    if _blas_is_fast():
        return a @ b
    return _einsum_product(a, b)


def gram(y, weights=None):
    """y^T diag(weights) y for tokens y [n, p] (float64, symmetric)."""
    y = np.asarray(y, np.float64)
    if weights is not None:
        y = y * np.sqrt(np.asarray(weights, np.float64))[:, None]
    out = matmul(y.T.copy(), y)
    return (out + out.T) * 0.5


def top_eigenvectors(symmetric, k):
    """(values, vectors [p, k]) of the k largest eigenvalues, descending."""
    values, vectors = np.linalg.eigh(np.asarray(symmetric, np.float64))
    order = np.argsort(values)[::-1][:k]
    return values[order], vectors[:, order]


def principal_rows(y, k, tolerance=1e-12, reference=0.0):
    """An orthonormal basis [p, j] (j <= k) of the top principal directions
    of the rows of y [n, p] (uncentred, as attention sees them), with their
    energies. Directions with energy below tolerance * max(the largest,
    reference) are left out. Works through the smaller of the two Gram
    matrices."""
    y = np.asarray(y)
    n, p = y.shape
    if n == 0 or k == 0:
        return np.zeros(0), np.zeros((p, 0))
    floor = lambda values: max(values[0] if len(values) else 0.0, reference, 0.0) * tolerance
    if p <= n:
        values, vectors = top_eigenvectors(gram(y), k)
    else:
        small = matmul(y, y.T.copy()).astype(np.float64)
        values, v = top_eigenvectors((small + small.T) * 0.5, k)
        keep = values > floor(values)
        values, v = values[keep], v[:, keep]
        if not len(values):
            return values, np.zeros((p, 0))
        vectors = matmul(y.T.copy(), v.astype(y.dtype)).astype(np.float64) / np.sqrt(values)
        # The small Gram matrix squares the condition number; one Cholesky
        # QR pass restores orthonormality to float64 round-off.
        vectors = _orthonormalize(vectors)
    keep = values > floor(values)
    return values[keep], vectors[:, keep]


def _orthonormalize(vectors):
    # Cholesky QR: a product, a small factorization and a small inverse,
    # much cheaper than Householder QR through the reference LAPACK.
    g = gram(vectors)
    try:
        chol = np.linalg.cholesky(g)
    except np.linalg.LinAlgError:
        q, _ = np.linalg.qr(vectors)
        return q
    return matmul(vectors, np.linalg.inv(chol).T.copy())


def complement_rows(y, basis):
    """The rows of y with their components along the orthonormal `basis`
    [p, j] removed."""
    if basis.shape[1] == 0:
        return y
    return y - matmul(matmul(y, basis.astype(y.dtype)), basis.T.astype(y.dtype).copy())


def complete_basis(basis, k):
    """Extend an orthonormal basis [p, j] to k columns with unused unit
    directions (for maps of lower rank than the requested dimension)."""
    p, j = basis.shape
    missing = k - j
    if missing <= 0:
        return basis[:, :k]
    least_used = np.argsort(np.einsum("ij,ij->i", basis, basis))[:min(p, 2 * missing + 1)]
    filler = np.eye(p)[:, least_used]
    for _ in range(2):  # twice: orthogonal to round-off
        filler = filler - basis @ (basis.T @ filler)
    q, _ = np.linalg.qr(filler)
    return np.concatenate([basis, q[:, :missing]], axis=1)
