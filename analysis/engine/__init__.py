"""The engine that runs the stages over a capture: windows, carry, spill, conclusion."""
