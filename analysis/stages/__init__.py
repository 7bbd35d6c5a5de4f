"""The analysis stages: each turns frames into more frames (requests, phases, the loop model, stitching, ...)."""
