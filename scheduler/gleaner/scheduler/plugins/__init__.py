"""Filter and score plugins, one small module each (registered in ``gleaner.scheduler.registry``).

Node filters: ``node_usable``, ``node_excluded``, ``gpu_selector``, ``gpu_free``.
Set filters: ``instrumented``, ``pair_overlap``, ``memory_fit``, ``throughput_sla``.
Scores: ``sla_fit``, ``keep_aligned``, ``pack_nodes``.
"""
