r"""A fused per-target GAT attention kernel for CPU (C++, compiled at first use), measured against "csr".

The layer computes the equations of :class:`simcalib.backbones.gat_attention.GraphAttention` with the same
parameters and the same dropout draw (``bernoulli_`` over [E, H] in ``edge_index`` order); only the
attention step differs. One pass over each target's incoming edges (CSR order) does, for all heads at once,

- forward: ``e = LeakyReLU(s_src[j] + s_dst[i])``, the row maximum, ``u = exp(e - max)``, ``t = sum u`` and
  ``out_i = sum_j u_ij m_ij x_j / t_i`` (m: the dropout multiplier, read from the [E, H] mask in edge order
  through the edge -> CSR permutation, so no permuted copy is made);
- backward: with ``g_i = grad_out_i / t_i`` and ``r_i = g_i . out_i`` (per head),
  ``grad x_j += u_ij m_ij g_i``, ``dL/de_ij = u_ij (m_ij g_i . x_j - r_i) LeakyReLU'``, summed into
  ``grad s_dst[i]`` and ``grad s_src[j]``. ``u`` is kept from the forward ([E, H], CSR order; not written in
  an evaluation forward without gradients).

The backward scatters into the sources' rows and so runs on one thread; the forward splits the targets
over torch's threads.

    python benchmarks/speed/gat_fused_attention.py check
    python benchmarks/speed/gat_fused_attention.py time --datasets Computers,Photo,CS,Physics --repeats 7
    python benchmarks/speed/gat_fused_attention.py kernels --datasets Computers,Physics --repeats 5

``time --kernels csr,pyg,fused,fused-per-head`` picks the models timed (fused-per-head: the kernel run one head
at a time); ``$GAT_FUSED_CFLAGS`` the compiler flags of the extension (default -O3).
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import sys
import time
import warnings

import torch
from torch import Tensor
from utils import cpu_model  # same folder: run as a script

CPP_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <limits>
#include <vector>

// exp(x) for x <= 0 (the softmax's shifted scores): Cephes' expf polynomial, written branch-free so that
// the compiler vectorises it over the heads; float64 (gradcheck) uses std::exp.
static inline float exp_nonpositive(float x) {
  x = x < -87.0f ? -87.0f : x;
  const float magic = 12582912.0f;  // 1.5 * 2^23: adding and subtracting it rounds to the nearest integer
  float n = (x * 1.44269504088896341f + magic) - magic;
  float r = x - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}
static inline double exp_nonpositive(double x) { return std::exp(x); }

template <typename T>
static inline T leaky(T v, T slope) { return v > T(0) ? v : v * slope; }

// H heads and C channels are compile-time, so that the per-edge loops over them are unrolled and
// vectorised and the accumulators stay in registers.
template <typename T, int H, int C>
static void forward_impl(const T* __restrict__ x, const T* __restrict__ ssrc, const T* __restrict__ sdst,
                         const int64_t* __restrict__ crow, const int64_t* __restrict__ col,
                         const T* __restrict__ mask, const int64_t* __restrict__ eoe, T slope, int64_t N,
                         T* __restrict__ out, T* __restrict__ top, T* __restrict__ total, T* __restrict__ u_out) {
  at::parallel_for(0, N, 256, [&](int64_t begin, int64_t end) {
    std::vector<T> buf;
    for (int64_t i = begin; i < end; ++i) {
      const int64_t k0 = crow[i], k1 = crow[i + 1], deg = k1 - k0;
      T di[H], mx[H], tt[H], acc[H * C];
      for (int h = 0; h < H; ++h) { di[h] = sdst[i * H + h]; mx[h] = -std::numeric_limits<T>::infinity(); tt[h] = T(0); }
      T* __restrict__ e;
      if (u_out) {
        e = u_out + k0 * H;
      } else {
        if (static_cast<int64_t>(buf.size()) < deg * H) buf.resize(deg * H);
        e = buf.data();
      }
      for (int64_t k = 0; k < deg; ++k) {
        const T* __restrict__ sj = ssrc + col[k0 + k] * H;
        for (int h = 0; h < H; ++h) {
          const T v = leaky(sj[h] + di[h], slope);
          e[k * H + h] = v;
          mx[h] = v > mx[h] ? v : mx[h];
        }
      }
      for (int64_t k = 0; k < deg; ++k)
        for (int h = 0; h < H; ++h) e[k * H + h] = exp_nonpositive(e[k * H + h] - mx[h]);
      for (int64_t k = 0; k < deg; ++k)
        for (int h = 0; h < H; ++h) tt[h] += e[k * H + h];
      for (int q = 0; q < H * C; ++q) acc[q] = T(0);
      for (int64_t k = 0; k < deg; ++k) {
        const T* __restrict__ xj = x + col[k0 + k] * (H * C);
        T w[H];
        if (mask) {
          const T* __restrict__ mk = mask + eoe[k0 + k] * H;
          for (int h = 0; h < H; ++h) w[h] = e[k * H + h] * mk[h];
        } else {
          for (int h = 0; h < H; ++h) w[h] = e[k * H + h];
        }
        for (int h = 0; h < H; ++h)
          for (int c = 0; c < C; ++c) acc[h * C + c] += w[h] * xj[h * C + c];
      }
      T* __restrict__ oi = out + i * (H * C);
      for (int h = 0; h < H; ++h) {
        const T t = tt[h] < T(1) ? T(1) : tt[h];
        total[i * H + h] = t;
        top[i * H + h] = deg > 0 ? mx[h] : T(0);
        for (int c = 0; c < C; ++c) oi[h * C + c] = acc[h * C + c] / t;
      }
    }
  });
}

template <typename T, int H, int C>
static void backward_impl(const T* __restrict__ gout, const T* __restrict__ x, const T* __restrict__ ssrc,
                          const T* __restrict__ sdst, const int64_t* __restrict__ crow,
                          const int64_t* __restrict__ col, const T* __restrict__ mask,
                          const int64_t* __restrict__ eoe, const T* __restrict__ uval,
                          const T* __restrict__ total, const T* __restrict__ out, T slope, int64_t N,
                          T* __restrict__ gx, T* __restrict__ gsrc, T* __restrict__ gdst) {
  for (int64_t i = 0; i < N; ++i) {
    const int64_t k0 = crow[i], k1 = crow[i + 1];
    if (k0 == k1) continue;
    T g[H * C], r[H], di[H], gd[H];
    for (int h = 0; h < H; ++h) {
      const T inv = T(1) / total[i * H + h];
      T s = T(0);
      for (int c = 0; c < C; ++c) {
        const T v = gout[i * (H * C) + h * C + c] * inv;
        g[h * C + c] = v;
        s += v * out[i * (H * C) + h * C + c];
      }
      r[h] = s;
      di[h] = sdst[i * H + h];
      gd[h] = T(0);
    }
    for (int64_t k = k0; k < k1; ++k) {
      const int64_t j = col[k];
      const T* __restrict__ sj = ssrc + j * H;
      const T* __restrict__ xj = x + j * (H * C);
      T* __restrict__ gxj = gx + j * (H * C);
      T* __restrict__ gsj = gsrc + j * H;
      const T* __restrict__ uk = uval + k * H;
      T m[H];
      if (mask) {
        const T* __restrict__ mk = mask + eoe[k] * H;
        for (int h = 0; h < H; ++h) m[h] = mk[h];
      } else {
        for (int h = 0; h < H; ++h) m[h] = T(1);
      }
      T dot[H];
      for (int h = 0; h < H; ++h) {
        T s = T(0);
        for (int c = 0; c < C; ++c) s += g[h * C + c] * xj[h * C + c];
        dot[h] = s;
      }
      for (int h = 0; h < H; ++h) {
        const T wh = uk[h] * m[h];
        for (int c = 0; c < C; ++c) gxj[h * C + c] += wh * g[h * C + c];
      }
      for (int h = 0; h < H; ++h) {
        T d = uk[h] * (m[h] * dot[h] - r[h]);
        d = (sj[h] + di[h]) > T(0) ? d : d * slope;
        gd[h] += d;
        gsj[h] += d;
      }
    }
    for (int h = 0; h < H; ++h) gdst[i * H + h] += gd[h];
  }
}

template <typename T, int H, int C>
static void run_forward(torch::Tensor& x, torch::Tensor& ssrc, torch::Tensor& sdst, torch::Tensor& crow,
                        torch::Tensor& col, torch::Tensor& mask, torch::Tensor& eoe, double slope,
                        torch::Tensor& out, torch::Tensor& top, torch::Tensor& total, torch::Tensor& u) {
  forward_impl<T, H, C>(x.data_ptr<T>(), ssrc.data_ptr<T>(), sdst.data_ptr<T>(), crow.data_ptr<int64_t>(),
                        col.data_ptr<int64_t>(), mask.numel() ? mask.data_ptr<T>() : nullptr,
                        eoe.data_ptr<int64_t>(), static_cast<T>(slope), x.size(0),
                        out.data_ptr<T>(), top.data_ptr<T>(), total.data_ptr<T>(),
                        u.numel() ? u.data_ptr<T>() : nullptr);
}

template <typename T, int H, int C>
static void run_backward(torch::Tensor& gout, torch::Tensor& x, torch::Tensor& ssrc, torch::Tensor& sdst,
                         torch::Tensor& crow, torch::Tensor& col, torch::Tensor& mask, torch::Tensor& eoe,
                         torch::Tensor& u, torch::Tensor& total, torch::Tensor& out, double slope,
                         torch::Tensor& gx, torch::Tensor& gsrc, torch::Tensor& gdst) {
  backward_impl<T, H, C>(gout.data_ptr<T>(), x.data_ptr<T>(), ssrc.data_ptr<T>(), sdst.data_ptr<T>(),
                         crow.data_ptr<int64_t>(), col.data_ptr<int64_t>(),
                         mask.numel() ? mask.data_ptr<T>() : nullptr, eoe.data_ptr<int64_t>(), u.data_ptr<T>(),
                         total.data_ptr<T>(), out.data_ptr<T>(), static_cast<T>(slope), x.size(0),
                         gx.data_ptr<T>(), gsrc.data_ptr<T>(), gdst.data_ptr<T>());
}

// The shapes GAT uses: 8 heads x 8 channels, and one head of 1-16 classes.
bool supported(int64_t H, int64_t C) { return (H == 8 && C == 8) || (H == 1 && C >= 1 && C <= 16); }

#define ONE_HEAD(T, FN, c, ...) case c: FN<T, 1, c>(__VA_ARGS__); break;
#define DIMS_SWITCH(T, FN, ...)                                                                        \
  if (H == 8 && C == 8) { FN<T, 8, 8>(__VA_ARGS__); }                                                  \
  else switch (C) {                                                                                    \
    ONE_HEAD(T, FN, 1, __VA_ARGS__) ONE_HEAD(T, FN, 2, __VA_ARGS__) ONE_HEAD(T, FN, 3, __VA_ARGS__)    \
    ONE_HEAD(T, FN, 4, __VA_ARGS__) ONE_HEAD(T, FN, 5, __VA_ARGS__) ONE_HEAD(T, FN, 6, __VA_ARGS__)    \
    ONE_HEAD(T, FN, 7, __VA_ARGS__) ONE_HEAD(T, FN, 8, __VA_ARGS__) ONE_HEAD(T, FN, 9, __VA_ARGS__)    \
    ONE_HEAD(T, FN, 10, __VA_ARGS__) ONE_HEAD(T, FN, 11, __VA_ARGS__) ONE_HEAD(T, FN, 12, __VA_ARGS__) \
    ONE_HEAD(T, FN, 13, __VA_ARGS__) ONE_HEAD(T, FN, 14, __VA_ARGS__) ONE_HEAD(T, FN, 15, __VA_ARGS__) \
    ONE_HEAD(T, FN, 16, __VA_ARGS__)                                                                   \
  }

std::vector<torch::Tensor> fused_forward(torch::Tensor x, torch::Tensor ssrc, torch::Tensor sdst,
                                         torch::Tensor crow, torch::Tensor col, torch::Tensor mask,
                                         torch::Tensor eoe, double slope, bool keep_weights) {
  const int64_t N = x.size(0), H = x.size(1), C = x.size(2);
  TORCH_CHECK(supported(H, C), "fused attention: unsupported heads x channels");
  auto out = torch::empty_like(x);
  auto top = torch::empty({N, H}, x.options());
  auto total = torch::empty({N, H}, x.options());
  auto u = keep_weights ? torch::empty({col.size(0), H}, x.options()) : torch::empty({0}, x.options());
  if (x.scalar_type() == at::kFloat) {
    DIMS_SWITCH(float, run_forward, x, ssrc, sdst, crow, col, mask, eoe, slope, out, top, total, u)
  } else {
    TORCH_CHECK(x.scalar_type() == at::kDouble, "float32 or float64");
    DIMS_SWITCH(double, run_forward, x, ssrc, sdst, crow, col, mask, eoe, slope, out, top, total, u)
  }
  return {out, top, total, u};
}

std::vector<torch::Tensor> fused_backward(torch::Tensor gout, torch::Tensor x, torch::Tensor ssrc,
                                          torch::Tensor sdst, torch::Tensor crow, torch::Tensor col,
                                          torch::Tensor mask, torch::Tensor eoe, torch::Tensor u,
                                          torch::Tensor total, torch::Tensor out, double slope) {
  const int64_t N = x.size(0), H = x.size(1), C = x.size(2);
  auto gx = torch::zeros_like(x);
  auto gsrc = torch::zeros({N, H}, x.options());
  auto gdst = torch::zeros({N, H}, x.options());
  if (x.scalar_type() == at::kFloat) {
    DIMS_SWITCH(float, run_backward, gout, x, ssrc, sdst, crow, col, mask, eoe, u, total, out, slope, gx, gsrc, gdst)
  } else {
    DIMS_SWITCH(double, run_backward, gout, x, ssrc, sdst, crow, col, mask, eoe, u, total, out, slope, gx, gsrc, gdst)
  }
  return {gx, gsrc, gdst};
}
"""

