"""vLLM hook: recompute the KV blocks the Gleaner agent reclaimed from this engine.

An opt-in vLLM general plugin (entry point ``vllm.general_plugins`` → ``gleaner_kv`` →
:func:`gleaner.vllm_hook.plugin.register`). When enabled, the engine-core process
connects to the agent as a FRAMEWORK peer, receives INVALIDATE_BLOCKS frames, and after
every scheduler step merges those block IDs into vLLM's own recompute path
(``Scheduler._handle_invalid_blocks``), so the affected requests recompute from their last
valid block, and carries the KV memory path (memory.py). See docs/vllm-hook.md.
"""
