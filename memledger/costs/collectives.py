"""Collective communication time: latency + size / bandwidth (the alpha–beta model) per link.

A group runs on NVLink (PCIe without it) when every group of its kind lies inside one node,
else on the per-GPU network NIC — Megatron's rank order puts tp innermost, then cp, dp
(experts: etp, then ep), so a group of n ranks placed s apart spans n·s consecutive GPUs, and
the groups tile the ranks in blocks of that span: all of them stay inside a node exactly when
the span divides the GPUs per node. A span that does not (tp 3 or 6 on 8-GPU nodes: ranks
6–8 form a group) puts some groups across a node boundary, and every rank of the collective
waits for the slowest group, so the network's bandwidth and latency apply. Per collective of
n ranks moving a buffer of B bytes (the full, unsharded size):
  all-gather / reduce-scatter  (n − 1)·α + (n − 1)/n · B / β        (ring)
  all-reduce                   min(2(n − 1), 2⌈log2 n⌉)·α + 2(n − 1)/n · B / β
                               (ring vs NCCL's double binary tree: same bytes, fewer hops)
  all-to-all                   (n − 1)·α + (n − 1)/n · B · imbalance / β
  send/recv                    α + B / β
β = link bandwidth per direction × bus efficiency: nccl-tests bus bandwidth reaches ≈ 80 % of
the NVLink figure and ≈ 90 % of the NIC line rate for large messages (NVIDIA nccl-tests'
performance notes on bus bandwidth, github.com/NVIDIA/nccl-tests; DGX H100 all-reduce busbw
≈ 360 of 450 GB/s; docs/step-time.md). α: ≈ 5 µs per hop inside a node,
≈ 10 µs across nodes (NCCL src/graph/tuning.cc base + hardware latencies of the Simple/LL128
protocols, rounded up for launch overhead).
Top-k routing imbalance: with balanced routing each of the n expert ranks receives on average
μ = T·K rows; the busiest — whose all-to-all and expert GEMMs everyone waits for — receives the
expected maximum of n binomial counts, ≈ μ + √(2 μ ln n) (Gumbel limit of the multinomial
maximum), so imbalance = 1 + √(2 ln n / μ).
Across nodes a collective is not held to one NIC: on DGX-class nodes every GPU has its own NIC
(DGX A100: eight 200 Gb/s HDR, Narayanan et al. 2021 §5), and NCCL builds one ring per NIC and,
over NVLink, splits a collective into as many parts as NICs and balances them (NCCL
maintainers, NVIDIA/nccl issue #601). A group with k members in each node (GPUs per node /
its stride, when its groups tile whole nodes) moves its cross-node bytes over k NICs:
β = min(k × NIC β, intra-node β) (`rails`). Point-to-point and all-to-all keep one NIC per rank
(each rank's own bytes leave through its own NIC; an all-to-all sends its share for the group's
members in the same node over NVLink meanwhile, `all_to_all_seconds(local=…)`). The orderings
of the layouts in Narayanan et al.'s Figs. 13–15 follow only with this (docs/step-time.md).
Ignores router skew beyond sampling (expert popularity), congestion and SHARP in-network
reduction.
"""
from __future__ import annotations

import numpy as np

NVLINK_BUS_EFFICIENCY = 0.8
NETWORK_BUS_EFFICIENCY = 0.9
ALPHA_INTRA_S = 5e-6
ALPHA_INTER_S = 10e-6


def inside_node(span, gpus_per_node: int):
    """Whether every group of `span` consecutive ranks lies inside one node."""
    span = np.asarray(span)
    return (span <= gpus_per_node) & (np.mod(gpus_per_node, np.maximum(span, 1)) == 0)


def rails(span, stride, gpus_per_node: int):
    """NICs per node one collective of a group stripes its cross-node traffic over: its
    members in each node (gpus_per_node / stride) when the groups tile whole nodes (span a
    multiple of the node, stride dividing it), else 1 (groups that straddle a boundary
    unevenly: the side with fewest members bounds them; kept at one NIC)."""
    span, stride = np.asarray(span), np.asarray(stride)
    tiles = (np.mod(span, gpus_per_node) == 0) & (np.mod(gpus_per_node, stride) == 0) & \
        (stride < gpus_per_node)
    return np.where(tiles, gpus_per_node // np.maximum(np.minimum(stride, gpus_per_node), 1), 1)


def link(hw, span, gpus_per_node: int, stride=None):
    """(bytes/s, seconds per hop) of a group whose ranks span `span` consecutive GPUs.
    `stride` (collectives only; None for point-to-point): the distance between the group's
    ranks — across nodes, a collective's channels stripe over the NICs of its members in a
    node (`rails`), up to what NVLink carries between them."""
    inside = inside_node(span, gpus_per_node)
    intra = hw.intra_node_bw * (NVLINK_BUS_EFFICIENCY if hw.nvlink_bw else 1.0)
    k = 1 if stride is None else rails(span, stride, gpus_per_node)
    beta = np.where(inside, intra, np.minimum(k * hw.network_bw * NETWORK_BUS_EFFICIENCY, intra))
    alpha = np.where(inside, ALPHA_INTRA_S, ALPHA_INTER_S)
    return beta, alpha


def _share(n):
    n = np.asarray(n, np.float64)
    return (n - 1) / n


def gather_seconds(n_bytes, n, beta, alpha):
    """Ring all-gather or reduce-scatter of an n_bytes buffer over n ranks (0 when n = 1)."""
    n = np.asarray(n, np.float64)
    return (n - 1) * alpha + _share(n) * n_bytes / beta


def all_reduce_seconds(n_bytes, n, beta, alpha):
    n = np.asarray(n, np.float64)
    hops = np.minimum(2 * (n - 1), 2 * np.ceil(np.log2(np.maximum(n, 1))))
    return hops * alpha + 2 * _share(n) * n_bytes / beta


def all_to_all_seconds(n_bytes, n, beta, alpha, imbalance=1.0, local=1, beta_local=None):
    """n_bytes: what one rank sends in total (its (n−1)/n share leaves the rank). local: the
    group's members in the rank's node (itself included) when the group crosses nodes: the
    (local − 1)/n share to them goes over `beta_local` (NVLink) while the (n − local)/n share
    to other nodes goes over `beta` (the rank's own NIC); the slower of the two decides."""
    n = np.asarray(n, np.float64)
    local = np.asarray(local, np.float64)
    remote = (n - local) / n * n_bytes * imbalance / beta
    if beta_local is None:
        return (n - 1) * alpha + remote
    near = (local - 1) / n * n_bytes * imbalance / beta_local
    return (n - 1) * alpha + np.maximum(remote, near)


def p2p_seconds(n_bytes, beta, alpha):
    return alpha + np.asarray(n_bytes, np.float64) / beta


def topk_imbalance(rows_per_rank, n):
    """Busiest of n ranks over the mean when each receives `rows_per_rank` routed rows on average."""
    n = np.asarray(n, np.float64)
    mu = np.maximum(np.asarray(rows_per_rank, np.float64), 1.0)
    return 1.0 + np.sqrt(2.0 * np.log(np.maximum(n, 1.0)) / mu)