_EXTENSIONS: dict = {}
FLAGS = tuple(os.environ.get("GAT_FUSED_CFLAGS", "-O3").split())


def extension(flags: tuple[str, ...] | None = None):
    """The compiled kernels (built once per source and flags into torch's extension cache);
    ``$GAT_FUSED_CFLAGS`` picks the compiler flags (default -O3)."""
    flags = FLAGS if flags is None else flags
    if flags not in _EXTENSIONS:
        from torch.utils.cpp_extension import load_inline

        tag = "".join(ch if ch.isalnum() else "_" for ch in "".join(flags))
        _EXTENSIONS[flags] = load_inline(name=f"simcalib_gat_fused_proto_{tag}", cpp_sources=CPP_SOURCE,
                                         functions=["fused_forward", "fused_backward", "supported"],
                                         extra_cflags=list(flags), verbose=False)
    return _EXTENSIONS[flags]


def _structure(graph):
    """(crow int64, col int64, edge_of_entry int64) of an AttentionGraph, cached on it."""
    cached = getattr(graph, "_fused_structure", None)
    if cached is None:
        crow = graph.crow.long().contiguous()
        cached = (crow, graph.col.contiguous(), graph.edge_of_entry.contiguous())
        object.__setattr__(graph, "_fused_structure", cached)
    return cached


