"""The book's MathJax is the vendored one (docs/conf.py), not a CDN's: ``make book`` and ``make instructor`` (the same
configuration) work offline. tests/lab/test_book_offline.py checks the built pages in a browser."""

import runpy
from pathlib import Path
from urllib.parse import urlparse

import pytest

from tools import slides

ROOT = Path(__file__).resolve().parents[1]


def test_the_book_takes_mathjax_2_from_the_vendored_copy(monkeypatch):
    calls = []
    monkeypatch.setattr(slides, "vendor", lambda out, names=tuple(slides.VENDOR): calls.append((Path(out), names)))
    conf = runpy.run_path(str(ROOT / "docs" / "conf.py"))
    assert calls == [(Path(conf["BOOK_STATIC"]), ("mathjax",))]  # unpacked from tools.slides' checked tarball
    assert [Path(p) for p in conf["html_static_path"]] == [Path(conf["BOOK_STATIC"])]  # copied into _static/
    path, _, query = conf["mathjax_path"].partition("?")
    assert not urlparse(path).scheme and not path.startswith("/"), path  # under the site's _static/
    assert path == "vendor/mathjax/" + slides.VENDOR["mathjax"][2][0]  # MathJax.js, among the members unpacked
    assert slides.VENDOR["mathjax"][0].startswith("2.")
    config = query.removeprefix("config=")
    assert f"config/{config}.js" in slides.VENDOR["mathjax"][2], config
    assert conf["mathjax2_config"] and conf["myst_update_mathjax"] is False
    assert conf["nb_ipywidgets_js"] == {}  # myst-nb's default loads require.js and the widget manager from CDNs


def test_vendor_refuses_a_package_it_does_not_pin(tmp_path):
    with pytest.raises(ValueError, match="expected package names of VENDOR"):
        slides.vendor(tmp_path, names=("katex",))
