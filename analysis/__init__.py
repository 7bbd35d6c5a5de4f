"""Analysis stage: per-request timelines, phase attribution, event-loop model, CLI and notebook API."""
