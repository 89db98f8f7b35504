"""SDG-to-SDG passes, each ``apply(sdg, cfg) -> sdg``, run in the order of :data:`PIPELINE`."""
from tempo.transforms import fuse, superopt, vectorize

# (name, module); a compile may switch any of them off by name.
PIPELINE = (("vectorize", vectorize), ("fuse", fuse), ("superopt", superopt))

__all__ = ["PIPELINE", "fuse", "superopt", "vectorize"]