class _FusedAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, score_src, score_dst, graph, negative_slope, mask):
        crow, col, eoe = _structure(graph)
        x, score_src, score_dst = x.contiguous(), score_src.contiguous(), score_dst.contiguous()
        mask_arg = mask if mask is not None else x.new_empty(0)
        keep = any(ctx.needs_input_grad[:3])
        out, top, total, weights = extension().fused_forward(x, score_src, score_dst, crow, col, mask_arg, eoe,
                                                             negative_slope, keep)
        ctx.graph, ctx.negative_slope = graph, negative_slope
        ctx.save_for_backward(x, score_src, score_dst, mask_arg, weights, total, out)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        x, score_src, score_dst, mask_arg, weights, total, out = ctx.saved_tensors
        crow, col, eoe = _structure(ctx.graph)
        gx, gsrc, gdst = extension().fused_backward(grad_out.contiguous(), x, score_src, score_dst, crow, col,
                                                    mask_arg, eoe, weights, total, out, ctx.negative_slope)
        return gx, gsrc, gdst, None, None, None


def fused_forward_layer(self, x: Tensor, graph) -> Tensor:
    """``GraphAttention.forward`` with the fused attention step (bound to a GraphAttention instance)."""
    from simcalib.backbones.gat_attention import AttentionGraph

    n = x.size(0)
    if not isinstance(graph, AttentionGraph):
        graph = AttentionGraph.from_edge_index(graph, n)
    h, c = self.heads, self.out_channels
    x = self.lin(x).view(n, h, c)
    score_src = (x * self.att_src).sum(-1)
    score_dst = (x * self.att_dst).sum(-1)
    mask = None
    if self.training and self.dropout > 0.0:
        keep = 1.0 - self.dropout
        mask = torch.empty(graph.num_edges, h, dtype=x.dtype, device=x.device).bernoulli_(keep).div_(keep)
    if getattr(self, "fused_per_head", False) and h > 1:
        # one head at a time: the kernel's gathered operand is that head's [N, C] slice
        out = torch.stack([_FusedAttention.apply(x[:, k : k + 1].contiguous(), score_src[:, k : k + 1].contiguous(),
                                                 score_dst[:, k : k + 1].contiguous(), graph, self.negative_slope,
                                                 None if mask is None else mask[:, k : k + 1].contiguous())[:, 0]
                           for k in range(h)], dim=1)
    else:
        out = _FusedAttention.apply(x, score_src, score_dst, graph, self.negative_slope, mask)
    out = out.reshape(n, h * c) if self.concat else out.mean(dim=1)
    return out if self.bias is None else out + self.bias


