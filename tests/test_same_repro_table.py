"""tools.same_repro_table: make test-no-triton's check that the main job prints results/repro_cpu.md's tables."""

import pytest

from tools.same_repro_table import main, table_rows

TABLE = """# header
| run | acc | time s |
|-----|-----|--------|
| a   | 0.5 |   1.00 |
text between
| defects | acc |
|---|---|
| width | 0.266 |
"""


def test_the_time_column_alone_is_left_out():
    assert table_rows(TABLE) == [["run", "acc"], ["-----", "-----"], ["a", "0.5"], ["defects", "acc"],
                                 ["---", "---"], ["width", "0.266"]]
    assert table_rows(TABLE.replace("1.00", "9.99")) == table_rows(TABLE)


@pytest.mark.parametrize("change", [("0.5 ", "0.6 "), ("| width | 0.266 |\n", ""), ("width", "workspace")])
def test_another_number_or_row_is_refused(tmp_path, change):
    (tmp_path / "want.md").write_text(TABLE)
    (tmp_path / "got.md").write_text(TABLE.replace(*change))
    with pytest.raises(SystemExit, match="differs from"):
        main([str(tmp_path / "want.md"), str(tmp_path / "got.md")])
    (tmp_path / "got.md").write_text(TABLE.replace("1.00", "2.50"))
    main([str(tmp_path / "want.md"), str(tmp_path / "got.md")])
    (tmp_path / "none.md").write_text("no table\n")
    with pytest.raises(SystemExit, match="expected markdown tables"):
        main([str(tmp_path / "none.md"), str(tmp_path / "got.md")])
