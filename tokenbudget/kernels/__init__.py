"""A small torch runner that executes scheduler steps for real (paged KV, speculative decoding).

``models`` (the seeded target and its early-exit drafter), ``paged_kv`` (the cache and
the block-table slot mapping), ``attention`` (paged and dense attention), ``buffers``
(the persistent B-row inputs), ``acceptance`` (greedy and rejection sampling),
``drafting`` (proposals, the n-gram proposer), ``runner`` (ModelRunner: one step),
``target`` (RunnerTarget: the scheduler driving the runner, for replay), ``report``,
``plot``, ``memory`` (the CUDA cap), ``footprint`` (what a deployment takes up front,
refused when the device cannot hold it), ``arrivals`` (seeded arrivals), ``errors``,
``prompts`` and ``gpu_check``. Nothing is imported here: torch loads only when a
module of the runner is used.
"""