def make_fused(model, per_head: bool = False):
    """A csr GAT's two attention layers switched to the fused step (same parameters, same draws); ``per_head``:
    the kernel runs one head at a time."""
    import types

    for layer in (model.conv1, model.conv2):
        layer.forward = types.MethodType(fused_forward_layer, layer)
        layer.fused_per_head = per_head
    return model


# ---------------------------------------------------------------------------------------------- checks


def _tiny_graph(n: int = 7, e: int = 20, seed: int = 0):
    from torch_geometric.utils import add_self_loops, remove_self_loops

    g = torch.Generator().manual_seed(seed)
    ei = torch.randint(0, n, (2, e), generator=g)
    ei, _ = remove_self_loops(ei)
    ei = add_self_loops(ei, num_nodes=n)[0]
    ei = torch.cat([ei, ei[:, :3]], dim=1)  # multi-edges
    return ei


def check() -> None:
    """gradcheck in float64 on a tiny graph (with and without a dropout mask), and forward/backward against
    the csr kernel on Cora in float32 from the same seed."""
    from simcalib.backbones.gat_attention import AttentionGraph, _AttentionAggregation

    print("# python benchmarks/speed/gat_fused_attention.py check")
    start = time.perf_counter()
    extension()
    print(f"extension built (or loaded from the cache) in {time.perf_counter() - start:.1f} s")
    n = 7
    ei = _tiny_graph(n)
    graph = AttentionGraph.from_edge_index(ei, n)
    for heads, c in ((8, 8), (1, 4)):
        g = torch.Generator().manual_seed(1)
        x = torch.randn(n, heads, c, dtype=torch.float64, generator=g, requires_grad=True)
        ss = torch.randn(n, heads, dtype=torch.float64, generator=g, requires_grad=True)
        sd = torch.randn(n, heads, dtype=torch.float64, generator=g, requires_grad=True)
        mask = torch.empty(graph.num_edges, heads, dtype=torch.float64).bernoulli_(0.5, generator=g).div_(0.5)
        for label, m in (("no mask", None), ("dropout mask", mask)):
            ok = torch.autograd.gradcheck(lambda a, b, d, m=m: _FusedAttention.apply(a, b, d, graph, 0.2, m),
                                          (x, ss, sd))
            multiplier = None if m is None else m.index_select(0, graph.edge_of_entry).t().contiguous()
            ref = _AttentionAggregation.apply(x, ss, sd, graph, 0.2, multiplier)
            fused = _FusedAttention.apply(x, ss, sd, graph, 0.2, m)
            go = torch.randn_like(ref)
            gr = torch.autograd.grad(ref, (x, ss, sd), go)
            gf = torch.autograd.grad(fused, (x, ss, sd), go)
            bwd = max((a - b).abs().max().item() for a, b in zip(gr, gf))
            print(f"tiny graph ({n} nodes, {graph.num_edges} edges with multi-edges) float64, {heads} heads x {c} "
                  f"({label}): gradcheck {ok}; max |fused - csr| forward {(ref - fused).abs().max().item():.2e}, "
                  f"backward {bwd:.2e}")

    sys.path.insert(0, os.path.dirname(__file__))
    from gat_attention_speed import setup_backbone

    for dataset in ("Cora", "Computers"):
        results = {}
        for kind in ("csr", "fused"):
            model, optimizer, xin, graph, y, train_idx = setup_backbone(dataset, "csr", seed=0)
            if kind == "fused":
                make_fused(model)
            model.train()
            torch.manual_seed(123)  # same dropout masks for both
            logits, _ = model(xin, graph)
            torch.nn.functional.cross_entropy(logits[train_idx], y[train_idx]).backward()
            grads = {name: p.grad.clone() for name, p in model.named_parameters()}
            model.eval()
            with torch.no_grad():
                ev = model(xin, graph)[0]
            results[kind] = (logits.detach(), grads, ev)
        (lc, gc, ec), (lf, gf, ef) = results["csr"], results["fused"]
        grad_diff = max((gc[k] - gf[k]).abs().max().item() for k in gc)
        grad_scale = max(gc[k].abs().max().item() for k in gc)
        print(f"{dataset} GAT float32, same seed and dropout draws: train logits max |fused - csr| "
              f"{(lc - lf).abs().max().item():.2e} (max |logit| {lc.abs().max().item():.2f}); eval logits "
              f"{(ec - ef).abs().max().item():.2e}; parameter gradients max diff {grad_diff:.2e} "
              f"(max |grad| {grad_scale:.2e})")


