"""Rendering of results: rich terminal tables (:mod:`.terminal`) and the self-contained HTML
report (:mod:`.html`)."""
