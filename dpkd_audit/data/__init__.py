"""Dataset loaders (sklearn digits, MNIST, Fashion-MNIST) and deterministic splits."""
