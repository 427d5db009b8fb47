"""Rendering of analysed runs: text/markdown/CSV/JSON tables, PNG plots, the HTML report and JUnit
XML. Never imports gevent or Locust.
"""
