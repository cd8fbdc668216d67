"""PyTorch CUDA memory snapshots (`torch.cuda.memory._dump_snapshot`) read safely, measured and
attributed to the ledger's rows, then put beside the ledger's prediction of the same rank."""