# ---------------------------------------------------------------------------------------------- timing


def _epoch(model, optimizer, x, graph, y, train_idx) -> tuple[float, float]:
    """(wall, cpu) seconds of one epoch: a training step (forward, loss, backward, Adam) and an eval forward."""
    import torch.nn.functional as F

    wall, cpu = time.perf_counter(), time.process_time()
    model.train()
    optimizer.zero_grad()
    logits, _ = model(x, graph)
    F.cross_entropy(logits[train_idx], y[train_idx]).backward()
    optimizer.step()
    model.eval()
    with torch.no_grad():
        model(x, graph)
    return time.perf_counter() - wall, time.process_time() - cpu


def _summary(seconds: list[float]) -> str:
    ms = [s * 1e3 for s in seconds]
    return f"{statistics.median(ms):7.1f} [{min(ms):6.1f}-{max(ms):6.1f}]"


def time_epochs(datasets: list[str], repeats: int, kernels: tuple[str, ...]) -> None:
    sys.path.insert(0, os.path.dirname(__file__))
    from gat_attention_speed import setup_backbone

    start = time.perf_counter()
    extension()
    build = time.perf_counter() - start
    print(f"# python benchmarks/speed/gat_fused_attention.py {shlex.join(sys.argv[1:])}")
    print(f"# {cpu_model()}, {os.cpu_count()} cores; torch {torch.__version__}, {torch.get_num_threads()} torch "
          f"thread(s); {time.strftime('%Y-%m-%d %H:%M %Z')}; extension loaded in {build:.1f} s")
    print("# ms per epoch (training step + eval forward): median [min-max] over the repetitions, CPU time "
          "(time.process_time) and wall; kernels interleaved, order reversed every repetition")
    for dataset in datasets:
        load_before = " ".join(f"{v:.2f}" for v in os.getloadavg())
        setups = {}
        for kernel in kernels:
            setup = setup_backbone(dataset, "csr" if kernel.startswith("fused") else kernel, seed=0)
            if kernel.startswith("fused"):
                make_fused(setup[0], per_head=kernel == "fused-per-head")
            setups[kernel] = setup
        for kernel in kernels:  # warm-up
            _epoch(*setups[kernel])
        times = {k: {"wall": [], "cpu": []} for k in kernels}
        for rep in range(repeats):
            for kernel in (kernels if rep % 2 == 0 else kernels[::-1]):
                wall, cpu = _epoch(*setups[kernel])
                times[kernel]["wall"].append(wall)
                times[kernel]["cpu"].append(cpu)
        graph = setups["csr"][3] if "csr" in setups else None
        e = graph.num_edges if graph is not None else ""
        print(f"\n{dataset} GAT: {e} edges with self-loops; {repeats} repetitions; load {load_before} -> "
              + " ".join(f"{v:.2f}" for v in os.getloadavg()))
        print(f"  {'':6s}" + "".join(f"{k + ' cpu':>27s}{k + ' wall':>27s}" for k in kernels))
        print(f"  {'epoch':6s}" + "".join(f"{_summary(times[k]['cpu']):>27s}{_summary(times[k]['wall']):>27s}"
                                          for k in kernels))
        med = {k: statistics.median(times[k]["cpu"]) for k in kernels}
        medw = {k: statistics.median(times[k]["wall"]) for k in kernels}
        for fused in (k for k in kernels if k.startswith("fused")):
            ratios = "; ".join(f"{k} / {fused}: cpu {med[k] / med[fused]:.2f}x, wall {medw[k] / medw[fused]:.2f}x"
                               for k in kernels if not k.startswith("fused"))
            # paired per-repetition ratio (same repetition, adjacent in time)
            if "csr" in kernels:
                paired = [a / b for a, b in zip(times["csr"]["cpu"], times[fused]["cpu"])]
                ratios += (f"; paired csr/{fused} cpu ratio per repetition: median {statistics.median(paired):.2f} "
                           f"[{min(paired):.2f}-{max(paired):.2f}]")
            print(f"  {ratios}")
        sys.stdout.flush()


