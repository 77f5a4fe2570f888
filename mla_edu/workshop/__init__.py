"""The workshop on top of the case study: ``panel`` (widgets that drive ``case_study.diagnose``),
``exercises`` (the checkers of notebook 08), ``checks`` (the "predict, then run" checks of notebooks 01-07,
and what every checker shares) and ``solutions`` (notebook 08's, which no notebook imports)."""
