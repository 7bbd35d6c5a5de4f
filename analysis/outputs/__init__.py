"""What a capture becomes for people and other tools: reports, files, figures, traces."""
