"""Handler bodies, one per module; ``gleaner.operator.main`` registers them with kopf."""
