"""Notebook layer: magics, rich results, the live viewport widget, ``%config`` options."""
