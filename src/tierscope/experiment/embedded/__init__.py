"""The embedded system under test: a RUBBoS-like bulletin board in three tiers.

``web`` (HTTP front end and load balancer), ``app`` (pages and business logic) and ``db`` (a
query server over SQLite) each run as their own OS processes
(``python -m tierscope.experiment.embedded.<tier> CONFIG.json``) and record every request with
its arrival and departure times; see :mod:`._instrument` for how they are measured.
"""
