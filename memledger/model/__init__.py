"""What is being trained: parameter groups and counts (`params`), FLOPs per token (`flops`),
the Hugging Face config.json importer (`hf_config`) and the model presets (`presets`).

Below the ledger: nothing here knows about ranks, schedules or memory rows beyond the
sharding rule each parameter group names.
"""
