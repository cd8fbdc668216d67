"""Memory snapshots of a real run (torch.cuda.memory._dump_snapshot) read safely, measured and
attributed to the ledger's rows, and put beside the prediction (docs/snapshots.md)."""
