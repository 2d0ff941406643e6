"""HTTP layer: routes, dependencies and the RFC 9457 problem mapping."""
