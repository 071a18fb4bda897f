"""Measuring translations: sacreBLEU scores, reports, by-length, tuning."""
