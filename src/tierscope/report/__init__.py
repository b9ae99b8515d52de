"""Rendering of results: terminal tables now, the HTML report later."""
