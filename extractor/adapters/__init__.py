"""LoRA adapters on disk, below the engines that serve them and the training that makes them.

- :mod:`extractor.adapters.manifest`: what an adapter was trained for (base model, task
  fingerprint), checked before it serves;
- :mod:`extractor.adapters.merge`: an adapter merged into the base model's weights (``extractor model merge``).
"""