def attention_variants(graph, heads: int, c: int) -> dict:
    """The three attention variants of :func:`kernels` on random inputs of the first layer's shape, each a function
    of ``backward`` (also run the backward pass)."""
    from simcalib.backbones.gat_attention import _AttentionAggregation

    n, e = graph.num_nodes, graph.num_edges
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, heads, c, generator=g, requires_grad=True)
    ss = torch.randn(n, heads, generator=g, requires_grad=True)
    sd = torch.randn(n, heads, generator=g, requires_grad=True)
    mask = torch.empty(e, heads).bernoulli_(0.5, generator=g).div_(0.5)
    grad = torch.randn(n, heads, c, generator=g)
    heads_x = [x[:, h : h + 1].detach().contiguous().requires_grad_() for h in range(heads)]
    heads_ss = [ss[:, h : h + 1].detach().contiguous().requires_grad_() for h in range(heads)]
    heads_sd = [sd[:, h : h + 1].detach().contiguous().requires_grad_() for h in range(heads)]
    heads_mask = [mask[:, h : h + 1].contiguous() for h in range(heads)]

    def csr(backward):
        multiplier = mask.index_select(0, graph.edge_of_entry).t().contiguous()
        out = _AttentionAggregation.apply(x, ss, sd, graph, 0.2, multiplier)
        if backward:
            out.backward(grad)

    def fused(backward):
        out = _FusedAttention.apply(x, ss, sd, graph, 0.2, mask)
        if backward:
            out.backward(grad)

    def fused_per_head(backward):
        for h in range(heads):
            out = _FusedAttention.apply(heads_x[h], heads_ss[h], heads_sd[h], graph, 0.2, heads_mask[h])
            if backward:
                out.backward(grad[:, h : h + 1])

    return {"csr": csr, "fused": fused, "fused one head at a time": fused_per_head}


