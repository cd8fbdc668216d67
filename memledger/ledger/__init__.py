"""The ledger: every pipeline rank's six rows, built top-down (see docs/architecture.md).

  build          build_ledger: rank by rank, the stages below in order, then the peak
  static/        weights, gradients, optimizer states: the sharding table, ZeRO, offload moves
  activations/   tensor inventories per profile -> storage policy per tensor -> the row
  communication  buffers: gradient buckets, NCCL, PP send/recv, MoE all-to-all, ZeRO-3 gathers
  pipeline/      stage placement, schedules (micro-batches in flight), remote levelling
  runtime        optimizer-step temporaries, transients, slack, context: the peak
  items          Item / RankLedger: the rows' data types
"""
from memledger.ledger.build import Ledger, build_ledger, build_rank
from memledger.ledger.items import ROW_LABELS, ROWS, Item, RankLedger

__all__ = ["Ledger", "build_ledger", "build_rank", "ROWS", "ROW_LABELS", "Item", "RankLedger"]
