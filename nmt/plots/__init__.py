"""Figures: line charts, training curves, attention heatmaps."""