def kernels(datasets: list[str], repeats: int) -> None:
    """CPU ms of the attention step alone at the first layer's shape (8 heads x 8, random inputs, a dropout
    mask): the csr kernel (mask permuted to CSR order outside, as GraphAttention does), the fused kernel over
    all heads, and the fused kernel run one head at a time on that head's contiguous [N, 8] slice."""
    from simcalib.backbones.gat_attention import AttentionGraph
    from simcalib.backbones.models import GAT
    from simcalib.data import load_dataset

    extension()
    print(f"# python benchmarks/speed/gat_fused_attention.py {shlex.join(sys.argv[1:])}")
    print(f"# torch {torch.__version__}, {torch.get_num_threads()} torch thread(s); {time.strftime('%Y-%m-%d %H:%M %Z')}; "
          "CPU ms per call (time.process_time): median [min-max] over the repetitions, variants interleaved")
    for dataset in datasets:
        data = load_dataset(dataset)
        graph = GAT.prepare_graph(data.edge_index, data.num_nodes, attention="csr")
        assert isinstance(graph, AttentionGraph)
        n, e, heads, c = graph.num_nodes, graph.num_edges, 8, 8
        variants = attention_variants(graph, heads, c)
        times = {(name, b): [] for name in variants for b in (False, True)}
        for rep in range(repeats + 1):
            for name in (variants if rep % 2 == 0 else list(variants)[::-1]):
                for b in (False, True):
                    start = time.process_time()
                    variants[name](b)
                    if rep:  # the first round is a warm-up
                        times[name, b].append(time.process_time() - start)
        print(f"\n{dataset}: {n} nodes, {e} edges with self-loops; load " + " ".join(f"{v:.2f}" for v in os.getloadavg()))
        print(f"  {'':26s}{'forward':>24s}{'forward + backward':>24s}")
        for name in variants:
            print(f"  {name:26s}{_summary(times[name, False]):>24s}{_summary(times[name, True]):>24s}")
        sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("check", "time", "kernels"))
    parser.add_argument("--datasets", default="Computers,Photo,CS,Physics")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--kernels", default="csr,pyg,fused")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(args.threads)
    if args.what == "check":
        check()
    elif args.what == "kernels":
        kernels(args.datasets.split(","), args.repeats)
    else:
        time_epochs(args.datasets.split(","), args.repeats, tuple(args.kernels.split(",")))


if __name__ == "__main__":
    main()
