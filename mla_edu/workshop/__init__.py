"""The workshop on top of the case study: ``panel`` (widgets that drive ``case_study.diagnose``),
``exercises`` (the checkers of notebook 08) and ``solutions``."""
