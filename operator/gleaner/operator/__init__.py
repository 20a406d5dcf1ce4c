"""Operator: the kopf controller that binds OfflineJobs and watches their SLAs (I/O shell).

Public API for other components:

- ``gleaner.operator.config.OperatorConfig`` and ``gleaner.operator.main.run(config)`` /
  ``run_async(config)`` (what ``gleaner operator`` calls); ``main.register(config)`` builds
  the kopf registry;
- ``gleaner.operator.builders``: ``build_offline_pod(job, placement, attempt)``,
  ``build_eviction_report_configmap``, label/annotation constants (``LABEL_JOB``,
  ``LABEL_ROLE``, ``ANNOTATION_GPUS``, ``LABEL_REPORT``, ``REPORT_KEY``...);
- ``gleaner.operator.status``: the phase machine (``TRANSITIONS``, ``QUEUED_PHASES``,
  ``BOUND_PHASES``) and pure status changes;
- ``gleaner.operator.http``: ``build_app``, ``register_router`` (the dashboard mounts its
  routers on the operator's one HTTP server);
- ``gleaner.operator.metrics.OperatorMetrics``; ``gleaner.operator.observation`` (the
  observed-throughput formulas, pure).

docs/operator.md describes handlers, phases, and flags.
"""
