"""The workshop on top of the case study: ``panel`` (widgets that drive ``case_study.diagnose``),
``exercises`` (the checkers of notebook 08), ``checks`` (the "predict, then run" checks of notebooks 01-07,
and the one rule every checker reads answers by). The solutions are not here: they are in the instructor
build (``instructor/`` in the checkout, ``make instructor``)."""
