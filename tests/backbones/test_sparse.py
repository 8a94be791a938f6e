import torch

from simcalib.backbones.sparse import SparseOperand, fast_dropout


def test_sparse_product_and_gradient_match_dense():
    torch.manual_seed(0)
    dense = torch.rand(30, 20) * (torch.rand(30, 20) < 0.2)
    op = SparseOperand.from_csr(dense.to_sparse_csr())
    assert torch.equal(op.transpose.to_dense(), dense.t())
    w1 = torch.randn(20, 5, requires_grad=True)
    w2 = w1.detach().clone().requires_grad_(True)
    (op.matmul(w1) ** 2).sum().backward()
    ((dense @ w2) ** 2).sum().backward()
    assert torch.allclose(op.matmul(w1), dense @ w1, atol=1e-6)
    assert torch.allclose(w1.grad, w2.grad, atol=1e-5)


def test_sparse_dropout_keeps_the_transpose_consistent():
    torch.manual_seed(1)
    dense = torch.rand(25, 15) * (torch.rand(25, 15) < 0.3)
    dropped = SparseOperand.from_csr(dense.to_sparse_csr()).dropout(0.5, training=True)
    assert torch.equal(dropped.transpose.to_dense(), dropped.matrix.to_dense().t())
    kept = dropped.matrix.to_dense()
    assert set(torch.unique(kept[dense > 0] / dense[dense > 0]).tolist()) <= {0.0, 2.0}


def test_fast_dropout_is_inverted_dropout():
    torch.manual_seed(2)
    x = torch.ones(200_000)
    y = fast_dropout(x, 0.5, training=True)
    assert set(torch.unique(y).tolist()) == {0.0, 2.0}
    assert abs(y.mean().item() - 1.0) < 0.02
    assert fast_dropout(x, 0.5, training=False) is x
