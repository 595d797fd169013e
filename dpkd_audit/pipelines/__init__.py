"""End-to-end private knowledge-distillation pipelines (reverse k-NN, DP-DFD, DGD)."""
